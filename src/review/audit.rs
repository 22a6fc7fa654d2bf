//! `memcal audit`: the factor history (`data/factors-history.json`) checked entry by entry
//! against the `data/factors.json` of the commit that fixed it, its medians recomputed from that
//! commit's rows, every committed version of the factors file checked against its entry, and the
//! current factors refitted from the rows they claim. The site's history page shows only what
//! this audit establishes ([`audit_history`]).

use super::{entry_of, evaluate, git, DataState, Evaluated};
use crate::engine::{self, Calibration, Method};
use crate::error::{Error, Result};
use crate::factors::{FactorHistory, FactorsFile, HistoryEntry, Upper};
use crate::features::FEATURE_NAMES;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Where an audited value comes from: a commit of the factors file, or the working tree's file
/// (not committed yet, or equal to the last commit's when nothing else has it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EntrySource {
    Commit { commit: String, date: String },
    WorkingTree,
}

impl EntrySource {
    /// `commit 1a2b3c4d5e6f (2026-11-29T22:13:13Z)` or `the working tree`.
    pub fn describe(&self) -> String {
        match self {
            EntrySource::Commit { commit, date } => {
                format!("commit {} ({date})", &commit[..12.min(commit.len())])
            }
            EntrySource::WorkingTree => "the working tree (not committed)".into(),
        }
    }
}

/// One entry of the factor history, as the audit established it: the values are the factors
/// file's at the entry's source, the medians recomputed from the rows there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditedEntry {
    /// 1-based position in `data/factors-history.json`.
    pub index: usize,
    pub fixed_at: String,
    /// The version of `data/factors.json` that first has this `provenance.fixed_at` (absent:
    /// none has, so nothing of the entry is established).
    pub source: Option<EntrySource>,
    /// The source's values (absent without a source).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<HistoryEntry>,
    /// Recomputed from the source's rows (absent where they could not be).
    pub held_out_median: Option<f64>,
    pub in_sample_median: Option<f64>,
    /// Where the log differs from what the audit established, in words naming the field
    /// (empty: the entry is audited).
    pub differences: Vec<String>,
}

/// Whether the current factors reproduce from the rows they claim.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reproduction {
    pub reproduces: bool,
    /// What differs, in words (empty when it reproduces).
    pub differences: Vec<String>,
}

/// The format of `memcal audit --json`.
pub const AUDIT_FORMAT: &str = "memcal-audit/1";

/// Everything `memcal audit` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditReport {
    /// Every version of the factors file, oldest first.
    pub versions: Vec<FactorsVersion>,
    pub history: Vec<AuditedEntry>,
    pub current: Reproduction,
    /// Every failure of the audit, in words (empty: it passes).
    pub failures: Vec<String>,
}

/// One version of `data/factors.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactorsVersion {
    pub source: EntrySource,
    pub fixed_at: Option<String>,
    #[serde(skip)]
    pub file: FactorsFile,
}

/// The git repository holding a data folder, and the folder's path in it.
struct Repo {
    top: PathBuf,
    /// The data folder relative to the top, `/`-separated, without a trailing slash.
    data_path: String,
}

impl Repo {
    /// The repository of `data_dir`, or `None` when it is in none (or git is missing).
    fn of(data_dir: &Path) -> Option<Repo> {
        let top = git(data_dir, &["rev-parse", "--show-toplevel"]).ok()?;
        let prefix = git(data_dir, &["rev-parse", "--show-prefix"]).ok()?;
        let top = PathBuf::from(String::from_utf8_lossy(&top).trim());
        let prefix = String::from_utf8_lossy(&prefix).trim().to_string();
        Some(Repo {
            top,
            data_path: prefix.trim_end_matches('/').to_string(),
        })
    }

    fn path_of(&self, name: &str) -> String {
        if self.data_path.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.data_path)
        }
    }
}

