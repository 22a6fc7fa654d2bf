//! Sharded campaigns: shard I of N of a plan's runs, for Slurm job arrays and Kubernetes Indexed
//! Jobs (`campaign PLAN --shard I/N`). Each shard writes its rows and a record (`shard.json`,
//! format `memcal-shard/1`: the plan's SHA-256, the shard's run list, and per attempt the host,
//! the scheduler's variables, the device environment and every run's outcome) to its own folder
//! `<out>/shard-<I>-of-<N>/`. A retried shard resumes: rows already in its folder are skipped.
//! `merge` (in [`crate::merge`]) checks the shards' rows and moves them into `data/runs/`.

use crate::campaign::{self, Job, JobResult, Outcome, Summary};
use crate::measure::{Exit, EXIT_USAGE};
use memcal::graph::sha256_hex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// The format tag of a shard record.
pub const SHARD_FORMAT: &str = "memcal-shard/1";
/// The record's file name inside a shard folder.
pub const SHARD_RECORD: &str = "shard.json";
/// Environment variables recorded with each attempt (the scheduler's view of the task).
pub const SCHEDULER_VARS: [&str; 9] = [
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURMD_NODENAME",
    "SLURM_RESTART_COUNT",
    "CUDA_VISIBLE_DEVICES",
    "JOB_COMPLETION_INDEX",
    "HOSTNAME",
];

/// Which shard of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The shard's folder under a campaign's output folder.
    pub fn dir(&self, out: &Path) -> PathBuf {
        out.join(format!("shard-{}-of-{}", self.index, self.count))
    }

    /// `3/6`, for messages.
    pub fn label(&self) -> String {
        format!("{}/{}", self.index, self.count)
    }
}

/// The shard that plan run `k` (0-based, in plan order) belongs to: `k mod N`. Adding runs at
/// the end of a plan leaves every earlier run in its shard (for the same N), and the shards'
/// sizes differ by at most one.
pub fn shard_of(k: usize, count: usize) -> usize {
    k % count
}

fn parse_number(s: &str, what: &str, spec: &str) -> Result<usize, Exit> {
    s.trim().parse::<usize>().map_err(|_| {
        Exit::usage(format!(
            "--shard {spec}: {what} `{s}` is not a non-negative integer"
        ))
    })
}

/// Parses `--shard`: `I/N`; `auto/N` (I from `SLURM_ARRAY_TASK_ID` or, on Kubernetes,
/// `JOB_COMPLETION_INDEX`); or `auto` (I and N from `SLURM_ARRAY_TASK_ID` and
/// `SLURM_ARRAY_TASK_COUNT`). `var` reads an environment variable (injected for tests).
pub fn parse_shard(spec: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<Shard, Exit> {
    let (i, n) = match spec.split_once('/') {
        Some((i, n)) => (i.trim(), Some(n.trim())),
        None => (spec.trim(), None),
    };
    let count = match n {
        Some(n) => parse_number(n, "the shard count", spec)?,
        None if i == "auto" => {
            if var("SLURM_ARRAY_TASK_ID").is_none() && var("JOB_COMPLETION_INDEX").is_some() {
                return Err(Exit::usage(format!(
                    "--shard {spec}: JOB_COMPLETION_INDEX gives the index only; pass the Job's \
                     `completions` as `--shard auto/N`"
                )));
            }
            let c = var("SLURM_ARRAY_TASK_COUNT").ok_or_else(|| {
                Exit::usage(format!(
                    "--shard {spec}: SLURM_ARRAY_TASK_COUNT is not set (not in a Slurm array \
                     task?); pass `--shard I/N` or `--shard auto/N`"
                ))
            })?;
            parse_number(&c, "SLURM_ARRAY_TASK_COUNT", spec)?
        }
        None => {
            return Err(Exit::usage(format!(
                "--shard {spec}: expected `I/N`, `auto/N` or `auto`"
            )))
        }
    };
    let index = if i == "auto" {
        let slurm = var("SLURM_ARRAY_TASK_ID");
        let k8s = var("JOB_COMPLETION_INDEX");
        match (slurm, k8s) {
            (Some(a), Some(b)) if a.trim() != b.trim() => {
                return Err(Exit::usage(format!(
                    "--shard {spec}: SLURM_ARRAY_TASK_ID={a} and JOB_COMPLETION_INDEX={b} disagree"
                )))
            }
            (Some(a), _) => parse_number(&a, "SLURM_ARRAY_TASK_ID", spec)?,
            (None, Some(b)) => parse_number(&b, "JOB_COMPLETION_INDEX", spec)?,
            (None, None) => {
                return Err(Exit::usage(format!(
                    "--shard {spec}: neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set; \
                     pass the index as `--shard I/N`"
                )))
            }
        }
    } else {
        parse_number(i, "the shard index", spec)?
    };
    if count == 0 {
        return Err(Exit::usage(format!(
            "--shard {spec}: the shard count must be at least 1"
        )));
    }
    if index >= count {
        return Err(Exit::usage(format!(
            "--shard {spec}: index {index} is not below the count {count} (indices are 0..N-1)"
        )));
    }
    Ok(Shard { index, count })
}

/// One run of a shard, as planned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlannedRun {
    /// 0-based position in the plan's run list.
    pub index: usize,
    /// `mlp-r1 b4 cap0.125`.
    pub run: String,
    /// The graph file, as the plan names it.
    pub graph: String,
    pub batch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_gib: Option<f64>,
    pub device: String,
    /// The row's path relative to the shard folder (`mlp-r1/b4-cap0.125.json`).
    pub row: String,
}

