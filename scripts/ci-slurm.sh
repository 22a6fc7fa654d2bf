#!/usr/bin/env bash
# CI for sharded campaigns on a real scheduler (memcal issue 24): starts a single-node Slurm on
# this machine (scripts/slurm-local.sh: loopback only, every file in a temp folder, stopped by
# pid), then
#   1. submits a 6-run CPU campaign of the smallest graphs with the script `memcal-measure slurm`
#      writes (at most 2 tasks at once), waits for it (sbatch --wait), merges it into a temporary
#      copy of data/, and checks that `memcal fit` on that copy accounts for every row;
#   2. submits a campaign with a run that fails and checks it surfaces as a failed campaign
#      naming that run, with nothing merged;
#   3. runs the Kubernetes Indexed Job's own command (from the job.yaml that `memcal-measure k8s`
#      writes) once per index with JOB_COMPLETION_INDEX set, then its merge Job's command;
#   4. submits the per-rank campaign's array (`python3 -m memcal_export.ranks --slurm`: one
#      DDP run at world 2 a task, both ranks in the task) for hf-llama-r1's two batches, checks
#      that each rank's row peaks at its committed row's bytes (to 1 KiB), and that a second script finds
#      nothing left to measure.
# Nothing is written into the repository's data/. Needs root (apt-get, slurmd). Called from
# scripts/ci-measurement.sh after the harness is built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
started=$(date +%s)

