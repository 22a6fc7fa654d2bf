"""python -m memcal_export: draw a module as a memcal graph.

  python -m memcal_export torchvision.models:resnet50 --kwargs '{"num_classes": 1000}' \
      --input images=B,3,224,224 --name resnet50-tv --family resnet --out resnet50-tv.json
  memcal plan resnet50-tv.json --batch 32

The factory (`package.module:callable`) is called under `torch.device("meta")`: no weights are
allocated, so a 70 B model exports in seconds. Inputs: `name=dims` with `B` for the batch axis;
`name=dims:int64:CLASSES` for token ids. The loss is added: cross_entropy over the output's
last axis (labels `[B, ...]`, classes = that axis unless --classes) or --loss mse. Exit 2 with
the node and what to do when something has no memcal op.
"""

import argparse
import importlib
import json
import sys

from .trace import ExportError, export, write


def _input(spec):
    name, _, rest = spec.partition("=")
    parts = rest.split(":")
    dims = ["B" if d == "B" else int(d) for d in parts[0].split(",")]
    if len(parts) == 1:
        return (name, dims, "float32")
    if parts[1] != "int64" or len(parts) != 3:
        raise ValueError(f"input `{spec}`: write name=dims or name=dims:int64:CLASSES")
    return (name, dims, ("int64", int(parts[2])))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m memcal_export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("factory", help="package.module:callable that returns the nn.Module")
    ap.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the factory")
    ap.add_argument("--input", action="append", required=True, help="name=B,3,224,224 or name=B,512:int64:50257")
    ap.add_argument("--name", required=True)
    ap.add_argument("--family", required=True)
    ap.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse"])
    ap.add_argument("--classes", type=int)
    ap.add_argument("--out", help="write here (default: standard output)")
    args = ap.parse_args(argv)
    import torch

    try:
        mod_name, _, fn_name = args.factory.partition(":")
        factory = getattr(importlib.import_module(mod_name), fn_name)
        inputs = [_input(s) for s in args.input]
        with torch.device("meta"):
            module = factory(**json.loads(args.kwargs))
        graph = export(module, inputs, name=args.name, family=args.family, loss=args.loss, classes=args.classes)
    except (ExportError, ValueError, AttributeError, ImportError) as e:
        print(f"memcal_export: {e}", file=sys.stderr)
        return 2
    if args.out:
        write(graph, args.out)
        print(f"wrote {args.out}: {len(graph['nodes'])} nodes; plan it with `memcal plan {args.out} --batch N`", file=sys.stderr)
    else:
        json.dump(graph, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
