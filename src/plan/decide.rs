//! The plan: estimate = Σ factor_i x feature_i, the bound max(floor, estimate x q95), and the
//! verdict per card. With a data folder's evidence ([`super::evidence`]) the verdict comes
//! from the method with the better held-out record (the six-factor plan or the simulator), with
//! its own q95 bound, widened or refused outside the fitted range, on the seed cards and the
//! real ones ([`super::cards`]), and is explained in one line ([`Plan::why`]).

use super::cards::RealCard;
use super::evidence::{Decider, Evidence, FitRange, MethodRecord, OutOfRange};
use crate::baselines::{self, Accelerate, Textbook};
use crate::factors::{Card, FactorsFile};
use crate::features::{self, Features, Precision, N_FEATURES};
use crate::graph::Graph;
use crate::units::gb;
use serde::Serialize;

/// Three-way verdict of the bound on one card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// bound x (1 + headroom) <= card.
    Fits,
    /// estimate <= card < bound x (1 + headroom).
    Borderline,
    /// estimate > card.
    DoesNotFit,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fits => "fits",
            Verdict::Borderline => "borderline",
            Verdict::DoesNotFit => "does not fit",
        }
    }
}

/// The bytes provably alive at the optimizer phase of the harness's step 2 and 3 (AdamW over
/// every trainable parameter; a formula from the protocol, no fitted factor): the weights,
/// gradients and both Adam states (the `model_state` feature: 16 bytes a parameter in float32,
/// 8 in pure bf16) and, while the largest parameter is updated, AdamW's temporaries for it
/// ([`crate::simulate::rules::adamw_transient`], at the weights' element size). Under bf16
/// autocast the weights and the optimizer stay float32 and the autocast cache is empty outside
/// the autocast region, so the floor is fp32's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhaseFloor {
    pub bytes: u64,
    /// Parameters x [`Precision::state_bytes_per_parameter`].
    pub model_state: u64,
    /// The AdamW temporaries of the largest parameter tensor.
    pub optimizer_temporaries: u64,
    pub largest_parameter_bytes: u64,
}

/// The phase floor of a graph (see [`PhaseFloor`]).
pub fn phase_floor(graph: &Graph, precision: Precision) -> PhaseFloor {
    let largest = graph
        .nodes
        .iter()
        .flat_map(|n| n.op.parameter_tensors())
        .map(|dims| dims.iter().fold(1u64, |a, d| a.saturating_mul(*d)))
        .max()
        .unwrap_or(0)
        .saturating_mul(precision.weight_bytes());
    let model_state = graph
        .parameters()
        .saturating_mul(precision.state_bytes_per_parameter());
    let optimizer_temporaries = if largest == 0 {
        0
    } else {
        crate::simulate::rules::adamw_transient(largest)
    };
    PhaseFloor {
        bytes: model_state.saturating_add(optimizer_temporaries),
        model_state,
        optimizer_temporaries,
        largest_parameter_bytes: largest,
    }
}

/// The six-factor plan's activation terms: Σ factor_i x feature_i over every feature but
/// `model_state` (what a strategy formula transforms where that plan decides the plain step).
pub fn activation_terms(factors: &[f64; N_FEATURES], features: &Features) -> f64 {
    factors
        .iter()
        .zip(features.as_array())
        .skip(1)
        .map(|(f, x)| f * x as f64)
        .sum()
}

/// The plan's estimate never below the phase floor: max(Σ factor_i x feature_i, floor).
pub fn estimate_floored(factors: &[f64; N_FEATURES], features: &Features, floor: u64) -> f64 {
    estimate(factors, features).max(floor as f64)
}

/// Σ factor_i x feature_i, in bytes.
pub fn estimate(factors: &[f64; N_FEATURES], features: &Features) -> f64 {
    factors
        .iter()
        .zip(features.as_f64())
        .map(|(a, x)| a * x)
        .sum()
}

/// The plan alone fits a card iff estimate x (1 + headroom) <= card.
pub fn plan_fits(estimate: f64, headroom: f64, card_bytes: u64) -> bool {
    estimate * (1.0 + headroom) <= card_bytes as f64
}

/// The bound: max(floor, estimate x multiplier).
pub fn bound(estimate: f64, multiplier: f64, floor_bytes: u64) -> f64 {
    (estimate * multiplier).max(floor_bytes as f64)
}

