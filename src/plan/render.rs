//! Text rendering of a [`Plan`] for `memcal plan` (formatting only: every number is in the plan).

use super::decide::Plan;
use crate::features::FEATURE_NAMES;
use crate::format::count;
use crate::units::{both, gb};
use std::fmt::Write;

/// The human-readable table `memcal plan` prints: the answer first (the smallest card by the
/// verdict and why), then the details; the legends with `explain`.
pub fn render(p: &Plan, explain: bool) -> String {
    let mut s = String::new();
    render_answer(&mut s, p);
    render_header(&mut s, p);
    render_estimate(&mut s, p);
    render_simulated(&mut s, p);
    let _ = writeln!(
        s,
        "bound       {}  (max(floor, estimate x q95 = {:.2}))",
        both(p.bound_bytes),
        p.q95
    );
    render_decision(&mut s, p);
    let replay = render_cards(&mut s, p, explain);
    if !explain {
        let _ = writeln!(
            s,
            "\nlegend: `memcal plan --explain` says how the verdict, each card column and the usable bytes are decided"
        );
    }
    if replay && explain {
        let _ = writeln!(
            s,
            "\nsimulated reserved: the allocator replay's reserved peak against the card (on a GPU the caching allocator's reserved segments, not the allocated bytes, exhaust the card; the simulator's rule table replayed through a model of torch's caching allocator, not a measured figure; docs/simulator.md lists its sources, the constants calibrated on fixtures and its error on the GPU rows)."
        );
    }
    if explain {
        render_verdict_legend(&mut s, p);
    }
    if let Some(sf) = &p.shortfall {
        let _ = writeln!(
            s,
            "\nnone of the cards: the {} needs {} (estimate x {:.2}); the largest card, {}, is {} short.",
            p.decision.method.label(),
            both(sf.needed_bytes as f64),
            1.0 + p.headroom,
            sf.largest_card.name,
            both(sf.short_by_bytes as f64)
        );
        let _ = writeln!(
            s,
            "{}Strategies that cut memory ({}) are planned by `memcal plan --recommend` (the cheapest that fits each card) and `--strategy`.",
            if sf.floor_exceeds_card {
                "The phase floor alone (weights, gradients and AdamW states) exceeds it: no batch fits this card. "
            } else {
                "A smaller batch may fit (`--max-batch`). "
            },
            crate::strategy::table_summary()
        );
    }
    render_baselines(&mut s, p);
    s
}

/// The names of the real cards (the products) among the plan's cards: the ones its smallest
/// card is named from; empty without a data folder.
pub fn real_cards(p: &Plan) -> std::collections::BTreeSet<String> {
    p.cards
        .iter()
        .filter(|c| c.product.is_some())
        .map(|c| c.card.name.clone())
        .collect()
}

/// The plain plan's answer line, the first line `memcal plan` prints (also in `--recommend`,
/// word for word): the smallest card by the verdict, the deciding method's estimate and bound.
pub fn answer_line(p: &Plan) -> String {
    let card = p
        .smallest_card_verdict
        .as_ref()
        .map_or("none of the cards", |c| c.name.as_str());
    format!(
        "smallest card that fits: {card} (decided by the {}: estimate {}, bound {})",
        p.decision.method.label(),
        gb(p.decision.estimate_bytes),
        gb(p.decision.bound_bytes)
    )
}

/// The answer, first: [`answer_line`], then the verdict in one line.
fn render_answer(s: &mut String, p: &Plan) {
    let _ = writeln!(s, "{}", answer_line(p));
    let _ = writeln!(s, "in one line {}", p.why);
    if p.decision.records.is_empty() {
        // Without a data folder the verdict changes method and cards: said next to the answer.
        let real = p.cards.iter().any(|c| c.product.is_some());
        let _ = writeln!(
            s,
            "note: {}{}",
            p.decision.reason,
            if real {
                ""
            } else {
                "; the real products are not checked (give --data DIR)"
            }
        );
    }
    s.push('\n');
}

/// How the verdict and the plan columns are decided (`--explain`).
fn render_verdict_legend(s: &mut String, p: &Plan) {
    let _ = writeln!(
        s,
        "\nverdict: the deciding method's: fits when its bound x {h:.2} <= card (and, where the simulator replays the allocator, its reserved peak is within the card); borderline when its estimate fits the card but its bound does not; does not fit when its estimate (or reserved peak) exceeds the card; refused when the job is outside the fitted range and no other method covers it. plan: the six-factor plan alone, fits when estimate x {h:.2} <= card. plan bound: fits when bound x {h:.2} <= card; borderline when the estimate fits the card but the bound does not; does not fit when the estimate exceeds the card. Each bound is its method's estimate x its q95, the ratio of measured to predicted that 95% of its held-out runs stayed under.",
        h = 1.0 + p.headroom
    );
}

