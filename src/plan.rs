//! The plan: estimate = Σ factor_i x feature_i, the bound max(floor, estimate x q95), and the
//! verdict per card.

use crate::baselines::{self, Accelerate, Textbook};
use crate::factors::{Card, FactorsFile};
use crate::features::{self, Features, Precision, N_FEATURES};
use crate::graph::Graph;
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
/// every trainable parameter; a formula from the protocol, no fitted factor): float32 weights,
/// gradients and both Adam states (16 bytes a parameter, the `model_state` feature) and, while
/// the largest parameter is updated, libtorch's AdamW temporaries for it
/// ([`crate::simulate::rules::adamw_transient`]). Under bf16 autocast the weights and the
/// optimizer stay float32 and the autocast cache is empty outside the autocast region, so the
/// floor is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhaseFloor {
    pub bytes: u64,
    /// 16 bytes x parameters.
    pub model_state: u64,
    /// The AdamW temporaries of the largest parameter tensor.
    pub optimizer_temporaries: u64,
    pub largest_parameter_bytes: u64,
}

/// The phase floor of a graph (see [`PhaseFloor`]).
pub fn phase_floor(graph: &Graph) -> PhaseFloor {
    let largest = graph
        .nodes
        .iter()
        .flat_map(|n| n.op.parameter_tensors())
        .map(|dims| dims.iter().fold(1u64, |a, d| a.saturating_mul(*d)))
        .max()
        .unwrap_or(0)
        .saturating_mul(4);
    let model_state = graph.parameters().saturating_mul(16);
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
    pub plan: Option<u64>,
    pub bound: Option<u64>,
}

/// The largest batch `max_batch` tries.
pub const MAX_BATCH_SEARCHED: u64 = 1 << 24;

/// The largest batch in 1..=MAX_BATCH_SEARCHED for which `fits(batch)` holds, given that it
/// holds for every batch below one that holds (the features grow with the batch).
fn largest_batch(fits: impl Fn(u64) -> bool) -> Option<u64> {
    if !fits(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, MAX_BATCH_SEARCHED);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

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
    let floor = phase_floor(graph).bytes;
    let q95 = factors.upper_for(precision).q95;
    let est = |b: u64| estimate_floored(f, &features::features(graph, b, precision), floor);
    Ok(cards
        .iter()
        .map(|c| MaxBatch {
            card: c.clone(),
            plan: largest_batch(|b| plan_fits(est(b), factors.headroom, c.bytes)),
            bound: largest_batch(|b| {
                let e = est(b);
                let bd = bound(e, q95, factors.bound_floor_bytes);
                bound_verdict(e, bd, factors.headroom, c.bytes) == Verdict::Fits
            }),
        })
        .collect())
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
    pub card: Card,
    pub plan_fits: bool,
    pub bound: Verdict,
    /// CUDA: whether the simulator's reserved peak (the caching allocator's segments, what
    /// exhausts a card) is within the card; absent where there is no allocator replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_reserved_fits: Option<bool>,
}

/// The format tag of `memcal plan --json` (documented in `docs/hardening.md`).
pub const PLAN_FORMAT: &str = "memcal-plan/1";

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
    pub cards: Vec<CardVerdict>,
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

/// Plans a graph at a batch and precision against the factors file's cards (or `cards`).
pub fn plan(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    factors: &FactorsFile,
    cards: &[Card],
) -> Result<Plan, String> {
    let sim = crate::simulate::simulate_peak(graph, batch, precision);
    plan_with_simulation(graph, batch, precision, factors, cards, &sim)
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

/// [`plan`] with the simulation already run (so `plan --timeline` simulates once).
pub fn plan_with_simulation(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    factors: &FactorsFile,
    cards: &[Card],
    sim: &Result<crate::simulate::Simulation, String>,
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
    let floor = phase_floor(graph);
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
    let verdicts: Vec<CardVerdict> = cards
        .iter()
        .map(|c| CardVerdict {
            card: c.clone(),
            plan_fits: plan_fits(est, factors.headroom, c.bytes),
            bound: bound_verdict(est, b, factors.headroom, c.bytes),
            simulated_reserved_fits: reserved.map(|r| r <= c.bytes),
        })
        .collect();
    Ok(Plan {
        format: PLAN_FORMAT,
        graph: graph.name.clone(),
        family: graph.family.clone(),
        batch,
        precision,
        parameters: graph.parameters(),
        has_batch_axis: graph.has_batch_axis(),
        features: feats,
        factors: *f,
        estimate_bytes: est,
        linear_estimate_bytes: linear,
        floor,
        floor_decides: (floor.bytes as f64) > linear,
        headroom: factors.headroom,
        q95,
        bound_bytes: b,
        smallest_card: verdicts
            .iter()
            .find(|v| v.plan_fits)
            .map(|v| v.card.clone()),
        smallest_card_bound: verdicts
            .iter()
            .find(|v| v.bound == Verdict::Fits)
            .map(|v| v.card.clone()),
        shortfall: if verdicts.iter().any(|v| v.plan_fits) {
            None
        } else {
            cards.iter().max_by_key(|c| c.bytes).map(|c| {
                let needed = (est * (1.0 + factors.headroom)).ceil() as u64;
                Shortfall {
                    largest_card: c.clone(),
                    needed_bytes: needed,
                    short_by_bytes: needed.saturating_sub(c.bytes),
                    floor_exceeds_card: floor.bytes as f64 * (1.0 + factors.headroom)
                        > c.bytes as f64,
                }
            })
        },
        cards: verdicts,
        accelerate: baselines::accelerate(graph, precision),
        textbook: baselines::textbook(graph, batch),
        simulated,
    })
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