/// The bound's three-way verdict on a card.
pub fn bound_verdict(estimate: f64, bound: f64, headroom: f64, card_bytes: u64) -> Verdict {
    let card = card_bytes as f64;
    if estimate > card {
        Verdict::DoesNotFit
    } else if bound * (1.0 + headroom) <= card {
        Verdict::Fits
    } else {
        Verdict::Borderline
    }
}

/// The largest batch that fits one card, by the plan and by the bound (absent: not even
/// batch 1; the search stops at [`MAX_BATCH_SEARCHED`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaxBatch {
    pub card: Card,
    /// By the deciding method's verdict ("fits"), where [`max_batch_verdict`] was run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Option<u64>>,
    pub plan: Option<u64>,
    pub bound: Option<u64>,
}

/// The largest batch `max_batch` tries.
pub const MAX_BATCH_SEARCHED: u64 = 1 << 24;

/// The largest batch in 1..=MAX_BATCH_SEARCHED for which `fits(batch)` holds, given that it
/// holds for every batch below one that holds (the features grow with the batch).
fn largest_batch(fits: impl Fn(u64) -> bool) -> Option<u64> {
    largest_fitting(MAX_BATCH_SEARCHED, fits)
}

pub use crate::search::largest_fitting;

/// Per card, the largest batch the plan (estimate x (1 + headroom) <= card) and the bound
/// (bound x (1 + headroom) <= card) fit, with the estimate floored as in [`plan`].
pub fn max_batch(
    graph: &Graph,
    precision: Precision,
    factors: &FactorsFile,
    cards: &[Card],
) -> Result<Vec<MaxBatch>, String> {
    if !graph.has_batch_axis() {
        return Err(format!(
            "graph `{}` has no batch axis: the batch changes nothing",
            graph.name
        ));
    }
    let f = factors
        .factors(precision)
        .ok_or_else(|| format!("no factors for precision `{precision}`"))?;
    let floor = phase_floor(graph, precision).bytes;
    let q95 = factors.upper_for(precision).q95;
    let est = |b: u64| estimate_floored(f, &features::features(graph, b, precision), floor);
    Ok(cards
        .iter()
        .map(|c| MaxBatch {
            card: c.clone(),
            verdict: None,
            plan: largest_batch(|b| plan_fits(est(b), factors.headroom, c.bytes)),
            bound: largest_batch(|b| {
                let e = est(b);
                let bd = bound(e, q95, factors.bound_floor_bytes);
                bound_verdict(e, bd, factors.headroom, c.bytes) == Verdict::Fits
            }),
        })
        .collect())
}

/// Per card of `cards` (the seed cards, then the real ones), the largest batch whose verdict
/// by the deciding method ([`Decision`], the full plan at that batch: the simulator's peak and
/// reserved peak, the range check, the bound) is "fits"; absent: not even batch 1. Each batch is
/// planned once for every card.
pub fn max_batch_verdict(
    graph: &Graph,
    precision: Precision,
    factors: &FactorsFile,
    cards: Cards,
    evidence: Option<&Evidence>,
) -> Vec<Option<u64>> {
    max_batch_verdict_with(
        graph,
        precision,
        factors,
        cards,
        evidence,
        &crate::simulate::AllocatorSettings::default(),
    )
}

/// [`max_batch_verdict`] with the simulator's allocator replay under `settings`.
pub fn max_batch_verdict_with(
    graph: &Graph,
    precision: Precision,
    factors: &FactorsFile,
    cards: Cards,
    evidence: Option<&Evidence>,
    settings: &crate::simulate::AllocatorSettings,
) -> Vec<Option<u64>> {
    let memo = std::cell::RefCell::new(std::collections::HashMap::<u64, Vec<bool>>::new());
    let fits = |b: u64| -> Vec<bool> {
        if let Some(v) = memo.borrow().get(&b) {
            return v.clone();
        }
        let sim = crate::simulate::simulate_peak(graph, b, precision)
            .map(|s| s.with_allocator_settings(settings));
        let v: Vec<bool> =
            plan_with_simulation(graph, b, precision, factors, cards, &sim, evidence)
                .map(|p| p.cards.iter().map(|v| v.verdict == Decided::Fits).collect())
                .unwrap_or_default();
        memo.borrow_mut().insert(b, v.clone());
        v
    };
    let n = cards.seed.len() + cards.real.len();
    (0..n)
        .map(|i| largest_batch(|b| fits(b).get(i).copied().unwrap_or(false)))
        .collect()
}

