//! `memcal diff`: what a change of `data/` does to every method's error and card verdicts, per
//! precision profile, and which of the gates (`--fail-on`) it crosses. Computes by comparing
//! two calibrations; formats nothing (see [`super::markdown`]).

use super::sides::{CodeComparison, Side};
use super::state::{ReviewState, StateRow, StateRule};
use crate::engine::intervals::{self, Interval};
use crate::engine::{Method, MethodMetrics, Truth};
use crate::factors::HistoryEntry;
use crate::features::{Precision, FEATURE_NAMES};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The format tag of `memcal diff --json` (documented in `docs/review.md`).
pub const DIFF_FORMAT: &str = "memcal-diff/2";

/// One factor before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactorChange {
    pub profile: String,
    pub feature: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
}

/// A method's headline numbers over one profile's rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MetricSummary {
    /// Completed runs of at least the small-run threshold: the error's sample.
    pub error_rows: u64,
    pub median_abs_rel_error: Option<f64>,
    pub within_25pct: Option<f64>,
    pub did_not_fit_checks: u64,
    /// Did-not-fit checks the method called "fits".
    pub missed_oom: u64,
    pub fit_checks: u64,
    /// Fit checks the method called "does not fit" (edge and over-estimates together).
    pub false_alarms: u64,
    pub accuracy: Option<f64>,
    /// The 95% interval of the median |error| (absent: too few runs).
    pub median_interval: Option<Interval>,
}

impl MetricSummary {
    pub(crate) fn of(m: Option<&MethodMetrics>) -> MetricSummary {
        m.map_or_else(MetricSummary::default, |x| MetricSummary {
            error_rows: x.error_rows,
            median_abs_rel_error: x.median_abs_rel_error,
            within_25pct: x.within_25pct,
            did_not_fit_checks: x.did_not_fit_checks,
            missed_oom: x.missed_oom.len() as u64,
            fit_checks: x.fit_checks,
            false_alarms: (x.false_alarm_edge.len() + x.false_alarm_over.len()) as u64,
            accuracy: x.accuracy,
            median_interval: x.median_interval,
        })
    }
}

/// What a change of a median |error| is, in criterion's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// The same median to the last bit.
    NoChangeDetected,
    /// A different median, but not beyond the noise: the sign test on the rows both states
    /// share is not significant, and head's median is inside base's 95% interval.
    WithinNoise,
    /// Worse beyond the noise.
    Regressed,
    /// Better beyond the noise.
    Improved,
    /// One of the states has no median.
    NotComparable,
}

impl Change {
    pub fn words(self) -> &'static str {
        match self {
            Change::NoChangeDetected => "no change detected",
            Change::WithinNoise => "within noise",
            Change::Regressed => "regressed",
            Change::Improved => "improved",
            Change::NotComparable => "not comparable",
        }
    }
}

/// The paired comparison of a method's |error| on the rows both states share (completed runs
/// of at least the threshold in both): how many rose and fell, and the sign test's p-value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Paired {
    pub rows: u64,
    pub rose: u64,
    pub fell: u64,
    /// Two-sided; absent when no row's error moved.
    pub p_value: Option<f64>,
}

/// A method's numbers over one profile's rows, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodDelta {
    pub profile: Precision,
    pub method: Method,
    pub before: MetricSummary,
    pub after: MetricSummary,
    /// Change of the median |error|, in percentage points (after - before).
    pub median_change_points: Option<f64>,
    pub paired: Paired,
    /// Whether the median's change is beyond the noise.
    pub change: Change,
}

/// A family's median |error| under one method and profile, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyDelta {
    pub family: String,
    pub profile: Precision,
    pub method: Method,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub change_points: Option<f64>,
}