/// Every committed version of `<data>/factors.json` (oldest first), then the working tree's if
/// it differs from the last committed one.
fn versions(data_dir: &Path, repo: Option<&Repo>) -> Result<Vec<FactorsVersion>> {
    let mut out = Vec::new();
    let mut last_bytes: Option<Vec<u8>> = None;
    if let Some(r) = repo {
        let path = r.path_of("factors.json");
        let log = git(
            &r.top,
            &["log", "--reverse", "--format=%H %cI", "--", &path],
        )?;
        for line in String::from_utf8_lossy(&log).lines() {
            let Some((commit, date)) = line.split_once(' ') else {
                continue;
            };
            let Ok(bytes) = git(&r.top, &["show", &format!("{commit}:{path}")]) else {
                // The commit deleted the file.
                last_bytes = None;
                continue;
            };
            let file = FactorsFile::parse(
                &String::from_utf8_lossy(&bytes),
                &PathBuf::from(format!("{commit}:{path}")),
            )?;
            out.push(FactorsVersion {
                source: EntrySource::Commit {
                    commit: commit.to_string(),
                    date: date.to_string(),
                },
                fixed_at: file.provenance.as_ref().map(|p| p.fixed_at.clone()),
                file,
            });
            last_bytes = Some(bytes);
        }
    }
    let path = data_dir.join("factors.json");
    let bytes = std::fs::read(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    if last_bytes.as_deref() != Some(bytes.as_slice()) {
        let file = FactorsFile::parse(&String::from_utf8_lossy(&bytes), &path)?;
        out.push(FactorsVersion {
            source: EntrySource::WorkingTree,
            fixed_at: file.provenance.as_ref().map(|p| p.fixed_at.clone()),
            file,
        });
    }
    Ok(out)
}

/// A number as memcal writes it in JSON (the shortest text that reads back as the same value).
fn num(x: f64) -> String {
    format!("{x}")
}

/// An optional value in words: the value, or `none`.
fn or_none<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "none".to_string(), f)
}

/// A profile's six factors, `[f1, f2, ...]`.
fn factor_list(f: &[f64]) -> String {
    let v: Vec<String> = f.iter().map(|x| num(*x)).collect();
    format!("[{}]", v.join(", "))
}

/// The fields of `log` that differ from `want`, named as in `data/factors-history.json`, each
/// with both values in words and numbers.
fn field_differences(log: &HistoryEntry, want: &HistoryEntry) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut cmp = |field: String, a: String, b: String| {
        if a != b {
            out.push((field, a, b));
        }
    };
    let quoted = |s: &str| format!("`{s}`");
    cmp(
        "tool_version".into(),
        quoted(&log.tool_version),
        quoted(&want.tool_version),
    );
    cmp("rows".into(), log.rows.to_string(), want.rows.to_string());
    cmp(
        "rows_sha256".into(),
        quoted(&log.rows_sha256),
        quoted(&want.rows_sha256),
    );
    cmp("q90".into(), num(log.q90), num(want.q90));
    cmp("q95".into(), num(log.q95), num(want.q95));
    let profiles: std::collections::BTreeSet<&String> =
        log.profiles.keys().chain(want.profiles.keys()).collect();
    for p in profiles {
        let (a, b) = (log.profiles.get(p), want.profiles.get(p));
        match (a, b) {
            (Some(a), Some(b)) => {
                for (i, name) in FEATURE_NAMES.iter().enumerate() {
                    cmp(format!("profiles.{p}.{name}"), num(a[i]), num(b[i]));
                }
            }
            _ => cmp(
                format!("profiles.{p}"),
                or_none(a, |f| factor_list(f)),
                or_none(b, |f| factor_list(f)),
            ),
        }
        let q =
            |u: Option<&Upper>| or_none(u, |u| format!("q90 {} / q95 {}", num(u.q90), num(u.q95)));
        cmp(
            format!("upper.{p}"),
            q(log.upper.get(p)),
            q(want.upper.get(p)),
        );
        cmp(
            format!("profile_fixed_at.{p}"),
            or_none(log.profile_fixed_at.get(p), |t| t.clone()),
            or_none(want.profile_fixed_at.get(p), |t| t.clone()),
        );
    }
    out
}

/// The held-out-by-architecture and in-sample medians the history records.
fn medians(cal: &Calibration) -> (Option<f64>, Option<f64>) {
    let m = |x: Method| cal.methods.get(&x).and_then(|m| m.median_abs_rel_error);
    (
        m(Method::PlanHeldOutArchitecture),
        m(Method::PlanRefitInSample),
    )
}

/// Audits every entry of `<data_dir>/factors-history.json`. `current`: the calibration of
/// `data_dir` as it is (the caller has it: the site build, the audit), which gives the medians
/// of an entry whose factors are the working tree's. Outside a git repository only an entry of the working tree's factors
/// file can be audited; the others say so.
pub fn audit_history(data_dir: &Path, current: &Calibration) -> Result<Vec<AuditedEntry>> {
    let repo = Repo::of(data_dir);
    let vs = versions(data_dir, repo.as_ref())?;
    audit_entries(data_dir, repo.as_ref(), &vs, current)
}

