//! Reviewing a change and auditing the factors: `memcal diff` runs the engine on two states of
//! `data/` (a git ref or a directory each) and reports what changed; `memcal audit` walks the
//! git history of `data/factors.json` and checks that the current factors reproduce from the rows
//! they claim. Both only read; the engine computes every number.

use crate::engine::{self, Calibration, Method, Truth};
use crate::error::{Error, Result};
use crate::factors::{FactorHistory, FactorsFile, HistoryEntry};
use crate::features::FEATURE_NAMES;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
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

fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>> {
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
        let tmp = tempfile::tempdir().map_err(|source| Error::Io {
            path: std::env::temp_dir(),
            source,
        })?;
        let tar = git(repo, &["archive", "--format=tar", &commit, "data"])?;
        extract_tar(&tar, tmp.path())?;
        Ok(DataState {
            label: format!("{spec} ({})", &commit[..12.min(commit.len())]),
            data_dir: tmp.path().join("data"),
            _tmp: Some(tmp),
        })
    }
}

fn extract_tar(bytes: &[u8], into: &Path) -> Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("tar")
        .arg("-x")
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

/// One factor before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactorChange {
    pub profile: String,
    pub feature: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
}

/// A method's headline numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct MetricSummary {
    pub median_abs_rel_error: Option<f64>,
    pub within_25pct: Option<f64>,
    pub missed_oom: u64,
    pub false_alarms: u64,
    pub accuracy: Option<f64>,
}

/// A method's numbers before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodDelta {
    pub method: &'static str,
    pub before: MetricSummary,
    pub after: MetricSummary,
    /// Change of the median error, in percentage points.
    pub median_change_points: Option<f64>,
}

/// A family's held-out-by-architecture median error before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyDelta {
    pub family: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub change_points: Option<f64>,
}

/// A card check whose verdict changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictChange {
    pub run_id: String,
    pub card_bytes: u64,
    pub method: &'static str,
    /// What the run says about the card, before (absent if the check did not exist) and after.
    pub truth_before: Option<&'static str>,
    pub truth: &'static str,
    pub before: Option<&'static str>,
    pub after: Option<&'static str>,
    /// A did-not-fit check that this method now calls "fits": a new missed OOM.
    pub new_missed_oom: bool,
}

/// Everything `memcal diff` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    pub base: String,
    pub head: String,
    pub factors: Vec<FactorChange>,
    pub methods: Vec<MethodDelta>,
    pub families: Vec<FamilyDelta>,
    pub verdict_changes: Vec<VerdictChange>,
    pub rows_added: Vec<String>,
    pub rows_removed: Vec<String>,
    /// Rows excluded in head that were not excluded (or absent) in base, with the reason.
    pub newly_excluded: Vec<(String, String)>,
    /// Thresholds crossed (`--fail-on`), in words.
    pub failures: Vec<String>,
}

fn summary(cal: &Calibration, m: Method) -> MetricSummary {
    cal.methods
        .get(&m)
        .map_or_else(MetricSummary::default, |x| MetricSummary {
            median_abs_rel_error: x.median_abs_rel_error,
            within_25pct: x.within_25pct,
            missed_oom: x.missed_oom.len() as u64,
            false_alarms: (x.false_alarm_edge.len() + x.false_alarm_over.len()) as u64,
            accuracy: x.accuracy,
        })
}

fn points(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some((after? - before?) * 100.0)
}

fn truth_str(t: Truth) -> &'static str {
    match t {
        Truth::Fits => "fits",
        Truth::DoesNotFit => "does not fit",
        _ => "unknown",
    }
}

fn verdict_str(fits: bool) -> &'static str {
    if fits {
        "fits"
    } else {
        "does not fit"
    }
}

/// A threshold for `--fail-on`.
#[derive(Debug, Clone, PartialEq)]
pub enum FailOn {
    /// Any did-not-fit check that a plan method now calls "fits".
    NewMissedOom,
    /// The plan's held-out-by-architecture median error worse by more than this many points.
    HeldOutMedianWorse(f64),
}

impl std::str::FromStr for FailOn {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s == "new-missed-oom" {
            return Ok(FailOn::NewMissedOom);
        }
        if let Some(v) = s.strip_prefix("held-out-median-worse=") {
            return v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(FailOn::HeldOutMedianWorse)
                .ok_or_else(|| format!("`{v}` is not a number of percentage points"));
        }
        Err(format!(
            "unknown threshold `{s}`; use `new-missed-oom` or `held-out-median-worse=<points>`"
        ))
    }
}

const PLAN_METHODS: [Method; 4] = [
    Method::PlanShipped,
    Method::PlanHeldOutArchitecture,
    Method::PlanHeldOutRegime,
    Method::PlanAfterFit,
];