/// A card check whose verdict changed, or a check of an added row that a verdict method misses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictChange {
    pub run_id: String,
    pub profile: Precision,
    pub card_bytes: u64,
    /// The card's name in the row's regime (e.g. `16 GB`).
    pub card: String,
    pub method: Method,
    /// The row is new in head (it has no base verdicts).
    pub added: bool,
    /// What the run says about the card, before (absent if the check did not exist) and after.
    pub truth_before: Option<Truth>,
    pub truth: Truth,
    /// `true` = "fits"; absent where the method did not predict the row.
    pub before: Option<bool>,
    pub after: Option<bool>,
    /// A did-not-fit check that this method calls "fits" in head and did not in base.
    pub new_missed_oom: bool,
}

/// A row excluded in head that was not excluded (or absent) in base.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewlyExcluded {
    pub run_id: String,
    pub reason: String,
    pub detail: String,
}

/// A profile's bottom line, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// New missed out-of-memory checks, or a median regressed beyond the noise; none improved.
    Regresses,
    /// A median improved beyond the noise; none regressed, no new missed OOM.
    Improves,
    /// Both.
    Mixed,
    /// Medians moved, none beyond the noise.
    WithinNoise,
    /// No median moved and no new missed OOM.
    Unchanged,
}

impl Verdict {
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Regresses => "regresses",
            Verdict::Improves => "improves",
            Verdict::Mixed => "improves and regresses",
            Verdict::WithinNoise => "changes within noise",
            Verdict::Unchanged => "unchanged",
        }
    }
}

/// One profile's bottom line: the count of new missed OOM checks, and the methods whose median
/// |error| moved beyond the noise (or within it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BottomLine {
    pub profile: Precision,
    pub verdict: Verdict,
    /// Distinct card checks (run and card) a plan method or the simulator newly calls "fits"
    /// though the run did not fit.
    pub new_missed_oom: u64,
    pub regressed: Vec<Method>,
    pub improved: Vec<Method>,
    pub within_noise: Vec<Method>,
}

/// A row head adds, with every method's signed error (predicted / measured - 1) where the row
/// is in the error's sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddedRow {
    pub run_id: String,
    pub profile: Precision,
    pub family: String,
    pub measured_bytes: Option<u64>,
    pub errors: BTreeMap<Method, f64>,
}

/// An ATen op whose generic simulator rule predicts its OpInfo samples differently in head.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleChange {
    pub op: String,
    pub samples: u64,
    /// Samples predicted within 64 bytes in every phase (absent: the op is not in that state).
    pub exact_before: Option<u64>,
    pub exact_after: Option<u64>,
    pub refused_before: Option<u64>,
    pub refused_after: Option<u64>,
}

/// One row where a feature's value moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeatureExample {
    pub run_id: String,
    pub before: u64,
    pub after: u64,
}

/// A feature whose value differs on rows both states have (a changed definition, or changed
/// graphs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeatureChange {
    pub feature: &'static str,
    pub rows: u64,
    pub graphs: Vec<String>,
    pub example: FeatureExample,
}

/// Everything `memcal diff` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    pub format: &'static str,
    pub base: String,
    pub head: String,
    /// Which code computed each side's numbers, and what code changed.
    pub code: CodeComparison,
    /// One per profile with rows in either state.
    pub bottom_lines: Vec<BottomLine>,
    /// Signs that head's factors were edited by hand, in words (empty: none).
    pub hand_edits: Vec<String>,
    /// The gates that were checked, in `--fail-on` syntax, after `default` was expanded.
    pub gates: Vec<String>,
    /// Thresholds crossed, in words (empty: none).
    pub failures: Vec<String>,
    /// Every factor of every profile in either state.
    pub factors: Vec<FactorChange>,
    /// ATen ops whose generic rule changed (on torch's OpInfo samples).
    pub rules_changed: Vec<RuleChange>,
    /// Features whose values moved on rows both states have.
    pub features_changed: Vec<FeatureChange>,
    /// Per profile with rows in either state, per method.
    pub methods: Vec<MethodDelta>,
    /// Per family, profile and method in [`FAMILY_METHODS`], largest change first.
    pub families: Vec<FamilyDelta>,
    /// New missed OOMs first, then by run, card and method.
    pub verdict_changes: Vec<VerdictChange>,
    pub rows_added: Vec<AddedRow>,
    pub rows_removed: Vec<String>,
    pub newly_excluded: Vec<NewlyExcluded>,
}

