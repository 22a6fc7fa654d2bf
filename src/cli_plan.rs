//! Text rendering of a [`Plan`] for `memcal plan` (formatting only: every number is in the plan).

use crate::features::FEATURE_NAMES;
use crate::plan::Plan;
use crate::units::{both, gb};
use std::fmt::Write;

/// The human-readable table `memcal plan` prints.
pub fn render(p: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "graph       {} (family {})", p.graph, p.family);
    let _ = writeln!(s, "batch       {}", p.batch);
    let _ = writeln!(s, "precision   {}", p.precision);
    let _ = writeln!(s, "parameters  {}", group(p.parameters));
    if !p.has_batch_axis {
        let _ = writeln!(
            s,
            "warning     no batch axis: no input has a `B` dimension, so the batch changes nothing"
        );
    }
    let _ = writeln!(
        s,
        "\n{:<18} {:>22} {:>8} {:>28}",
        "feature", "bytes", "factor", "contribution"
    );
    for (i, (name, v)) in FEATURE_NAMES.iter().zip(p.features.as_array()).enumerate() {
        let _ = writeln!(
            s,
            "{:<18} {:>22} {:>8.3} {:>28}",
            name,
            group(v),
            p.factors[i],
            both(p.factors[i] * v as f64)
        );
    }
    let _ = writeln!(s, "\nestimate    {}", both(p.estimate_bytes));
    let _ = writeln!(
        s,
        "            = max(linear sum {}, phase floor {}){}",
        gb(p.linear_estimate_bytes),
        gb(p.floor.bytes as f64),
        if p.floor_decides {
            ": the floor decides (the fitted sum is below what the optimizer step provably holds)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "            phase floor: 16 bytes x parameters ({}, weights + gradients + AdamW states) + AdamW temporaries of the largest parameter ({})",
        gb(p.floor.model_state as f64),
        gb(p.floor.optimizer_temporaries as f64)
    );
    match &p.simulated {
        Ok(sim) => {
            let (what, rules) = match &sim.reserved {
                None => ("", "no fitted factor"),
                Some(_) => (" allocated", "rules cuda-bf16-autocast, no fitted factor"),
            };
            let _ = writeln!(
                s,
                "simulated   {}{what}  (peak in {} at `{}`; {rules})",
                both(sim.bytes as f64),
                sim.phase,
                sim.node
            );
            if let Some(r) = &sim.reserved {
                let _ = writeln!(
                    s,
                    "            {} reserved   (peak in {} at `{}`; CUDA caching-allocator replay)",
                    both(r.bytes as f64),
                    r.phase,
                    r.node
                );
            }
        }
        Err(why) => {
            let _ = writeln!(s, "simulated   not available ({why})");
        }
    }
    let _ = writeln!(
        s,
        "bound       {}  (max(floor, estimate x q95 = {:.2}))",
        both(p.bound_bytes),
        p.q95
    );
    let plan_rule = format!("plan (estimate x {:.2})", 1.0 + p.headroom);
    let replay = p.cards.iter().any(|v| v.simulated_reserved_fits.is_some());
    let _ = writeln!(
        s,
        "\n{:<10} {:<26} {:<14}{}",
        "card",
        plan_rule,
        "bound",
        if replay { "simulated reserved" } else { "" }
    );
    for v in &p.cards {
        let _ = writeln!(
            s,
            "{:<10} {:<26} {:<14}{}",
            v.card.name,
            if v.plan_fits { "fits" } else { "does not fit" },
            v.bound.as_str(),
            match v.simulated_reserved_fits {
                Some(true) => "fits",
                Some(false) => "does not fit",
                None => "",
            }
        );
    }
    let _ = writeln!(
        s,
        "\nsmallest card (plan)   {}",
        p.smallest_card
            .as_ref()
            .map_or("none of the cards".to_string(), |c| c.name.clone())
    );
    let _ = writeln!(
        s,
        "smallest card (bound)  {}",
        p.smallest_card_bound
            .as_ref()
            .map_or("none of the cards".to_string(), |c| c.name.clone())
    );
    if replay {
        let _ = writeln!(
            s,
            "\nsimulated reserved: the allocator replay's reserved peak against the card (on a GPU the caching allocator's reserved segments, not the allocated bytes, exhaust the card; the simulator's rule table replayed through a model of torch's caching allocator, not a measured figure; docs/simulator.md lists its sources, the constants calibrated on fixtures and its error on the GPU rows)."
        );
    }
    let _ = writeln!(
        s,
        "\nplan: fits when estimate x {h:.2} <= card. bound: fits when bound x {h:.2} <= card; borderline when the estimate fits the card but the bound does not; does not fit when the estimate exceeds the card. The bound is the estimate x q95, the ratio of measured to predicted that 95% of held-out runs stayed under.",
        h = 1.0 + p.headroom
    );
    if let Some(sf) = &p.shortfall {
        let _ = writeln!(
            s,
            "\nnone of the cards: the plan needs {} (estimate x {:.2}); the largest card, {}, is {} short.",
            both(sf.needed_bytes as f64),
            1.0 + p.headroom,
            sf.largest_card.name,
            both(sf.short_by_bytes as f64)
        );
        let _ = writeln!(
            s,
            "{}memcal plans single-device training only: strategies that cut memory (activation checkpointing, LoRA or QLoRA, ZeRO/FSDP or tensor parallelism over several devices) are not planned yet.",
            if sf.floor_exceeds_card {
                "The phase floor alone (weights, gradients and AdamW states) exceeds it: no batch fits this card. "
            } else {
                "A smaller batch may fit (`--max-batch`). "
            }
        );
    }
    let a = &p.accelerate;
    let _ = writeln!(s, "\nbaselines");
    let _ = writeln!(
        s,
        "  accelerate estimate-memory ({} row): training {} | as it prints: largest layer {}, total {}, training {}",
        a.dtype_row,
        both(a.training_bytes as f64),
        a.printed_largest_layer,
        a.printed_total,
        a.printed_training
    );
    match &p.textbook {
        Ok(t) => {
            let _ = writeln!(
                s,
                "  textbook 14P + L·B·T·(34d + 5hT): {} (L={}, T={}, d={}, h={}; model {}, activations {})",
                both(t.total_bytes as f64),
                t.layers,
                t.sequence,
                t.hidden,
                t.heads,
                gb(t.model_bytes as f64),
                gb(t.activation_bytes as f64)
            );
        }
        Err(why) => {
            let _ = writeln!(s, "  textbook formula: not applicable ({why})");
        }
    }
    s
}

/// 124439808 -> "124,439,808".
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The `--max-batch` table: per card, the largest batch by the plan and by the bound.
pub fn render_max_batch(rows: &[crate::plan::MaxBatch]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "largest batch that fits (searched up to {})\n{:<10} {:>12} {:>12}",
        group(crate::plan::MAX_BATCH_SEARCHED),
        "card",
        "plan",
        "bound"
    );
    let cell = |b: Option<u64>| b.map_or("none".to_string(), group);
    for r in rows {
        let _ = writeln!(
            s,
            "{:<10} {:>12} {:>12}",
            r.card.name,
            cell(r.plan),
            cell(r.bound)
        );
    }
    s
}
