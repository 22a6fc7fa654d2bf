//! `slurm` and `k8s`: write the files that run a campaign on a cluster's own scheduler, one
//! shard per array task (Slurm) or per completion index (Kubernetes Indexed Job), and a merge
//! step after them. memcal schedules nothing itself.
//!
//! - Slurm: `campaign.sbatch` (an array job, `--array=0-(N-1)%K`, each task
//!   `campaign PLAN --shard auto/N`), `merge.sbatch` (submitted with
//!   `--dependency=afterok:<array>`), and `submit.sh`, which submits both and, with `--wait`,
//!   waits (`sbatch --wait`) and names every failed run.
//! - Kubernetes: `job.yaml` (`completionMode: Indexed`), `merge-job.yaml`, and `submit.sh`
//!   (`kubectl apply`, wait for the Job, then the merge Job).

use crate::campaign;
use crate::measure::Exit;
use memcal::graph::sha256_hex;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Slurm's default `MaxArraySize` is 1001: array indices 0..=1000.
pub const MAX_ARRAY: usize = 1001;

/// What both generators need to know about the campaign.
#[derive(Debug, Clone)]
pub struct Common {
    pub plan: PathBuf,
    /// Where the files are written (here).
    pub out: PathBuf,
    /// Where merged rows go (`data/runs/<regime>`), as the merge step sees it.
    pub into: PathBuf,
    /// Shards (array tasks, completion indices); default: one per run, at most [`MAX_ARRAY`].
    pub shards: Option<usize>,
    /// GPUs per task; default 1 when a run of the plan is on CUDA, else none.
    pub gpus_per_task: Option<u32>,
    pub cpus_per_task: Option<u32>,
    pub run_timeout_s: Option<u64>,
    /// The memcal-measure binary as the tasks see it.
    pub bin: PathBuf,
    /// The folder the tasks run in (plan and graph paths are relative to it).
    pub workdir: PathBuf,
}

/// Slurm-only options.
#[derive(Debug, Clone)]
pub struct SlurmOpts {
    pub partition: Option<String>,
    pub max_concurrent: Option<usize>,
    pub time: Option<String>,
}

/// Kubernetes-only options.
#[derive(Debug, Clone)]
pub struct K8sOpts {
    pub image: String,
    pub parallelism: Option<usize>,
    pub backoff_limit_per_index: u32,
    /// A ReadWriteMany PersistentVolumeClaim shared by every pod, mounted at `mount`.
    pub claim: String,
    pub mount: PathBuf,
    pub namespace: Option<String>,
}

/// The campaign as the generators see it.
#[derive(Debug, Clone)]
pub struct Campaign {
    pub name: String,
    pub runs: usize,
    pub shards: usize,
    pub gpus: u32,
    pub plan_sha256: String,
}

fn inspect(c: &Common) -> Result<Campaign, Exit> {
    let bytes = std::fs::read(&c.plan)
        .map_err(|e| Exit::usage(format!("{}: cannot read: {e}", c.plan.display())))?;
    let jobs = campaign::load_plan(&c.plan, Path::new(""))?;
    if jobs.is_empty() {
        return Err(Exit::usage(format!(
            "{}: the plan has no runs",
            c.plan.display()
        )));
    }
    let shards = c.shards.unwrap_or(jobs.len().min(MAX_ARRAY));
    if shards == 0 || shards > jobs.len() {
        return Err(Exit::usage(format!(
            "--shards {shards}: must be between 1 and the plan's {} runs",
            jobs.len()
        )));
    }
    let stem = c
        .plan
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("campaign");
    let name: String = format!("memcal-{stem}")
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() {
                ch.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let cuda = jobs.iter().any(|j| j.device.starts_with("cuda"));
    // A Kubernetes Job name is a DNS label (at most 63 characters), and `-merge` is appended.
    let name: String = name.trim_matches('-').chars().take(57).collect();
    Ok(Campaign {
        name: name.trim_end_matches('-').to_string(),
        runs: jobs.len(),
        shards,
        gpus: c.gpus_per_task.unwrap_or(u32::from(cuda)),
        plan_sha256: sha256_hex(&bytes),
    })
}

/// Quotes a word for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn abs(workdir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        workdir.join(p)
    }
}