/// The methods whose per-family medians the report compares.
pub const FAMILY_METHODS: [Method; 2] = [Method::PlanAsShipped, Method::PlanHeldOutArchitecture];

/// The methods whose "fits" verdicts a user acts on: the plan's and the simulator's (the
/// baselines' misses are listed only where a verdict changed on a row both states have).
fn gives_verdicts(m: Method) -> bool {
    m.is_plan() || m == Method::Simulated
}

/// One gate of `memcal diff --fail-on`.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Any did-not-fit check of head that a plan method or the simulator calls "fits" and did
    /// not in base; rows added by the change count (they had no verdict before).
    NewMissedOom,
    /// `METHOD`'s median |error| over `PROFILE`'s rows rose by more than `points` percentage
    /// points and the change is beyond the noise ([`Change::Regressed`]); `profile: None`
    /// checks every profile on its own. Improvements never fail.
    MedianWorse {
        profile: Option<Precision>,
        method: Method,
        points: f64,
    },
}

impl Gate {
    /// The gate in `--fail-on` syntax.
    pub fn spec(&self) -> String {
        match self {
            Gate::NewMissedOom => "new-missed-oom".into(),
            Gate::MedianWorse {
                profile,
                method,
                points,
            } => format!(
                "median-worse={}:{}:{points}",
                profile.map_or("*", |p| p.as_str()),
                method.as_str()
            ),
        }
    }
}

/// The gates `--fail-on default` stands for (`docs/review.md` gives the reasoning): no new
/// missed out-of-memory check (zero tolerance, like Codecov's patch status on new code), and
/// per profile, no rise of more than 1 point in the median |error| of the plan as shipped and
/// of the plan held out by architecture (1 point, like criterion's 1% noise threshold).
pub const DEFAULT_GATES: [&str; 3] = [
    "new-missed-oom",
    "median-worse=*:plan-as-shipped:1",
    "median-worse=*:plan-held-out-architecture:1",
];

/// What `--fail-on` takes: `default`, or one gate.
#[derive(Debug, Clone, PartialEq)]
pub struct FailOn(pub Vec<Gate>);

impl std::str::FromStr for FailOn {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s == "default" {
            return DEFAULT_GATES
                .iter()
                .map(|g| parse_gate(g))
                .collect::<Result<Vec<_>, _>>()
                .map(FailOn);
        }
        parse_gate(s).map(|g| FailOn(vec![g]))
    }
}

fn parse_points(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("`{v}` is not a number of percentage points (0 or more)"))
}

fn parse_gate(s: &str) -> Result<Gate, String> {
    if s == "new-missed-oom" {
        return Ok(Gate::NewMissedOom);
    }
    // The first form of the gate: the held-out-by-architecture median, now per profile.
    if let Some(v) = s.strip_prefix("held-out-median-worse=") {
        return Ok(Gate::MedianWorse {
            profile: None,
            method: Method::PlanHeldOutArchitecture,
            points: parse_points(v)?,
        });
    }
    if let Some(v) = s.strip_prefix("median-worse=") {
        let parts: Vec<&str> = v.split(':').collect();
        let [profile, method, points] = parts[..] else {
            return Err(format!(
                "`{s}`: expected median-worse=PROFILE:METHOD:POINTS, e.g. median-worse=fp32:plan-as-shipped:1"
            ));
        };
        let profile = match profile {
            "*" => None,
            p => Some(p.parse::<Precision>().map_err(|_| {
                format!(
                    "`{p}` is not a precision profile; use one of {} or *",
                    Precision::ALL.map(|p| p.as_str()).join(", ")
                )
            })?),
        };
        let method = Method::parse(method).ok_or_else(|| {
            format!(
                "`{method}` is not a method; use one of {}",
                Method::ALL.map(|m| m.as_str()).join(", ")
            )
        })?;
        return Ok(Gate::MedianWorse {
            profile,
            method,
            points: parse_points(points)?,
        });
    }
    Err(format!(
        "unknown threshold `{s}`; use `default`, `new-missed-oom` or `median-worse=PROFILE:METHOD:POINTS`"
    ))
}