/// Why no card fits: what the plan needs against the largest card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shortfall {
    pub largest_card: Card,
    /// estimate x (1 + headroom): what the plan needs of a card.
    pub needed_bytes: u64,
    pub short_by_bytes: u64,
    /// The phase floor alone exceeds the largest card: no batch fits it.
    pub floor_exceeds_card: bool,
}

/// One card's verdicts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardVerdict {
    /// For a real product: its name and usable bytes (`product` has the rest).
    pub card: Card,
    /// A real product's reported total, context and usable bytes; absent for the seed cards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<RealCard>,
    /// The verdict of the deciding method ([`Decision`]): the one `plan` states.
    pub verdict: Decided,
    /// The six-factor plan alone: estimate x (1 + headroom) <= card.
    pub plan_fits: bool,
    /// The six-factor plan's bound.
    pub bound: Verdict,
    /// CUDA: whether the simulator's reserved peak (the caching allocator's segments, what
    /// exhausts a card) is within the card (a real card's reservable bytes: its reported
    /// total less the CUDA context); absent where there is no allocator replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_reserved_fits: Option<bool>,
}

/// The deciding method's verdict on one card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decided {
    /// bound x (1 + headroom) <= card, and the simulated reserved peak (where there is one)
    /// within the card.
    Fits,
    /// The estimate fits the card, the bound does not.
    Borderline,
    /// The estimate exceeds the card, or the simulated reserved peak does.
    DoesNotFit,
    /// No verdict: the job is outside the range of the rows the only covering method was
    /// fitted on (the phase floor alone exceeding the card is still "does not fit").
    Refused,
}

impl Decided {
    pub fn as_str(self) -> &'static str {
        match self {
            Decided::Fits => "fits",
            Decided::Borderline => "borderline",
            Decided::DoesNotFit => "does not fit",
            Decided::Refused => "refused",
        }
    }
}

/// Which method gives the verdict, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub method: Decider,
    /// Why this method, in words (its record against the other's, or why the other does not
    /// cover the job).
    pub reason: String,
    /// The method's estimate, never below the phase floor. In JSON: whole bytes, rounded up.
    #[serde(serialize_with = "whole_bytes")]
    pub estimate_bytes: f64,
    /// max(bound floor, estimate x the method's own held-out q95), or, outside the fitted
    /// range, the largest of the covering methods' bounds. In JSON: whole bytes, rounded up.
    #[serde(serialize_with = "whole_bytes")]
    pub bound_bytes: f64,
    /// The method's own held-out q95 (measured / predicted).
    pub q95: f64,
    /// Each method's held-out record over the profile's rows (empty without a data folder).
    pub records: Vec<MethodRecord>,
    /// The profile's fitted range and what of the job lies outside it (absent without a data
    /// folder or a fitted row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeCheck>,
    /// Outside the range, the bound is the larger of the covering methods' bounds.
    pub bound_widened: bool,
    /// Why there is no verdict (outside the range with one covering method).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A job against its profile's fitted range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RangeCheck {
    pub fitted: FitRange,
    /// Empty: inside.
    pub outside: Vec<OutOfRange>,
}

/// The cards a plan is checked against: the factors file's (or a regime's) and the real
/// products ([`super::cards`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cards<'a> {
    pub seed: &'a [Card],
    pub real: &'a [RealCard],
}

impl Cards<'_> {
    /// Every card as the verdicts use it (a real product at its usable bytes).
    pub fn all(&self) -> Vec<Card> {
        let real = self.real.iter().map(RealCard::card);
        self.seed.iter().cloned().chain(real).collect()
    }
}

/// The format tag of `memcal plan --json` (documented in `docs/hardening.md`).
pub const PLAN_FORMAT: &str = "memcal-plan/3";

/// The format of `memcal plan --timeline --json`: the plan (`memcal-plan/3`) and the simulation
/// whose timeline it prints.
pub const PLAN_TIMELINE_FORMAT: &str = "memcal-plan-timeline/1";

