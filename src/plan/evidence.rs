//! What the data folder tells `memcal plan` beyond the factors: each method's held-out record
//! per precision profile (which method decides a verdict, and its own bound), the range of the
//! rows each profile was fitted on (whether a job is inside it), and the real cards' usable
//! bytes (the allocator overhead measured on the GPU rows). Computed at load time from the
//! data folder and its calibration, never stored: nothing here can drift from the rows.

use super::cards::{self, AllocatorOverhead, RealCard};
use crate::engine::{Bucket, Calibration, Dataset, Method, MethodMetrics};
use crate::features::{Precision, FEATURE_NAMES, N_FEATURES};
use crate::run::RunStatus;
use serde::Serialize;
use std::collections::BTreeMap;

/// The two methods a verdict can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decider {
    /// The six-factor plan (its record: refitted without every family that shares an
    /// implementation block with the row's, the strictest of its held-out splits).
    SixFactorPlan,
    /// The training-step simulator (no fitted factor; its record: every row it predicts).
    Simulator,
}

impl Decider {
    pub fn label(self) -> &'static str {
        match self {
            Decider::SixFactorPlan => "six-factor plan",
            Decider::Simulator => "simulator",
        }
    }

    /// The engine's method whose card verdict `memcal plan` prints when this decider decides:
    /// the simulator's, or the six-factor plan's with the factors as shipped.
    pub fn verdict_method(self) -> Method {
        match self {
            Decider::SixFactorPlan => Method::PlanAsShipped,
            Decider::Simulator => Method::Simulated,
        }
    }

    /// The engine's method whose metrics are this decider's held-out record.
    pub fn record_method(self) -> Method {
        match self {
            Decider::SixFactorPlan => Method::PlanHeldOutImplementation,
            Decider::Simulator => Method::Simulated,
        }
    }
}

/// One method's held-out record over one profile's rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodRecord {
    pub method: Decider,
    /// The engine's method the numbers are from.
    pub record_of: Method,
    /// Completed rows >= the small-run threshold with a prediction.
    pub error_rows: u64,
    pub median_abs_rel_error: Option<f64>,
    pub max_abs_rel_error: Option<f64>,
    pub did_not_fit_checks: u64,
    /// Did-not-fit checks the method called "fits".
    pub missed_oom: u64,
    /// Ratios measured / predicted behind `q95` (the same rows as `error_rows`).
    pub ratios: u64,
    /// Nearest-rank q95 of measured / predicted: the method's own bound multiplier.
    pub q95: Option<f64>,
}

impl MethodRecord {
    fn of(
        method: Decider,
        record_of: Method,
        m: Option<&MethodMetrics>,
        ratios: &[f64],
    ) -> MethodRecord {
        let d = MethodMetrics::default();
        let m = m.unwrap_or(&d);
        MethodRecord {
            method,
            record_of,
            error_rows: m.error_rows,
            median_abs_rel_error: m.median_abs_rel_error,
            max_abs_rel_error: m.max_abs_rel_error,
            did_not_fit_checks: m.did_not_fit_checks,
            missed_oom: m.missed_oom.len() as u64,
            ratios: ratios.len() as u64,
            q95: crate::engine::nearest_rank(ratios, 95),
        }
    }

    /// Missed did-not-fit checks over did-not-fit checks (0 without any).
    pub fn missed_share(&self) -> f64 {
        if self.did_not_fit_checks == 0 {
            0.0
        } else {
            self.missed_oom as f64 / self.did_not_fit_checks as f64
        }
    }

    /// Whether this record is better than `other`: fewer missed out-of-memory checks (in
    /// share), then a smaller median |error|; a record without a median is never better.
    pub fn better_than(&self, other: &MethodRecord) -> bool {
        let Some(a) = self.median_abs_rel_error else {
            return false;
        };
        let Some(b) = other.median_abs_rel_error else {
            return true;
        };
        let (sa, sb) = (self.missed_share(), other.missed_share());
        if sa != sb {
            return sa < sb;
        }
        a < b
    }
}

/// The range of the rows a profile's factors were fitted on (completed fitted rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitRange {
    pub rows: u64,
    pub parameters_min: u64,
    pub parameters_max: u64,
    /// Measured allocated peaks.
    pub peak_min: u64,
    pub peak_max: u64,
    /// Per feature (in feature order): its smallest and largest share of the six features'
    /// sum (bytes over bytes).
    pub share_min: [f64; N_FEATURES],
    pub share_max: [f64; N_FEATURES],
}

