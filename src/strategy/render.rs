//! Text rendering of strategy plans, recommendations and inference plans (formatting only).

use super::memory::{CacheLength, Inference};
use crate::factors::Card;
use crate::format::count;
use crate::plan::strategies::{Base, Recommendation, StrategyPlan, COST_ORDER};
use crate::units::{both, gb};
use std::collections::BTreeSet;
use std::fmt::Write;

fn header(s: &mut String, b: &Base) {
    let _ = writeln!(
        s,
        "graph       {}  batch {}  precision {}  parameters {}",
        b.graph,
        b.batch,
        b.precision,
        count(b.parameters)
    );
    let _ = writeln!(
        s,
        "plain       {} ({}); A = {} {}",
        both(b.plain_estimate_bytes as f64),
        b.plain_method,
        gb(b.plain_activations_bytes as f64),
        if b.plain_method == crate::plan::evidence::Decider::SixFactorPlan.label() {
            "(its activation terms)".to_string()
        } else {
            format!(
                "beyond {} bytes a parameter",
                b.precision.state_bytes_per_parameter()
            )
        }
    );
}

fn assumptions(s: &mut String, b: &Base) {
    let _ = writeln!(s, "\nassumptions");
    for a in &b.assumptions {
        let _ = writeln!(s, "  - {a}");
    }
}

/// The smallest of `cards` that `keep` accepts, among the `real` cards (the products) where
/// there are any: the seed cards are listed for comparison, as `memcal plan` names its
/// smallest card.
fn smallest<'c, T>(
    cards: impl Iterator<Item = (&'c Card, T)>,
    real: &BTreeSet<String>,
    keep: impl Fn(&T) -> bool,
) -> Option<(&'c Card, T)> {
    cards
        .filter(|(c, t)| keep(t) && (real.is_empty() || real.contains(&c.name)))
        .min_by_key(|(c, _)| c.bytes)
}

/// `--strategy`'s answer, first: the smallest card the strategy fits by the verdict rule of
/// `memcal plan` (bound x (1 + headroom) <= card), or the smallest where it is borderline.
pub fn strategy_answer(p: &StrategyPlan, real: &BTreeSet<String>) -> String {
    use crate::plan::Verdict;
    let on = format!("{} ({} device(s))", p.strategy, p.devices);
    let numbers = format!(
        "estimate {} a device, bound {}",
        gb(p.estimate_bytes as f64),
        gb(p.bound_bytes as f64)
    );
    let cards = p.cards.iter().map(|c| (&c.card, c.verdict));
    match smallest(cards.clone(), real, |v| *v == Verdict::Fits) {
        Some((c, _)) => format!("smallest card that fits with {on}: {} ({numbers})\n", c.name),
        None => match smallest(cards, real, |v| *v == Verdict::Borderline) {
            Some((c, _)) => format!(
                "fits no card with {on}; borderline on {} (the estimate fits, the bound does not: measure it once) ({numbers})\n",
                c.name
            ),
            None => format!("fits no card with {on} ({numbers})\n"),
        },
    }
}

/// `--recommend`'s answer, first: the smallest card with an option that fits and that
/// option, with the cheapest borderline option before it where there is one.
pub fn recommend_answer(recs: &[Recommendation], real: &BTreeSet<String>) -> String {
    let option = |p: &StrategyPlan| {
        format!(
            "{} on {} device(s), estimate {} a device, bound {}",
            p.strategy,
            p.devices,
            gb(p.estimate_bytes as f64),
            gb(p.bound_bytes as f64)
        )
    };
    let fitting = recs
        .iter()
        .filter_map(|r| Some((&r.card, r.plan.as_ref()?)));
    let mut s = match smallest(fitting, real, |_| true) {
        Some((c, p)) => format!(
            "cheapest that fits the smallest card with an option: {}: {}\n",
            c.name,
            option(p)
        ),
        None => "no candidate (up to 64 devices) fits any card\n".to_string(),
    };
    let borderline = recs
        .iter()
        .filter_map(|r| Some((&r.card, r.borderline.as_ref()?)));
    if let Some((c, p)) = smallest(borderline, real, |_| true) {
        let _ = writeln!(
            s,
            "borderline, cheaper: {}: {} (the estimate fits, the bound does not: measure it once)",
            c.name,
            option(p)
        );
    }
    s
}

