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

/// One card's verdicts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardVerdict {
    pub card: Card,
    pub plan_fits: bool,
    pub bound: Verdict,
}

/// Everything `memcal plan` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub graph: String,
    pub family: String,
    pub batch: u64,
    pub precision: Precision,
    pub parameters: u64,
    pub has_batch_axis: bool,
    pub features: Features,
    pub factors: [f64; N_FEATURES],
    pub estimate_bytes: f64,
    pub headroom: f64,
    pub q95: f64,
    pub bound_bytes: f64,
    pub cards: Vec<CardVerdict>,
    /// Smallest card the plan alone fits.
    pub smallest_card: Option<Card>,
    /// Smallest card the bound fits.
    pub smallest_card_bound: Option<Card>,
    pub accelerate: Accelerate,
    pub textbook: Result<Textbook, String>,
    /// The simulator's peak and where it falls (no fitted factor), or why it has no rules yet.
    pub simulated: Result<SimulatedPeak, String>,
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
    let sim = crate::simulate::simulate(graph, batch, precision);
    plan_with_simulation(graph, batch, precision, factors, cards, &sim)
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
    let f =
        factors.factors(precision).ok_or_else(|| {
            format!(
            "data/factors.json has no factors for precision `{precision}`; profiles present: {}",
            factors.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        )
        })?;
    let feats = features::features(graph, batch, precision);
    let est = estimate(f, &feats);
    let q95 = factors.upper_for(precision).q95;
    let b = bound(est, q95, factors.bound_floor_bytes);
    let verdicts: Vec<CardVerdict> = cards
        .iter()
        .map(|c| CardVerdict {
            card: c.clone(),
            plan_fits: plan_fits(est, factors.headroom, c.bytes),
            bound: bound_verdict(est, b, factors.headroom, c.bytes),
        })
        .collect();
    Ok(Plan {
        graph: graph.name.clone(),
        family: graph.family.clone(),
        batch,
        precision,
        parameters: graph.parameters(),
        has_batch_axis: graph.has_batch_axis(),
        features: feats,
        factors: *f,
        estimate_bytes: est,
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
        cards: verdicts,
        accelerate: baselines::accelerate(graph, precision),
        textbook: baselines::textbook(graph, batch),
        simulated: sim.as_ref().map_err(Clone::clone).map(SimulatedPeak::of),
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