/// Each feature's share of the features' sum (all zero when the sum is zero).
pub fn shares(features: &[u64; N_FEATURES]) -> [f64; N_FEATURES] {
    let total: f64 = features.iter().map(|v| *v as f64).sum();
    let mut out = [0.0; N_FEATURES];
    if total > 0.0 {
        for (o, v) in out.iter_mut().zip(features) {
            *o = *v as f64 / total;
        }
    }
    out
}

/// How a job stands out of a range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfRange {
    /// `parameters`, `peak` or `share of <feature>`.
    pub what: String,
    pub value: f64,
    pub low: f64,
    pub high: f64,
    /// For `parameters` and `peak`: how many times beyond the range (value / high, or
    /// low / value); for a share: by how many percentage points.
    pub by: f64,
}

impl FitRange {
    /// What of a job (its parameters, its predicted peak, its features) lies outside the range.
    pub fn outside(
        &self,
        parameters: u64,
        peak: f64,
        features: &[u64; N_FEATURES],
    ) -> Vec<OutOfRange> {
        let mut out = Vec::new();
        let mut ratio = |what: &str, v: f64, lo: f64, hi: f64| {
            let by = if v > hi {
                v / hi
            } else if v < lo && v > 0.0 {
                lo / v
            } else {
                return;
            };
            out.push(OutOfRange {
                what: what.to_string(),
                value: v,
                low: lo,
                high: hi,
                by,
            });
        };
        ratio(
            "parameters",
            parameters as f64,
            self.parameters_min as f64,
            self.parameters_max as f64,
        );
        ratio("peak", peak, self.peak_min as f64, self.peak_max as f64);
        for (k, s) in shares(features).iter().enumerate() {
            let (lo, hi) = (self.share_min[k], self.share_max[k]);
            let by = if *s > hi {
                s - hi
            } else if *s < lo {
                lo - s
            } else {
                continue;
            };
            out.push(OutOfRange {
                what: format!("share of {}", FEATURE_NAMES[k]),
                value: *s,
                low: lo,
                high: hi,
                by: by * 100.0,
            });
        }
        out
    }
}

/// One profile's evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileEvidence {
    /// The six-factor plan's record, then the simulator's.
    pub records: Vec<MethodRecord>,
    /// The method with the better record ([`MethodRecord::better_than`]; the simulator only
    /// with a q95): it gives the verdict wherever it covers the job.
    pub preferred: Decider,
    /// Absent: no completed fitted row.
    pub range: Option<FitRange>,
    /// The factors file's q95 for the profile: the six-factor plan's bound where its held-out
    /// record has none.
    #[serde(skip)]
    pub file_q95: f64,
}

/// Which method decides a job, with its estimate and the q95 of its bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub method: Decider,
    pub estimate: f64,
    pub q95: f64,
}

impl ProfileEvidence {
    pub fn record(&self, d: Decider) -> Option<&MethodRecord> {
        self.records.iter().find(|r| r.method == d)
    }

    /// The q95 of `d`'s held-out record.
    pub fn q95(&self, d: Decider) -> Option<f64> {
        self.record(d).and_then(|r| r.q95)
    }

    /// The one rule of which method decides a job on this profile (`memcal plan`, the runs
    /// tables' verdicts and the page use it): the preferred method where it covers the job
    /// (the simulator, when it has an estimate, `simulated`, and a q95), else the six-factor
    /// plan with its held-out q95, else the factors file's.
    pub fn choose(&self, plan_estimate: f64, simulated: Option<f64>) -> Choice {
        match (self.preferred, simulated, self.q95(Decider::Simulator)) {
            (Decider::Simulator, Some(e), Some(q)) => Choice {
                method: Decider::Simulator,
                estimate: e,
                q95: q,
            },
            _ => Choice {
                method: Decider::SixFactorPlan,
                estimate: plan_estimate,
                q95: self.q95(Decider::SixFactorPlan).unwrap_or(self.file_q95),
            },
        }
    }
}

/// Everything the plan takes from the data folder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub profiles: BTreeMap<Precision, ProfileEvidence>,
    pub allocator_overhead: Option<AllocatorOverhead>,
    pub real_cards: Vec<RealCard>,
}