fn audit_entries(
    data_dir: &Path,
    repo: Option<&Repo>,
    vs: &[FactorsVersion],
    current: &Calibration,
) -> Result<Vec<AuditedEntry>> {
    let log = FactorHistory::load_or_empty(&data_dir.join("factors-history.json"))?;
    let mut out = Vec::new();
    for (k, e) in log.entries.iter().enumerate() {
        let name = format!(
            "data/factors-history.json entry {} (fixed_at {})",
            k + 1,
            e.fixed_at
        );
        let Some(v) = vs
            .iter()
            .find(|v| v.fixed_at.as_deref() == Some(e.fixed_at.as_str()))
        else {
            let why = if repo.is_some() {
                "no version of data/factors.json in the git history or the working tree has this provenance.fixed_at: no fit wrote it"
            } else {
                "not in a git repository, and the working tree's data/factors.json has another provenance.fixed_at: cannot be audited"
            };
            out.push(AuditedEntry {
                index: k + 1,
                fixed_at: e.fixed_at.clone(),
                source: None,
                values: None,
                held_out_median: None,
                in_sample_median: None,
                differences: vec![format!("{name}: {why}")],
            });
            continue;
        };
        let want = entry_of(&v.file).expect("a version with fixed_at has provenance");
        let mut differences: Vec<String> = field_differences(e, &want)
            .into_iter()
            .map(|(field, log, file)| {
                format!(
                    "{name}: field `{field}` is {log} in the log but {file} in data/factors.json at {}",
                    v.source.describe()
                )
            })
            .collect();
        // The medians, from the rows at the source.
        let evaluated: Option<Evaluated>;
        let cal = match &v.source {
            EntrySource::WorkingTree => Some(current),
            EntrySource::Commit { commit, .. } => {
                let r = repo.expect("a commit source has a repository");
                let state = DataState::at_commit(&r.top, commit, &r.data_path, commit.to_string())?;
                evaluated = evaluate(&state).ok();
                evaluated.as_ref().map(|x| &x.cal)
            }
        };
        let (held, in_sample) = cal.map_or((None, None), medians);
        match cal {
            None => differences.push(format!(
                "{name}: the rows at {} do not load with this memcal: its medians cannot be recomputed",
                v.source.describe()
            )),
            Some(c) => {
                for (field, log, now) in [
                    ("held_out_median", e.held_out_median, held),
                    ("in_sample_median", e.in_sample_median, in_sample),
                ] {
                    if log != now {
                        differences.push(format!(
                            "{name}: field `{field}` is {} in the log but the rows at {} give {}",
                            or_none(log, num),
                            v.source.describe(),
                            or_none(now, num)
                        ));
                    }
                }
                if c.fitted_rows_sha256 != e.rows_sha256 {
                    differences.push(format!(
                        "{name}: field `rows_sha256` is {} in the log but the fitted rows at {} hash to {}",
                        e.rows_sha256,
                        v.source.describe(),
                        c.fitted_rows_sha256
                    ));
                }
            }
        }
        out.push(AuditedEntry {
            index: k + 1,
            fixed_at: e.fixed_at.clone(),
            source: Some(v.source.clone()),
            values: Some(want),
            held_out_median: held,
            in_sample_median: in_sample,
            differences,
        });
    }
    order_differences(&log.entries, vs, &mut out);
    Ok(out)
}