/// The plan's heading: graph, batch, precision, parameters, the graph's approximations and a
/// missing batch axis.
fn render_header(s: &mut String, p: &Plan) {
    let _ = writeln!(s, "graph       {} (family {})", p.graph, p.family);
    let _ = writeln!(s, "batch       {}", p.batch);
    let _ = writeln!(s, "precision   {}", p.precision);
    let _ = writeln!(s, "parameters  {}", count(p.parameters));
    if !p.approximations.is_empty() {
        const SHOWN: usize = 12;
        let _ = writeln!(
            s,
            "approximate graph: {} approximation(s), each an error the estimate may carry",
            p.approximations.len()
        );
        for a in p.approximations.iter().take(SHOWN) {
            let at = a
                .node
                .as_deref()
                .map_or(String::new(), |n| format!("`{n}`: "));
            let _ = writeln!(s, "  {at}{}", a.text);
        }
        if p.approximations.len() > SHOWN {
            let _ = writeln!(
                s,
                "  ... and {} more (--json lists every one under `approximations`)",
                p.approximations.len() - SHOWN
            );
        }
    }
    if !p.has_batch_axis {
        let _ = writeln!(
            s,
            "warning     no batch axis: no input has a `B` dimension, so the batch changes nothing"
        );
    }
}

/// The six features with their factors and contributions, the estimate and its phase floor.
fn render_estimate(s: &mut String, p: &Plan) {
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
            count(v),
            p.factors[i],
            both(p.factors[i] * v as f64)
        );
    }
    if let Some(from) = &p.factors_borrowed_from {
        let _ = writeln!(
            s,
            "factors     {from}'s: no {} row is fitted yet (their rows are all held out; the features carry this profile's element sizes)",
            p.precision
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
        "            phase floor: {} bytes x parameters ({}, weights + gradients + AdamW states) + AdamW temporaries of the largest parameter ({})",
        p.precision.state_bytes_per_parameter(),
        gb(p.floor.model_state as f64),
        gb(p.floor.optimizer_temporaries as f64)
    );
}

/// The simulator's peak (and, on CUDA, its allocator replay's reserved peak).
fn render_simulated(s: &mut String, p: &Plan) {
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
                    "            {} reserved   (peak in {} at `{}`; CUDA caching-allocator replay{})",
                    both(r.bytes as f64),
                    r.phase,
                    r.node,
                    r.allocator_settings
                        .as_deref()
                        .map_or(String::new(), |c| format!(
                            " under PYTORCH_CUDA_ALLOC_CONF={c}"
                        ))
                );
            }
        }
        Err(why) => {
            let _ = writeln!(s, "simulated   not available ({why})");
        }
    }
}

/// The baselines: accelerate's estimate-memory and the textbook formula.
fn render_baselines(s: &mut String, p: &Plan) {
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
}

/// The card table, the smallest cards and how usable bytes are made; whether any card has a
/// simulated reserved check.
fn render_cards(s: &mut String, p: &Plan, explain: bool) -> bool {
    let plan_rule = format!("plan x {:.2}", 1.0 + p.headroom);
    let replay = p.cards.iter().any(|v| v.simulated_reserved_fits.is_some());
    let _ = writeln!(
        s,
        "\n{:<18} {:>10} {:<14} {:<14} {:<14}{}",
        "card",
        "usable",
        "verdict",
        plan_rule,
        "plan bound",
        if replay { "simulated reserved" } else { "" }
    );
    for v in &p.cards {
        let _ = writeln!(
            s,
            "{:<18} {:>10} {:<14} {:<14} {:<14}{}",
            v.card.name,
            gb(v.card.bytes as f64),
            v.verdict.as_str(),
            if v.plan_fits { "fits" } else { "does not fit" },
            v.bound.as_str(),
            match v.simulated_reserved_fits {
                Some(true) => "fits",
                Some(false) => "does not fit",
                None => "",
            }
        );
    }
    let name = |c: &Option<crate::factors::Card>| {
        c.as_ref()
            .map_or("none of the cards".to_string(), |c| c.name.clone())
    };
    let _ = writeln!(
        s,
        "\nsmallest card (verdict, {})  {}",
        p.decision.method.label(),
        name(&p.smallest_card_verdict)
    );
    let _ = writeln!(
        s,
        "smallest card (six-factor plan)  {}",
        name(&p.smallest_card)
    );
    let _ = writeln!(
        s,
        "smallest card (six-factor bound) {}",
        name(&p.smallest_card_bound)
    );
    if explain && p.cards.iter().any(|v| v.product.is_some()) {
        let _ = writeln!(
            s,
            "\nusable: a real card's total as the device reports it, less the CUDA context ({}), divided by the caching allocator's median reserved/allocated ratio on the GPU rows; the simulated reserved peak is compared with the total less the context alone. `memcal plan` prints where each total comes from with --json; the page's card table lists them.",
            gb(p.cards
                .iter()
                .find_map(|v| v.product.as_ref())
                .map_or(0.0, |r| r.context_bytes as f64))
        );
    }
    replay
}