/// The six-factor plan's own fields, which `--json` puts under `six_factor` ([`Plan::to_json`]).
const SIX_FACTOR_FIELDS: [&str; 11] = [
    "features",
    "factors",
    "factors_borrowed_from",
    "estimate_bytes",
    "linear_estimate_bytes",
    "floor",
    "floor_decides",
    "q95",
    "bound_bytes",
    "smallest_card",
    "smallest_card_bound",
];

impl Plan {
    /// `memcal plan --json` ([`PLAN_FORMAT`], docs/hardening.md): the verdict's numbers at the
    /// top level (`method`, `estimate_bytes`, `bound_bytes`, `smallest_card`: the deciding
    /// method's), the six-factor plan's own under `six_factor`, the rest as the plan holds it.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        let Some(top) = v.as_object_mut() else {
            return v;
        };
        let mut six = serde_json::Map::new();
        for k in SIX_FACTOR_FIELDS {
            if let Some(x) = top.remove(k) {
                six.insert(k.to_string(), x);
            }
        }
        let d = &self.decision;
        top.insert("method".into(), serde_json::json!(d.method));
        top.insert(
            "estimate_bytes".into(),
            serde_json::json!(d.estimate_bytes.ceil() as u64),
        );
        top.insert(
            "bound_bytes".into(),
            serde_json::json!(d.bound_bytes.ceil() as u64),
        );
        top.remove("smallest_card_verdict");
        top.insert(
            "smallest_card".into(),
            serde_json::json!(self.smallest_card_verdict),
        );
        top.insert("six_factor".into(), serde_json::Value::Object(six));
        v
    }
}

/// Everything `memcal plan` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// [`PLAN_FORMAT`].
    pub format: &'static str,
    pub graph: String,
    pub family: String,
    pub batch: u64,
    pub precision: Precision,
    pub parameters: u64,
    pub has_batch_axis: bool,
    pub features: Features,
    pub factors: [f64; N_FEATURES],
    /// The profile whose factors these are when the job's profile has none fitted on its own
    /// rows (`Profile::borrowed_from`: pure bf16 takes bf16 autocast's); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub factors_borrowed_from: Option<String>,
    /// max(the linear six-factor sum, the phase floor). In JSON: whole bytes, rounded up (a
    /// planner never reserves a fraction of a byte).
    #[serde(serialize_with = "whole_bytes")]
    pub estimate_bytes: f64,
    /// Σ factor_i x feature_i alone. In JSON: whole bytes, rounded up.
    #[serde(serialize_with = "whole_bytes")]
    pub linear_estimate_bytes: f64,
    /// The bytes provably alive at the optimizer phase; the estimate is never below it.
    pub floor: PhaseFloor,
    /// The floor decides the estimate (the linear sum is below it).
    pub floor_decides: bool,
    pub headroom: f64,
    pub q95: f64,
    /// In JSON: whole bytes, rounded up.
    #[serde(serialize_with = "whole_bytes")]
    pub bound_bytes: f64,
    /// Which method gives the verdict, its estimate and bound, and why.
    pub decision: Decision,
    /// The verdict in one line: which method, estimate against the card, outside the range,
    /// lifted to the floor.
    pub why: String,
    /// The seed cards, then the real products.
    pub cards: Vec<CardVerdict>,
    /// Smallest card the deciding method fits.
    pub smallest_card_verdict: Option<Card>,
    /// Smallest card the plan alone fits.
    pub smallest_card: Option<Card>,
    /// Smallest card the bound fits.
    pub smallest_card_bound: Option<Card>,
    /// When the plan fits none of the cards: by how much the largest falls short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<Shortfall>,
    pub accelerate: Accelerate,
    /// In JSON: the formula's object, or `{"error": why}` where it does not apply.
    #[serde(serialize_with = "value_or_error")]
    pub textbook: Result<Textbook, String>,
    /// The simulator's peak and where it falls (no fitted factor), or why it has no rules yet.
    /// In JSON: the object, or `{"error": why}`.
    #[serde(serialize_with = "value_or_error")]
    pub simulated: Result<SimulatedPeak, String>,
    /// What the graph approximates: the file's notes, then each generic node whose rule is
    /// approximate. Non-empty: an "approximate graph", said first in the verdict line.
    pub approximations: Vec<crate::graph::GraphNote>,
}

