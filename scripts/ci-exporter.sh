#!/usr/bin/env bash
# CI for the Python exporter (exporter/memcal_export) and the proof against real implementations:
# installs Python torch, transformers and torchvision into .libtorch/ (scripts/setup-pytorch.sh,
# idempotent), runs the exporter's tests, then the proof (real torchvision and transformers
# classes measured in Python with the harness's counting allocator, against memcal-measure on
# their graphs and the simulator), failing if a checked case is off by more than 1%.
# Called from scripts/test.sh after the harness is built (target/release/memcal-measure). memcal
# itself runs as the release build that `cargo test --release` left (built here if missing): the
# exporter's tests call it hundreds of times.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/setup-pytorch.sh
cargo build -q --release -p memcal --bin memcal
cargo build -q --release -p memcal-measure
export PYTHONPATH="$root/.libtorch:$root/.libtorch/py:$root/exporter"
# The ATen table (src/ops/aten_table.rs) is what torch 2.11's own yaml files give.
time scripts/check-aten-table.sh
MEMCAL_BIN=target/release/memcal python3 -m unittest discover -s exporter/tests
# The GPU campaign (issue 42): its plans' running time from the shipped GPU measurements, and its
# dry run on the CPU (tiny sizes, the same code paths: fixtures through the harness, real
# transformers classes, allocator settings, caps, generate, LoRA).
for plan in measurement/campaigns/gpu-real.json measurement/campaigns/gpu-real-2.json; do
  python3 -m memcal_export.gpu --plan "$plan" --estimate data/gpu
done
rm -rf target/gpu-dry
BIN=target/release/memcal-measure measurement/campaigns/gpu-all.sh --dry-run target/gpu-dry 400
# Half the proof's cases (every second one, about 6 minutes on 2 cores; the full proof, about
# 13 minutes, is run by hand and its figures are in exporter/README.md).
python3 -m memcal_export.proof --repo . --memcal target/release/memcal \
  --measure target/release/memcal-measure --out target/proof --check --sample 2
echo "ci-exporter: ok"
