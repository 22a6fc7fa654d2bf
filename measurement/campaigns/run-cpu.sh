#!/usr/bin/env bash
# Runs the CPU calibration campaigns in order (resumable: rows already on disk are skipped).
#   measurement/campaigns/run-cpu.sh [MEASURE_BIN]
# The after-the-fit campaign is run separately, after `memcal fit --write-factors`:
#   memcal-measure campaign measurement/campaigns/cpu-after-fit.toml --out data/runs/cpu-after-fit
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-target/release/memcal-measure}"
"$bin" campaign measurement/campaigns/cpu-free.toml --out data/runs/cpu-free
"$bin" campaign measurement/campaigns/cpu-edge.toml --out data/runs/cpu-edge