/// The log is in the order of the fits: each entry's `fixed_at` is later than the one before
/// it, and its version of the factors file comes later in the git history. An entry that
/// breaks the order fails, with both entries named (the page lists the log newest first, so a
/// swapped pair would otherwise be shown out of order as if audited).
fn order_differences(entries: &[HistoryEntry], vs: &[FactorsVersion], out: &mut [AuditedEntry]) {
    let position = |e: &HistoryEntry| {
        vs.iter()
            .position(|v| v.fixed_at.as_deref() == Some(e.fixed_at.as_str()))
    };
    let time = |e: &HistoryEntry| crate::time::parse_rfc3339(&e.fixed_at).ok();
    let name = |k: usize| {
        format!(
            "data/factors-history.json entry {} (fixed_at {})",
            k + 1,
            entries[k].fixed_at
        )
    };
    // The last entry before `k` whose version is known: (its index, its version's position).
    let mut last_version: Option<(usize, usize)> = None;
    for k in 0..entries.len() {
        let here = position(&entries[k]);
        if k > 0 {
            let (a, b) = (time(&entries[k - 1]), time(&entries[k]));
            let later = match (a, b) {
                (Some(a), Some(b)) => b > a,
                _ => entries[k].fixed_at > entries[k - 1].fixed_at,
            };
            if !later {
                out[k].differences.push(format!(
                    "{}: out of order: it is not later than {}, the entry before it; the log \
                     lists the fits oldest first: put the entries back in the order of their \
                     fixed_at",
                    name(k),
                    name(k - 1)
                ));
            } else if let (Some(p), Some((j, q))) = (here, last_version) {
                if p < q {
                    out[k].differences.push(format!(
                        "{}: out of order: it comes after {} in the log, but its version of \
                         data/factors.json ({}) comes before that entry's ({}) in the git \
                         history; the log lists the fits in the order they were committed",
                        name(k),
                        name(j),
                        vs[p].source.describe(),
                        vs[q].source.describe()
                    ));
                }
            }
        }
        if let Some(p) = here {
            last_version = Some((k, p));
        }
    }
}

/// Every version of the factors file that has a `provenance` is the fit's output exactly: its
/// fit outputs equal those of the first version with the same `fixed_at` (a later edit that
/// keeps the provenance is no fit), and the log has an entry for it.
fn version_failures(vs: &[FactorsVersion], log: &[AuditedEntry]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in vs.iter().enumerate() {
        let Some(fixed_at) = &v.fixed_at else {
            continue;
        };
        if !log.iter().any(|e| &e.fixed_at == fixed_at) {
            out.push(format!(
                "data/factors.json at {} was fixed at {fixed_at} but data/factors-history.json has no entry for it",
                v.source.describe()
            ));
        }
        let first = vs[..k]
            .iter()
            .find(|x| x.fixed_at.as_deref() == Some(fixed_at.as_str()));
        if let Some(first) = first {
            let (a, b) = (entry_of(&first.file), entry_of(&v.file));
            if let (Some(a), Some(b)) = (a, b) {
                for (field, was, now) in field_differences(&a, &b) {
                    out.push(format!(
                        "data/factors.json at {}: field `{field}` changed from {was} to {now} while provenance.fixed_at stayed {fixed_at}: an edit that no fit made",
                        v.source.describe()
                    ));
                }
            }
        }
    }
    out
}

/// Checks that the factors in `data_dir` are what `memcal fit --write-factors` produces from the
/// rows there: same factors, same quantiles, same rows' SHA-256.
pub fn reproduce(data_dir: &Path) -> Result<Reproduction> {
    let ds = engine::load(data_dir)?;
    let cal = engine::calibrate(&ds);
    Ok(reproduce_from(&ds, &cal))
}

/// [`reproduce`] on a data set already loaded and calibrated.
fn reproduce_from(ds: &engine::Dataset, cal: &Calibration) -> Reproduction {
    let stored = &ds.factors;
    let mut differences = Vec::new();
    let Some(prov) = &stored.provenance else {
        return Reproduction {
            reproduces: false,
            differences: vec![
                "no provenance: this factors file was not written by `memcal fit --write-factors` (seed or hand edit)".into(),
            ],
        };
    };
    let refit = engine::refit_factors_file(ds, cal, &prov.fixed_at);
    for (p, prof) in &stored.profiles {
        if let Some(r) = refit.profiles.get(p) {
            for (i, name) in FEATURE_NAMES.iter().enumerate() {
                if prof.factors[i] != r.factors[i] {
                    differences.push(format!(
                        "profiles.{p}.factors: {name} is {} in the file but {} refitted from the rows",
                        prof.factors[i], r.factors[i]
                    ));
                }
            }
            if prof.upper != r.upper {
                let q = |u: &Option<Upper>| {
                    u.as_ref().map_or("none".to_string(), |u| {
                        format!("q90 {} / q95 {}", u.q90, u.q95)
                    })
                };
                differences.push(format!(
                    "profiles.{p}.upper: the file has {}, the rows give {}",
                    q(&prof.upper),
                    q(&r.upper)
                ));
            }
            if prof.fixed_at != r.fixed_at {
                differences.push(format!(
                    "profiles.{p}.fixed_at: the file has {}, a refit of the rows gives {} (a profile keeps its time only when the refit leaves it unchanged)",
                    prof.fixed_at.as_deref().unwrap_or("none"),
                    r.fixed_at.as_deref().unwrap_or("none")
                ));
            }
        }
    }
    if stored.upper != refit.upper {
        differences.push(format!(
            "upper: the file has q90 {} / q95 {}, the rows give q90 {} / q95 {}",
            stored.upper.q90, stored.upper.q95, refit.upper.q90, refit.upper.q95
        ));
    }
    let rp = refit.provenance.as_ref().expect("refit sets provenance");
    if prov.rows_sha256 != rp.rows_sha256 {
        differences.push(format!(
            "provenance.rows_sha256: the file claims {} but the fitted rows now hash to {} (rows changed since the fit)",
            prov.rows_sha256, rp.rows_sha256
        ));
    }
    if prov.rows != rp.rows {
        differences.push(format!(
            "provenance.rows: the file claims {} rows, the fit now uses {}",
            prov.rows, rp.rows
        ));
    }
    Reproduction {
        reproduces: differences.is_empty(),
        differences,
    }
}

