//! Campaigns: many runs from a TOML plan, each in a fresh child process (`memcal-measure run`),
//! resumable (a row already on disk is skipped), and robust (one run's crash or OOM never loses
//! another's row). The plan format is documented in `measurement/README.md`.

use crate::measure::{gib_label, Exit, SPAWN_ENV};
use memcal::graph::Graph;
use memcal::run::{RunRow, RunStatus};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A campaign plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Default device for every entry (`cpu`, `cuda:0`); default `cpu`.
    #[serde(default)]
    pub device: Option<String>,
    /// Default precision profile; default by device (`fp32` on CPU, `bf16-autocast` on CUDA).
    #[serde(default)]
    pub precision: Option<String>,
    /// Default regime label; default `<kind>-free`, or `<kind>-edge` for capped runs.
    #[serde(default)]
    pub regime: Option<String>,
    /// Default marker (`after-fit`).
    #[serde(default)]
    pub marker: Option<String>,
    /// The entries.
    #[serde(rename = "run")]
    pub runs: Vec<Entry>,
}

/// One plan entry: a graph and the batches (and caps) to run it at.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Path of the graph file, relative to the current directory.
    pub graph: PathBuf,
    /// Batch sizes.
    pub batches: Vec<u64>,
    /// Emulated capacities in GiB; each batch runs once per cap. Absent or empty: uncapped.
    #[serde(default)]
    pub caps: Vec<f64>,
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default)]
    pub precision: Option<String>,
    #[serde(default)]
    pub regime: Option<String>,
    #[serde(default)]
    pub marker: Option<String>,
    /// Strategy specs (`memcal-measure run --strategy`); each batch runs once per strategy,
    /// into `b<batch>-<strategy slug>.json`. Absent or empty: plain training.
    #[serde(default)]
    pub strategies: Vec<String>,
}

/// One run of a campaign.
#[derive(Debug, Clone)]
pub struct Job {
    pub graph: PathBuf,
    pub graph_name: String,
    pub batch: u64,
    pub cap_gib: Option<f64>,
    pub device: String,
    pub precision: Option<String>,
    pub regime: Option<String>,
    pub marker: Option<String>,
    pub strategy: Option<String>,
    pub output: PathBuf,
}

impl Job {
    pub fn label(&self) -> String {
        let mut s = format!("{} b{}", self.graph_name, self.batch);
        if let Some(st) = &self.strategy {
            s += &format!(" {st}");
        }
        if let Some(c) = self.cap_gib {
            s += &format!(" cap{}", gib_label(c));
        }
        s
    }
}

/// Reads a plan and expands it into jobs writing under `out`. Errors name the file and field.
pub fn load_plan(path: &Path, out: &Path) -> Result<Vec<Job>, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::usage(format!("{}: cannot read: {e}", path.display())))?;
    let plan: Plan = toml::from_str(&text)
        .map_err(|e| Exit::usage(format!("{}: malformed campaign plan: {e}", path.display())))?;
    let mut jobs = Vec::new();
    for (i, e) in plan.runs.iter().enumerate() {
        let field = |f: &str| format!("{}: field `run[{i}].{f}`", path.display());
        if e.batches.is_empty() || e.batches.contains(&0) {
            return Err(Exit::usage(format!(
                "{}: needs at least one batch, all positive",
                field("batches")
            )));
        }
        if let Some(c) = e.caps.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
            return Err(Exit::usage(format!(
                "{}: {c} is not a positive number of GiB",
                field("caps")
            )));
        }
        let graph = Graph::load(&e.graph)
            .map_err(|err| Exit::usage(format!("{}: {err}", field("graph"))))?;
        let caps: Vec<Option<f64>> = if e.caps.is_empty() {
            vec![None]
        } else {
            e.caps.iter().map(|c| Some(*c)).collect()
        };
        for s in &e.strategies {
            memcal::strategy::parse_row_spec(s)
                .map_err(|m| Exit::usage(format!("{}: {m}", field("strategies"))))?;
        }
        let strategies: Vec<Option<String>> = if e.strategies.is_empty() {
            vec![None]
        } else {
            e.strategies.iter().map(|s| Some(s.clone())).collect()
        };
        for &batch in &e.batches {
            for (&cap, strategy) in caps
                .iter()
                .flat_map(|c| strategies.iter().map(move |s| (c, s)))
            {
                let stem = match cap {
                    None => format!("b{batch}"),
                    Some(c) => format!("b{batch}-cap{}", gib_label(c)),
                };
                let file = match strategy {
                    None => format!("{stem}.json"),
                    Some(s) => format!("{stem}-{}.json", crate::measure::strategy_slug(s)),
                };
                jobs.push(Job {
                    graph: e.graph.clone(),
                    graph_name: graph.name.clone(),
                    batch,
                    cap_gib: cap,
                    device: e
                        .device
                        .clone()
                        .or_else(|| plan.device.clone())
                        .unwrap_or_else(|| "cpu".into()),
                    precision: e.precision.clone().or_else(|| plan.precision.clone()),
                    regime: e.regime.clone().or_else(|| plan.regime.clone()),
                    marker: e.marker.clone().or_else(|| plan.marker.clone()),
                    strategy: strategy.clone(),
                    output: out.join(&graph.name).join(file),
                });
            }
        }
    }
    Ok(jobs)
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobResult {
    Skipped,
    Completed,
    Oom,
    Error(String),
    /// The child exited without writing a row (a crash, a signal, a usage error).
    NoRow(String),
}

