//! `memcal diff`: what a change of `data/` does to every method's error and card verdicts, per
//! precision profile, and which of the gates (`--fail-on`) it crosses. Computes by comparing
//! two calibrations; formats nothing (see [`super::markdown`]).

use super::Evaluated;
use crate::engine::intervals::{self, Interval};
use crate::engine::{row_abs_rel_error, Calibration, Method, MethodMetrics, RowResult, Truth};
use crate::features::{Precision, FEATURE_NAMES};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The format tag of `memcal diff --json` (documented in `docs/review.md`).
pub const DIFF_FORMAT: &str = "memcal-diff/1";

/// One factor before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactorChange {
    pub profile: String,
    pub feature: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
}

/// A method's headline numbers over one profile's rows.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
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
    fn of(m: Option<&MethodMetrics>) -> MetricSummary {
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
    pub reason: &'static str,
    pub detail: String,
}

/// Everything `memcal diff` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    pub format: &'static str,
    pub base: String,
    pub head: String,
    /// The gates that were checked, in `--fail-on` syntax, after `default` was expanded.
    pub gates: Vec<String>,
    /// Thresholds crossed, in words (empty: none).
    pub failures: Vec<String>,
    /// Every factor of every profile in either state.
    pub factors: Vec<FactorChange>,
    /// Per profile with rows in either state, per method.
    pub methods: Vec<MethodDelta>,
    /// Per family, profile and method in [`FAMILY_METHODS`], largest change first.
    pub families: Vec<FamilyDelta>,
    /// New missed OOMs first, then by run, card and method.
    pub verdict_changes: Vec<VerdictChange>,
    pub rows_added: Vec<String>,
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

/// The paired comparison of `method`'s errors on `profile`'s rows both states share.
fn paired(base: &Evaluated, head: &Evaluated, profile: Precision, method: Method) -> Paired {
    fn errors(e: &Evaluated, profile: Precision, method: Method) -> BTreeMap<&str, f64> {
        let t = e.factors.small_runs.threshold_bytes;
        e.cal
            .rows
            .iter()
            .filter(|r| r.precision == profile)
            .filter_map(|r| row_abs_rel_error(r, method, t).map(|x| (r.run_id.as_str(), x)))
            .collect()
    }
    let (b, h) = (errors(base, profile, method), errors(head, profile, method));
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
fn profiles(base: &Calibration, head: &Calibration) -> Vec<Precision> {
    let has = |c: &Calibration, p: Precision| c.rows.iter().any(|r| r.precision == p);
    Precision::ALL
        .into_iter()
        .filter(|p| has(base, *p) || has(head, *p))
        .collect()
}

fn profile_metrics(c: &Calibration, p: Precision, m: Method) -> MetricSummary {
    MetricSummary::of(c.fits.get(&p).and_then(|f| f.methods.get(&m)))
}

fn factor_changes(base: &Evaluated, head: &Evaluated) -> Vec<FactorChange> {
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

fn family_deltas(base: &Calibration, head: &Calibration) -> Vec<FamilyDelta> {
    let median = |c: &Calibration, f: &str, p: Precision, m: Method| {
        c.families
            .get(f)
            .and_then(|r| r.by_profile.get(&p))
            .and_then(|ms| ms.get(&m))
            .and_then(|x| x.median_abs_rel_error)
    };
    let fams: BTreeSet<&String> = base.families.keys().chain(head.families.keys()).collect();
    let mut out = Vec::new();
    for f in fams {
        for p in Precision::ALL {
            for m in FAMILY_METHODS {
                let (before, after) = (median(base, f, p, m), median(head, f, p, m));
                if before.is_none() && after.is_none() {
                    continue;
                }
                out.push(FamilyDelta {
                    family: f.clone(),
                    profile: p,
                    method: m,
                    before,
                    after,
                    change_points: points(before, after),
                });
            }
        }
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
fn verdict_changes(base: &Evaluated, head: &Evaluated) -> Vec<VerdictChange> {
    let bi: BTreeMap<&str, &RowResult> = base
        .cal
        .rows
        .iter()
        .map(|r| (r.run_id.as_str(), r))
        .collect();
    let card_name = |r: &RowResult, bytes: u64| -> String {
        [&head.factors, &base.factors]
            .iter()
            .filter_map(|f| f.regimes.get(r.regime.as_str()))
            .flat_map(|g| g.cards.iter())
            .find(|c| c.bytes == bytes)
            .map_or_else(|| crate::units::gb(bytes as f64), |c| c.name.clone())
    };
    let mut out = Vec::new();
    for h in &head.cal.rows {
        let b = bi.get(h.run_id.as_str()).copied();
        for hc in &h.checks {
            let bc = b.and_then(|b| b.checks.iter().find(|c| c.card_bytes == hc.card_bytes));
            for m in Method::ALL {
                let after = hc.fits.get(&m).copied();
                let before = bc.and_then(|c| c.fits.get(&m).copied());
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
                    run_id: h.run_id.to_string(),
                    profile: h.precision,
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
                let new: Vec<&VerdictChange> = changes
                    .iter()
                    .filter(|v| v.new_missed_oom && gives_verdicts(v.method))
                    .collect();
                if !new.is_empty() {
                    let added = new.iter().filter(|v| v.added).count();
                    out.push(format!(
                        "new-missed-oom: {} did-not-fit check(s) that a plan method or the simulator now calls \"fits\" ({added} of them on rows this change adds)",
                        new.len()
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

/// Compares two evaluated states under the gates of `fail_on` (none: a report only).
pub fn diff(base: &Evaluated, head: &Evaluated, fail_on: &[FailOn]) -> DiffReport {
    let mut gates: Vec<Gate> = Vec::new();
    for g in fail_on.iter().flat_map(|f| f.0.iter()) {
        if !gates.contains(g) {
            gates.push(g.clone());
        }
    }
    let mut methods = Vec::new();
    for p in profiles(&base.cal, &head.cal) {
        for m in Method::ALL {
            let before = profile_metrics(&base.cal, p, m);
            let after = profile_metrics(&head.cal, p, m);
            if before == MetricSummary::default() && after == MetricSummary::default() {
                continue;
            }
            let paired = paired(base, head, p, m);
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
        .map(|e| NewlyExcluded {
            run_id: e.run_id.clone(),
            reason: e.reason.as_str(),
            detail: e.detail.clone(),
        })
        .collect();
    DiffReport {
        format: DIFF_FORMAT,
        base: base.label.clone(),
        head: head.label.clone(),
        gates: gates.iter().map(Gate::spec).collect(),
        failures: failures(&gates, &methods, &verdict_changes),
        factors: factor_changes(base, head),
        families: family_deltas(&base.cal, &head.cal),
        methods,
        verdict_changes,
        rows_added: hids.difference(&bids).cloned().collect(),
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