/// The whole audit of `data_dir`: the history entry by entry, every version of the factors
/// file, and the current factors' reproduction. It passes iff `failures` is empty.
pub fn audit(data_dir: &Path) -> Result<AuditReport> {
    let repo = Repo::of(data_dir);
    let vs = versions(data_dir, repo.as_ref())?;
    // The data folder as it is, loaded and calibrated once: for the refit and for an entry
    // whose factors are the working tree's.
    let ds = engine::load(data_dir)?;
    let cal = engine::calibrate(&ds);
    let history = audit_entries(data_dir, repo.as_ref(), &vs, &cal)?;
    let current = reproduce_from(&ds, &cal);
    let mut failures: Vec<String> = history
        .iter()
        .flat_map(|e| e.differences.iter().cloned())
        .collect();
    failures.extend(version_failures(&vs, &history));
    failures.extend(
        current
            .differences
            .iter()
            .map(|d| format!("current data/factors.json: {d}")),
    );
    Ok(AuditReport {
        versions: vs,
        history,
        current,
        failures,
    })
}

use crate::format::opt_pct as pct;

/// The audit as text.
pub fn audit_text(a: &AuditReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Versions of data/factors.json ({}, oldest first)\n",
        crate::format::plural(a.versions.len() as u64, "version")
    );
    for v in &a.versions {
        let _ = writeln!(
            s,
            "  {}  fixed_at {}",
            v.source.describe(),
            v.fixed_at
                .as_deref()
                .unwrap_or("(never fitted: seed factors)")
        );
    }
    let _ = writeln!(
        s,
        "\nFactor history ({}, oldest first), each checked against its source\n",
        match a.history.len() {
            1 => "1 entry".to_string(),
            n => format!("{n} entries"),
        }
    );
    for e in &a.history {
        let status = if e.differences.is_empty() {
            "audited"
        } else {
            "FAILS"
        };
        let _ = writeln!(
            s,
            "{}. fixed_at {}  {status}  from {}",
            e.index,
            e.fixed_at,
            e.source
                .as_ref()
                .map_or("no source".to_string(), EntrySource::describe)
        );
        if let Some(v) = &e.values {
            for (p, f) in &v.profiles {
                let x: Vec<String> = f.iter().map(|x| format!("{x:.4}")).collect();
                let _ = writeln!(s, "   {p:<14} [{}]", x.join(", "));
            }
            let _ = writeln!(
                s,
                "   rows {}  rows_sha256 {}  held-out median {}  in-sample median {} (recomputed)",
                v.rows,
                &v.rows_sha256[..16.min(v.rows_sha256.len())],
                pct(e.held_out_median),
                pct(e.in_sample_median)
            );
        }
    }
    if a.current.reproduces {
        let _ = writeln!(s, "\ncurrent factors: reproduce from the rows they claim");
    } else {
        let _ = writeln!(s, "\ncurrent factors: DO NOT reproduce");
    }
    if a.failures.is_empty() {
        let _ = writeln!(s, "\naudit: passes (every entry and version checked)");
    } else {
        let _ = writeln!(
            s,
            "\naudit: FAILS ({})",
            crate::format::plural(a.failures.len() as u64, "problem")
        );
        for d in &a.failures {
            let _ = writeln!(s, "  - {d}");
        }
    }
    s
}