/// A path for an `#SBATCH` line: Slurm reads those lines without a shell.
fn sbatch_path(p: &Path, what: &str) -> Result<String, Exit> {
    let s = p.display().to_string();
    if s.chars()
        .any(|c| c.is_whitespace() || c == '%' || c == '\'' || c == '"')
    {
        return Err(Exit::usage(format!(
            "{what} `{s}`: Slurm's #SBATCH lines cannot hold spaces, quotes or `%` in a path; \
             use another folder"
        )));
    }
    Ok(s)
}

fn check_time(t: &str) -> Result<(), Exit> {
    let ok = !t.is_empty()
        && t.chars()
            .all(|c| c.is_ascii_digit() || c == ':' || c == '-')
        && t.chars().next().is_some_and(|c| c.is_ascii_digit());
    if ok || t == "UNLIMITED" {
        Ok(())
    } else {
        Err(Exit::usage(format!(
            "--time `{t}`: expected a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS)"
        )))
    }
}

fn header(c: &Common, k: &Campaign, what: &str) -> String {
    format!(
        "# {what}\n# Written by `memcal-measure {}` {}; regenerate rather than edit.\n\
         # Plan {} (SHA-256 {}): {} runs in {} shards, run k in shard k mod {}.\n",
        what_command(what),
        env!("CARGO_PKG_VERSION"),
        c.plan.display(),
        k.plan_sha256,
        k.runs,
        k.shards,
        k.shards
    )
}

fn what_command(what: &str) -> &'static str {
    if what.contains("Kubernetes") {
        "k8s"
    } else {
        "slurm"
    }
}

/// The shard command every task runs, as words (before quoting).
fn shard_words(c: &Common, k: &Campaign, shards_dir: &str) -> Vec<String> {
    let mut w = vec![
        c.bin.display().to_string(),
        "campaign".into(),
        c.plan.display().to_string(),
        "--shard".into(),
        format!("auto/{}", k.shards),
        "--out".into(),
        shards_dir.to_string(),
    ];
    if let Some(s) = c.run_timeout_s {
        w.extend(["--run-timeout-s".into(), s.to_string()]);
    }
    w
}

fn merge_words(c: &Common, shards_dir: &str, into: &str) -> Vec<String> {
    vec![
        c.bin.display().to_string(),
        "merge".into(),
        shards_dir.to_string(),
        "--plan".into(),
        c.plan.display().to_string(),
        "--into".into(),
        into.to_string(),
    ]
}

fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| sh_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The Slurm files: (file name, contents), in writing order.
pub fn slurm_files(c: &Common, o: &SlurmOpts) -> Result<Vec<(String, String)>, Exit> {
    let k = inspect(c)?;
    if let Some(t) = &o.time {
        check_time(t)?;
    }
    if o.max_concurrent == Some(0) {
        return Err(Exit::usage("--max-concurrent: must be at least 1"));
    }
    let out = abs(&c.workdir, &c.out);
    let logs = sbatch_path(&out.join("logs"), "--out")?;
    let workdir = sbatch_path(&c.workdir, "--workdir")?;
    let shards_dir = out.join("shards").display().to_string();
    let into = abs(&c.workdir, &c.into).display().to_string();
    let mut common = String::new();
    if let Some(p) = &o.partition {
        writeln!(common, "#SBATCH --partition={p}").unwrap();
    }
    writeln!(common, "#SBATCH --ntasks=1").unwrap();
    if let Some(n) = c.cpus_per_task {
        writeln!(common, "#SBATCH --cpus-per-task={n}").unwrap();
    }
    writeln!(common, "#SBATCH --chdir={workdir}").unwrap();

    let mut array = format!(
        "#!/bin/bash\n{}",
        header(c, &k, "Slurm array job: one campaign shard per task.")
    );
    array +=
        "# Submit with submit.sh (it also queues the merge job). To retry failed tasks only:\n\
              #   sbatch --array=<ids> campaign.sbatch   (a retried shard resumes)\n";
    writeln!(array, "#SBATCH --job-name={}", k.name).unwrap();
    let throttle = o
        .max_concurrent
        .map(|m| format!("%{m}"))
        .unwrap_or_default();
    writeln!(array, "#SBATCH --array=0-{}{throttle}", k.shards - 1).unwrap();
    writeln!(array, "#SBATCH --output={logs}/%A_%a.out").unwrap();
    array += &common;
    if k.gpus > 0 {
        writeln!(array, "#SBATCH --gpus-per-task={}", k.gpus).unwrap();
    }
    if let Some(t) = &o.time {
        writeln!(array, "#SBATCH --time={t}").unwrap();
    }
    array += "set -euo pipefail\n\
              # --shard auto/N: the index from SLURM_ARRAY_TASK_ID, the count fixed here, so a\n\
              # resubmitted subset of the array still runs the same shards.\n";
    writeln!(
        array,
        "exec {}",
        shell_line(&shard_words(c, &k, &shards_dir))
    )
    .unwrap();

    let mut merge = format!(
        "#!/bin/bash\n{}",
        header(
            c,
            &k,
            "Slurm merge job: checks and moves every shard's rows in."
        )
    );
    merge +=
        "# submit.sh queues it with --dependency=afterok:<array job> --kill-on-invalid-dep=yes.\n";
    writeln!(merge, "#SBATCH --job-name={}-merge", k.name).unwrap();
    writeln!(merge, "#SBATCH --output={logs}/merge_%j.out").unwrap();
    merge += &common;
    merge += "#SBATCH --time=00:30:00\nset -euo pipefail\n";
    writeln!(
        merge,
        "exec {}",
        shell_line(&merge_words(c, &shards_dir, &into))
    )
    .unwrap();

    let check = {
        let mut w = merge_words(c, &shards_dir, &into);
        w.push("--check".into());
        shell_line(&w)
    };
    let submit = format!(
        "#!/usr/bin/env bash\n{}",
        header(c, &k, "Submits the Slurm campaign.")
    ) + &SLURM_SUBMIT
        .replace("@HERE@", &sh_quote(&out.display().to_string()))
        .replace("@NAME@", &k.name)
        .replace("@SHARDS@", &k.shards.to_string())
        .replace("@CHECK@", &check);
    Ok(vec![
        ("campaign.sbatch".into(), array),
        ("merge.sbatch".into(), merge),
        ("submit.sh".into(), submit),
    ])
}

/// The body of the Slurm submit.sh (placeholders `@NAME@` and so on).
const SLURM_SUBMIT: &str = r#"# Usage: submit.sh [--wait]. Queues the array job and the merge job after it (afterok).
# --wait: waits for the merge job (sbatch --wait); if a task failed, Slurm cancels the merge
# job, and this exits 1 naming each failed task and each failed run (from the shard records).
set -euo pipefail
here=@HERE@
wait=0
case "${1:-}" in --wait) wait=1 ;; "") ;; *) echo "usage: $0 [--wait]" >&2; exit 2 ;; esac
array=$(sbatch --parsable "$here/campaign.sbatch")
array=${array%%;*}
echo "@NAME@: array job $array (@SHARDS@ tasks), logs in $here/logs"
merge_args=(--parsable --dependency=afterok:"$array" --kill-on-invalid-dep=yes)
if [ "$wait" = 0 ]; then
  merge=$(sbatch "${merge_args[@]}" "$here/merge.sbatch")
  echo "@NAME@: merge job ${merge%%;*} runs after every task succeeds"
  exit 0
fi
# sbatch --wait prints the job id at once and exits when the job ends; a merge job cancelled
# for a failed dependency also exits 0, so its final state decides.
out=$(sbatch "${merge_args[@]}" --wait "$here/merge.sbatch") && rc=0 || rc=$?
merge=$(printf '%s\n' "$out" | head -n 1)
merge=${merge%%;*}
state=$(scontrol show job -o "$merge" 2>/dev/null | grep -o 'JobState=[A-Z_]*' || true)
if [ "$rc" = 0 ] && [ "$state" = JobState=COMPLETED ]; then
  echo "@NAME@: campaign merged (merge job $merge, log $here/logs/merge_$merge.out)"
  exit 0
