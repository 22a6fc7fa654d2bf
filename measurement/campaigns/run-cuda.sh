#!/usr/bin/env bash
# Runs a GPU campaign with a prebuilt `memcal-measure` (built with `--features cuda`) against the
# torch already installed on a CUDA machine (python3's torch 2.11.0, the version tch 0.24 pins).
#
#   measurement/campaigns/run-cuda.sh PLAN OUT_DIR [BUDGET_S]
#
# BIN (default .cuda-bin/memcal-measure) is the harness binary. The campaign stops after BUDGET_S
# seconds (default 420): it is resumable, and its plan is ordered so that a campaign cut short
# still covers every family. Rows land under OUT_DIR (one JSON file per run); when $OUT is set
# (a device machine), they are also packed into $OUT/rows.tgz with the campaign's log.
set -uo pipefail
plan="${1:?plan}"
out_dir="${2:?output folder}"
budget="${3:-420}"
bin="${BIN:-.cuda-bin/memcal-measure}"
started=$(date +%s)

# The torch libraries, and the pip CUDA libraries beside them, from the machine's python3.
# shellcheck source=measurement/campaigns/cuda-libs.sh
. "$(dirname "$0")/cuda-libs.sh"
python3 -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda)'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

log="${OUT:-/tmp}/campaign.log"
pack() {
  if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/rows.tgz" "$out_dir" 2>/dev/null || true
    echo "packed $(find "$out_dir" -name '*.json' | wc -l) rows into \$OUT/rows.tgz ($(($(date +%s) - started)) s)"
  fi
}
trap pack EXIT

"$bin" environment --device cuda:0 || {
  echo "run-cuda: memcal-measure cannot use cuda:0 (see above)" >&2
  ldd "$bin" | grep -E 'not found|torch' >&2
  exit 4
}
mkdir -p "$out_dir"
timeout -k 10 "$budget" "$bin" campaign "$plan" --out "$out_dir" --run-timeout-s 120 2>&1 | tee "$log"
echo "campaign exit: ${PIPESTATUS[0]} after $(($(date +%s) - started)) s"