/// `plan --strategy`.
pub fn render_strategy(b: &Base, p: &StrategyPlan) -> String {
    let mut s = String::new();
    header(&mut s, b);
    let _ = writeln!(s, "strategy    {}  on {} device(s)", p.strategy, p.devices);
    for part in &p.parts {
        let _ = writeln!(s, "  {:<18} {}", part.spec, part.evidence);
        let _ = writeln!(s, "  {:<18} changes: {}", "", part.effect);
        let _ = writeln!(s, "  {:<18} formula: {}", "", part.formula);
    }
    let t = &p.terms;
    let _ = writeln!(s, "\nper device");
    for (name, v) in [
        ("weights", t.weights),
        ("gradients", t.gradients),
        ("optimizer", t.optimizer),
        ("activations", t.activations),
        ("buffers", t.buffers),
    ] {
        let _ = writeln!(s, "  {name:<12} {:>24}", both(v));
    }
    let _ = writeln!(s, "  trainable    {:>24}", count(t.trainable_parameters));
    let _ = writeln!(
        s,
        "estimate    {} a device, {} devices",
        both(p.estimate_bytes as f64),
        p.devices
    );
    let _ = writeln!(s, "bound       {}", both(p.bound_bytes as f64));
    if let Some(sim) = &p.simulated {
        let rank = sim
            .rank
            .map_or(String::new(), |r| format!(", the worst rank: {r}"));
        let _ = writeln!(
            s,
            "simulated   {} a device (the simulator's rule set, op by op; peak in {} at {}{rank})",
            both(sim.bytes as f64),
            sim.phase,
            sim.node
        );
        for st in &sim.stages {
            let _ = writeln!(
                s,
                "  stage {:<3}   {} (peak in {} at {})",
                st.rank,
                both(st.bytes as f64),
                st.phase,
                st.node
            );
        }
        if let Some(note) = &sim.note {
            let _ = writeln!(s, "  note: {note}");
        }
        for (name, r, f) in &sim.evidence {
            let pct =
                |v: Option<f64>| v.map_or(crate::format::MISSING.to_string(), crate::format::pct);
            let _ = writeln!(
                s,
                "  {name:<18} held out on {} rows: simulated median |error| {}, max {}; formula {}, max {}",
                r.rows,
                pct(r.median_abs_error),
                pct(r.max_abs_error),
                pct(f.median_abs_error),
                pct(f.max_abs_error)
            );
        }
    }
    if let Some(why) = &p.simulated_unavailable {
        let _ = writeln!(s, "simulated   {} ({why})", crate::format::MISSING);
    }
    if !p.comparisons.is_empty() {
        let _ = writeln!(
            s,
            "\npublished estimators (model states only, for comparison; not the plan)"
        );
        for c in &p.comparisons {
            let _ = writeln!(s, "  {:<72} {}", c.what, gb(c.bytes as f64));
        }
    }
    let _ = writeln!(s, "\n{:<18} {:>10} verdict", "card", "usable");
    for c in &p.cards {
        let _ = writeln!(
            s,
            "{:<18} {:>10} {}",
            c.card.name,
            gb(c.card.bytes as f64),
            c.verdict.as_str()
        );
    }
    assumptions(&mut s, b);
    s
}

/// `plan --recommend`.
pub fn render_recommend(b: &Base, recs: &[Recommendation]) -> String {
    let mut s = String::new();
    header(&mut s, b);
    let _ = writeln!(s, "\norder of cost: {COST_ORDER}");
    let _ = writeln!(
        s,
        "\n{:<18} {:>10} {:<40} {:>8} {:>12} {:>12}  evidence",
        "card", "usable", "cheapest strategy that fits", "devices", "per device", "bound"
    );
    for r in recs {
        if let Some(p) = &r.plan {
            {
                let ev: Vec<String> = p
                    .parts
                    .iter()
                    .map(|x| format!("{}: {}", x.spec, x.evidence))
                    .collect();
                let _ = writeln!(
                    s,
                    "{:<18} {:>10} {:<40} {:>8} {:>12} {:>12}  {}",
                    r.card.name,
                    gb(r.card.bytes as f64),
                    p.strategy,
                    p.devices,
                    gb(p.estimate_bytes as f64),
                    gb(p.bound_bytes as f64),
                    if ev.is_empty() {
                        "plain plan".to_string()
                    } else {
                        ev.join("; ")
                    }
                );
            }
        } else {
            let _ = writeln!(
                s,
                "{:<18} {:>10} none of the candidates (up to 64 devices) fits",
                r.card.name,
                gb(r.card.bytes as f64)
            );
        }
        if let Some(p) = &r.borderline {
            let _ = writeln!(
                s,
                "{:<18} {:>10} {:<40} {:>8} {:>12} {:>12}  borderline: the estimate fits, the bound does not; measure it once",
                "",
                "",
                format!("or, cheaper: {}", p.strategy),
                p.devices,
                gb(p.estimate_bytes as f64),
                gb(p.bound_bytes as f64),
            );
        }
    }
    assumptions(&mut s, b);
    s
}