step() { printf '\n--> ci-slurm: %s\n' "$*"; }
fail() { echo "ci-slurm: FAIL: $*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  # slurmd and munged need root; CI runs as root, so this only happens on a developer machine.
  echo "ci-slurm: not root: skipped (run as root to test on a real Slurm)" >&2
  exit 0
fi

step "install Slurm and munge (apt-get, idempotent)"
scripts/slurm-local.sh install

cargo build -q --release -p memcal-measure
cargo build -q --release --bin memcal
bin="$root/target/release/memcal-measure"
memcal="$root/target/release/memcal"

tmp="$(mktemp -d /tmp/memcal-ci-slurm.XXXXXX)"
chmod 755 "$tmp" # munged runs as the munge user and must reach its folder inside
cleanup() {
  scripts/slurm-local.sh stop "$tmp/slurm" || true
  rm -rf "$tmp"
}
trap cleanup EXIT

step "start slurmctld and slurmd"
scripts/slurm-local.sh start "$tmp/slurm"
export SLURM_CONF="$tmp/slurm/slurm.conf"

# A copy of data/ the merged rows go into (the real data/ is never written).
mkdir -p "$tmp/data"
cp -r data/factors.json data/graphs data/runs "$tmp/data/"
rows_before=$(find "$tmp/data/runs" -name '*.json' | wc -l)

# 6 runs of the smallest graphs (about a second each), uncapped, CPU float32, at batches no row
# of data/ has (so no run id repeats one of data/).
cat >"$tmp/ci.toml" <<'EOF'
device = "cpu"
precision = "fp32"
regime = "cpu-free"

[[run]]
graph = "data/graphs/mlp-r1.json"
batches = [1, 2]

[[run]]
graph = "data/graphs/lstm-lm-r1.json"
batches = [1, 2]

[[run]]
graph = "data/graphs/bert-r1.json"
batches = [1]

[[run]]
graph = "data/graphs/gpt-r1.json"
batches = [1]
EOF

step "1. a 6-run campaign as a Slurm array (2 at once), merged, fitted"
"$bin" slurm "$tmp/ci.toml" --out "$tmp/ok" --into "$tmp/data/runs/cpu-ci" \
  --max-concurrent 2 --time 00:10:00
grep -qx '#SBATCH --array=0-5%2' "$tmp/ok/campaign.sbatch" || fail "campaign.sbatch has no --array=0-5%2"
t0=$(date +%s)
"$tmp/ok/submit.sh" --wait || fail "the campaign failed (logs: $tmp/ok/logs)"
echo "ci-slurm: campaign + merge took $(( $(date +%s) - t0 )) s"
merged=$(find "$tmp/data/runs/cpu-ci" -name '*.json' | wc -l)
[ "$merged" -eq 6 ] || fail "expected 6 merged rows, found $merged"
left=$(find "$tmp/ok/shards" -name 'b*.json' | wc -l)
[ "$left" -eq 0 ] || fail "$left rows left in the shard folders after the merge"
for i in 0 1 2 3 4 5; do
  python3 - "$tmp/ok/shards/shard-$i-of-6/shard.json" <<'EOF' || fail "shard $i: bad record"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["format"] == "memcal-shard/1" and r["shards"] == 6 and len(r["runs"]) == 1, r
a = r["attempts"][-1]
assert a["scheduler"].get("SLURM_ARRAY_TASK_ID") == str(r["shard"]), a["scheduler"]
env = a["environments"][0]
assert env["kind"] == "cpu" and env["torch"].startswith("2.11"), env
assert [o["outcome"] for o in a["results"]] == ["completed"], a["results"]
EOF
done
# Merging again finds everything merged already and moves nothing.
"$bin" merge "$tmp/ok/shards" --plan "$tmp/ci.toml" --into "$tmp/data/runs/cpu-ci" \
  --graphs data/graphs --check --json >"$tmp/again.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert len(r['already_merged'])==6 and not r['moved'] and not r['missing'], r" "$tmp/again.json"

"$memcal" fit --data "$tmp/data" --out "$tmp/calibration.json" >/dev/null
python3 - "$tmp/calibration.json" "$tmp/data" "$rows_before" <<'EOF' || fail "memcal fit does not account for every row"
import json, pathlib, sys
cal = json.load(open(sys.argv[1]))
data = pathlib.Path(sys.argv[2])
t = cal["totals"]
assert t["balanced"], t
# Every row file of the copy is a fitted, held-out or after-the-fit row, or an exclusion: once.
files = sorted(str(p.relative_to(data)) for p in (data / "runs").rglob("*.json"))
seen = sorted([r["file"] for r in cal["rows"]] + [e["file"] for e in cal["exclusions"]])
assert t["inputs"] == len(files) == int(sys.argv[3]) + 6, (t, len(files), sys.argv[3])
assert seen == files, set(seen) ^ set(files)
merged = {r["file"]: r["bucket"] for r in cal["rows"] if r["file"].startswith("runs/cpu-ci/")}
assert len(merged) == 6 and set(merged.values()) == {"fitted"}, merged
print(f"ci-slurm: memcal fit accounts for all {t['inputs']} rows: fitted {t['fitted']} "
      f"(the 6 merged among them), held out by regime {t['held_out_regime']}, "
      f"after the fit {t['after_fit']}, excluded {t['excluded']}")
EOF

step "2. a failing task surfaces as a failed campaign naming the run"
cat >"$tmp/failing.toml" <<'EOF'
device = "cpu"
precision = "fp32"

[[run]]
graph = "data/graphs/mlp-r1.json"
batches = [1]
regime = "cpu-free"

# An emulated capacity larger than this machine's memory: the run refuses it (exit 2, no row).
[[run]]
graph = "data/graphs/mlp-r1.json"
batches = [1]
caps = [100000]
regime = "cpu-edge"
EOF
"$bin" slurm "$tmp/failing.toml" --out "$tmp/bad" --into "$tmp/bad-into" --max-concurrent 2
set +e
"$tmp/bad/submit.sh" --wait 2>"$tmp/bad.err"
rc=$?
set -e
cat "$tmp/bad.err"
[ "$rc" -eq 1 ] || fail "a failing campaign exited $rc, not 1"
grep -q 'CAMPAIGN FAILED' "$tmp/bad.err" || fail "no CAMPAIGN FAILED line"
grep -q 'missing: mlp-r1 b1 cap100000 (shard 1 of 2): no-row' "$tmp/bad.err" \
  || fail "the failed run is not named"
grep -q 'task 1: FAILED, exit code 1:0' "$tmp/bad.err" || fail "the failed task is not named"
[ ! -e "$tmp/bad-into" ] || fail "a failed campaign merged rows"
[ -f "$tmp/bad/shards/shard-0-of-2/mlp-r1/b1.json" ] || fail "the good run's row was lost"

step "3. the Kubernetes Indexed Job's command, once per JOB_COMPLETION_INDEX, then its merge"
cat >"$tmp/k8s.toml" <<'EOF'
device = "cpu"
precision = "fp32"
regime = "cpu-free"

[[run]]
graph = "data/graphs/mlp-r1.json"
batches = [1, 2, 3]
EOF
mkdir -p "$tmp/k8s-data/runs"
"$bin" k8s "$tmp/k8s.toml" --out "$tmp/k8s" --into "$tmp/k8s-data/runs/cpu-k8s" \
  --image memcal-measure:ci --claim memcal-results --mount "$tmp/k8s-volume" \
  --workdir "$root" --bin "$bin" --parallelism 2
command_of() { python3 -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
cmd = [l.split("command: ", 1)[1] for l in lines if l.strip().startswith("command: ")]
assert len(cmd) == 1, cmd
print("\0".join(json.loads(cmd[0])), end="")' "$1"; }
grep -qx '  completionMode: Indexed' "$tmp/k8s/job.yaml" || fail "job.yaml is not an Indexed Job"
grep -qx '  completions: 3' "$tmp/k8s/job.yaml" || fail "job.yaml: completions is not 3"
mapfile -d '' shard_cmd < <(command_of "$tmp/k8s/job.yaml")
mapfile -d '' merge_cmd < <(command_of "$tmp/k8s/merge-job.yaml")
for i in 0 1 2; do
  JOB_COMPLETION_INDEX=$i "${shard_cmd[@]}" || fail "index $i failed"
done
"${merge_cmd[@]}" || fail "the merge Job's command failed"
merged=$(find "$tmp/k8s-data/runs/cpu-k8s" -name '*.json' | wc -l)
[ "$merged" -eq 3 ] || fail "expected 3 rows from the Kubernetes route, found $merged"

step "4. the per-rank campaign (memcal_export.ranks) as a Slurm array: a run a task, its ranks in it"
# Python's torch, transformers and the exporter (scripts/setup-pytorch.sh, run by test.sh first).
export PYTHONPATH="$root/.libtorch:$root/.libtorch/py:$root/exporter"
ranks=(python3 -m memcal_export.ranks --repo "$root" --memcal "$memcal" --runs "$tmp/ranks-rows"
  --work "$tmp/ranks-work" --only hf-llama-r1 --strategy ddp:world=2)
"${ranks[@]}" --slurm "$tmp/ranks" --max-concurrent 1 --time 00:10:00
grep -qx '#SBATCH --array=0,1%1' "$tmp/ranks/ranks.sbatch" || fail "ranks.sbatch has no --array=0,1%1"
t0=$(date +%s)
"$tmp/ranks/submit.sh" --wait || fail "the per-rank array failed (logs: $tmp/ranks/logs)"
echo "ci-slurm: 2 per-rank runs (4 ranks) took $(( $(date +%s) - t0 )) s"
# Every rank's row, each at its committed row's peak and phase.
python3 - "$tmp/ranks-rows/hf-llama-r1" data/runs/cpu-ranks/hf-llama-r1 <<'EOF' || fail "the per-rank rows differ"
import json, os, sys
new, old = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(new))
assert names == [f"b{b}-ddp-world2-r{r}.json" for b in (1, 2) for r in (0, 1)], names
for n in names:
    a, b = (json.load(open(os.path.join(d, n))) for d in (new, old))
    assert a["run_id"] == b["run_id"] and a["rank"] == b["rank"] and a["world"] == 2, n
    # To 1 KiB: a small tensor another thread frees late can shift a phase (test_ranks.py).
    d = a["peak"]["allocated_bytes"] - b["peak"]["allocated_bytes"]
    assert abs(d) <= 1024 and a["peak"]["phase"] == b["peak"]["phase"], (n, a["peak"], b["peak"])
print(f"ci-slurm: {len(names)} per-rank rows, each at its committed peak (to 1 KiB)")
EOF
# The campaign resumes: a second script finds every run measured.
"${ranks[@]}" --slurm "$tmp/ranks-again" | grep -q 'nothing to submit' \
  || fail "a measured per-rank campaign was submitted again"

echo
echo "ci-slurm: ok ($(( $(date +%s) - started )) s)"
