//! The "Strategies" section: every strategy of the plan's table, how its numbers are backed
//! (rows measured on CPU, one rank's layout emulated in one process, or a formula only), and
//! for those with rows the held-out error of the plan's strategy formula on them, overall and
//! per family, with the q95 of measured over predicted that bounds it in `memcal plan`. The
//! numbers are [`crate::strategy::evidence`]'s; this file formats them.

use super::*;
use crate::strategy::evidence::{Evidence, Record};

/// The section's view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StrategiesView {
    pub intro: String,
    pub table: Table,
    pub measured: Table,
    /// The simulator's rule sets beside the formula, per strategy with rows.
    pub simulator_intro: String,
    pub simulator: Table,
    pub by_family: Table,
    /// Strategies measured one process per rank: per world and rank, and each run's worst rank.
    pub ranks: Table,
}

/// Per strategy measured per rank: a row per (world, rank) and one for each run's worst rank,
/// with the formula's and the simulator's error on them.
fn ranks_table(ev: &Evidence) -> Table {
    let mut t = table(
        "strategies-ranks",
        "Strategies measured one process per rank (CPU, gloo): the formula's and the simulator's error per rank, and on each run's worst rank (its highest measured peak), the rank a plan must hold",
        vec![
            col("Strategy", false),
            col("World", true),
            col("Rank", false),
            col("Rows", true),
            col("Formula median |error|", true),
            col("Formula max |error|", true),
            col("Simulator median |error|", true),
            col("Simulator max |error|", true),
        ],
        "No strategy has rows measured per rank yet.",
    );
    for s in &ev.strategies {
        for r in s.by_rank.iter().chain(&s.worst_rank) {
            let pair = |x: Option<&Record>| {
                let c = error_cells(x);
                c.into_iter().take(2).collect::<Vec<_>>()
            };
            // Each run's worst rank spans the worlds: no world of its own.
            let (world, rank) = match r.rank {
                Some(k) => (count_cell(r.world), Cell::text(k.to_string())),
                None => (Cell::num(fmt::MISSING, ""), Cell::text("worst of each run")),
            };
            let mut row = vec![
                Cell::text(&s.strategy),
                world,
                rank,
                count_cell(r.formula.rows as u64),
            ];
            row.extend(pair(Some(&r.formula)));
            row.extend(pair(r.simulator.as_ref()));
            t.rows.push(row);
        }
    }
    t
}

/// Median, max |error| and q95 of a record (dashes where there is none).
fn error_cells(r: Option<&Record>) -> Vec<Cell> {
    match r {
        Some(r) => vec![
            opt_pct(r.median_abs_error),
            opt_pct(r.max_abs_error),
            match r.q95 {
                Some(q) => Cell::num(fmt::ratio(q), fmt::ratio(q)),
                None => Cell::num(fmt::MISSING, ""),
            },
        ],
        None => vec![
            Cell::num(fmt::MISSING, ""),
            Cell::num(fmt::MISSING, ""),
            Cell::num(fmt::MISSING, ""),
        ],
    }
}

fn record_cells(r: &Record) -> Vec<Cell> {
    vec![
        count_cell(r.rows as u64),
        count_cell(r.completed as u64),
        count_cell(r.families as u64),
        opt_pct(r.median_abs_error),
        opt_pct(r.max_abs_error),
        match r.q95 {
            Some(q) => Cell::num(fmt::ratio(q), fmt::ratio(q)),
            None => Cell::num(fmt::MISSING, ""),
        },
    ]
}

fn record_columns(first: &[&str]) -> Vec<Column> {
    let mut c: Vec<Column> = first.iter().map(|f| col(f, false)).collect();
    c.extend([
        col("Rows", true),
        col("Completed", true),
        col("Families", true),
        col("Median |error|", true),
        col("Max |error|", true),
        col("q95 (measured / predicted)", true),
    ]);
    c
}

/// Every strategy of the table, with how it is backed by the rows of `ev` (in `memcal plan`'s
/// words: [`crate::plan::strategies::evidence_label`]).
fn strategy_table(ev: &Evidence) -> Table {
    let counts = ev.counts();
    let mut t = table(
        "strategies-table",
        "Every strategy memcal plan knows: what it changes, its formula, and how its numbers are backed",
        vec![
            col("Strategy", false),
            col("What it changes", false),
            col("Formula", false),
            col("Backed by", false),
        ],
        "",
    );
    for d in crate::strategy::STRATEGIES {
        let backing = crate::plan::strategies::evidence_label(d.kind, &counts);
        t.rows.push(vec![
            Cell::text(d.syntax),
            Cell::text(d.effect),
            Cell::text(d.formula),
            Cell::text(backing),
        ]);
    }
    t
}