/// The graph's approximations: its notes, then every generic node whose rule approximates.
pub fn approximations(graph: &Graph) -> Vec<crate::graph::GraphNote> {
    let mut v = graph.notes.clone();
    for n in &graph.nodes {
        if let Some(a) = n.op.as_generic() {
            for text in crate::simulate::generic_overrides::approximations(a) {
                v.push(crate::graph::GraphNote {
                    node: Some(n.id.clone()),
                    text,
                });
            }
        }
    }
    v
}

/// Bytes held as `f64` (a product of factors and features), written as a whole number of
/// bytes, rounded up.
fn whole_bytes<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && *v >= 0.0 && *v < u64::MAX as f64 {
        s.serialize_u64(v.ceil() as u64)
    } else {
        s.serialize_none()
    }
}

/// A result as its value, or as `{"error": message}`.
fn value_or_error<T: Serialize, S: serde::Serializer>(
    v: &Result<T, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    match v {
        Ok(t) => t.serialize(s),
        Err(m) => {
            let mut map = s.serialize_map(Some(1))?;
            map.serialize_entry("error", m)?;
            map.end()
        }
    }
}

/// Where the simulated training step peaks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimulatedPeak {
    /// The peak comparable to a row's allocated peak: live bytes on CPU; on CUDA the
    /// caching-allocator replay's `allocated_bytes` peak (every tensor in its 512-byte block).
    pub bytes: u64,
    pub phase: String,
    pub node: String,
    /// CUDA only: the replay's reserved peak (the allocator's segments), where it is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved: Option<SimulatedReserved>,
}

/// The replay's reserved peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimulatedReserved {
    pub bytes: u64,
    pub phase: String,
    pub node: String,
    /// The allocator settings replayed (`PYTORCH_CUDA_ALLOC_CONF`, canonical; `memcal plan
    /// --allocator-settings`); absent: torch's defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator_settings: Option<String>,
}

impl SimulatedPeak {
    /// The simulation's peaks: the replay's on CUDA, the live bytes' elsewhere.
    pub fn of(s: &crate::simulate::Simulation) -> SimulatedPeak {
        match &s.device {
            Some(d) => SimulatedPeak {
                bytes: d.allocated_peak,
                phase: d.allocated_peak_phase.clone(),
                node: d.allocated_peak_node.clone(),
                reserved: Some(SimulatedReserved {
                    bytes: d.reserved_peak,
                    phase: d.reserved_peak_phase.clone(),
                    node: d.reserved_peak_node.clone(),
                    allocator_settings: d.allocator_settings.clone(),
                }),
            },
            None => SimulatedPeak {
                bytes: s.peak_bytes,
                phase: s.peak_phase.clone(),
                node: s.peak_node.clone(),
                reserved: None,
            },
        }
    }
}

/// Plans a graph at a batch and precision against `cards`, without a data folder (the
/// six-factor plan decides, with the factors file's q95; no real cards).
pub fn plan(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    factors: &FactorsFile,
    cards: &[Card],
) -> Result<Plan, String> {
    let sim = crate::simulate::simulate_peak(graph, batch, precision);
    let cards = Cards {
        seed: cards,
        real: &[],
    };
    plan_with_simulation(graph, batch, precision, factors, cards, &sim, None)
}

/// Refuses a plan whose features do not fit in 64 bits (the features
/// saturate at `u64::MAX`; a saturated feature is no estimate): the message names the graph's
/// file, or its name for a graph built in memory.
pub fn check_features(graph: &Graph, plan: &Plan) -> Result<(), String> {
    let batch = plan.batch;
    if let Some(k) = plan.features.as_array().iter().position(|v| *v == u64::MAX) {
        let name = features::FEATURE_NAMES[k];
        return Err(format!(
            "{}: at batch {batch} feature `{name}` needs more than 2^64 bytes (it overflows); \
             check the batch and the input shapes",
            graph
                .path
                .as_ref()
                .map_or(graph.name.clone(), |p| p.display().to_string())
        ));
    }
    Ok(())
}

/// The record line of a method: "missed 5 of 69 did-not-fit checks, median |error| 9.6% over
/// 90 rows".
fn record_text(r: &MethodRecord) -> String {
    format!(
        "missed {} of {} did-not-fit checks, median |error| {} over {} rows",
        r.missed_oom,
        r.did_not_fit_checks,
        r.median_abs_rel_error
            .map_or(crate::format::MISSING.to_string(), crate::format::pct),
        r.error_rows
    )
}