/// Compares two evaluated states.
pub fn diff(base: &Evaluated, head: &Evaluated, fail_on: &[FailOn]) -> DiffReport {
    let mut factors = Vec::new();
    let profiles: BTreeSet<&String> = base
        .factors
        .profiles
        .keys()
        .chain(head.factors.profiles.keys())
        .collect();
    for p in profiles {
        for (i, name) in FEATURE_NAMES.iter().enumerate() {
            let b = base.factors.profiles.get(p).map(|x| x.factors[i]);
            let a = head.factors.profiles.get(p).map(|x| x.factors[i]);
            factors.push(FactorChange {
                profile: p.clone(),
                feature: name,
                before: b,
                after: a,
            });
        }
    }
    let methods = Method::ALL
        .iter()
        .map(|m| {
            let before = summary(&base.cal, *m);
            let after = summary(&head.cal, *m);
            MethodDelta {
                method: m.as_str(),
                median_change_points: points(
                    before.median_abs_rel_error,
                    after.median_abs_rel_error,
                ),
                before,
                after,
            }
        })
        .collect();
    let fam_median = |cal: &Calibration, f: &str| {
        cal.families
            .get(f)
            .and_then(|r| r.methods.get(&Method::PlanHeldOutArchitecture))
            .and_then(|m| m.median_abs_rel_error)
    };
    let fams: BTreeSet<&String> = base
        .cal
        .families
        .keys()
        .chain(head.cal.families.keys())
        .collect();
    let mut families: Vec<FamilyDelta> = fams
        .into_iter()
        .map(|f| {
            let before = fam_median(&base.cal, f);
            let after = fam_median(&head.cal, f);
            FamilyDelta {
                family: f.clone(),
                before,
                after,
                change_points: points(before, after),
            }
        })
        .collect();
    families.sort_by(|x, y| {
        let key = |d: &FamilyDelta| d.change_points.map_or(f64::NEG_INFINITY, f64::abs);
        key(y)
            .total_cmp(&key(x))
            .then_with(|| x.family.cmp(&y.family))
    });

    let (bi, hi) = (row_index(&base.cal), row_index(&head.cal));
    let mut verdict_changes = Vec::new();
    for (id, h) in &hi {
        let Some(b) = bi.get(id) else { continue };
        for hc in &h.checks {
            let bc = b.checks.iter().find(|c| c.card_bytes == hc.card_bytes);
            for m in Method::ALL {
                let after = hc.fits.get(&m).copied();
                let before = bc.and_then(|c| c.fits.get(&m).copied());
                let truth_before = bc.map(|c| c.truth);
                if after != before || truth_before != Some(hc.truth) {
                    let missed = |t: Option<Truth>, call: Option<bool>| {
                        t == Some(Truth::DoesNotFit) && call == Some(true)
                    };
                    verdict_changes.push(VerdictChange {
                        run_id: id.to_string(),
                        card_bytes: hc.card_bytes,
                        method: m.as_str(),
                        truth_before: truth_before.map(truth_str),
                        truth: truth_str(hc.truth),
                        before: before.map(verdict_str),
                        after: after.map(verdict_str),
                        new_missed_oom: missed(Some(hc.truth), after)
                            && !missed(truth_before, before),
                    });
                }
            }
        }
    }
    verdict_changes.sort_by(|x, y| {
        y.new_missed_oom
            .cmp(&x.new_missed_oom)
            .then_with(|| x.run_id.cmp(&y.run_id))
            .then_with(|| x.card_bytes.cmp(&y.card_bytes))
            .then_with(|| x.method.cmp(y.method))
    });
    let ids = |cal: &Calibration| -> BTreeSet<String> {
        cal.rows
            .iter()
            .map(|r| r.run_id.to_string())
            .chain(cal.exclusions.iter().map(|e| e.run_id.clone()))
            .collect()
    };
    let (bids, hids) = (ids(&base.cal), ids(&head.cal));
    let base_excluded: BTreeSet<&String> = base.cal.exclusions.iter().map(|e| &e.run_id).collect();
    let newly_excluded = head
        .cal
        .exclusions
        .iter()
        .filter(|e| !base_excluded.contains(&e.run_id))
        .map(|e| {
            (
                e.run_id.clone(),
                format!("{}: {}", e.reason.as_str(), e.detail),
            )
        })
        .collect();

    let mut failures = Vec::new();
    for f in fail_on {
        match f {
            FailOn::NewMissedOom => {
                let plan: BTreeSet<&str> = PLAN_METHODS.iter().map(|m| m.as_str()).collect();
                let n = verdict_changes
                    .iter()
                    .filter(|v| v.new_missed_oom && plan.contains(v.method))
                    .count();
                if n > 0 {
                    failures.push(format!(
                        "new-missed-oom: {n} did-not-fit check(s) that a plan method now calls \"fits\""
                    ));
                }
            }
            FailOn::HeldOutMedianWorse(limit) => {
                let b = summary(&base.cal, Method::PlanHeldOutArchitecture).median_abs_rel_error;
                let a = summary(&head.cal, Method::PlanHeldOutArchitecture).median_abs_rel_error;
                if let Some(d) = points(b, a) {
                    if d > *limit {
                        failures.push(format!(
                            "held-out-median-worse={limit}: the held-out-by-architecture median error rose by {d:.2} points"
                        ));
                    }
                }
            }
        }
    }
    DiffReport {
        base: base.label.clone(),
        head: head.label.clone(),
        factors,
        methods,
        families,
        verdict_changes,
        rows_added: hids.difference(&bids).cloned().collect(),
        rows_removed: bids.difference(&hids).cloned().collect(),
        newly_excluded,
        failures,
    }
}

