"""memcal_export: draw a torch module as a memcal graph (`memcal-graph/1`), and measure a
module's training step with the harness's exact counting allocator."""

from .trace import ExportError, export, parameters, write

__all__ = ["ExportError", "export", "parameters", "write"]