/// One run's outcome in one attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunOutcome {
    pub run: String,
    /// `completed`, `oom`, `error` (a row with status error), `no-row` or `skipped`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub seconds: f64,
}

/// One attempt at running a shard (a retried shard has several).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Attempt {
    /// RFC 3339 UTC.
    pub started: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    pub host: String,
    pub tool_version: String,
    /// The scheduler's variables that were set (see [`SCHEDULER_VARS`]).
    pub scheduler: BTreeMap<String, String>,
    /// `memcal-measure environment --json` for each device of the shard's runs, or
    /// `{"device": .., "error": ..}` when the device is absent.
    pub environments: Vec<serde_json::Value>,
    /// Every run's outcome, in run order; absent until the attempt finishes.
    #[serde(default)]
    pub results: Vec<RunOutcome>,
}

/// `shard.json`: what a shard was asked to run and what happened, attempt by attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShardRecord {
    pub format: String,
    /// The plan file, as given.
    pub plan: String,
    /// SHA-256 of the plan file's bytes.
    pub plan_sha256: String,
    pub shard: usize,
    pub shards: usize,
    /// Runs in the whole plan.
    pub plan_runs: usize,
    /// The emulated capacities (GiB) of this shard's runs, sorted, without repeats.
    pub caps_gib: Vec<f64>,
    pub runs: Vec<PlannedRun>,
    pub attempts: Vec<Attempt>,
}

impl ShardRecord {
    /// Reads and checks a shard folder's record; errors name the file.
    pub fn load(dir: &Path) -> Result<ShardRecord, Exit> {
        let path = dir.join(SHARD_RECORD);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Exit::usage(format!("{}: cannot read: {e}", path.display())))?;
        let r: ShardRecord = serde_json::from_str(&text)
            .map_err(|e| Exit::usage(format!("{}: not a shard record: {e}", path.display())))?;
        if r.format != SHARD_FORMAT {
            return Err(Exit::usage(format!(
                "{}: field `format`: expected \"{SHARD_FORMAT}\", found \"{}\"",
                path.display(),
                r.format
            )));
        }
        if r.shards == 0 || r.shard >= r.shards {
            return Err(Exit::usage(format!(
                "{}: field `shard`: {} is not below `shards` {}",
                path.display(),
                r.shard,
                r.shards
            )));
        }
        Ok(r)
    }

    /// The last recorded outcome of `run`, with the attempt's host.
    pub fn last_outcome(&self, run: &str) -> Option<(&Attempt, &RunOutcome)> {
        self.attempts
            .iter()
            .rev()
            .find_map(|a| a.results.iter().find(|o| o.run == run).map(|o| (a, o)))
    }
}

/// Writes `text` to `path` through a temporary sibling and a rename (memcal's own file).
pub fn write_replace(path: &Path, text: &str) -> Result<(), Exit> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Exit::usage(format!("{}: cannot write: {e}", path.display()))
        })
}

fn save(dir: &Path, record: &ShardRecord) -> Result<(), Exit> {
    let mut text = serde_json::to_string_pretty(record).expect("a shard record serialises");
    text.push('\n');
    write_replace(&dir.join(SHARD_RECORD), &text)
}

/// The plan's runs, numbered in plan order, with the shard folder as their output root.
pub fn planned(jobs: &[Job], dir: &Path) -> Vec<PlannedRun> {
    jobs.iter()
        .enumerate()
        .map(|(k, j)| PlannedRun {
            index: k,
            run: j.label(),
            graph: j.graph.display().to_string(),
            batch: j.batch,
            cap_gib: j.cap_gib,
            device: j.device.clone(),
            row: j
                .output
                .strip_prefix(dir)
                .unwrap_or(&j.output)
                .display()
                .to_string(),
        })
        .collect()
}