fn row_index(cal: &Calibration) -> BTreeMap<&str, &engine::RowResult> {
    cal.rows.iter().map(|r| (r.run_id.as_str(), r)).collect()
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0))
}

fn signed(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{x:+.2}"))
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.4}"))
}

/// The report as Markdown, fit for a pull-request comment.
pub fn diff_markdown(d: &DiffReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## memcal: estimation error, {} → {}\n", d.base, d.head);
    if d.failures.is_empty() {
        let _ = writeln!(s, "No threshold crossed.\n");
    } else {
        let _ = writeln!(s, "**Thresholds crossed:**\n");
        for f in &d.failures {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "### Factors\n\n| profile | feature | before | after |\n|---|---|---:|---:|"
    );
    for f in &d.factors {
        let mark = if f.before != f.after {
            " **changed**"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}{mark} |",
            f.profile,
            f.feature,
            num(f.before),
            num(f.after)
        );
    }
    let _ = writeln!(
        s,
        "\n### Methods\n\n| method | median error before | after | change (points) | within 25% before | after | missed OOM before | after | false alarms before | after |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for m in &d.methods {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.method,
            pct(m.before.median_abs_rel_error),
            pct(m.after.median_abs_rel_error),
            signed(m.median_change_points),
            pct(m.before.within_25pct),
            pct(m.after.within_25pct),
            m.before.missed_oom,
            m.after.missed_oom,
            m.before.false_alarms,
            m.after.false_alarms
        );
    }
    let _ = writeln!(
        s,
        "\n### Held out by architecture, per family (largest change first)\n\n| family | before | after | change (points) |\n|---|---:|---:|---:|"
    );
    for f in &d.families {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            f.family,
            pct(f.before),
            pct(f.after),
            signed(f.change_points)
        );
    }
    let _ = writeln!(
        s,
        "\n### Card verdicts that changed ({})\n",
        d.verdict_changes.len()
    );
    if !d.verdict_changes.is_empty() {
        let _ = writeln!(
            s,
            "| run | card (bytes) | method | truth | before | after |\n|---|---:|---|---|---|---|"
        );
        for v in &d.verdict_changes {
            let flag = if v.new_missed_oom {
                " ⚠ new missed OOM"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {}{flag} |",
                v.run_id,
                v.card_bytes,
                v.method,
                v.truth_before.unwrap_or("-"),
                v.truth,
                v.before.unwrap_or("-"),
                v.after.unwrap_or("-")
            );
        }
    }
    let list = |s: &mut String, title: &str, items: &[String]| {
        let _ = writeln!(s, "\n### {title} ({})\n", items.len());
        for i in items {
            let _ = writeln!(s, "- {i}");
        }
    };
    list(&mut s, "Rows added", &d.rows_added);
    list(&mut s, "Rows removed", &d.rows_removed);
    let ex: Vec<String> = d
        .newly_excluded
        .iter()
        .map(|(r, why)| format!("{r}: {why}"))
        .collect();
    list(&mut s, "Rows newly excluded", &ex);
    s
}

/// The history entry `memcal fit --write-factors` appends for a newly fixed factors file.
pub fn history_entry(f: &FactorsFile, cal: &Calibration) -> HistoryEntry {
    let prov = f
        .provenance
        .as_ref()
        .expect("a refitted factors file has provenance");
    let median = |m: Method| cal.methods.get(&m).and_then(|x| x.median_abs_rel_error);
    HistoryEntry {
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
        held_out_median: median(Method::PlanHeldOutArchitecture),
        in_sample_median: median(Method::PlanShipped),
    }
}

/// One change of `data/factors.json` in the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub commit: String,
    pub date: String,
    pub factors: BTreeMap<String, [f64; 6]>,
    /// Per profile: the q95 its bound used (its own, else the file's `upper`).
    pub q95: BTreeMap<String, f64>,
    pub fixed_at: Option<String>,
    pub rows_sha256: Option<String>,
    /// The plan's held-out-by-architecture median error with that commit's data.
    pub held_out_median: Option<f64>,
}