/// What `plan --inference` shows (every figure computed by the caller).
pub struct InferenceView<'a> {
    pub graph: &'a str,
    pub inf: &'a Inference,
    /// Per card: the longest context by the formula, and whether the deciding figure fits.
    pub cards: &'a [(Card, Option<u64>, bool)],
    pub bytes: u64,
    /// The deciding figure and what it is.
    pub decided: (u64, &'static str),
    /// The simulator's generate rule set: its result, or why it does not apply; None: not
    /// tried (a precision other than fp32).
    pub simulated: Option<&'a Result<crate::simulate::generate::Generation, String>>,
    /// The simulator's held-out record on the generate rows.
    pub record: Option<&'a super::evidence::Record>,
    pub budgets: &'a [(Card, super::serve::Budget)],
    pub position_limit: Option<u64>,
}

/// `plan --inference --context N`: the answer first, then the terms, the cards, the engine.
pub fn render_inference(v: &InferenceView) -> String {
    let inf = v.inf;
    let mut s = String::new();
    let smallest = v
        .cards
        .iter()
        .filter(|(_, _, fits)| *fits)
        .min_by_key(|(c, _, _)| c.bytes)
        .map(|(c, _, _)| c.name.clone());
    let _ = writeln!(
        s,
        "{}: {} ({}, {})",
        smallest
            .as_deref()
            .map_or("fits no card", |_| "smallest card that fits"),
        smallest.as_deref().unwrap_or("-"),
        both(v.decided.0 as f64),
        v.decided.1
    );
    let _ = writeln!(
        s,
        "graph       {}  inference  batch {}  prompt {}  context {}  {} bytes an element",
        v.graph, inf.batch, inf.prompt, inf.context, v.bytes
    );
    match v.simulated {
        Some(Ok(g)) => {
            let rec = v.record.map_or(String::new(), |r| {
                format!(
                    "; held out on {} measured generate rows: median |error| {}, max {}",
                    r.rows,
                    r.median_abs_error
                        .map_or(crate::format::MISSING.into(), crate::format::pct),
                    r.max_abs_error
                        .map_or(crate::format::MISSING.into(), crate::format::pct)
                )
            });
            let _ = writeln!(
                s,
                "simulated   {}  peak in {} (transformers' generate, {} cache, fp32, op by op{rec})",
                both(g.peak_bytes as f64),
                g.peak_phase,
                g.cache.as_str()
            );
            for n in &g.notes {
                let _ = writeln!(s, "            approximation: {n}");
            }
        }
        Some(Err(why)) => {
            let _ = writeln!(s, "simulated   -  not simulated: {why}");
        }
        None => {
            let _ = writeln!(
                s,
                "simulated   -  the generate rule set is derived and measured in fp32 only (--precision fp32)"
            );
        }
    }
    let _ = writeln!(s, "formula     {}", both(inf.total_bytes as f64));
    let _ = writeln!(s, "  weights   {}", both(inf.weight_bytes as f64));
    let growing = inf
        .layers
        .iter()
        .filter(|l| l.length == CacheLength::Context)
        .count();
    let fixed: Vec<u64> = inf
        .layers
        .iter()
        .filter_map(|l| match l.length {
            CacheLength::Fixed(t) => Some(t),
            CacheLength::Context => None,
        })
        .collect();
    let cross = match (fixed.len(), fixed.iter().min(), fixed.iter().max()) {
        (0, ..) => String::new(),
        (n, Some(lo), Some(hi)) if lo == hi => {
            format!(", {n} cross-attention layers fixed at the encoder's {lo} tokens")
        }
        (n, ..) => format!(", {n} cross-attention layers fixed at the encoder's length"),
    };
    let windows: Vec<u64> = inf.layers.iter().filter_map(|l| l.window).collect();
    let sliding = match (windows.len(), windows.iter().min(), windows.iter().max()) {
        (0, ..) => String::new(),
        (n, Some(lo), Some(hi)) if lo == hi => {
            format!(", {n} of them sliding: the prompt after the prefill, then at most {lo} tokens")
        }
        (n, ..) => format!(
            ", {n} of them sliding: the prompt after the prefill, then at most their window"
        ),
    };
    let _ = writeln!(
        s,
        "  KV cache  {}  ({growing} causal self-attention layers growing with the context{sliding}{cross}; GQA-aware)",
        both(inf.kv_cache_bytes as f64),
    );
    let _ = writeln!(
        s,
        "  prefill   {}  (batch x prompt x (2 x widest op + residual) x bytes)",
        both(inf.prefill_bytes as f64),
    );
    let _ = writeln!(
        s,
        "  logits    {}  (the last position only, and generate's float32 copy)",
        both(inf.logits_bytes as f64)
    );
    let _ = writeln!(
        s,
        "\n{:<18} {:>10} {:<14} {:>16}",
        "card", "usable", "at this context", "longest context"
    );
    for (c, longest, fits) in v.cards {
        let _ = writeln!(
            s,
            "{:<18} {:>10} {:<14} {:>16}",
            c.name,
            gb(c.bytes as f64),
            if *fits { "fits" } else { "does not fit" },
            longest.map_or("none".to_string(), count)
        );
    }
    if let Some((_, b)) = v.budgets.first() {
        let e = b.engine;
        let _ = writeln!(
            s,
            "\n{} ({} {}): KV budget per card (of the memory CUDA reports); weights, activation peak (formula) and non-torch memory (named estimate) taken off",
            e.name(),
            e.flag(),
            b.fraction
        );
        let _ = writeln!(
            s,
            "{:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
            "card",
            "engine's",
            "weights",
            "activation",
            "non-torch",
            "KV",
            "KV tokens",
            "sequences",
            "longest"
        );
        for (c, b) in v.budgets {
            let _ = writeln!(
                s,
                "{:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
                c.name,
                gb(b.usable_bytes as f64),
                gb(b.weights_bytes as f64),
                gb(b.activation_bytes as f64),
                gb(b.non_torch_bytes as f64),
                gb(b.kv_bytes as f64),
                count(b.kv_tokens),
                count(b.concurrency(inf.context)),
                count(b.longest_context(v.position_limit)),
            );
        }
        let _ = writeln!(
            s,
            "sequences: of {} tokens at once; longest: one sequence's context (blocks of {} tokens); non-torch memory: {}; CUDA graphs: not estimated",
            inf.context,
            b.block_tokens,
            if e == super::serve::Engine::Vllm { super::serve::NON_TORCH_SOURCE } else { "not taken off by this engine's arithmetic" }
        );
        if !windows.is_empty() {
            let _ = writeln!(
                s,
                "sliding layers: counted at every token of the context (an engine that frees their blocks out of the window holds fewer: these KV tokens are a lower bound; not modelled)"
            );
        }
    }
    let _ = writeln!(s, "\nfits: the deciding figure x (1 + headroom) <= card; the longest context (formula) is searched up to 2^24 at this batch.");
    s
}