/// `memcal-measure environment --device D --json` in a child, so that the campaign process
/// itself never initialises a GPU.
fn environment_of(device: &str) -> serde_json::Value {
    let fail = |m: String| serde_json::json!({ "device": device, "error": m });
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(e.to_string()),
    };
    match Command::new(exe)
        .args(["environment", "--json", "--device", device])
        .output()
    {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| fail(format!("unreadable environment: {e}"))),
        Ok(o) => fail(
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .trim_start_matches("memcal-measure: ")
                .to_string(),
        ),
        Err(e) => fail(e.to_string()),
    }
}

fn outcome_of(o: &Outcome) -> RunOutcome {
    let (outcome, message) = match &o.result {
        JobResult::Skipped => ("skipped", None),
        JobResult::Completed => ("completed", None),
        JobResult::Oom => ("oom", None),
        JobResult::Error(m) => ("error", Some(m.clone())),
        JobResult::NoRow(m) => ("no-row", Some(m.clone())),
    };
    RunOutcome {
        run: String::new(),
        outcome: outcome.into(),
        message,
        seconds: (o.seconds * 1000.0).round() / 1000.0,
    }
}

/// The record to start an attempt with: the one on disk (checked against the plan), or a new one.
fn open_record(
    plan: &Path,
    plan_sha256: &str,
    shard: Shard,
    plan_runs: usize,
    runs: Vec<PlannedRun>,
    dir: &Path,
) -> Result<ShardRecord, Exit> {
    if dir.join(SHARD_RECORD).exists() {
        let r = ShardRecord::load(dir)?;
        if r.plan_sha256 != plan_sha256 || r.shards != shard.count || r.runs != runs {
            return Err(Exit::usage(format!(
                "{}: this shard folder was made from a different plan or shard count (plan \
                 SHA-256 {}, {} shards; now {plan_sha256}, {}); use a new --out folder",
                dir.join(SHARD_RECORD).display(),
                r.plan_sha256,
                r.shards,
                shard.count
            )));
        }
        return Ok(r);
    }
    let mut caps: Vec<f64> = runs.iter().filter_map(|r| r.cap_gib).collect();
    caps.sort_by(|a, b| a.total_cmp(b));
    caps.dedup();
    Ok(ShardRecord {
        format: SHARD_FORMAT.into(),
        plan: plan.display().to_string(),
        plan_sha256: plan_sha256.into(),
        shard: shard.index,
        shards: shard.count,
        plan_runs,
        caps_gib: caps,
        runs,
        attempts: Vec::new(),
    })
}

/// Shards go to a staging folder: under a data folder's `runs/` (a `runs` folder next to a
/// `factors.json`) the engine would read `shard.json` as a row.
fn refuse_data_folder(out: &Path) -> Result<(), Exit> {
    let abs = std::env::current_dir()
        .map(|d| d.join(out))
        .unwrap_or(out.to_path_buf());
    let inside = abs.ancestors().any(|a| {
        a.file_name().is_some_and(|n| n == "runs")
            && a.parent().is_some_and(|p| p.join("factors.json").is_file())
    });
    if inside {
        return Err(Exit::usage(format!(
            "--out {}: is inside a data folder's runs/; write shards to a staging folder and \
             `memcal-measure merge` them into data/runs/<regime>/",
            out.display()
        )));
    }
    Ok(())
}

