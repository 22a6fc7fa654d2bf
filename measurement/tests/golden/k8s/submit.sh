#!/usr/bin/env bash
# Submits the Kubernetes campaign.
# Written by `memcal-measure k8s` 0.1.0; regenerate rather than edit.
# Plan tests/fixtures/cluster-plan.toml (SHA-256 09050b948dec2d4075c914bd2cda04bf0b7c7d2d355cec66a8a6017527ce4294): 5 runs in 5 shards, run k in shard k mod 5.
# Usage: submit.sh. Applies the Indexed Job, waits until it is Complete or Failed, then runs
# the merge Job and waits for it. Exits 1 naming the failed indexes (kubectl logs shows why).
set -euo pipefail
here=@OUT@
state() { kubectl --namespace calibration get job "$1" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}'; }
await() {
  local s
  while :; do
    s=$(state "$1")
    case " $s " in *" Complete "*) return 0 ;; *" Failed "*) return 1 ;; esac
    sleep 10
  done
}
kubectl --namespace calibration apply -f "$here/job.yaml"
if ! await memcal-cluster-plan; then
  echo "memcal-cluster-plan: CAMPAIGN FAILED: failed indexes $(kubectl --namespace calibration get job memcal-cluster-plan -o jsonpath='{.status.failedIndexes}')" >&2
  echo "  each index's pod log (kubectl logs) and shard.json on the volume name its failed runs" >&2
  exit 1
fi
kubectl --namespace calibration apply -f "$here/merge-job.yaml"
if ! await memcal-cluster-plan-merge; then
  kubectl --namespace calibration logs job/memcal-cluster-plan-merge >&2 || true
  echo "memcal-cluster-plan: MERGE FAILED" >&2
  exit 1
fi
kubectl --namespace calibration logs job/memcal-cluster-plan-merge
echo "memcal-cluster-plan: campaign merged into /results/runs/cuda on the volume memcal-results"