/// The section, from the strategy rows' evidence.
pub fn view(ev: &Evidence) -> StrategiesView {
    let mut measured = table(
        "strategies-measured",
        "Each measured strategy: the plan's formula against the rows (none of them was used to choose a constant, so every row is held out)",
        record_columns(&["Strategy", "Backed by"]),
        "No strategy has a row yet.",
    );
    let mut columns = record_columns(&["Strategy", "Family"]);
    columns.extend([
        col("Simulator median |error|", true),
        col("Simulator max |error|", true),
        col("Simulator q95", true),
    ]);
    let mut by_family = table(
        "strategies-by-family",
        "Per strategy and family, with the simulator's rule set on the same rows",
        columns,
        "No strategy has a row yet.",
    );
    let mut simulator = table(
        "strategies-simulator",
        "The formula and the simulator's rule set on the same rows (held-out error)",
        vec![
            col("Strategy", false),
            col("Rows", true),
            col("Formula median |error|", true),
            col("Formula max |error|", true),
            col("Formula q95", true),
            col("Simulator median |error|", true),
            col("Simulator max |error|", true),
            col("Simulator q95", true),
        ],
        "No strategy has a row yet.",
    );
    for s in &ev.strategies {
        let label = ev
            .rows
            .iter()
            .find(|r| r.strategy == s.strategy)
            .map_or("", |r| r.label);
        let mut row = vec![Cell::text(&s.strategy), Cell::text(label)];
        row.extend(record_cells(&s.all));
        measured.rows.push(row);
        let mut row = vec![Cell::text(&s.strategy), count_cell(s.all.rows as u64)];
        row.extend(error_cells(Some(&s.all)));
        row.extend(error_cells(s.simulator.as_ref()));
        simulator.rows.push(row);
        for (f, r) in &s.by_family {
            let mut row = vec![Cell::text(&s.strategy), Cell::text(f)];
            row.extend(record_cells(r));
            row.extend(error_cells(s.simulator_by_family.get(f)));
            by_family.rows.push(row);
        }
    }
    StrategiesView {
        intro: format!(
            "memcal plan --strategy, --recommend and --inference plan with these. A training strategy's prediction is its formula applied to the simulator's plain peak of the same graph and batch; inference's is its own formula (weights, KV caches, the prefill, the last position's logits). {} Strategies over several processes (DDP, ZeRO, FSDP, TP, PP) are measured one process per rank with torch's and DeepSpeed's own code on CPU with gloo (regime cpu-ranks, python3 -m memcal_export.ranks; a row per rank, whole runs only); ZeRO-1 also as one rank's layout emulated in one process. Strategies still a formula: {}.",
            if ev.rows.is_empty() {
                "No strategy has a measured row yet.".to_string()
            } else {
                {
                    let generate = ev.rows.iter().filter(|r| r.strategy == "generate").count() as u64;
                    let harness = ev.rows.len() as u64 - generate;
                    let mut t = format!(
                        "The rows were measured on CPU in float32 by the harness's protocol for each strategy ({}; docs/strategies.md)",
                        fmt::runs(harness)
                    );
                    if generate > 0 {
                        t.push_str(&format!(
                            ", and by transformers' own model.generate on real classes at reduced sizes ({}, regime cpu-generate: python3 -m memcal_export.generate), compared on their peak after the model is loaded",
                            fmt::runs(generate)
                        ));
                    }
                    t.push('.');
                    t
                }
            },
            if ev.formulas_only.is_empty() {
                "none".to_string()
            } else {
                ev.formulas_only.join(", ")
            }
        ),
        table: strategy_table(ev),
        measured,
        simulator_intro: "The simulator also has a rule set per training strategy it can run (checkpointing, LoRA, QLoRA, and checkpointing with either): which tensors exist and for how long, read off the harness's protocol and torch's autograd, op by op, with no fitted factor (docs/simulator.md). Its peak is compared with the same rows. For generate it has the inference rule set (transformers' generate under no_grad, tensor by tensor as its code allocates them), over the rows it can bind. Per rank: DDP (the reducer's buckets), ZeRO-1 (the buckets; AdamW on the rank's partition), DeepSpeed's stages 1 and 2 (flat buffers, master copy, reduce bucket) FSDP1 and FSDP2 (each unit's shards, all-gathers, reduce-scatters, prefetch) TP (the rank's own graph: attention heads and each MLP's colwise and rowwise linears split, the all-reduces' clones), PP (each stage's micro-batches in the schedule's order, receive buffers, kept outputs and sends) and DeepSpeed's ZeRO-3 (partitions, each module gathered and released by the coordinator's trace and prefetch, saved views of gathered weights, the reduce bucket). A dash: no rule set (the harness's inference protocol, the emulated ZeRO-1 layout, those strategies).".to_string(),
        simulator,
        by_family,
        ranks: ranks_table(ev),
    }
}