/// `campaign PLAN --shard I/N --out OUT`: runs shard I's runs into `OUT/shard-I-of-N/`, records
/// the attempt in its `shard.json`; exit status 1 if a run failed (named on stderr and in the
/// record), 2 for bad input.
pub fn run_shard(
    plan: &Path,
    out: &Path,
    shard: Shard,
    timeout: Option<Duration>,
) -> Result<i32, Exit> {
    let bytes = std::fs::read(plan)
        .map_err(|e| Exit::usage(format!("{}: cannot read: {e}", plan.display())))?;
    let plan_sha256 = sha256_hex(&bytes);
    refuse_data_folder(out)?;
    let dir = shard.dir(out);
    let all = campaign::load_plan(plan, &dir)?;
    if shard.count > all.len() {
        return Err(Exit::usage(format!(
            "--shard {}: the plan has {} runs, fewer than {} shards",
            shard.label(),
            all.len(),
            shard.count
        )));
    }
    let plan_runs = all.len();
    let planned_all = planned(&all, &dir);
    let (jobs, runs): (Vec<Job>, Vec<PlannedRun>) = all
        .into_iter()
        .zip(planned_all)
        .filter(|(_, p)| shard_of(p.index, shard.count) == shard.index)
        .unzip();
    std::fs::create_dir_all(&dir)
        .map_err(|e| Exit::usage(format!("{}: cannot create folder: {e}", dir.display())))?;
    let mut record = open_record(plan, &plan_sha256, shard, plan_runs, runs, &dir)?;
    let mut devices: Vec<&str> = jobs.iter().map(|j| j.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    let environments: Vec<serde_json::Value> = devices.iter().map(|d| environment_of(d)).collect();
    let absent: Vec<String> = environments
        .iter()
        .filter_map(|e| e.get("error").and_then(|m| m.as_str()).map(str::to_string))
        .collect();
    let scheduler = SCHEDULER_VARS
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| (v.to_string(), x)))
        .collect();
    record.attempts.push(Attempt {
        started: memcal::clock::rfc3339_utc(SystemTime::now()),
        finished: None,
        host: crate::sysinfo::host_name(),
        tool_version: format!("memcal-measure {}", env!("CARGO_PKG_VERSION")),
        scheduler,
        environments,
        results: Vec::new(),
    });
    save(&dir, &record)?;
    if !absent.is_empty() {
        return Err(Exit {
            code: EXIT_USAGE,
            message: format!(
                "shard {}: device not usable here, no run started: {}",
                shard.label(),
                absent.join("; ")
            ),
        });
    }
    eprintln!(
        "shard {} of {}: {} runs into {}",
        shard.index,
        shard.count,
        jobs.len(),
        dir.display()
    );
    let started = Instant::now();
    let outcomes = campaign::run_jobs(&jobs, timeout)?;
    let attempt = record.attempts.last_mut().expect("pushed above");
    attempt.results = jobs
        .iter()
        .zip(&outcomes)
        .map(|(j, o)| RunOutcome {
            run: j.label(),
            ..outcome_of(o)
        })
        .collect();
    attempt.finished = Some(memcal::clock::rfc3339_utc(SystemTime::now()));
    save(&dir, &record)?;
    let summary = Summary::of(&jobs, &outcomes);
    summary.print(
        &format!("{} shard {}", plan.display(), shard.label()),
        jobs.len(),
        started.elapsed().as_secs_f64(),
    );
    Ok(if summary.failed.is_empty() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn explicit_and_environment_shards() {
        let none = env(&[]);
        assert_eq!(
            parse_shard("2/6", &none).unwrap(),
            Shard { index: 2, count: 6 }
        );
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "6"),
        ]);
        assert_eq!(
            parse_shard("auto", &slurm).unwrap(),
            Shard { index: 4, count: 6 }
        );
        assert_eq!(
            parse_shard("auto/5", &slurm).unwrap(),
            Shard { index: 4, count: 5 }
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3")]);
        assert_eq!(
            parse_shard("auto/4", &k8s).unwrap(),
            Shard { index: 3, count: 4 }
        );
    }

    #[test]
    fn bad_shards_say_what_to_do() {
        let none = env(&[]);
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3")]);
        let both = env(&[("JOB_COMPLETION_INDEX", "3"), ("SLURM_ARRAY_TASK_ID", "2")]);
        for (spec, var, want) in [
            ("6/6", &none as &dyn Fn(&str) -> Option<String>, "not below"),
            ("1/0", &none, "at least 1"),
            ("x/3", &none, "not a non-negative integer"),
            ("3", &none, "expected `I/N`"),
            ("auto/4", &none, "neither SLURM_ARRAY_TASK_ID"),
            ("auto", &none, "SLURM_ARRAY_TASK_COUNT is not set"),
            ("auto", &k8s, "auto/N"),
            ("auto/4", &both, "disagree"),
            ("auto/3", &k8s, "not below"),
        ] {
            let e = parse_shard(spec, var).unwrap_err();
            assert_eq!(e.code, EXIT_USAGE);
            assert!(e.message.contains(want), "{spec}: {}", e.message);
        }
    }

    #[test]
    fn adding_runs_at_the_end_keeps_every_assignment() {
        let before: Vec<usize> = (0..10).map(|k| shard_of(k, 4)).collect();
        let after: Vec<usize> = (0..17).map(|k| shard_of(k, 4)).collect();
        assert_eq!(before[..], after[..10]);
        let mut sizes = [0usize; 4];
        for s in after {
            sizes[s] += 1;
        }
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
    }
}
