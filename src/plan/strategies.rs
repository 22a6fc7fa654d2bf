//! `memcal plan --strategy` and `--recommend`: the per-device peak of a strategy from the plain
//! plan's terms ([`crate::strategy::memory`]), its verdict per card, and per card the cheapest strategy
//! that fits ([`recommend`]).

use super::decide::Plan;
use crate::factors::Card;
use crate::features::Precision;
use crate::graph::Graph;
use crate::strategy::evidence::RowCounts;
use crate::strategy::memory::{self, GraphTerms, Terms};
use crate::strategy::{cost_key, def, parse, Kind, Strategy};
use serde::Serialize;

/// The format tag of `memcal plan --strategy/--recommend --json` (docs/strategies.md).
pub const STRATEGY_PLAN_FORMAT: &str = "memcal-strategy-plan/1";

/// How a part's number is backed, in words: "measured on CPU: N rows", "measured on CPU
/// (gloo): N rows, one a rank", "formula, not measured" (with why, where a protocol exists).
pub fn evidence_label(kind: Kind, rows: &RowCounts) -> String {
    let n = rows.get(&kind).copied().unwrap_or(0);
    match (def(kind).backing, n) {
        (crate::strategy::Backing::MeasuredCpu, n) if n > 0 => format!("measured on CPU: {n} rows"),
        (crate::strategy::Backing::MeasuredGloo, n) if n > 0 => {
            format!("measured on CPU (gloo): {n} rows, one a rank")
        }
        (crate::strategy::Backing::MeasuredGloo, _) => {
            "formula, not measured (python3 -m memcal_export.ranks measures it per rank; no rows in the data folder)"
                .to_string()
        }
        (crate::strategy::Backing::Formula, _) => {
            format!(
                "formula, not measured ({})",
                crate::strategy::unmeasured_why(kind)
            )
        }
        _ => "formula, not measured (the harness has a protocol; no rows in the data folder)"
            .to_string(),
    }
}

/// One part of a planned strategy, with its table row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartInfo {
    pub spec: String,
    pub evidence: String,
    /// The formula's held-out record on the rows measured with this strategy alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<crate::strategy::evidence::Record>,
    pub effect: &'static str,
    pub formula: &'static str,
    pub cost: u8,
    pub cost_why: &'static str,
}

/// The evidence a plan draws on: the rows per kind and each strategy's held-out record.
#[derive(Debug, Clone, Default)]
pub struct Backing {
    pub counts: RowCounts,
    pub evidence: Option<crate::strategy::evidence::Evidence>,
}

impl Backing {
    pub fn of(e: Option<crate::strategy::evidence::Evidence>) -> Backing {
        Backing {
            counts: e.as_ref().map(|e| e.counts()).unwrap_or_default(),
            evidence: e,
        }
    }

    /// How one part is backed, in words. A part measured per rank counts the rows of its own
    /// group (`deepspeed zero1 (gloo)` apart from torch's `zero1 (gloo)`, each FSDP version and
    /// setting, each pipeline schedule): "measured on CPU (gloo): 36 rows of deepspeed zero2
    /// (gloo), one a rank; NCCL not measured"; with none, "formula, not measured" and why.
    pub fn label(&self, part: &crate::strategy::Part, precision: Precision) -> String {
        if def(part.kind).backing != crate::strategy::Backing::MeasuredGloo {
            let name = crate::strategy::evidence::part_group(part);
            let own = format!("{name} ({precision})");
            let on_gpu = self
                .evidence
                .as_ref()
                .and_then(|e| e.strategies.iter().find(|g| g.strategy == own));
            return match on_gpu {
                Some(g) if precision != Precision::Fp32 => format!(
                    "measured on a GPU at {precision}: {} rows of {own}; {}",
                    g.all.completed,
                    evidence_label(part.kind, &self.counts)
                ),
                _ => evidence_label(part.kind, &self.counts),
            };
        }
        let gloo = crate::strategy::evidence::rank_group(part, "gloo");
        let measured = self
            .evidence
            .as_ref()
            .and_then(|e| e.strategies.iter().find(|g| g.strategy == gloo));
        match measured {
            Some(g) => format!(
                "measured on CPU (gloo): {} rows of {gloo}, one a rank; NCCL not measured",
                g.all.completed
            ),
            None => format!(
                "formula, not measured (no rows of {gloo} in the data folder; python3 -m memcal_export.ranks measures it per rank)"
            ),
        }
    }

