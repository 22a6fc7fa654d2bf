//! Reviewing a change and auditing the factors: `memcal diff` scores two states (a git ref or a
//! directory each), each with its own code ([`sides`]: a ref's memcal is built from the ref,
//! [`code`]; its numbers come back as a [`state::ReviewState`]) and reports what changed
//! ([`diff`], as Markdown in [`markdown`]); `memcal audit` ([`audit`]) checks every entry of the factor history against the
//! `data/factors.json` of its commit, recomputes the medians it records, and checks that the
//! current factors reproduce from the rows they claim. All of it only reads; the engine computes
//! every number.

mod audit;
pub mod code;
mod diff;
mod markdown;
mod sides;
pub mod state;

pub use audit::{
    audit, audit_history, audit_text, reproduce, AuditReport, AuditedEntry, EntrySource,
    Reproduction, AUDIT_FORMAT,
};
pub use diff::{
    diff, AddedRow, BottomLine, Change, DiffReport, FactorChange, FailOn, FamilyDelta,
    FeatureChange, Gate, MethodDelta, MetricSummary, NewlyExcluded, Paired, RuleChange, Verdict,
    VerdictChange, DEFAULT_GATES, DIFF_FORMAT,
};
pub use markdown::{diff_markdown, COMMENT_LIMIT};
pub use sides::{open_sides, CodeComparison, Request, Side};
pub use state::{ReviewState, STATE_FORMAT};

use crate::engine::{self, Calibration, Method};
use crate::error::{Error, Result};
use crate::factors::{FactorsFile, HistoryEntry};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A `data/` folder to read: a directory as it is, or a git ref extracted into a temp folder.
pub struct DataState {
    /// What the user named (`HEAD~1`, `../other/data`).
    pub label: String,
    /// The folder holding `factors.json`, `graphs/`, `runs/`.
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

pub(crate) fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|e| Error::Invalid(format!("cannot run git: {e}; is git installed?")))?;
    if !out.status.success() {
        return Err(Error::Invalid(format!(
            "git {} failed in {}: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

impl DataState {
    /// Resolves `spec`: an existing directory (its `data/` subfolder if it has one) or a git ref
    /// of the repository at `repo`, whose `data/` is extracted with `git archive` (the working
    /// tree is never checked out or touched).
    pub fn open(spec: &str, repo: &Path) -> Result<DataState> {
        let as_dir = Path::new(spec);
        if as_dir.is_dir() {
            let data_dir = if as_dir.join("data/factors.json").is_file() {
                as_dir.join("data")
            } else {
                as_dir.to_path_buf()
            };
            return Ok(DataState {
                label: spec.to_string(),
                data_dir,
                _tmp: None,
            });
        }
        let commit = git(repo, &["rev-parse", "--verify", &format!("{spec}^{{commit}}")]).map_err(|_| {
            Error::Invalid(format!(
                "`{spec}` is neither a directory nor a git ref of {}; pass a branch, tag, commit or folder",
                repo.display()
            ))
        })?;
        let commit = String::from_utf8_lossy(&commit).trim().to_string();
        let label = format!("{spec} ({})", &commit[..12.min(commit.len())]);
        DataState::at_commit(repo, &commit, "data", label)
    }

    /// The folder `data_path` (relative to the repository's top) as it was at `commit`,
    /// extracted with `git archive` into a temp folder.
    pub fn at_commit(
        repo: &Path,
        commit: &str,
        data_path: &str,
        label: String,
    ) -> Result<DataState> {
        let tmp = tempfile::tempdir().map_err(|source| Error::Io {
            path: std::env::temp_dir(),
            source,
        })?;
        let tar = git(repo, &["archive", "--format=tar", commit, data_path])?;
        extract_tar(&tar, tmp.path())?;
        Ok(DataState {
            label,
            data_dir: tmp.path().join(data_path),
            _tmp: Some(tmp),
        })
    }
}

/// Extracts a tar archive into `into`. Every file gets the time of extraction (`-m`), not its
/// commit's: cargo decides what to rebuild by modification times, and a base build of an older
/// commit in the shared target folder must not look older than what it replaces.
fn extract_tar(bytes: &[u8], into: &Path) -> Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("tar")
        .arg("-x")
        .arg("-m")
        .arg("-C")
        .arg(into)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Invalid(format!("cannot run tar: {e}")))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(bytes)
        .map_err(|source| Error::Io {
            path: into.to_path_buf(),
            source,
        })?;
    let status = child
        .wait()
        .map_err(|e| Error::Invalid(format!("tar failed: {e}")))?;
    if !status.success() {
        return Err(Error::Invalid(format!(
            "tar could not extract into {}",
            into.display()
        )));
    }
    Ok(())
}

/// The engine's view of one state.
pub struct Evaluated {
    pub label: String,
    pub factors: FactorsFile,
    pub cal: Calibration,
}

/// Loads and calibrates one state.
pub fn evaluate(state: &DataState) -> Result<Evaluated> {
    let ds = engine::load(&state.data_dir)?;
    let cal = engine::calibrate(&ds);
    Ok(Evaluated {
        label: state.label.clone(),
        factors: ds.factors,
        cal,
    })
}

/// The history entry `memcal fit --write-factors` appends for a newly fixed factors file.
pub fn history_entry(f: &FactorsFile, cal: &Calibration) -> HistoryEntry {
    let median = |m: Method| cal.methods.get(&m).and_then(|x| x.median_abs_rel_error);
    HistoryEntry {
        held_out_median: median(Method::PlanHeldOutArchitecture),
        in_sample_median: median(Method::PlanRefitInSample),
        ..entry_of(f).expect("a refitted factors file has provenance")
    }
}

/// The values a history entry records of the factors file `f` (its medians absent), or `None`
/// for a file no fit wrote (no provenance). The audit compares a log entry with these.
pub(crate) fn entry_of(f: &FactorsFile) -> Option<HistoryEntry> {
    let prov = f.provenance.as_ref()?;
    Some(HistoryEntry {
        fixed_at: prov.fixed_at.clone(),
        tool_version: prov.tool_version.clone(),
        rows: prov.rows,
        rows_sha256: prov.rows_sha256.clone(),
        profiles: f
            .profiles
            .iter()
            .map(|(k, v)| (k.clone(), v.factors))
            .collect(),
        q90: f.upper.q90,
        q95: f.upper.q95,
        upper: f
            .profiles
            .iter()
            .filter_map(|(k, v)| v.upper.clone().map(|u| (k.clone(), u)))
            .collect(),
        profile_fixed_at: f
            .profiles
            .iter()
            .filter_map(|(k, v)| v.fixed_at.clone().map(|t| (k.clone(), t)))
            .collect(),
        held_out_median: None,
        in_sample_median: None,
    })
}