/// What [`decide`] works from.
struct Candidates<'a> {
    precision: Precision,
    evidence: Option<&'a Evidence>,
    /// The six-factor plan's floored estimate, and the factors file's q95.
    plan_estimate: f64,
    file_q95: f64,
    /// The simulator's floored allocated peak, or why it does not cover the job.
    simulated: Result<f64, String>,
    bound_floor: u64,
    parameters: u64,
    features: [u64; N_FEATURES],
}

/// Which method decides, its estimate and bound (see [`Decision`]).
fn decide(c: &Candidates) -> Decision {
    let profile = c.evidence.and_then(|e| e.profiles.get(&c.precision));
    let record = |d: Decider| profile.and_then(|p| p.record(d));
    let q95_of = |d: Decider| profile.and_then(|p| p.q95(d));
    let plan_q95 = q95_of(Decider::SixFactorPlan).unwrap_or(c.file_q95);
    let plan_bound = bound(c.plan_estimate, plan_q95, c.bound_floor);
    let sim = c.simulated.as_ref().ok().copied();
    let sim_q95 = q95_of(Decider::Simulator);
    // The rule is the evidence's (`ProfileEvidence::choose`); the six-factor plan's q95 falls
    // back to the factors file this plan runs with.
    let (method, estimate, q95) = match profile.map(|pe| pe.choose(c.plan_estimate, sim)) {
        Some(ch) if ch.method == Decider::Simulator => (ch.method, ch.estimate, ch.q95),
        _ => (Decider::SixFactorPlan, c.plan_estimate, plan_q95),
    };
    let reason = match (&c.simulated, profile) {
        (_, None) => "no held-out record (no data folder, or no rows of this profile): the six-factor plan decides with the factors file's q95".to_string(),
        (Err(why), Some(_)) => format!("the simulator does not cover this job ({why})"),
        (Ok(_), Some(_)) => match (record(Decider::SixFactorPlan), record(Decider::Simulator)) {
            (Some(p), Some(s)) if method == Decider::Simulator => format!(
                "the simulator's held-out record on {} is better ({}) than the six-factor plan's held out by implementation ({})",
                c.precision, record_text(s), record_text(p)
            ),
            (Some(p), Some(s)) => format!(
                "the six-factor plan's record held out by implementation on {} ({}) is at least as good as the simulator's ({})",
                c.precision, record_text(p), record_text(s)
            ),
            _ => "the simulator has no record on this profile".to_string(),
        },
    };
    let own_bound = bound(estimate, q95, c.bound_floor);
    let range = profile.and_then(|p| p.range.as_ref()).map(|r| RangeCheck {
        outside: r.outside(c.parameters, estimate, &c.features),
        fitted: r.clone(),
    });
    let outside = range.as_ref().is_some_and(|r| !r.outside.is_empty());
    let sim_bound = sim.zip(sim_q95).map(|(e, q)| bound(e, q, c.bound_floor));
    let (bound_bytes, widened, refused) = match (outside, sim_bound) {
        (false, _) => (own_bound, false, None),
        (true, Some(sb)) => (sb.max(plan_bound), sb.max(plan_bound) > own_bound, None),
        (true, None) => (
            own_bound,
            false,
            Some("outside the range of the rows the six-factor plan was fitted on, and no other method covers the job".to_string()),
        ),
    };
    Decision {
        method,
        reason,
        estimate_bytes: estimate,
        bound_bytes,
        q95,
        records: profile.map_or(Vec::new(), |p| p.records.clone()),
        range,
        bound_widened: widened,
        refused,
    }
}

/// The deciding method's verdict on a card of `card` bytes; `reserved` against `reservable`
/// where the simulator replays the allocator.
fn decided_verdict(
    d: &Decision,
    headroom: f64,
    floor: u64,
    card: u64,
    reserved: Option<(u64, u64)>,
) -> Decided {
    if d.refused.is_some() {
        return if floor as f64 * (1.0 + headroom) > card as f64 {
            Decided::DoesNotFit
        } else {
            Decided::Refused
        };
    }
    if reserved.is_some_and(|(r, room)| r > room) {
        return Decided::DoesNotFit;
    }
    match bound_verdict(d.estimate_bytes, d.bound_bytes, headroom, card) {
        Verdict::Fits => Decided::Fits,
        Verdict::Borderline => Decided::Borderline,
        Verdict::DoesNotFit => Decided::DoesNotFit,
    }
}

