#!/usr/bin/env bash
# Submits the Slurm campaign.
# Written by `memcal-measure slurm` 0.1.0; regenerate rather than edit.
# Plan tests/fixtures/cluster-plan.toml (SHA-256 09050b948dec2d4075c914bd2cda04bf0b7c7d2d355cec66a8a6017527ce4294): 5 runs in 5 shards, run k in shard k mod 5.
# Usage: submit.sh [--wait]. Queues the array job and the merge job after it (afterok).
# --wait: waits for the merge job (sbatch --wait); if a task failed, Slurm cancels the merge
# job, and this exits 1 naming each failed task and each failed run (from the shard records).
set -euo pipefail
here=@OUT@
wait=0
case "${1:-}" in --wait) wait=1 ;; "") ;; *) echo "usage: $0 [--wait]" >&2; exit 2 ;; esac
array=$(sbatch --parsable "$here/campaign.sbatch")
array=${array%%;*}
echo "memcal-cluster-plan: array job $array (5 tasks), logs in $here/logs"
merge_args=(--parsable --dependency=afterok:"$array" --kill-on-invalid-dep=yes)
if [ "$wait" = 0 ]; then
  merge=$(sbatch "${merge_args[@]}" "$here/merge.sbatch")
  echo "memcal-cluster-plan: merge job ${merge%%;*} runs after every task succeeds"
  exit 0
fi
# sbatch --wait prints the job id at once and exits when the job ends; a merge job cancelled
# for a failed dependency also exits 0, so its final state decides.
out=$(sbatch "${merge_args[@]}" --wait "$here/merge.sbatch") && rc=0 || rc=$?
merge=$(printf '%s\n' "$out" | head -n 1)
merge=${merge%%;*}
state=$(scontrol show job -o "$merge" 2>/dev/null | grep -o 'JobState=[A-Z_]*' || true)
if [ "$rc" = 0 ] && [ "$state" = JobState=COMPLETED ]; then
  echo "memcal-cluster-plan: campaign merged (merge job $merge, log $here/logs/merge_$merge.out)"
  exit 0
fi
echo "memcal-cluster-plan: CAMPAIGN FAILED: merge job $merge ${state:-state unknown} (exit $rc)" >&2
scontrol show job -o "$array" 2>/dev/null | grep -v 'JobState=COMPLETED' | sed -n \
  's/.*ArrayTaskId=\([0-9]*\).*JobState=\([A-Z_]*\).*ExitCode=\([0-9:]*\).*/  task \1: \2, exit code \3, log logs\/'"$array"'_\1.out/p' >&2 || true
/srv/memcal/target/release/memcal-measure merge @OUT@/shards --plan tests/fixtures/cluster-plan.toml --into /srv/memcal/data/runs/cuda --check >&2 || true
exit 1
