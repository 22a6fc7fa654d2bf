//! What the data folder tells `memcal plan` beyond the factors: each method's held-out record
//! per precision profile (which method decides a verdict, and its own bound), the range of the
//! rows each profile was fitted on (whether a job is inside it), and the real cards' usable
//! bytes (the allocator overhead measured on the GPU rows). Computed at load time from the
//! data folder and its calibration, never stored: nothing here can drift from the rows.

use crate::cards::{self, AllocatorOverhead, RealCard};
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
    fn of(method: Decider, m: Option<&MethodMetrics>, ratios: &[f64]) -> MethodRecord {
        let d = MethodMetrics::default();
        let m = m.unwrap_or(&d);
        MethodRecord {
            method,
            record_of: method.record_method(),
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
}

impl ProfileEvidence {
    pub fn record(&self, d: Decider) -> Option<&MethodRecord> {
        self.records.iter().find(|r| r.method == d)
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
/// they choose: the simulator where its record is better and it has a q95.
fn records(cal: &Calibration) -> BTreeMap<Precision, (Vec<MethodRecord>, Decider)> {
    cal.fits
        .iter()
        .map(|(p, fits)| {
            let record = Decider::SixFactorPlan.record_method();
            let plan_ratios = ratios(cal, *p, record, &[Bucket::Fitted]);
            let all = [Bucket::Fitted, Bucket::HeldOutRegime, Bucket::AfterFit];
            let sim_ratios = ratios(cal, *p, Method::Simulated, &all);
            let records = vec![
                MethodRecord::of(
                    Decider::SixFactorPlan,
                    fits.methods.get(&record),
                    &plan_ratios,
                ),
                MethodRecord::of(
                    Decider::Simulator,
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

/// `memcal plan`'s one-line verdict on one graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictLine {
    pub graph: String,
    pub parameters: u64,
    pub precision: Precision,
    pub batch: u64,
    pub method: Decider,
    /// [`crate::plan::Plan::why`].
    pub why: String,
}

/// The one-line verdicts of every full-size graph (not cut from another) of `graphs` at
/// `batch`, per precision profile of `factors`, against its cards and the real ones, as
/// `memcal plan` gives them. A graph the plan refuses (a feature overflowing) is left out.
pub fn full_size_verdicts(
    graphs: &[crate::graph::Graph],
    factors: &crate::factors::FactorsFile,
    ev: &Evidence,
    batch: u64,
) -> Vec<VerdictLine> {
    let cards = crate::plan::Cards {
        seed: &factors.cards,
        real: &ev.real_cards,
    };
    let mut out = Vec::new();
    for g in graphs.iter().filter(|g| g.cut_from.is_none()) {
        for precision in factors.profiles.keys().filter_map(|p| p.parse().ok()) {
            let Some(p) = plan_job(g, batch, precision, factors, cards, ev) else {
                continue;
            };
            out.push(VerdictLine {
                graph: g.name.clone(),
                parameters: p.parameters,
                precision,
                batch,
                method: p.decision.method,
                why: p.why,
            });
        }
    }
    out
}

/// `g` at `batch` under `precision` as `memcal plan` answers it (simulated, planned, its
/// features checked); None where `plan` refuses the job.
fn plan_job(
    g: &crate::graph::Graph,
    batch: u64,
    precision: Precision,
    factors: &crate::factors::FactorsFile,
    cards: crate::plan::Cards,
    ev: &Evidence,
) -> Option<crate::plan::Plan> {
    let sim = crate::simulate::simulate_peak(g, batch, precision);
    let p = crate::plan::plan_with_simulation(g, batch, precision, factors, cards, &sim, Some(ev))
        .ok()?;
    crate::plan::check_features(g, &p).ok()?;
    Some(p)
}

/// One job of the "Will it fit?" page: a graph at a batch under bf16 autocast, as `memcal plan`
/// answers it against the real cards.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitLine {
    pub graph: String,
    /// Where the graph comes from (the zoo's full-size template, or an imported config).
    pub source: String,
    pub parameters: u64,
    pub batch: u64,
    pub method: Decider,
    pub estimate_bytes: f64,
    pub bound_bytes: f64,
    /// The smallest real product the deciding method says fits (bound and, on CUDA, the
    /// simulated reserved peak within it).
    pub smallest_fits: Option<String>,
    /// The smallest real product whose verdict is at least borderline.
    pub smallest_borderline: Option<String>,
    /// When every real product is "does not fit": `memcal plan`'s shortfall (the largest card,
    /// the bytes the deciding estimate needs with the headroom, and by how much it is short).
    pub shortfall: Option<crate::plan::Shortfall>,
    pub why: String,
}

/// The "Will it fit?" jobs: each graph of `graphs` (with its source) at each of `batches`,
/// under bf16 autocast (the profile the GPU cards are planned in), as `memcal plan` answers.
pub fn will_it_fit(
    graphs: &[(&crate::graph::Graph, String)],
    factors: &crate::factors::FactorsFile,
    ev: &Evidence,
    batches: &[u64],
) -> Vec<FitLine> {
    let cards = crate::plan::Cards {
        seed: &[],
        real: &ev.real_cards,
    };
    let precision = Precision::Bf16Autocast;
    let mut out = Vec::new();
    for (g, source) in graphs {
        for &batch in batches {
            let Some(p) = plan_job(g, batch, precision, factors, cards, ev) else {
                continue;
            };
            let first = |ok: &dyn Fn(crate::plan::Decided) -> bool| {
                p.cards
                    .iter()
                    .filter(|v| v.product.is_some() && ok(v.verdict))
                    .min_by_key(|v| v.card.bytes)
                    .map(|v| v.card.name.clone())
            };
            use crate::plan::Decided;
            let smallest_fits = first(&|d| d == Decided::Fits);
            let smallest_borderline = first(&|d| matches!(d, Decided::Fits | Decided::Borderline));
            out.push(FitLine {
                graph: g.name.clone(),
                source: source.clone(),
                parameters: p.parameters,
                batch,
                method: p.decision.method,
                estimate_bytes: p.decision.estimate_bytes,
                bound_bytes: p.decision.bound_bytes,
                smallest_fits,
                smallest_borderline,
                shortfall: p.shortfall,
                why: p.why,
            });
        }
    }
    out
}

/// How `memcal plan`'s verdict on a measured row compares with what the run did at the
/// capacity it ran under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowOutcome {
    /// "fits" on a run that completed, or "does not fit" on one that ran out of memory.
    Right,
    /// "fits" on a run that ran out of memory: the miss a planner must not make.
    MissedOom,
    /// "does not fit" on a run that completed.
    FalseAlarm,
    /// "borderline" (the estimate fits, the bound with the headroom does not): on a completed
    /// run a cautious answer, on an out-of-memory run a warned one.
    BorderlineCompleted,
    BorderlineOom,
}

impl RowOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RowOutcome::Right => "right",
            RowOutcome::MissedOom => "missed: it ran out of memory",
            RowOutcome::FalseAlarm => "a false alarm: it completed",
            RowOutcome::BorderlineCompleted => "cautious: it completed",
            RowOutcome::BorderlineOom => "warned: it ran out of memory",
        }
    }
}

/// `memcal plan`'s verdict on one shipped row: the job (graph, batch, precision) against the
/// capacity the run ran under, by the method that decides on its profile, with that method's
/// own q95 bound. (`plan` also widens the bound outside the fitted range; the rows are the
/// fitted range and its neighbours, so the row verdict does not.)
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RowVerdict {
    pub method: Decider,
    pub estimate_bytes: f64,
    pub bound_bytes: f64,
    pub capacity_bytes: u64,
    pub verdict: crate::plan::Verdict,
    pub outcome: RowOutcome,
}

/// The verdict on every usable row of `cal` (in `cal.rows` order; absent where the deciding
/// method has no prediction, or for a run that neither completed nor ran out of memory).
pub fn row_verdicts(cal: &Calibration, ev: &Evidence) -> Vec<Option<RowVerdict>> {
    use crate::plan::{bound, bound_verdict, Verdict};
    let s = &cal.settings;
    cal.rows
        .iter()
        .map(|r| {
            let pe = ev.profiles.get(&r.precision)?;
            let covered = |d: Decider| r.predictions.get(&d.verdict_method()).copied();
            let (method, estimate) = match (pe.preferred, covered(Decider::Simulator)) {
                (Decider::Simulator, Some(e)) => (Decider::Simulator, e),
                _ => (Decider::SixFactorPlan, covered(Decider::SixFactorPlan)?),
            };
            let q95 = pe
                .record(method)
                .and_then(|m| m.q95)
                .or_else(|| cal.fits.get(&r.precision).map(|f| f.upper.q95_used))?;
            let b = bound(estimate, q95, s.bound_floor_bytes);
            let verdict = bound_verdict(estimate, b, s.headroom, r.capacity_bytes);
            let completed = match r.status {
                RunStatus::Completed => true,
                RunStatus::Oom => false,
                _ => return None,
            };
            let outcome = match (verdict, completed) {
                (Verdict::Fits, true) | (Verdict::DoesNotFit, false) => RowOutcome::Right,
                (Verdict::Fits, false) => RowOutcome::MissedOom,
                (Verdict::DoesNotFit, true) => RowOutcome::FalseAlarm,
                (Verdict::Borderline, true) => RowOutcome::BorderlineCompleted,
                (Verdict::Borderline, false) => RowOutcome::BorderlineOom,
            };
            Some(RowVerdict {
                method,
                estimate_bytes: estimate,
                bound_bytes: b,
                capacity_bytes: r.capacity_bytes,
                verdict,
                outcome,
            })
        })
        .collect()
}

/// How `memcal plan`'s verdicts on one profile's rows compare with the runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutcomeCounts {
    pub rows: u64,
    pub right: u64,
    pub missed_oom: u64,
    pub false_alarm: u64,
    pub borderline_completed: u64,
    pub borderline_oom: u64,
    /// Rows without a verdict (no prediction by either method, or a run that failed otherwise).
    pub no_verdict: u64,
}

/// Per precision profile, the outcomes of `verdicts` (aligned with `cal.rows`).
pub fn outcome_counts(
    cal: &Calibration,
    verdicts: &[Option<RowVerdict>],
) -> BTreeMap<Precision, OutcomeCounts> {
    let mut out: BTreeMap<Precision, OutcomeCounts> = BTreeMap::new();
    for (r, v) in cal.rows.iter().zip(verdicts) {
        let c = out.entry(r.precision).or_default();
        c.rows += 1;
        let slot = match v.map(|v| v.outcome) {
            Some(RowOutcome::Right) => &mut c.right,
            Some(RowOutcome::MissedOom) => &mut c.missed_oom,
            Some(RowOutcome::FalseAlarm) => &mut c.false_alarm,
            Some(RowOutcome::BorderlineCompleted) => &mut c.borderline_completed,
            Some(RowOutcome::BorderlineOom) => &mut c.borderline_oom,
            None => &mut c.no_verdict,
        };
        *slot += 1;
    }
    out
}
