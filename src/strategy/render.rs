//! Text rendering of strategy plans, recommendations and inference plans (formatting only).

use super::memory::{CacheLength, Inference};
use super::planner::{Base, Recommendation, StrategyPlan, COST_ORDER};
use crate::factors::Card;
use crate::format::count;
use crate::units::{both, gb};
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
        "plain       {} ({}); A = {} beyond 16 bytes a parameter",
        both(b.plain_estimate_bytes as f64),
        b.plain_method,
        gb(b.plain_activations_bytes as f64)
    );
}

fn assumptions(s: &mut String, b: &Base) {
    let _ = writeln!(s, "\nassumptions");
    for a in &b.assumptions {
        let _ = writeln!(s, "  - {a}");
    }
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
        let _ = writeln!(
            s,
            "simulated   {} a device (the simulator's rule set, op by op; peak in {} at {})",
            both(sim.bytes as f64),
            sim.phase,
            sim.node
        );
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
        match &r.plan {
            Some(p) => {
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
            None => {
                let _ = writeln!(
                    s,
                    "{:<18} {:>10} none of the candidates (up to 64 devices) fits",
                    r.card.name,
                    gb(r.card.bytes as f64)
                );
            }
        }
    }
    assumptions(&mut s, b);
    s
}

/// `plan --inference --context N`.
pub fn render_inference(
    graph: &str,
    inf: &Inference,
    cards: &[(Card, Option<u64>, bool)],
    bytes: u64,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "graph       {graph}  inference  batch {}  context {}  {bytes} bytes an element",
        inf.batch, inf.context
    );
    let _ = writeln!(s, "weights     {}", both(inf.weight_bytes as f64));
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
            format!(", and {n} cross-attention layers fixed at the encoder's {lo} tokens")
        }
        (n, ..) => format!(", and {n} cross-attention layers fixed at the encoder's length"),
    };
    let _ = writeln!(
        s,
        "KV cache    {}  ({growing} causal self-attention layers growing with the context{cross}: tensors x kv_heads x head_dim x tokens x batch x bytes; GQA-aware)",
        both(inf.kv_cache_bytes as f64),
    );
    if let Some(l) = inf.layers.first() {
        let _ = writeln!(
            s,
            "            first layer `{}`: {} tensor(s) x {} kv heads x {} head dim",
            l.node, l.tensors, l.kv_heads, l.head_dim
        );
    }
    let _ = writeln!(
        s,
        "prefill     {}  (batch x prompt {} x (2 x widest op + residual) x bytes; the logits left out)",
        both(inf.prefill_bytes as f64),
        inf.prompt
    );
    let _ = writeln!(
        s,
        "logits      {}  (the last position only, as generate and the serving engines compute them: batch x vocab x bytes, and generate's float32 copy)",
        both(inf.logits_bytes as f64)
    );
    let _ = writeln!(
        s,
        "total       {}  formula, not measured against this graph",
        both(inf.total_bytes as f64)
    );
    let _ = writeln!(
        s,
        "\n{:<18} {:>10} {:<14} {:>16}",
        "card", "usable", "at this context", "longest context"
    );
    for (c, longest, fits) in cards {
        let _ = writeln!(
            s,
            "{:<18} {:>10} {:<14} {:>16}",
            c.name,
            gb(c.bytes as f64),
            if *fits { "fits" } else { "does not fit" },
            longest.map_or("none".to_string(), count)
        );
    }
    let _ = writeln!(s, "\nfits: total x (1 + headroom) <= card; the longest context is searched up to 2^24 at this batch.");
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