/// The one-line explanation of a plan's verdict.
fn why_line(p: &Plan, floor_lifts: bool) -> String {
    let d = &p.decision;
    let approximate = match p.approximations.len() {
        0 => String::new(),
        n => format!(
            "approximate graph ({n} approximation{}); ",
            if n == 1 { "" } else { "s" }
        ),
    };
    let mut s = format!(
        "{approximate}{} decides: estimate {}, bound {} ({})",
        d.method.label(),
        gb(d.estimate_bytes),
        gb(d.bound_bytes),
        if d.bound_widened {
            "the larger of both methods' bounds".to_string()
        } else if d.bound_bytes > d.estimate_bytes * d.q95 {
            "the bound floor".to_string()
        } else {
            format!("x{:.2}, its own held-out q95", d.q95)
        }
    );
    if floor_lifts {
        s.push_str("; the phase floor lifts the estimate (weights, gradients and AdamW states)");
    }
    if let Some(r) = &d.range {
        let parts: Vec<String> = r
            .outside
            .iter()
            .filter(|o| !o.what.starts_with("share"))
            .map(|o| {
                let side = if o.value > o.high { "above" } else { "below" };
                format!("{} {:.1}x {side} the fitted rows'", o.what, o.by)
            })
            .collect();
        let shares = r.outside.len() - parts.len();
        let mut all = parts;
        if shares > 0 {
            all.push(format!(
                "{shares} feature share{} beyond theirs",
                if shares == 1 { "" } else { "s" }
            ));
        }
        if !all.is_empty() {
            s.push_str(&format!("; outside the fitted range: {}", all.join(", ")));
        }
    }
    if let Some(why) = &d.refused {
        s.push_str(&format!("; refused: {why}"));
    }
    match (&p.smallest_card_verdict, &p.shortfall) {
        (Some(c), _) => s.push_str(&format!(
            "; fits {} ({} usable)",
            c.name,
            gb(c.bytes as f64)
        )),
        (None, Some(sf)) => s.push_str(&format!(
            "; fits no card: needs {}, the largest ({}) is {} short",
            gb(sf.needed_bytes as f64),
            sf.largest_card.name,
            gb(sf.short_by_bytes as f64)
        )),
        (None, None) if p.cards.iter().any(|v| v.verdict == Decided::Borderline) => {
            let c = p
                .cards
                .iter()
                .filter(|v| v.verdict == Decided::Borderline)
                .min_by_key(|v| v.card.bytes)
                .map_or(String::new(), |v| v.card.name.clone());
            s.push_str(&format!(
                "; no card fits with the bound: borderline from {c} up (the estimate fits, the bound does not)"
            ))
        }
        (None, None) => s.push_str("; no verdict on any card that holds the phase floor"),
    }
    s
}