/// The executable to start a child with: this one, or, when it was replaced on disk while the
/// campaign runs (a rebuild), the new file at the same path.
fn child_exe(exe: &Path) -> PathBuf {
    if exe.exists() {
        return exe.to_path_buf();
    }
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(p) => PathBuf::from(p),
        None => exe.to_path_buf(),
    }
}

/// Runs one job in a child process.
pub fn run_job(exe: &Path, job: &Job, timeout: Option<Duration>) -> JobResult {
    if job.output.exists() {
        return JobResult::Skipped;
    }
    let exe = child_exe(exe);
    let mut cmd = Command::new(&exe);
    cmd.arg("run")
        .arg("--graph")
        .arg(&job.graph)
        .arg("--batch")
        .arg(job.batch.to_string())
        .arg("--device")
        .arg(&job.device)
        .arg("--output")
        .arg(&job.output);
    if let Some(p) = &job.precision {
        cmd.arg("--precision").arg(p);
    }
    if let Some(c) = job.cap_gib {
        cmd.arg("--cap-gib").arg(gib_label(c));
    }
    if let Some(r) = &job.regime {
        cmd.arg("--regime").arg(r);
    }
    if let Some(m) = &job.marker {
        cmd.arg("--marker").arg(m);
    }
    if let Some(s) = &job.strategy {
        cmd.arg("--strategy").arg(s);
    }
    let spawn_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    cmd.env(SPAWN_ENV, spawn_ns.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return JobResult::NoRow(format!("cannot start {}: {e}", exe.display())),
    };
    // Read stderr on a thread so a chatty child never blocks on a full pipe.
    let mut pipe = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut pipe, &mut buf);
        buf
    });
    let started = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if timeout.is_some_and(|t| started.elapsed() > t) {
            timed_out = true;
            let _ = child.kill();
            break child.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // After a timeout, a grandchild may still hold the pipe: do not wait for it.
    let stderr_bytes = if timed_out {
        Vec::new()
    } else {
        reader.join().unwrap_or_default()
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => return JobResult::NoRow(format!("waiting for the child: {e}")),
    };
    let stderr = String::from_utf8_lossy(&stderr_bytes);
    let tail: String = stderr
        .lines()
        .filter(|l| !l.starts_with("memcal-overhead-seconds"))
        .collect::<Vec<_>>()
        .join(" | ");
    let exit = match status.code() {
        _ if timed_out => format!(
            "killed after the {}s run timeout",
            timeout.unwrap_or_default().as_secs()
        ),
        Some(c) => format!("exit status {c}"),
        None => {
            use std::os::unix::process::ExitStatusExt;
            format!("killed by signal {}", status.signal().unwrap_or(0))
        }
    };
    if !job.output.exists() {
        return JobResult::NoRow(format!("{exit}, no row written: {tail}"));
    }
    let row: Result<RunRow, String> = std::fs::read_to_string(&job.output)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()));
    match row {
        Ok(r) => match r.status {
            RunStatus::Completed => JobResult::Completed,
            RunStatus::Oom => JobResult::Oom,
            RunStatus::Error => JobResult::Error(
                r.error
                    .map(|f| format!("{}: {}", f.phase, f.message))
                    .unwrap_or_else(|| exit.clone()),
            ),
        },
        Err(e) => JobResult::Error(format!("{}: unreadable row: {e}", job.output.display())),
    }
}

/// One job's outcome in a campaign: what happened and how long it took.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub result: JobResult,
    pub seconds: f64,
}

/// The counts and failures of a finished list of jobs.
#[derive(Debug, Default)]
pub struct Summary {
    pub completed: usize,
    pub oom: usize,
    pub skipped: usize,
    /// (run label, what went wrong), in plan order.
    pub failed: Vec<(String, String)>,
}

impl Summary {
    /// Counts the outcomes of `jobs` (same order).
    pub fn of(jobs: &[Job], outcomes: &[Outcome]) -> Summary {
        let mut s = Summary::default();
        for (job, o) in jobs.iter().zip(outcomes) {
            match &o.result {
                JobResult::Skipped => s.skipped += 1,
                JobResult::Completed => s.completed += 1,
                JobResult::Oom => s.oom += 1,
                JobResult::Error(m) => s.failed.push((job.label(), format!("error: {m}"))),
                JobResult::NoRow(m) => s.failed.push((job.label(), format!("no row: {m}"))),
            }
        }
        s
    }