fi
echo "@NAME@: CAMPAIGN FAILED: merge job $merge ${state:-state unknown} (exit $rc)" >&2
scontrol show job -o "$array" 2>/dev/null | grep -v 'JobState=COMPLETED' | sed -n \
  's/.*ArrayTaskId=\([0-9]*\).*JobState=\([A-Z_]*\).*ExitCode=\([0-9:]*\).*/  task \1: \2, exit code \3, log logs\/'"$array"'_\1.out/p' >&2 || true
@CHECK@ >&2 || true
exit 1
"#;

/// The body of the Kubernetes submit.sh.
const K8S_SUBMIT: &str = r#"# Usage: submit.sh. Applies the Indexed Job, waits until it is Complete or Failed, then runs
# the merge Job and waits for it. Exits 1 naming the failed indexes (kubectl logs shows why).
set -euo pipefail
here=@HERE@
state() { @KC@ get job "$1" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}'; }
await() {
  local s
  while :; do
    s=$(state "$1")
    case " $s " in *" Complete "*) return 0 ;; *" Failed "*) return 1 ;; esac
    sleep 10
  done
}
@KC@ apply -f "$here/job.yaml"
if ! await @NAME@; then
  echo "@NAME@: CAMPAIGN FAILED: failed indexes $(@KC@ get job @NAME@ -o jsonpath='{.status.failedIndexes}')" >&2
  echo "  each index's pod log (kubectl logs) and shard.json on the volume name its failed runs" >&2
  exit 1
fi
@KC@ apply -f "$here/merge-job.yaml"
if ! await @MERGE@; then
  @KC@ logs job/@MERGE@ >&2 || true
  echo "@NAME@: MERGE FAILED" >&2
  exit 1
fi
@KC@ logs job/@MERGE@
echo "@NAME@: campaign merged into @INTO@ on the volume @CLAIM@"
"#;

/// A YAML flow sequence of strings: JSON strings are valid YAML double-quoted scalars.
fn yaml_words(words: &[String]) -> String {
    serde_json::to_string(words).expect("strings serialise")
}

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn pod_spec(
    c: &Common,
    k: &Campaign,
    o: &K8sOpts,
    name: &str,
    command: &[String],
    gpus: u32,
) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "  template:\n    metadata:\n      labels:\n        app: {}",
        yaml_str(&k.name)
    )
    .unwrap();
    s += "    spec:\n      restartPolicy: Never\n      containers:\n";
    writeln!(s, "        - name: {}", yaml_str(name)).unwrap();
    writeln!(s, "          image: {}", yaml_str(&o.image)).unwrap();
    writeln!(
        s,
        "          workingDir: {}",
        yaml_str(&c.workdir.display().to_string())
    )
    .unwrap();
    writeln!(s, "          command: {}", yaml_words(command)).unwrap();
    if gpus > 0 || c.cpus_per_task.is_some() {
        s += "          resources:\n            limits:\n";
        if gpus > 0 {
            writeln!(s, "              nvidia.com/gpu: {gpus}").unwrap();
        }
        if let Some(n) = c.cpus_per_task {
            writeln!(s, "              cpu: {n}").unwrap();
        }
    }
    writeln!(
        s,
        "          volumeMounts:\n            - name: results\n              mountPath: {}",
        yaml_str(&o.mount.display().to_string())
    )
    .unwrap();
    writeln!(
        s,
        "      volumes:\n        - name: results\n          persistentVolumeClaim:\n            claimName: {}",
        yaml_str(&o.claim)
    )
    .unwrap();
    s
}

fn metadata(k: &Campaign, o: &K8sOpts, name: &str) -> String {
    let mut s = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {}\n",
        yaml_str(name)
    );
    if let Some(ns) = &o.namespace {
        writeln!(s, "  namespace: {}", yaml_str(ns)).unwrap();
    }
    writeln!(s, "  labels:\n    app: {}", yaml_str(&k.name)).unwrap();
    s
}