    /// The held-out record of one part measured alone: its rows measured per rank (gloo)
    /// first, else its group's.
    fn record(
        &self,
        part: &crate::strategy::Part,
        precision: Precision,
    ) -> Option<&crate::strategy::evidence::Record> {
        self.group(part, precision).map(|s| &s.all)
    }

    /// The evidence group of one part measured alone: per rank with gloo first, then the
    /// job's precision's own rows (`lora (bf16)`: LoRA over a bf16 base), then the part's.
    pub fn group(
        &self,
        part: &crate::strategy::Part,
        precision: Precision,
    ) -> Option<&crate::strategy::evidence::StrategyEvidence> {
        use crate::strategy::evidence::{part_group, rank_group};
        let all = &self.evidence.as_ref()?.strategies;
        let gloo = rank_group(part, "gloo");
        let name = part_group(part);
        let own = (precision != Precision::Fp32).then(|| format!("{name} ({precision})"));
        all.iter()
            .find(|s| s.strategy == gloo)
            .or_else(|| {
                own.as_ref()
                    .and_then(|o| all.iter().find(|s| &s.strategy == o))
            })
            .or_else(|| all.iter().find(|s| s.strategy == name))
    }
}

/// A verdict on one card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardFit {
    pub card: Card,
    /// `fits`, `borderline` or `does-not-fit`, as the plain plan's bound verdict.
    pub verdict: super::decide::Verdict,
}

/// A published estimator's figure, for comparison (never the plan).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub what: String,
    pub bytes: u64,
}

/// One strategy planned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyPlan {
    pub strategy: String,
    pub parts: Vec<PartInfo>,
    /// Devices the job needs (data parallel x tensor parallel x pipeline stages).
    pub devices: u64,
    /// Per device.
    pub terms: Terms,
    pub estimate_bytes: u64,
    /// The larger of the plain plan's q95 and the measured parts' own held-out q95.
    pub q95: f64,
    /// max(bound floor, estimate x q95).
    pub bound_bytes: u64,
    pub cards: Vec<CardFit>,
    pub comparisons: Vec<Comparison>,
    /// The simulator's per-device peak under the strategy, where its rule set is clearly more
    /// accurate than the formula on every part's rows ([`simulator_preferred`]); shown beside
    /// the estimate, not deciding the verdicts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated: Option<SimulatedPeak>,
    /// Why there is no simulated peak where the rule set would be preferred (bf16-autocast).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_unavailable: Option<String>,
}

/// The simulator's peak of a strategy plan, with the held-out records behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimulatedPeak {
    pub bytes: u64,
    /// The phase and op of the peak (`step2.backward`, `layers0.self_attn`).
    pub phase: String,
    pub node: String,
    /// A multi-process strategy: the rank whose peak this is, the worst of them.
    pub rank: Option<u64>,
    /// A pipeline: every stage's simulated peak, in stage order (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::simulate::RankPeak>,
    /// Per part: (strategy, the simulator's record, the formula's record) on its rows.
    pub evidence: Vec<(
        String,
        crate::strategy::evidence::Record,
        crate::strategy::evidence::Record,
    )>,
    /// What the simulation assumes beyond its measured record (the collective backend where
    /// the rule set tells them apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Whether the simulator's rule set is clearly more accurate than the formula for every part
/// of `s`: each part has rows of its own with a simulator record whose median and max |error|
/// are both below half the formula's. The records, per part; None otherwise.
pub fn simulator_preferred(
    s: &Strategy,
    backing: &Backing,
    precision: Precision,
) -> Option<
    Vec<(
        String,
        crate::strategy::evidence::Record,
        crate::strategy::evidence::Record,
    )>,
