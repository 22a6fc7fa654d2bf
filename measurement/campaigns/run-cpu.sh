#!/usr/bin/env bash
# Runs the CPU calibration campaign (uncapped cpu-free and capped cpu-edge runs, interleaved in
# tiers; resumable: rows already on disk are skipped):
#   measurement/campaigns/run-cpu.sh [MEASURE_BIN]
# The after-the-fit campaign runs separately, after `memcal fit --write-factors` is committed:
#   MEASURE_BIN campaign measurement/campaigns/cpu-after-fit.toml --out data/runs/cpu-after-fit
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-target/release/memcal-measure}"
"$bin" campaign measurement/campaigns/cpu.toml --out data/runs/cpu
"$bin" campaign measurement/campaigns/cpu-more.toml --out data/runs/cpu
"$bin" campaign measurement/campaigns/cpu-round3.toml --out data/runs/cpu