/// Which method decides, why, the methods' records, the fitted range and the one-line verdict.
fn render_decision(s: &mut String, p: &Plan) {
    let d = &p.decision;
    let _ = writeln!(s, "\nverdict by  {}: {}", d.method.label(), d.reason);
    let _ = writeln!(
        s,
        "            estimate {}, bound {} (x{:.2}){}",
        both(d.estimate_bytes),
        both(d.bound_bytes),
        d.q95,
        if d.bound_widened {
            ", widened to the larger of both methods' bounds (outside the fitted range)"
        } else {
            ""
        }
    );
    if !d.records.is_empty() {
        let _ = writeln!(
            s,
            "\n{:<16} {:<28} {:>6} {:>10} {:>8} {:>12} {:>7}",
            "method", "record (held out)", "rows", "median|e|", "max|e|", "missed OOM", "q95"
        );
        let pct = crate::format::opt_pct;
        for r in &d.records {
            let _ = writeln!(
                s,
                "{:<16} {:<28} {:>6} {:>10} {:>8} {:>12} {:>7}",
                r.method.label(),
                r.record_of.as_str(),
                r.error_rows,
                pct(r.median_abs_rel_error),
                pct(r.max_abs_rel_error),
                format!("{}/{}", r.missed_oom, r.did_not_fit_checks),
                crate::format::opt_ratio(r.q95)
            );
        }
    }
    if let Some(r) = &d.range {
        let f = &r.fitted;
        let _ = writeln!(
            s,
            "\nfitted range {} rows: parameters {} to {}, measured peak {} to {}",
            f.rows,
            count(f.parameters_min),
            count(f.parameters_max),
            gb(f.peak_min as f64),
            gb(f.peak_max as f64)
        );
        if r.outside.is_empty() {
            let _ = writeln!(s, "            the job is inside it");
        }
        for o in &r.outside {
            let (v, lo, hi, by) = if o.what.starts_with("share") {
                (
                    format!("{:.1}%", o.value * 100.0),
                    format!("{:.1}%", o.low * 100.0),
                    format!("{:.1}%", o.high * 100.0),
                    format!("{:.1} points", o.by),
                )
            } else if o.what == "peak" {
                (gb(o.value), gb(o.low), gb(o.high), format!("{:.1}x", o.by))
            } else {
                (
                    count(o.value as u64),
                    count(o.low as u64),
                    count(o.high as u64),
                    format!("{:.1}x", o.by),
                )
            };
            let _ = writeln!(
                s,
                "  outside    {}: {v}, fitted {lo} to {hi}, beyond by {by}",
                o.what
            );
        }
    }
    if let Some(why) = &d.refused {
        let _ = writeln!(s, "refused     {why}");
    }
}

/// The `--max-batch` table: per card, the largest batch by the verdict, the six-factor plan
/// and its bound.
pub fn render_max_batch(rows: &[super::decide::MaxBatch]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "largest batch that fits (searched up to {})\n{:<18} {:>12} {:>16} {:>16}",
        count(super::decide::MAX_BATCH_SEARCHED),
        "card",
        "verdict",
        "six-factor plan",
        "six-factor bound"
    );
    let cell = |b: Option<u64>| b.map_or("none".to_string(), count);
    for r in rows {
        let _ = writeln!(
            s,
            "{:<18} {:>12} {:>16} {:>16}",
            r.card.name,
            r.verdict.map_or(crate::format::MISSING.to_string(), cell),
            cell(r.plan),
            cell(r.bound)
        );
    }
    s
}