> {
    if s.parts.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for p in &s.parts {
        let name = def(p.kind).name;
        let st = backing.group(p, precision)?;
        let sim = st.simulator.as_ref()?;
        let clearly = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => a < b / 2.0,
            _ => false,
        };
        if !(clearly(sim.median_abs_error, st.all.median_abs_error)
            && clearly(sim.max_abs_error, st.all.max_abs_error))
        {
            return None;
        }
        out.push((name.to_string(), sim.clone(), st.all.clone()));
    }
    Some(out)
}

/// What every strategy plan of one job shares: the plain plan's numbers and the assumptions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Base {
    pub format: &'static str,
    pub graph: String,
    pub batch: u64,
    pub precision: crate::features::Precision,
    pub parameters: u64,
    /// The plain plan's deciding method and its estimate.
    pub plain_method: String,
    pub plain_estimate_bytes: u64,
    /// A = plain estimate - 16 x parameters (never below zero).
    pub plain_activations_bytes: u64,
    pub q95: f64,
    pub headroom: f64,
    pub graph_terms: GraphTerms,
    pub assumptions: Vec<String>,
}

/// The assumptions every strategy plan prints.
fn assumptions(q95: f64) -> Vec<String> {
    vec![
        "--batch is the batch a device runs (a data-parallel job runs it on every device); pipeline micro-batches split it".to_string(),
        "fp32 weights, gradients and AdamW states as the harness trains (bf16 autocast changes the activations only), bf16 ones under --precision bf16 (LoRA and QLoRA adapters float32 over a bf16 base, as peft makes them); 8-bit and 4-bit states where the strategy says".to_string(),
        "A (activations and transients) = the simulator's plain peak less the model state (16 bytes a parameter; 8 in pure bf16), or, where the six-factor plan decides the plain step, its activation terms (every factor x feature but model_state's); each strategy's formula transforms it".to_string(),
        format!("bound = estimate x the larger of {q95:.2} (the plain plan's bound over its estimate: the deciding method's held-out q95, widened as `memcal plan` widens it outside the fitted range) and each measured part's own held-out q95 (measured / formula on its CPU rows); fits when bound x (1 + headroom) <= card, as `memcal plan` decides"),
        "blocks are read from node ids (`layers0`, `h3`, `encoder.layer1`); LoRA/QLoRA target every linear, attention and MoE projection matrix inside them".to_string(),
    ]
}

/// The plain plan's bound over its estimate: the deciding method's held-out q95, or, where the
/// plan widens its bound outside the fitted range, the widened ratio. Every mode multiplies by
/// it, so `--recommend` and `--strategy` decide plain training as `memcal plan` does.
pub fn bound_ratio(plain: &Plan) -> f64 {
    let d = &plain.decision;
    if d.bound_widened && d.estimate_bytes > 0.0 {
        (d.bound_bytes / d.estimate_bytes).max(d.q95)
    } else {
        d.q95
    }
}

/// The base of a job's strategy plans, from its plain plan.
pub fn base(graph: &Graph, plain: &Plan) -> Base {
    let p = graph.parameters();
    let est = plain.decision.estimate_bytes;
    let b_state = plain.precision.state_bytes_per_parameter() as f64;
    let ratio = bound_ratio(plain);
    Base {
        format: STRATEGY_PLAN_FORMAT,
        graph: graph.name.clone(),
        batch: plain.batch,
        precision: plain.precision,
        parameters: p,
        plain_method: plain.decision.method.label().to_string(),
        plain_estimate_bytes: est.ceil() as u64,
        plain_activations_bytes: match plain.decision.method {
            // The six-factor plan's own activation terms: its estimate less the model state
            // would count what its model_state factor leaves out (or the floor's optimizer
            // temporaries) as activations.
            super::evidence::Decider::SixFactorPlan => {
                super::decide::activation_terms(&plain.factors, &plain.features)
            }
            super::evidence::Decider::Simulator => (est - b_state * p as f64).max(0.0),
        }
        .ceil() as u64,
        q95: ratio,
        headroom: plain.headroom,
        graph_terms: memory::graph_terms(graph, plain.batch),
        assumptions: assumptions(ratio),
    }
}