/// The Kubernetes files: (file name, contents), in writing order.
pub fn k8s_files(c: &Common, o: &K8sOpts) -> Result<Vec<(String, String)>, Exit> {
    let k = inspect(c)?;
    if o.parallelism == Some(0) {
        return Err(Exit::usage("--parallelism: must be at least 1"));
    }
    if !o.mount.is_absolute() {
        return Err(Exit::usage(format!(
            "--mount `{}`: must be an absolute path in the container",
            o.mount.display()
        )));
    }
    let shards_dir = o.mount.join(&k.name).join("shards").display().to_string();
    let into = abs(&c.workdir, &c.into).display().to_string();
    let mut job = header(
        c,
        &k,
        "Kubernetes Indexed Job: one campaign shard per completion index.",
    );
    job +=
        "# Each pod runs `campaign --shard auto/N`: the index from JOB_COMPLETION_INDEX. Rows go\n\
            # to the shared volume; merge-job.yaml moves them in after the Job completes.\n";
    job += &metadata(&k, o, &k.name);
    job += "spec:\n  completionMode: Indexed\n";
    writeln!(job, "  completions: {}", k.shards).unwrap();
    writeln!(
        job,
        "  parallelism: {}",
        o.parallelism.unwrap_or(k.shards).min(k.shards)
    )
    .unwrap();
    writeln!(job, "  backoffLimitPerIndex: {}", o.backoff_limit_per_index).unwrap();
    writeln!(job, "  maxFailedIndexes: {}", k.shards).unwrap();
    job += &pod_spec(c, &k, o, "shard", &shard_words(c, &k, &shards_dir), k.gpus);

    let merge_name = format!("{}-merge", k.name);
    let mut merge = header(
        c,
        &k,
        "Kubernetes merge Job: checks and moves every shard's rows in.",
    );
    merge += "# submit.sh applies it once the Indexed Job is Complete.\n";
    merge += &metadata(&k, o, &merge_name);
    merge += "spec:\n  backoffLimit: 0\n";
    merge += &pod_spec(c, &k, o, "merge", &merge_words(c, &shards_dir, &into), 0);

    let ns = o
        .namespace
        .as_ref()
        .map(|n| format!(" --namespace {}", sh_quote(n)))
        .unwrap_or_default();
    let out = abs(&c.workdir, &c.out);
    let submit = format!(
        "#!/usr/bin/env bash\n{}",
        header(c, &k, "Submits the Kubernetes campaign.")
    ) + &K8S_SUBMIT
        .replace("@HERE@", &sh_quote(&out.display().to_string()))
        .replace("@KC@", &format!("kubectl{ns}"))
        .replace("@NAME@", &k.name)
        .replace("@MERGE@", &merge_name)
        .replace("@INTO@", &into)
        .replace("@CLAIM@", &o.claim);
    Ok(vec![
        ("job.yaml".into(), job),
        ("merge-job.yaml".into(), merge),
        ("submit.sh".into(), submit),
    ])
}

/// Writes the files into `out` (creating it and, for Slurm, its `logs/` folder), executable
/// where they are scripts; prints what to run next.
pub fn write_files(
    out: &Path,
    files: &[(String, String)],
    logs: bool,
    next: &str,
) -> Result<i32, Exit> {
    use std::os::unix::fs::PermissionsExt;
    let dir = if logs {
        out.join("logs")
    } else {
        out.to_path_buf()
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Exit::usage(format!("{}: cannot create folder: {e}", out.display())))?;
    for (name, text) in files {
        let p = out.join(name);
        crate::shard::write_replace(&p, text)?;
        let mode = if name.ends_with(".sh") || name.ends_with(".sbatch") {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Exit::usage(format!("{}: {e}", p.display())))?;
        println!("wrote {}", p.display());
    }
    println!("{next}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_and_yaml_strings_are_quoted() {
        assert_eq!(sh_quote("/srv/memcal/plan.toml"), "/srv/memcal/plan.toml");
        assert_eq!(sh_quote("a b'c"), r"'a b'\''c'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("$HOME"), "'$HOME'");
        assert_eq!(yaml_str("x: \"y\"\n"), r#""x: \"y\"\n""#);
        assert_eq!(
            yaml_words(&["memcal-measure".into(), "a b".into()]),
            r#"["memcal-measure","a b"]"#
        );
    }

    #[test]
    fn slurm_times_are_checked() {
        for t in ["30", "02:00:00", "1-00:00:00", "UNLIMITED"] {
            assert!(check_time(t).is_ok(), "{t}");
        }
        for t in ["", "2h", "-1", "one hour"] {
            assert!(check_time(t).is_err(), "{t}");
        }
    }
}