/// The |error| per run of `method` over `profile`'s rows of a state (rows in the error's sample).
fn abs_errors(s: &ReviewState, profile: Precision, method: Method) -> BTreeMap<&str, f64> {
    s.rows
        .iter()
        .filter(|r| r.profile == profile)
        .filter_map(|r| {
            r.errors
                .get(method.as_str())
                .map(|e| (r.run_id.as_str(), e.abs()))
        })
        .collect()
}

/// The paired comparison of `method`'s errors on `profile`'s rows both states share.
fn paired(base: &ReviewState, head: &ReviewState, profile: Precision, method: Method) -> Paired {
    let (b, h) = (
        abs_errors(base, profile, method),
        abs_errors(head, profile, method),
    );
    let (mut rows, mut rose, mut fell) = (0, 0, 0);
    for (id, x) in &h {
        let Some(y) = b.get(id) else { continue };
        rows += 1;
        match x.total_cmp(y) {
            std::cmp::Ordering::Greater => rose += 1,
            std::cmp::Ordering::Less => fell += 1,
            std::cmp::Ordering::Equal => {}
        }
    }
    Paired {
        rows,
        rose,
        fell,
        p_value: intervals::sign_test_p(rose, fell),
    }
}

/// Whether a median's change is beyond the noise: a significant sign test on the shared rows
/// in the direction of the change, or else head's median outside base's 95% interval.
fn change(before: &MetricSummary, after: &MetricSummary, paired: &Paired) -> Change {
    let (Some(b), Some(a)) = (before.median_abs_rel_error, after.median_abs_rel_error) else {
        return Change::NotComparable;
    };
    if a.to_bits() == b.to_bits() {
        return Change::NoChangeDetected;
    }
    let worse = a > b;
    let alpha = 1.0 - intervals::CONFIDENCE;
    if paired.p_value.is_some_and(|p| p < alpha) && (paired.rose > paired.fell) == worse {
        return if worse {
            Change::Regressed
        } else {
            Change::Improved
        };
    }
    match before.median_interval {
        Some(i) if a > i.high => Change::Regressed,
        Some(i) if a < i.low => Change::Improved,
        _ => Change::WithinNoise,
    }
}

fn points(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some((after? - before?) * 100.0)
}

/// The profiles with rows in either state, in profile order.
fn profiles(base: &ReviewState, head: &ReviewState) -> Vec<Precision> {
    let has = |s: &ReviewState, p: Precision| s.rows.iter().any(|r| r.profile == p);
    Precision::ALL
        .into_iter()
        .filter(|p| has(base, *p) || has(head, *p))
        .collect()
}

fn factor_changes(base: &Side, head: &Side) -> Vec<FactorChange> {
    let names: BTreeSet<&String> = base
        .factors
        .profiles
        .keys()
        .chain(head.factors.profiles.keys())
        .collect();
    let mut out = Vec::new();
    for p in names {
        for (i, feature) in FEATURE_NAMES.iter().enumerate() {
            out.push(FactorChange {
                profile: p.clone(),
                feature,
                before: base.factors.profiles.get(p).map(|x| x.factors[i]),
                after: head.factors.profiles.get(p).map(|x| x.factors[i]),
            });
        }
    }
    out
}

fn family_medians(s: &ReviewState) -> BTreeMap<(&str, Precision, Method), Option<f64>> {
    s.families
        .iter()
        .filter_map(|f| {
            let m = Method::parse(&f.method)?;
            FAMILY_METHODS
                .contains(&m)
                .then_some(((f.family.as_str(), f.profile, m), f.median))
        })
        .collect()
}