/// Refuses a strategy the job cannot run (tp not dividing the heads; pipeline micro-batches not
/// dividing the batch, fewer than the stages under 1F1B, more stages than blocks).
pub fn check_job(s: &Strategy, b: &Base) -> Result<(), String> {
    if let (Some(tp), Some(heads)) = (s.part(Kind::Tp), b.graph_terms.heads) {
        let k = tp.get("k");
        if heads % k != 0 {
            return Err(format!(
                "`{s}`: tp over {k} ranks for an attention of {heads} (key/value) heads: tensor parallel gives every rank whole heads; give tp a k that divides {heads}"
            ));
        }
    }
    if let Some(pp) = s.part(Kind::Pp) {
        let (micro, stages) = (pp.get("micro"), pp.get("stages"));
        // (A micro above the batch does not divide it either.)
        if !b.batch.is_multiple_of(micro) {
            return Err(format!(
                "`{s}`: {micro} micro-batches of a batch of {}: give pp a micro that divides the batch (the schedule splits it into equal micro-batches)",
                b.batch
            ));
        }
        if pp.word("schedule") == "1f1b" && micro < stages {
            return Err(format!(
                "`{s}`: 1F1B with {micro} micro-batches over {stages} stages: torch's Schedule1F1B needs at least as many micro-batches as stages; give micro >= {stages} or schedule=gpipe"
            ));
        }
        if stages > b.graph_terms.blocks.max(1) {
            return Err(format!(
                "`{s}`: {stages} pipeline stages for {} blocks: give at most one stage a block",
                b.graph_terms.blocks
            ));
        }
    }
    Ok(())
}

/// Plans one strategy against the cards.
pub fn plan_strategy(
    b: &Base,
    s: &Strategy,
    cards: &[Card],
    backing: &Backing,
    bound_floor: u64,
) -> StrategyPlan {
    let terms = memory::strategy_terms(
        &b.graph_terms,
        b.plain_activations_bytes as f64,
        s,
        b.precision,
    );
    let est = terms.total();
    // The larger of the plain q95 and each measured part's own held-out q95.
    let q95 = s
        .parts
        .iter()
        .filter_map(|p| backing.record(p, b.precision).and_then(|r| r.q95))
        .fold(b.q95, f64::max);
    let bound = (est * q95).max(bound_floor as f64);
    let cards = cards
        .iter()
        .map(|c| CardFit {
            card: c.clone(),
            verdict: super::decide::bound_verdict(est, bound, b.headroom, c.bytes),
        })
        .collect();
    StrategyPlan {
        strategy: s.spec(),
        parts: s
            .parts
            .iter()
            .map(|p| {
                let d = def(p.kind);
                PartInfo {
                    spec: p.to_string(),
                    evidence: backing.label(p, b.precision),
                    record: backing.record(p, b.precision).cloned(),
                    effect: d.effect,
                    formula: d.formula,
                    cost: d.cost,
                    cost_why: d.cost_why,
                }
            })
            .collect(),
        devices: s.devices(),
        q95,
        estimate_bytes: est.ceil() as u64,
        bound_bytes: bound.ceil() as u64,
        cards,
        comparisons: comparisons(b, s),
        terms,
        simulated: None,
        simulated_unavailable: None,
    }
}