/// `memcal fit --strategies`: the formula against the strategy rows.
pub fn render_evidence(e: &super::evidence::Evidence) -> String {
    let mut s = String::new();
    let pct = |v: Option<f64>| v.map_or(crate::format::MISSING.to_string(), crate::format::pct);
    let ratio = crate::format::opt_ratio;
    let m = crate::format::MISSING;
    let _ = writeln!(
        s,
        "strategy rows against their formulas and the simulator's rule sets (no constant of either chosen on them: every row held out)\n{:<24} {:<14} {:>6} {:>9} {:>10} {:>8} {:>7} | {:>10} {:>8} {:>7}",
        "strategy", "family", "rows", "families", "median|e|", "max|e|", "q95", "sim med", "sim max", "sim q95"
    );
    let line = |s: &mut String,
                name: &str,
                fam: &str,
                r: &super::evidence::Record,
                fams: String,
                sim: Option<&super::evidence::Record>| {
        let _ = writeln!(
            s,
            "{:<24} {:<14} {:>6} {:>9} {:>10} {:>8} {:>7} | {:>10} {:>8} {:>7}",
            name,
            fam,
            r.rows,
            fams,
            pct(r.median_abs_error),
            pct(r.max_abs_error),
            ratio(r.q95),
            sim.map_or(m.to_string(), |x| pct(x.median_abs_error)),
            sim.map_or(m.to_string(), |x| pct(x.max_abs_error)),
            sim.map_or(m.to_string(), |x| ratio(x.q95)),
        );
    };
    for st in &e.strategies {
        let a = &st.all;
        line(
            &mut s,
            &st.strategy,
            "all",
            a,
            a.families.to_string(),
            st.simulator.as_ref(),
        );
        for (f, r) in &st.by_family {
            line(
                &mut s,
                "",
                f,
                r,
                String::new(),
                st.simulator_by_family.get(f),
            );
        }
    }
    let _ = writeln!(
        s,
        "\nstill formulas, not measured: {}",
        e.formulas_only.join(", ")
    );
    let _ = writeln!(
        s,
        "zero1 rows: one rank's layout, emulated in one process (rank 0's optimizer shard; no other rank, no communication)"
    );
    let _ = writeln!(
        s,
        "rows measured on CPU (fp32, the counting allocator); error = (measured - formula) / measured; q95: the 95th percentile of measured / formula; sim: the same for the simulator's peak under the strategy (src/simulate/staged.rs, lowrank.rs; docs/simulator.md)"
    );
    s
}