    /// Prints the one-line summary and every failed run; `what` names the campaign.
    pub fn print(&self, what: &str, runs: usize, seconds: f64) {
        eprintln!(
            "campaign {what}: {runs} runs: {} completed, {} oom, {} skipped, {} failed ({seconds:.1}s)",
            self.completed,
            self.oom,
            self.skipped,
            self.failed.len(),
        );
        for (label, m) in &self.failed {
            eprintln!("  failed: {label}: {m}");
        }
    }
}

/// Runs `jobs` one after the other, each in a child process, with a progress bar; returns each
/// job's outcome in order.
pub fn run_jobs(jobs: &[Job], timeout: Option<Duration>) -> Result<Vec<Outcome>, Exit> {
    let exe = std::env::current_exe()
        .map_err(|e| Exit::usage(format!("cannot find my own executable: {e}")))?;
    let pb = indicatif::ProgressBar::new(jobs.len() as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise}, ETA {eta}] {msg}",
        )
        .expect("valid progress template"),
    );
    let hidden = pb.is_hidden();
    let mut outcomes = Vec::with_capacity(jobs.len());
    for (k, job) in jobs.iter().enumerate() {
        pb.set_message(job.label());
        let t = Instant::now();
        let result = run_job(&exe, job, timeout);
        let seconds = t.elapsed().as_secs_f64();
        let line = match &result {
            JobResult::Skipped => format!("skipped (row exists): {}", job.output.display()),
            JobResult::Completed => format!("completed in {seconds:.1}s"),
            JobResult::Oom => format!("oom (recorded) in {seconds:.1}s"),
            JobResult::Error(m) => format!("ERROR: {m}"),
            JobResult::NoRow(m) => format!("CRASH: {m}"),
        };
        let line = format!("[{}/{}] {}: {line}", k + 1, jobs.len(), job.label());
        if hidden {
            eprintln!("{line}");
        } else {
            pb.println(line);
        }
        pb.inc(1);
        outcomes.push(Outcome { result, seconds });
    }
    pb.finish_and_clear();
    Ok(outcomes)
}

/// Runs a whole campaign with a progress bar; returns the exit status (1 if any run errored or
/// wrote no row).
pub fn run_campaign(plan: &Path, out: &Path, timeout: Option<Duration>) -> Result<i32, Exit> {
    let jobs = load_plan(plan, out)?;
    let started = Instant::now();
    let outcomes = run_jobs(&jobs, timeout)?;
    let summary = Summary::of(&jobs, &outcomes);
    summary.print(
        &plan.display().to_string(),
        jobs.len(),
        started.elapsed().as_secs_f64(),
    );
    Ok(if summary.failed.is_empty() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(dir: &Path) -> Job {
        Job {
            graph: PathBuf::from("g.json"),
            graph_name: "g".into(),
            batch: 2,
            cap_gib: Some(0.5),
            device: "cpu".into(),
            precision: None,
            regime: None,
            marker: None,
            strategy: None,
            output: dir.join("g/b2-cap0.5.json"),
        }
    }

    #[test]
    fn a_child_that_writes_no_row_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let j = job(dir.path());
        assert_eq!(j.label(), "g b2 cap0.5");
        match run_job(Path::new("/bin/false"), &j, None) {
            JobResult::NoRow(m) => assert!(m.contains("exit status 1"), "{m}"),
            other => panic!("expected NoRow, got {other:?}"),
        }
        match run_job(Path::new("/nonexistent/memcal-measure"), &j, None) {
            JobResult::NoRow(m) => assert!(m.contains("cannot start"), "{m}"),
            other => panic!("expected NoRow, got {other:?}"),
        }
    }

    #[test]
    fn a_hung_child_is_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        // A stand-in child that ignores its arguments and hangs.
        let script = dir.path().join("hang.sh");
        std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // Another test thread that forks while the script is still open for writing makes
        // exec fail with ETXTBSY ("Text file busy") for a moment: a known race of writing an
        // executable in a multi-threaded process, so the start is retried a few times.
        let mut tries = 0;
        let (t, result) = loop {
            let t = Instant::now();
            let r = run_job(&script, &job(dir.path()), Some(Duration::from_millis(300)));
            match &r {
                JobResult::NoRow(m) if m.contains("Text file busy") && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => break (t, r),
            }
        };
        match result {
            JobResult::NoRow(m) => assert!(m.contains("run timeout"), "{m}"),
            other => panic!("expected NoRow, got {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn an_existing_row_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let j = job(dir.path());
        std::fs::create_dir_all(j.output.parent().unwrap()).unwrap();
        std::fs::write(&j.output, "{}").unwrap();
        assert_eq!(
            run_job(Path::new("/bin/false"), &j, None),
            JobResult::Skipped
        );
    }
}