fn family_deltas(base: &ReviewState, head: &ReviewState) -> Vec<FamilyDelta> {
    let (b, h) = (family_medians(base), family_medians(head));
    let keys: BTreeSet<&(&str, Precision, Method)> = b.keys().chain(h.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (before, after) = (b.get(k).copied().flatten(), h.get(k).copied().flatten());
        if before.is_none() && after.is_none() {
            continue;
        }
        out.push(FamilyDelta {
            family: k.0.to_string(),
            profile: k.1,
            method: k.2,
            before,
            after,
            change_points: points(before, after),
        });
    }
    let key = |d: &FamilyDelta| d.change_points.map_or(f64::NEG_INFINITY, f64::abs);
    out.sort_by(|x, y| {
        key(y)
            .total_cmp(&key(x))
            .then_with(|| x.family.cmp(&y.family))
            .then_with(|| x.profile.cmp(&y.profile))
            .then_with(|| x.method.cmp(&y.method))
    });
    out
}

fn missed(t: Option<Truth>, call: Option<bool>) -> bool {
    t == Some(Truth::DoesNotFit) && call == Some(true)
}

/// Every changed verdict of a row both states have, and every missed did-not-fit check of a
/// verdict method on a row only head has.
fn verdict_changes(base: &Side, head: &Side) -> Vec<VerdictChange> {
    let bi: BTreeMap<&str, &StateRow> = base
        .state
        .rows
        .iter()
        .map(|r| (r.run_id.as_str(), r))
        .collect();
    let card_name = |r: &StateRow, bytes: u64| -> String {
        [&head.factors, &base.factors]
            .iter()
            .filter_map(|f| f.regimes.get(r.regime.as_str()))
            .flat_map(|g| g.cards.iter())
            .find(|c| c.bytes == bytes)
            .map_or_else(|| crate::units::gb(bytes as f64), |c| c.name.clone())
    };
    let mut out = Vec::new();
    for h in &head.state.rows {
        let b = bi.get(h.run_id.as_str()).copied();
        for hc in &h.checks {
            let bc = b.and_then(|b| b.checks.iter().find(|c| c.card_bytes == hc.card_bytes));
            for m in Method::ALL {
                let after = hc.fits.get(m.as_str()).copied();
                let before = bc.and_then(|c| c.fits.get(m.as_str()).copied());
                let truth_before = bc.map(|c| c.truth);
                let new_missed_oom = missed(Some(hc.truth), after) && !missed(truth_before, before);
                let listed = match b {
                    Some(_) => after != before || truth_before != Some(hc.truth),
                    None => new_missed_oom && gives_verdicts(m),
                };
                if !listed {
                    continue;
                }
                out.push(VerdictChange {
                    run_id: h.run_id.clone(),
                    profile: h.profile,
                    card_bytes: hc.card_bytes,
                    card: card_name(h, hc.card_bytes),
                    method: m,
                    added: b.is_none(),
                    truth_before,
                    truth: hc.truth,
                    before,
                    after,
                    new_missed_oom,
                });
            }
        }
    }
    out.sort_by(|x, y| {
        y.new_missed_oom
            .cmp(&x.new_missed_oom)
            .then_with(|| x.run_id.cmp(&y.run_id))
            .then_with(|| x.card_bytes.cmp(&y.card_bytes))
            .then_with(|| x.method.cmp(&y.method))
    });
    out
}

