//! What the measured rows say of `memcal plan`'s verdicts: the one-line verdict of every
//! full-size graph, the "Will it fit?" lines, and each row's outcome under the verdict rule
//! (fits, borderline, did not fit, missed). Built from the decision ([`super::decide`]) and the
//! evidence ([`super::evidence`]); neither of those reads this file.

use super::decide as plan;
use super::evidence::{Choice, Decider, Evidence};
use crate::engine::Calibration;
use crate::features::Precision;
use crate::run::RunStatus;
use serde::Serialize;
use std::collections::BTreeMap;

/// `memcal plan`'s one-line verdict on one graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictLine {
    pub graph: String,
    pub parameters: u64,
    pub precision: Precision,
    pub batch: u64,
    pub method: Decider,
    /// [`plan::Plan::why`].
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
    let cards = plan::Cards {
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
    cards: plan::Cards,
    ev: &Evidence,
) -> Option<plan::Plan> {
    let sim = crate::simulate::simulate_peak(g, batch, precision);
    let p = plan::plan_with_simulation(g, batch, precision, factors, cards, &sim, Some(ev)).ok()?;
    plan::check_features(g, &p).ok()?;
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
    pub shortfall: Option<plan::Shortfall>,
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
    let cards = plan::Cards {
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
            let first = |ok: &dyn Fn(plan::Decided) -> bool| {
                p.cards
                    .iter()
                    .filter(|v| v.product.is_some() && ok(v.verdict))
                    .min_by_key(|v| v.card.bytes)
                    .map(|v| v.card.name.clone())
            };
            use plan::Decided;
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
    pub verdict: plan::Verdict,
    pub outcome: RowOutcome,
}

/// The verdict on every usable row of `cal` (in `cal.rows` order; absent where the deciding
/// method has no prediction, or for a run that neither completed nor ran out of memory).
pub fn row_verdicts(cal: &Calibration, ev: &Evidence) -> Vec<Option<RowVerdict>> {
    use plan::{bound, bound_verdict, Verdict};
    let s = &cal.settings;
    cal.rows
        .iter()
        .map(|r| {
            let pe = ev.profiles.get(&r.precision)?;
            let covered = |d: Decider| r.predictions.get(&d.verdict_method()).copied();
            let simulated = covered(Decider::Simulator);
            let plan = covered(Decider::SixFactorPlan);
            let Choice {
                method,
                estimate,
                q95,
            } = match (plan, simulated) {
                (Some(p), _) => pe.choose(p, simulated),
                // No six-factor estimate: only the simulator can decide.
                (None, Some(_)) => match pe.choose(0.0, simulated) {
                    c if c.method == Decider::Simulator => c,
                    _ => return None,
                },
                (None, None) => return None,
            };
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