/// DeepSpeed's estimators and the ZeRO paper's formulas for a ZeRO strategy (model states only).
fn comparisons(b: &Base, s: &Strategy) -> Vec<Comparison> {
    let (p, n) = (b.parameters, s.data_parallel());
    let g = &b.graph_terms;
    let mut v = Vec::new();
    let mut add = |what: &str, bytes: u64| {
        v.push(Comparison {
            what: what.to_string(),
            bytes,
        })
    };
    if s.has(Kind::Zero1) {
        add(
            "ZeRO paper P_os, mixed precision (4P + 12P/N)",
            memory::zero_paper(1, p, n),
        );
    }
    if s.has(Kind::Zero2) {
        add(
            "DeepSpeed estimate_zero2_model_states_mem_needs, code (4P + 16P/N)",
            memory::deepspeed_zero2(p, n),
        );
        add(
            "DeepSpeed memory docs, ZeRO-2 (2P + 16P/N)",
            memory::deepspeed_zero2_docs(p, n),
        );
        add(
            "ZeRO paper P_os+g, mixed precision (2P + 14P/N)",
            memory::zero_paper(2, p, n),
        );
    }
    if s.has(Kind::Zero3) || s.has(Kind::Fsdp) {
        add(
            "DeepSpeed estimate_zero3_model_states_mem_needs (4 x largest layer + 18P/N)",
            memory::deepspeed_zero3(p, g.largest_layer, n),
        );
        add(
            "ZeRO paper P_os+g+p, mixed precision (16P/N)",
            memory::zero_paper(3, p, n),
        );
    }
    v
}

/// The strategies `--recommend` tries, cheapest first ([`cost_key`]).
pub fn candidates() -> Vec<Strategy> {
    let mut specs: Vec<String> = [
        "plain",
        "checkpoint",
        "adam8bit",
        "checkpoint+adam8bit",
        "lora:r=8",
        "checkpoint+lora:r=8",
        "qlora:r=8",
        "checkpoint+qlora:r=8",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for n in [2u64, 4, 8, 16, 32, 64] {
        for s in [
            "zero1:world={n}",
            "zero2:world={n}",
            "zero3:world={n}",
            "checkpoint+zero3:world={n}",
            "checkpoint+zero3:world={n}+lora:r=8",
        ] {
            specs.push(s.replace("{n}", &n.to_string()));
        }
        if n <= 8 {
            specs.push(format!("tp:{n}"));
            specs.push(format!("checkpoint+tp:{n}"));
        }
    }
    let mut v: Vec<Strategy> = specs
        .iter()
        .map(|s| parse(s).expect("the candidate specs parse"))
        .collect();
    v.sort_by_key(cost_key);
    v
}

/// Per card, the cheapest candidate that fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    pub card: Card,
    /// None: no candidate fits this card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<StrategyPlan>,
    /// The cheapest candidate before it (in cost order) whose estimate fits the card but whose
    /// bound does not: borderline, worth measuring once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub borderline: Option<StrategyPlan>,
}

/// `--recommend`: per card, the first candidate (in [`cost_key`] order) whose verdict is fits.
pub fn recommend(
    b: &Base,
    cards: &[Card],
    backing: &Backing,
    bound_floor: u64,
) -> Vec<Recommendation> {
    let plans: Vec<StrategyPlan> = candidates()
        .iter()
        .filter(|s| check_job(s, b).is_ok())
        .map(|s| plan_strategy(b, s, cards, backing, bound_floor))
        .collect();
    cards
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let fits = plans
                .iter()
                .position(|p| p.cards[i].verdict == super::decide::Verdict::Fits);
            let on_card = |p: &StrategyPlan| StrategyPlan {
                cards: vec![p.cards[i].clone()],
                ..p.clone()
            };
            Recommendation {
                card: c.clone(),
                plan: fits.map(|k| on_card(&plans[k])),
                borderline: plans[..fits.unwrap_or(plans.len())]
                    .iter()
                    .find(|p| p.cards[i].verdict == super::decide::Verdict::Borderline)
                    .map(on_card),
            }
        })
        .collect()
}

/// The order of cost, in words (printed by `--recommend` and `--help`).
pub const COST_ORDER: &str = "cheapest first: fewer devices first (a strategy over N devices needs N of them); on the same devices plain < checkpoint (recomputes each segment's forward, about 1/3 more compute) < adam8bit (approximate optimizer numerics) < lora (changes what is trained) < qlora (lora on a 4-bit base) < zero1 < zero2 < zero3 = fsdp (more communication each stage) < tp (an all-reduce in every block) < pp (the pipeline bubble); then fewer combined parts";