/// [`plan`] with the simulation already run (so `plan --timeline` simulates once) and, from
/// a data folder, the methods' held-out records, the fitted range and the real cards.
pub fn plan_with_simulation(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    factors: &FactorsFile,
    cards: Cards,
    sim: &Result<crate::simulate::Simulation, String>,
    evidence: Option<&Evidence>,
) -> Result<Plan, String> {
    let f = factors.factors(precision).ok_or_else(|| {
        format!(
            "has no factors for precision `{precision}` (profiles present: {}); pass \
                 --precision one of them, or fit that profile",
            factors
                .profiles
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let feats = features::features(graph, batch, precision);
    let floor = phase_floor(graph, precision);
    let linear = estimate(f, &feats);
    let est = linear.max(floor.bytes as f64);
    let q95 = factors.upper_for(precision).q95;
    let b = bound(est, q95, factors.bound_floor_bytes);
    let simulated = sim.as_ref().map_err(Clone::clone).map(SimulatedPeak::of);
    let reserved = simulated
        .as_ref()
        .ok()
        .and_then(|s| s.reserved.as_ref())
        .map(|r| r.bytes);
    let decision = decide(&Candidates {
        precision,
        evidence,
        plan_estimate: est,
        file_q95: q95,
        simulated: simulated
            .as_ref()
            .map(|s| (s.bytes as f64).max(floor.bytes as f64))
            .map_err(Clone::clone),
        bound_floor: factors.bound_floor_bytes,
        parameters: graph.parameters(),
        features: feats.as_array(),
    });
    let floor_lifts = match decision.method {
        Decider::SixFactorPlan => (floor.bytes as f64) > linear,
        Decider::Simulator => simulated.as_ref().is_ok_and(|s| s.bytes < floor.bytes),
    };
    let seed = cards.seed.iter().map(|c| (c.clone(), None));
    let real = cards.real.iter().map(|r| (r.card(), Some(r.clone())));
    let verdicts: Vec<CardVerdict> = seed
        .chain(real)
        .map(|(c, product)| {
            let room = product.as_ref().map_or(c.bytes, |p| p.reservable_bytes);
            CardVerdict {
                verdict: decided_verdict(
                    &decision,
                    factors.headroom,
                    floor.bytes,
                    c.bytes,
                    reserved.map(|r| (r, room)),
                ),
                plan_fits: plan_fits(est, factors.headroom, c.bytes),
                bound: bound_verdict(est, b, factors.headroom, c.bytes),
                simulated_reserved_fits: reserved.map(|r| r <= room),
                card: c,
                product,
            }
        })
        .collect();
    // With real products, the smallest card named is a real one (the seed cards are there
    // for comparison).
    let real_only = verdicts.iter().any(|v| v.product.is_some());
    let smallest = |keep: &dyn Fn(&CardVerdict) -> bool| {
        verdicts
            .iter()
            .filter(|v| keep(v) && (v.product.is_some() || !real_only))
            .min_by_key(|v| v.card.bytes)
            .map(|v| v.card.clone())
    };
    let shortfall = if verdicts.iter().any(|v| v.verdict != Decided::DoesNotFit) {
        None
    } else {
        verdicts.iter().max_by_key(|v| v.card.bytes).map(|v| {
            let needed = (decision.estimate_bytes * (1.0 + factors.headroom)).ceil() as u64;
            Shortfall {
                largest_card: v.card.clone(),
                needed_bytes: needed,
                short_by_bytes: needed.saturating_sub(v.card.bytes),
                floor_exceeds_card: floor.bytes as f64 * (1.0 + factors.headroom)
                    > v.card.bytes as f64,
            }
        })
    };
    let mut p = Plan {
        format: PLAN_FORMAT,
        graph: graph.name.clone(),
        family: graph.family.clone(),
        batch,
        precision,
        parameters: graph.parameters(),
        has_batch_axis: graph.has_batch_axis(),
        features: feats,
        factors: *f,
        factors_borrowed_from: factors
            .profiles
            .get(precision.as_str())
            .and_then(|p| p.borrowed_from.clone()),
        estimate_bytes: est,
        linear_estimate_bytes: linear,
        floor,
        floor_decides: (floor.bytes as f64) > linear,
        headroom: factors.headroom,
        q95,
        bound_bytes: b,
        smallest_card_verdict: smallest(&|v| v.verdict == Decided::Fits),
        smallest_card: smallest(&|v| v.plan_fits),
        smallest_card_bound: smallest(&|v| v.bound == Verdict::Fits),
        decision,
        why: String::new(),
        shortfall,
        cards: verdicts,
        accelerate: baselines::accelerate(graph, precision),
        textbook: baselines::textbook(graph, batch),
        simulated,
        approximations: approximations(graph),
    };
    p.why = why_line(&p, floor_lifts);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_rules() {
        let gb = 1_000_000_000u64;
        // estimate 10 GB, bound 14.3 GB, headroom 0.15: 16 GB card -> borderline (14.3*1.15 > 16).
        let b = bound(10e9, 1.43, gb);
        assert_eq!(bound_verdict(10e9, b, 0.15, 16 * gb), Verdict::Borderline);
        assert_eq!(bound_verdict(10e9, b, 0.15, 24 * gb), Verdict::Fits);
        assert_eq!(bound_verdict(10e9, b, 0.15, 8 * gb), Verdict::DoesNotFit);
        assert!(plan_fits(10e9, 0.15, 16 * gb));
        assert!(!plan_fits(14e9, 0.15, 16 * gb));
        // The floor: a tiny job is bounded at 1 GB.
        assert_eq!(bound(1e6, 1.43, gb), 1e9);
    }
}
