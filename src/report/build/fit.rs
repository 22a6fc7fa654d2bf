//! The "Will it fit?" page (`fit.html`): every full-size graph of the zoo and every real model
//! imported from `data/models/`, at a few batches under bf16 autocast, as `memcal plan`
//! answers it against the real cards: the deciding method, its estimate and bound, the
//! smallest card that holds the job, and by how much the largest falls short where none does.
//! Formatting only: every figure is [`crate::plan::verdicts::will_it_fit`]'s.

use super::{col, table};
use crate::format as fmt;
use crate::plan::verdicts::FitLine;
use crate::report::view::{Cell, FitPage, Link, PageMeta};

/// The batches each job is planned at.
pub const BATCHES: [u64; 3] = [1, 8, 32];

fn bytes(b: f64) -> Cell {
    Cell::num(fmt::bytes(b), format!("{}", b.ceil() as u64))
}

/// The page from its jobs (none: an empty table saying so).
pub fn page(lines: &[FitLine], nav: Vec<Link>) -> FitPage {
    let mut t = table(
        "will-it-fit",
        "Each job as memcal plan answers it (bf16 autocast, the real cards)",
        vec![
            col("Model", false),
            col("From", false),
            col("Parameters", true),
            col("Batch", true),
            col("Verdict by", false),
            col("Estimate", true),
            col("Bound", true),
            col("Smallest card it fits", false),
            col("What it needs", false),
        ],
        "No full-size graph or imported model to plan.",
    );
    for l in lines {
        let fits = match (&l.smallest_fits, &l.smallest_borderline) {
            (Some(c), _) => Cell::text(c.clone()),
            (None, Some(c)) => Cell::text(format!(
                "{c} (borderline: the estimate fits, the bound does not)"
            ))
            .class("warn"),
            (None, None) => Cell::text(fmt::MISSING).class("bad"),
        };
        let needs = match (&l.shortfall, &l.smallest_borderline) {
            (Some(s), _) => Cell::markdown(format!(
                "more than one card: it needs {} with the headroom, {} more than the {}; a strategy that splits or shrinks the job is needed (`memcal plan --recommend` gives the cheapest that fits each card)",
                fmt::bytes(s.needed_bytes as f64),
                fmt::bytes(s.short_by_bytes as f64),
                s.largest_card.name
            ))
            .class("bad"),
            (None, Some(_)) => Cell::text("one card, as measured"),
            (None, None) => Cell::markdown(format!("no verdict: {}", l.why)).class("warn"),
        };
        t.rows.push(vec![
            Cell::text(l.graph.clone()),
            Cell::text(l.source.clone()),
            Cell::num(fmt::count(l.parameters), l.parameters.to_string()),
            Cell::num(fmt::count(l.batch), l.batch.to_string()),
            Cell::text(l.method.label()),
            bytes(l.estimate_bytes),
            bytes(l.bound_bytes),
            fits,
            needs,
        ]);
    }
    FitPage {
        meta: PageMeta {
            file: "fit.html".into(),
            title: format!("Will it fit?: {}", super::TITLE),
            nav,
        },
        intro: format!(
            "Every full-size graph of the zoo (data/graphs/) and every real model whose Hugging Face configuration is in data/models/ (imported as memcal import hf does, at its default sequence length), planned at batches {} in bf16 autocast against the real cards (the usable bytes of the Planning section), exactly as memcal plan answers: the method whose held-out record decides, its estimate and bound, and the smallest card whose verdict is \"fits\". Where no card holds the job, the last column gives memcal plan's shortfall: the bytes the job needs with the headroom, and by how much the largest card falls short. memcal measures plain single-device training only: no strategy (checkpointing, LoRA, sharding) is modelled yet, so none is offered.",
            fmt::list(&BATCHES.iter().map(|b| b.to_string()).collect::<Vec<_>>(), ", ")
        ),
        table: t,
    }
}
