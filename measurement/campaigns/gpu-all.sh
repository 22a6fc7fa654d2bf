#!/usr/bin/env bash
# The whole GPU campaign, started once on a machine with one GPU (issue 42):
#   (a) every CUDA single-op fixture (tests/fixtures/sim/*.json, batches 4 and 8) through the
#       CUDA harness `memcal-measure` (tch), several runs at a time (each is a few MB of GPU
#       memory), beside
#   (b-e) the real transformers classes (python3 -m memcal_export.gpu, plan
#       measurement/campaigns/gpu-real.json): 1-8B decoders in bf16 autocast and pure bf16 at
#       sequence 2048, under three allocator settings and at emulated capacities near their
#       peaks, `generate` with dynamic and static caches, LoRA over a bf16 8B base.
# Everything lands under OUT_DIR (resumable: a measured run is never run again) and, when $OUT is
# set (a device machine), is packed into $OUT/gpu-rows.tgz with the log after every part.
#
#   measurement/campaigns/gpu-all.sh OUT_DIR [BUDGET_S]          # on the GPU machine
#   measurement/campaigns/gpu-all.sh --dry-run OUT_DIR [BUDGET_S] # CPU, tiny sizes (CI)
#
# BUDGET_S (default 480) bounds the whole script; the Python part stops starting work when it is
# spent, and the fixtures are cut with it. BIN names the harness (default .cuda-bin/memcal-measure,
# built with `cargo build --release -p memcal-measure --features cuda`; the dry run uses
# target/debug/memcal-measure). FIXTURE_SHARDS (default 6) harness runs go at a time; FIXTURES=0
# skips them. PLAN names another plan of real models (default measurement/campaigns/gpu-real.json).
# Afterwards, on the development machine: `python3 -m memcal_export.gpu_stamp --from OUT_DIR`
# turns the measurements into rows (exporter/README.md).
set -uo pipefail
dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
out_dir="${1:?output folder}"
budget="${2:-480}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
mkdir -p "$out_dir/fixtures"
log="$out_dir/campaign.log"
exec > >(tee -a "$log") 2>&1

pack() {
  if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/.gpu-rows.$BASHPID" -C "$out_dir" . 2>/dev/null && mv "$OUT/.gpu-rows.$BASHPID" "$OUT/gpu-rows.tgz"
    echo "packed $(find "$out_dir" -name '*.json' | wc -l) files into \$OUT/gpu-rows.tgz ($(elapsed) s)"
  fi
}
# Packed every minute too, so that a run killed from outside still brings its rows back.
(while sleep 60; do pack >/dev/null; done) &
packer=$!
trap 'kill $packer 2>/dev/null; pack' EXIT

if [ "$dry" = 1 ]; then
  bin="${BIN:-$root/target/debug/memcal-measure}"
  device=cpu precision=fp32 batches="[2]" regime=cpu-fixture-dry
  export PYTHONPATH="$root/.libtorch:$root/.libtorch/py:$root/exporter${PYTHONPATH:+:$PYTHONPATH}"
  fixtures=$(ls "$root"/tests/fixtures/sim/sim-{gqa,lstm,moe,conv2}.json)
else
  bin="${BIN:-$root/.cuda-bin/memcal-measure}"
  device=cuda:0 precision=bf16-autocast batches="[4, 8]" regime=cuda-fixture
  export PYTHONPATH="$root/exporter${PYTHONPATH:+:$PYTHONPATH}"
  # The harness runs against python3's torch and the pip CUDA libraries beside it.
  # shellcheck source=measurement/campaigns/cuda-libs.sh
  . "$root/measurement/campaigns/cuda-libs.sh"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # Assumed or source-only CUDA rules first (RNNs, MoE, MLA, convolutions, masked sdpa).
  fixtures=$(ls "$root"/tests/fixtures/sim/sim-*.json | awk '/lstm|gru|moe|mla|conv|mask|sdpa/ {print "0 " $0; next} {print "1 " $0}' | sort -s -k1,1 | cut -d' ' -f2)
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -c 'import torch, transformers; print("python torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'

# (a) the fixtures, in shards beside the Python part.
plan="$out_dir/fixtures/plan.toml"
{
  echo "# Written by measurement/campaigns/gpu-all.sh: every single-op fixture, $device."
  echo "device = \"$device\""
  echo "precision = \"$precision\""
  echo "regime = \"$regime\""
  for f in $fixtures; do
    printf '\n[[run]]\ngraph = "%s"\nbatches = %s\n' "${f#"$root"/}" "$batches"
  done
} >"$plan"
shards="${FIXTURE_SHARDS:-$([ "$dry" = 1 ] && echo 2 || echo 6)}"
fixture_pids=()
if [ "${FIXTURES:-1}" = 0 ]; then
  echo "fixtures: skipped (FIXTURES=0)"
elif "$bin" environment --device "$device" >/dev/null; then
  for i in $(seq 0 $((shards - 1))); do
    (cd "$root" && timeout -k 5 $((budget - 20)) "$bin" campaign "$plan" --shard "$i/$shards" \
      --out "$out_dir/fixtures/shard-$i" --run-timeout-s 60 >"$out_dir/fixtures/shard-$i.log" 2>&1) &
    fixture_pids+=($!)
  done
  echo "fixtures: $(echo "$fixtures" | wc -w) graphs in $shards shards ($(elapsed) s)"
else
  echo "fixtures: memcal-measure cannot use $device; skipped (see above)"
  ldd "$bin" | grep -E 'not found|torch' || true
fi

# (b-e) the real models, in the time left.
dry_flag=()
[ "$dry" = 1 ] && dry_flag=(--dry-run)
(cd "$root" && python3 -u -m memcal_export.gpu --repo "$root" --plan "${PLAN:-$root/measurement/campaigns/gpu-real.json}" --out "$out_dir/real" \
  --budget-s $((budget - $(elapsed) - 15)) "${dry_flag[@]}")
real_rc=$?
echo "real models: done, exit $real_rc ($(elapsed) s)"
pack

fixture_rc=0
for pid in "${fixture_pids[@]}"; do wait "$pid" || fixture_rc=1; done
echo "fixtures: $(find "$out_dir/fixtures" -path '*shard-*' -name 'b*.json' | wc -l) rows, exit $fixture_rc ($(elapsed) s)"
tail -n 2 "$out_dir"/fixtures/shard-*.log 2>/dev/null | grep -v '^$' | tail -n 12
# The dry run (CI) fails when any part did; on a GPU the rows so far are kept and a rerun resumes.
if [ "$dry" = 1 ] && { [ "$real_rc" != 0 ] || [ "$fixture_rc" != 0 ]; }; then
  echo "gpu-all --dry-run: FAILED (real models exit $real_rc, fixtures exit $fixture_rc)"
  exit 1
fi