/// Whether the current factors reproduce from the rows they claim.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reproduction {
    pub reproduces: bool,
    /// What differs, in words (empty when it reproduces).
    pub differences: Vec<String>,
}

/// Everything `memcal audit` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditReport {
    pub history: Vec<AuditEntry>,
    pub current: Reproduction,
}

/// Checks that the factors in `data_dir` are what `memcal fit --write-factors` produces from the
/// rows there: same factors, same quantiles, same rows' SHA-256.
pub fn reproduce(data_dir: &Path) -> Result<Reproduction> {
    let ds = engine::load(data_dir)?;
    let cal = engine::calibrate(&ds);
    let stored = &ds.factors;
    let mut differences = Vec::new();
    let Some(prov) = &stored.provenance else {
        return Ok(Reproduction {
            reproduces: false,
            differences: vec![
                "no provenance: this factors file was not written by `memcal fit --write-factors` (seed or hand edit)".into(),
            ],
        });
    };
    let refit = engine::refit_factors_file(&ds, &cal, &prov.fixed_at);
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
                let q = |u: &Option<crate::factors::Upper>| {
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
    Ok(Reproduction {
        reproduces: differences.is_empty(),
        differences,
    })
}

/// Walks the history of `data/factors.json` in the repository at `repo` (oldest first) and
/// checks the current factors in `data_dir`.
pub fn audit(repo: &Path, data_dir: &Path) -> Result<AuditReport> {
    let log = git(
        repo,
        &[
            "log",
            "--reverse",
            "--format=%H %cI",
            "--",
            "data/factors.json",
        ],
    )?;
    let mut history = Vec::new();
    for line in String::from_utf8_lossy(&log).lines() {
        let Some((commit, date)) = line.split_once(' ') else {
            continue;
        };
        let text = git(repo, &["show", &format!("{commit}:data/factors.json")])?;
        let path = PathBuf::from(format!("{commit}:data/factors.json"));
        let f = FactorsFile::parse(&String::from_utf8_lossy(&text), &path)?;
        let state = DataState::open(commit, repo)?;
        let held_out_median = evaluate(&state).ok().and_then(|e| {
            e.cal
                .methods
                .get(&Method::PlanHeldOutArchitecture)
                .and_then(|m| m.median_abs_rel_error)
        });
        history.push(AuditEntry {
            commit: commit.to_string(),
            date: date.to_string(),
            factors: f
                .profiles
                .iter()
                .map(|(k, v)| (k.clone(), v.factors))
                .collect(),
            q95: f
                .profiles
                .keys()
                .map(|k| (k.clone(), f.upper_of(k).q95))
                .collect(),
            fixed_at: f.provenance.as_ref().map(|p| p.fixed_at.clone()),
            rows_sha256: f.provenance.as_ref().map(|p| p.rows_sha256.clone()),
            held_out_median,
        });
    }
    let mut current = reproduce(data_dir)?;
    // Every fitted factors file in the git history has its entry in the history log.
    let log = FactorHistory::load_or_empty(&data_dir.join("factors-history.json"))?;
    for e in &history {
        if let Some(fixed_at) = &e.fixed_at {
            if !log.entries.iter().any(|h| &h.fixed_at == fixed_at) {
                current.differences.push(format!(
                    "data/factors-history.json has no entry for the factors fixed at {fixed_at} (commit {})",
                    &e.commit[..12.min(e.commit.len())]
                ));
            }
        }
    }
    current.reproduces = current.differences.is_empty();
    Ok(AuditReport { history, current })
}

/// The audit as text.
pub fn audit_text(a: &AuditReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "History of data/factors.json ({} changes, oldest first)\n",
        a.history.len()
    );
    for e in &a.history {
        let _ = writeln!(s, "{}  {}", &e.commit[..12.min(e.commit.len())], e.date);
        for (p, f) in &e.factors {
            let v: Vec<String> = f.iter().map(|x| format!("{x:.4}")).collect();
            let q95 = e.q95.get(p).map_or("-".into(), |q| format!("{q:.4}"));
            let _ = writeln!(s, "  {p:<14} [{}]  q95 {q95}", v.join(", "));
        }
        let _ = writeln!(
            s,
            "  fixed_at {}  rows {}  held-out median error then {}",
            e.fixed_at.as_deref().unwrap_or("(never fitted)"),
            e.rows_sha256
                .as_deref()
                .map_or("-", |h| &h[..16.min(h.len())]),
            pct(e.held_out_median)
        );
    }
    if a.current.reproduces {
        let _ = writeln!(s, "\ncurrent factors: reproduce from the rows they claim");
    } else {
        let _ = writeln!(s, "\ncurrent factors: DO NOT reproduce");
        for d in &a.current.differences {
            let _ = writeln!(s, "  - {d}");
        }
    }
    s
}