/// Sorted ratios measured / predicted by `method` over `p`'s completed rows >= `threshold`.
fn ratios(cal: &Calibration, p: Precision, method: Method, buckets: &[Bucket]) -> Vec<f64> {
    let threshold = cal.settings.small_runs_threshold_bytes;
    let mut v: Vec<f64> = cal
        .rows
        .iter()
        .filter(|r| r.precision == p && buckets.contains(&r.bucket))
        .filter_map(|r| {
            let m = r.measured_bytes.filter(|m| *m >= threshold)?;
            let pred = *r.predictions.get(&method)?;
            (pred > 0.0).then(|| m as f64 / pred)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

fn fit_range(ds: &Dataset, cal: &Calibration, p: Precision) -> Option<FitRange> {
    let rows: Vec<_> = cal
        .rows
        .iter()
        .filter(|r| r.precision == p && r.bucket == Bucket::Fitted)
        .filter(|r| r.status == RunStatus::Completed)
        .filter_map(|r| Some((r, r.measured_bytes?, ds.graphs.get(r.graph.as_str())?)))
        .collect();
    let first = rows.first()?;
    let mut range = FitRange {
        rows: rows.len() as u64,
        parameters_min: first.2.parameters,
        parameters_max: first.2.parameters,
        peak_min: first.1,
        peak_max: first.1,
        share_min: [f64::INFINITY; N_FEATURES],
        share_max: [f64::NEG_INFINITY; N_FEATURES],
    };
    for (r, peak, g) in &rows {
        range.parameters_min = range.parameters_min.min(g.parameters);
        range.parameters_max = range.parameters_max.max(g.parameters);
        range.peak_min = range.peak_min.min(*peak);
        range.peak_max = range.peak_max.max(*peak);
        for (k, s) in shares(&r.features).iter().enumerate() {
            range.share_min[k] = range.share_min[k].min(*s);
            range.share_max[k] = range.share_max[k].max(*s);
        }
    }
    Some(range)
}

/// Each profile's two records (the six-factor plan's, then the simulator's) and the decider
/// they choose: the simulator where its record is better and it has a q95. A profile none of
/// whose rows is fitted (its factors borrowed, `Profile::borrowed_from`) has the plan as
/// shipped over its rows for the six-factor plan's record: every one of them is held out.
fn records(cal: &Calibration) -> BTreeMap<Precision, (Vec<MethodRecord>, Decider)> {
    cal.fits
        .iter()
        .map(|(p, fits)| {
            let fitted = cal
                .rows
                .iter()
                .any(|r| r.precision == *p && r.bucket == Bucket::Fitted);
            let (record, plan_buckets): (Method, &[Bucket]) = if fitted {
                (Decider::SixFactorPlan.record_method(), &[Bucket::Fitted])
            } else {
                (
                    Method::PlanAsShipped,
                    &[Bucket::HeldOutRegime, Bucket::AfterFit],
                )
            };
            let plan_ratios = ratios(cal, *p, record, plan_buckets);
            let all = [Bucket::Fitted, Bucket::HeldOutRegime, Bucket::AfterFit];
            let sim_ratios = ratios(cal, *p, Method::Simulated, &all);
            let records = vec![
                MethodRecord::of(
                    Decider::SixFactorPlan,
                    record,
                    fits.methods.get(&record),
                    &plan_ratios,
                ),
                MethodRecord::of(
                    Decider::Simulator,
                    Method::Simulated,
                    fits.methods.get(&Method::Simulated),
                    &sim_ratios,
                ),
            ];
            let sim_better = records[1].better_than(&records[0]) && records[1].q95.is_some();
            let preferred = if sim_better {
                Decider::Simulator
            } else {
                Decider::SixFactorPlan
            };
            (*p, (records, preferred))
        })
        .collect()
}

/// Per profile, the engine's method whose card verdict `memcal plan` prints for a job the
/// preferred decider covers ([`Decider::verdict_method`]): what the page marks as the verdict.
pub fn verdict_methods(cal: &Calibration) -> BTreeMap<Precision, Method> {
    records(cal)
        .into_iter()
        .map(|(p, (_, d))| (p, d.verdict_method()))
        .collect()
}

/// The evidence of a loaded and calibrated data folder.
pub fn evidence(ds: &Dataset, cal: &Calibration) -> Evidence {
    let profiles = records(cal)
        .into_iter()
        .map(|(p, (records, preferred))| {
            (
                p,
                ProfileEvidence {
                    preferred,
                    records,
                    range: fit_range(ds, cal, p),
                    file_q95: ds.factors.upper_for(p).q95,
                },
            )
        })
        .collect();
    let overhead = cards::allocator_overhead(ds);
    Evidence {
        profiles,
        real_cards: cards::real_cards(overhead.as_ref()),
        allocator_overhead: overhead,
    }
}