/// The gates that `methods` and `verdict_changes` cross, in words.
fn failures(gates: &[Gate], methods: &[MethodDelta], changes: &[VerdictChange]) -> Vec<String> {
    let mut out = Vec::new();
    for g in gates {
        match g {
            Gate::NewMissedOom => {
                let new = new_missed_checks(changes, None);
                if new > 0 {
                    let added = new_missed_checks(changes.iter().filter(|v| v.added), None);
                    out.push(format!(
                        "new-missed-oom: {new} did-not-fit {} that a plan method or the simulator now calls \"fits\" ({added} of them on rows this change adds)",
                        plural(new, "check", "checks")
                    ));
                }
            }
            Gate::MedianWorse {
                profile,
                method,
                points: limit,
            } => {
                for d in methods
                    .iter()
                    .filter(|d| d.method == *method && profile.is_none_or(|p| p == d.profile))
                {
                    let Some(change) = d.median_change_points else {
                        continue;
                    };
                    if change > *limit && d.change == Change::Regressed {
                        out.push(format!(
                            "{}: the median |error| of {} over {} rows regressed by {change:.2} points ({:.2}% -> {:.2}%; {} of {} shared rows worse, sign test p = {})",
                            g.spec(),
                            method.as_str(),
                            d.profile.as_str(),
                            d.before.median_abs_rel_error.unwrap_or(0.0) * 100.0,
                            d.after.median_abs_rel_error.unwrap_or(0.0) * 100.0,
                            d.paired.rose,
                            d.paired.rows,
                            d.paired
                                .p_value
                                .map_or("none".to_string(), |p| format!("{p:.2e}")),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// `one` or `many`, by `n`.
pub(crate) fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// How many distinct card checks (run and card) a plan method or the simulator newly misses,
/// over `profile`'s rows (`None`: every profile).
fn new_missed_checks<'a>(
    changes: impl IntoIterator<Item = &'a VerdictChange>,
    profile: Option<Precision>,
) -> u64 {
    changes
        .into_iter()
        .filter(|v| v.new_missed_oom && gives_verdicts(v.method))
        .filter(|v| profile.is_none_or(|p| p == v.profile))
        .map(|v| (v.run_id.as_str(), v.card_bytes))
        .collect::<BTreeSet<_>>()
        .len() as u64
}

/// One profile's bottom line: new missed OOM checks first, then the methods by change.
fn bottom_line(p: Precision, methods: &[MethodDelta], changes: &[VerdictChange]) -> BottomLine {
    let of = |c: Change| -> Vec<Method> {
        methods
            .iter()
            .filter(|d| d.profile == p && d.change == c)
            .map(|d| d.method)
            .collect()
    };
    let (regressed, improved, within_noise) = (
        of(Change::Regressed),
        of(Change::Improved),
        of(Change::WithinNoise),
    );
    let new_missed_oom = new_missed_checks(changes, Some(p));
    let worse = new_missed_oom > 0 || !regressed.is_empty();
    let verdict = match (worse, !improved.is_empty()) {
        (true, true) => Verdict::Mixed,
        (true, false) => Verdict::Regresses,
        (false, true) => Verdict::Improves,
        (false, false) if !within_noise.is_empty() => Verdict::WithinNoise,
        (false, false) => Verdict::Unchanged,
    };
    BottomLine {
        profile: p,
        verdict,
        new_missed_oom,
        regressed,
        improved,
        within_noise,
    }
}

/// The rows head adds, each with every method's error.
fn added_rows(base: &ReviewState, head: &ReviewState) -> Vec<AddedRow> {
    let known: BTreeSet<&str> = base
        .rows
        .iter()
        .map(|r| r.run_id.as_str())
        .chain(base.exclusions.iter().map(|e| e.run_id.as_str()))
        .collect();
    head.rows
        .iter()
        .filter(|r| !known.contains(r.run_id.as_str()))
        .map(|r| AddedRow {
            run_id: r.run_id.clone(),
            profile: r.profile,
            family: r.family.clone(),
            measured_bytes: r.measured_bytes,
            errors: Method::ALL
                .iter()
                .filter_map(|m| r.errors.get(m.as_str()).map(|e| (*m, *e)))
                .collect(),
        })
        .collect()
}

/// The ATen ops whose generic rule predicts their OpInfo samples differently.
fn rule_changes(base: &ReviewState, head: &ReviewState) -> Vec<RuleChange> {
    let (Some(b), Some(h)) = (&base.rules, &head.rules) else {
        return Vec::new();
    };
    let bi: BTreeMap<&str, &StateRule> = b.iter().map(|r| (r.op.as_str(), r)).collect();
    let hi: BTreeMap<&str, &StateRule> = h.iter().map(|r| (r.op.as_str(), r)).collect();
    let ops: BTreeSet<&str> = bi.keys().chain(hi.keys()).copied().collect();
    ops.into_iter()
        .filter_map(|op| {
            let (x, y) = (bi.get(op), hi.get(op));
            if x.map(|r| &r.digest) == y.map(|r| &r.digest) {
                return None;
            }
            Some(RuleChange {
                op: op.to_string(),
                samples: y.or(x).map_or(0, |r| r.samples),
                exact_before: x.map(|r| r.exact),
                exact_after: y.map(|r| r.exact),
                refused_before: x.map(|r| r.refused),
                refused_after: y.map(|r| r.refused),
            })
        })
        .collect()
}

/// Per feature, the rows both states have whose value of it differs.
fn feature_changes(base: &ReviewState, head: &ReviewState) -> Vec<FeatureChange> {
    let bi: BTreeMap<&str, &StateRow> = base.rows.iter().map(|r| (r.run_id.as_str(), r)).collect();
    let mut out = Vec::new();
    for (i, feature) in FEATURE_NAMES.iter().enumerate() {
        let mut graphs: BTreeSet<&str> = BTreeSet::new();
        let mut rows = 0;
        let mut example = None;
        for h in &head.rows {
            let Some(b) = bi.get(h.run_id.as_str()) else {
                continue;
            };
            if b.features[i] != h.features[i] {
                rows += 1;
                graphs.insert(h.graph.as_str());
                example.get_or_insert(FeatureExample {
                    run_id: h.run_id.clone(),
                    before: b.features[i],
                    after: h.features[i],
                });
            }
        }
        if let Some(example) = example {
            out.push(FeatureChange {
                feature,
                rows,
                graphs: graphs.into_iter().map(str::to_string).collect(),
                example,
            });
        }
    }
    out
}

/// What says the factors of head were edited by hand: a change of the fit's outputs that
/// keeps base's `fixed_at` (no fit wrote it), or a factors file that differs from its own
/// history entry.
fn hand_edits(base: &Side, head: &Side) -> Vec<String> {
    let mut out = Vec::new();
    let Some(h) = super::entry_of(&head.factors) else {
        return out;
    };
    if let Some(b) = super::entry_of(&base.factors) {
        if b.fixed_at == h.fixed_at && b != h {
            out.push(format!(
                "data/factors.json: {} changed but provenance.fixed_at ({}) did not: no fit wrote the change",
                what_differs(&b, &h),
                h.fixed_at
            ));
        }
    }
    match head.history.entries.iter().find(|e| e.fixed_at == h.fixed_at) {
        None => out.push(format!(
            "data/factors.json: its provenance.fixed_at ({}) has no entry in data/factors-history.json",
            h.fixed_at
        )),
        Some(e) => {
            let logged = HistoryEntry {
                held_out_median: None,
                in_sample_median: None,
                ..e.clone()
            };
            if logged != h {
                out.push(format!(
                    "data/factors.json: {} differ from its history entry fixed at {}",
                    what_differs(&logged, &h),
                    h.fixed_at
                ));
            }
        }
    }
    out
}

/// Which parts of two history entries differ, in words.
fn what_differs(a: &HistoryEntry, b: &HistoryEntry) -> String {
    let mut parts: Vec<String> = Vec::new();
    let names: BTreeSet<&String> = a.profiles.keys().chain(b.profiles.keys()).collect();
    for p in names {
        if a.profiles.get(p) != b.profiles.get(p) {
            parts.push(format!("the {p} factors"));
        }
    }
    if (a.q90, a.q95) != (b.q90, b.q95) || a.upper != b.upper {
        parts.push("the bound's multipliers".into());
    }
    if (a.rows, &a.rows_sha256) != (b.rows, &b.rows_sha256) {
        parts.push("the fitted rows it claims".into());
    }
    if parts.is_empty() {
        parts.push("the provenance".into());
    }
    parts.join(", ")
}

/// Compares two sides under the gates of `fail_on` (none: a report only).
pub fn diff(base: &Side, head: &Side, code: &CodeComparison, fail_on: &[FailOn]) -> DiffReport {
    let mut gates: Vec<Gate> = Vec::new();
    for g in fail_on.iter().flat_map(|f| f.0.iter()) {
        if !gates.contains(g) {
            gates.push(g.clone());
        }
    }
    let (bs, hs) = (&base.state, &head.state);
    let mut methods = Vec::new();
    let profiles = profiles(bs, hs);
    for &p in &profiles {
        for m in Method::ALL {
            let before = bs.summary(p, m);
            let after = hs.summary(p, m);
            if before == MetricSummary::default() && after == MetricSummary::default() {
                continue;
            }
            let paired = paired(bs, hs, p, m);
            methods.push(MethodDelta {
                profile: p,
                method: m,
                median_change_points: points(
                    before.median_abs_rel_error,
                    after.median_abs_rel_error,
                ),
                change: change(&before, &after, &paired),
                paired,
                before,
                after,
            });
        }
    }
    let verdict_changes = verdict_changes(base, head);
    let ids = |s: &ReviewState| -> BTreeSet<String> {
        s.rows
            .iter()
            .map(|r| r.run_id.clone())
            .chain(s.exclusions.iter().map(|e| e.run_id.clone()))
            .collect()
    };
    let (bids, hids) = (ids(bs), ids(hs));
    let base_excluded: BTreeSet<&String> = bs.exclusions.iter().map(|e| &e.run_id).collect();
    let newly_excluded = hs
        .exclusions
        .iter()
        .filter(|e| !base_excluded.contains(&e.run_id))
        .map(|e| NewlyExcluded {
            run_id: e.run_id.clone(),
            reason: e.reason.clone(),
            detail: e.detail.clone(),
        })
        .collect();
    DiffReport {
        format: DIFF_FORMAT,
        base: base.label.clone(),
        head: head.label.clone(),
        code: code.clone(),
        bottom_lines: profiles
            .iter()
            .map(|p| bottom_line(*p, &methods, &verdict_changes))
            .collect(),
        hand_edits: hand_edits(base, head),
        gates: gates.iter().map(Gate::spec).collect(),
        failures: failures(&gates, &methods, &verdict_changes),
        factors: factor_changes(base, head),
        rules_changed: rule_changes(bs, hs),
        features_changed: feature_changes(bs, hs),
        families: family_deltas(bs, hs),
        methods,
        verdict_changes,
        rows_added: added_rows(bs, hs),
        rows_removed: bids.difference(&hids).cloned().collect(),
        newly_excluded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_and_print_back() {
        for s in [
            "new-missed-oom",
            "median-worse=*:plan-as-shipped:1",
            "median-worse=fp32:plan-held-out-architecture:0.5",
        ] {
            let f: FailOn = s.parse().unwrap();
            assert_eq!(f.0.len(), 1);
            assert_eq!(f.0[0].spec(), s);
        }
        let d: FailOn = "default".parse().unwrap();
        assert_eq!(
            d.0.iter().map(Gate::spec).collect::<Vec<_>>(),
            DEFAULT_GATES.to_vec()
        );
        let legacy: FailOn = "held-out-median-worse=2".parse().unwrap();
        assert_eq!(
            legacy.0[0].spec(),
            "median-worse=*:plan-held-out-architecture:2"
        );
        for bad in [
            "median-worse=fp32:plan:1",
            "median-worse=fp16:plan-as-shipped:1",
            "median-worse=fp32:plan-as-shipped:-1",
            "median-worse=fp32:plan-as-shipped",
            "nothing",
        ] {
            assert!(bad.parse::<FailOn>().is_err(), "{bad}");
        }
    }
}
