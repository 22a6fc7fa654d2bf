#!/usr/bin/env bash
# CI for the Python exporter (exporter/memcal_export) and the proof against real implementations:
# installs Python torch, transformers and torchvision into .libtorch/ (scripts/setup-pytorch.sh,
# idempotent), runs the exporter's tests, then the proof (real torchvision and transformers
# classes measured in Python with the harness's counting allocator, against memcal-measure on
# their graphs and the simulator), failing if a checked case is off by more than 1%.
# Called from scripts/test.sh after the harness is built (target/debug/memcal-measure).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/setup-pytorch.sh
cargo build -q -p memcal --bin memcal
cargo build -q -p memcal-measure
export PYTHONPATH="$root/.libtorch:$root/.libtorch/py:$root/exporter"
MEMCAL_BIN=target/debug/memcal python3 -m unittest discover -s exporter/tests
python3 -m memcal_export.proof --repo . --memcal target/debug/memcal \
  --measure target/debug/memcal-measure --out target/proof --check
echo "ci-exporter: ok"
