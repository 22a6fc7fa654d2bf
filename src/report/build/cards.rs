//! The index page's "Planning a job" section: the real cards with their reported totals and
//! usable bytes, which method gives `memcal plan`'s verdict on each profile and its own bound,
//! and the range of the rows each profile was fitted on. Filled from
//! [`crate::plan::evidence::Evidence`]; its own view struct and template include
//! (`templates/cards.html`), apart from the rest of the index.

use super::{bytes_cell, col, count_cell, opt_pct, table};
use crate::features::Precision;
use crate::features::FEATURE_NAMES;
use crate::format as fmt;
use crate::plan::evidence::Evidence;
use crate::plan::verdicts::{OutcomeCounts, VerdictLine};
use crate::report::view::{Cell, Table};
use crate::units;
use serde::Serialize;
use std::collections::BTreeMap;

/// The section's view model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CardsView {
    /// How usable bytes are made, with the numbers.
    pub usable: String,
    pub cards: Table,
    /// How the deciding method is chosen.
    pub decides: String,
    pub methods: Table,
    /// What the fitted range is and what `plan` does outside it.
    pub range: String,
    pub ranges: Table,
    /// What memcal plan says of every full-size graph at batch 1, in one line each.
    pub verdicts: Table,
    /// memcal plan's verdicts on the shipped rows against what the runs did, per profile.
    pub row_outcomes: Table,
}

fn bytes(b: u64) -> Cell {
    bytes_cell(Some(b as f64))
}

fn cards_table(ev: &Evidence) -> Table {
    let mut t = table(
        "real-cards",
        "Real cards: the total each device reports, and what a training job can use of it",
        vec![
            col("Product", false),
            col("Reported total", true),
            col("Reported by", false),
            col("Less the CUDA context", true),
            col("Usable", true),
            col("Source of the total", false),
        ],
        "No real card.",
    );
    for c in &ev.real_cards {
        t.rows.push(vec![
            Cell::text(c.name.clone()),
            Cell::num(
                format!(
                    "{} ({})",
                    units::gb(c.reported_bytes as f64),
                    units::gib(c.reported_bytes as f64)
                ),
                c.reported_bytes.to_string(),
            ),
            Cell::text(c.reported_by),
            bytes(c.reservable_bytes),
            bytes(c.usable_bytes),
            Cell::text(c.source),
        ]);
    }
    t
}

fn methods_table(ev: &Evidence) -> Table {
    let mut t = table(
        "plan-methods",
        "Which method gives memcal plan's verdict, per precision profile: each method's record and its own bound",
        vec![
            col("Precision profile", false),
            col("Method", false),
            col("Record of", false),
            col("Rows in the error", true),
            col("Median |error|", true),
            col("Max |error|", true),
            col("Missed OOM", true),
            col("Own q95 (measured / predicted)", true),
            col("Gives the verdict", false),
        ],
        "No profile has rows yet.",
    );
    for (p, pe) in &ev.profiles {
        for r in &pe.records {
            t.rows.push(vec![
                Cell::text(p.as_str()),
                Cell::text(r.method.label()),
                Cell::text(r.record_of.as_str()),
                Cell::num(fmt::count(r.error_rows), r.error_rows.to_string()),
                opt_pct(r.median_abs_rel_error),
                opt_pct(r.max_abs_rel_error),
                Cell::num(
                    format!("{} of {}", r.missed_oom, r.did_not_fit_checks),
                    fmt::pct_key(r.missed_share()),
                ),
                r.q95.map_or(Cell::num(fmt::MISSING, ""), |q| {
                    Cell::num(fmt::ratio(q), format!("{q:.6}"))
                }),
                Cell::text(if r.method == pe.preferred {
                    "yes, where it covers the job"
                } else {
                    "no"
                }),
            ]);
        }
    }
    t
}

fn ranges_table(ev: &Evidence) -> Table {
    let mut columns = vec![
        col("Precision profile", false),
        col("Fitted rows", true),
        col("Parameters", false),
        col("Measured peak", false),
    ];
    for name in FEATURE_NAMES {
        columns.push(col(&format!("Share of {name}"), false));
    }
    let mut t = table(
        "fitted-range",
        "The range of the rows each profile's factors were fitted on",
        columns,
        "No profile has fitted rows yet.",
    );
    for (p, pe) in &ev.profiles {
        let Some(r) = &pe.range else { continue };
        let mut row = vec![
            Cell::text(p.as_str()),
            Cell::num(fmt::count(r.rows), r.rows.to_string()),
            Cell::text(format!(
                "{} to {}",
                fmt::count(r.parameters_min),
                fmt::count(r.parameters_max)
            )),
            Cell::text(format!(
                "{} to {}",
                fmt::bytes(r.peak_min as f64),
                fmt::bytes(r.peak_max as f64)
            )),
        ];
        for k in 0..FEATURE_NAMES.len() {
            row.push(Cell::text(format!(
                "{} to {}",
                fmt::pct(r.share_min[k]),
                fmt::pct(r.share_max[k])
            )));
        }
        t.rows.push(row);
    }
    t
}

fn verdicts_table(lines: &[VerdictLine]) -> Table {
    let mut t = table(
        "full-size-verdicts",
        "What memcal plan says of every full-size graph at batch 1, against the seed and the real cards",
        vec![
            col("Graph", false),
            col("Parameters", true),
            col("Precision profile", false),
            col("Decided by", false),
            col("The verdict in one line", false),
        ],
        "No full-size graph in the data folder.",
    );
    for l in lines {
        t.rows.push(vec![
            Cell::text(l.graph.clone()),
            Cell::num(fmt::count(l.parameters), l.parameters.to_string()),
            Cell::text(l.precision.as_str()),
            Cell::text(l.method.label()),
            Cell::text(l.why.clone()),
        ]);
    }
    t
}

fn outcomes_table(counts: &BTreeMap<Precision, OutcomeCounts>) -> Table {
    let mut t = table(
        "row-verdicts",
        "memcal plan's verdict on every shipped row, at the capacity the run ran under, against what the run did (each row's verdict is the last column of the runs tables)",
        vec![
            col("Precision profile", false),
            col("Rows", true),
            col("Right", true),
            col("Missed: \"fits\", ran out of memory", true),
            col("False alarm: \"does not fit\", completed", true),
            col("Borderline, completed", true),
            col("Borderline, ran out of memory", true),
            col("No verdict", true),
        ],
        "No row yet.",
    );
    for (p, c) in counts {
        let n = count_cell;
        t.rows.push(vec![
            Cell::text(p.as_str()),
            n(c.rows),
            n(c.right),
            n(c.missed_oom),
            n(c.false_alarm),
            n(c.borderline_completed),
            n(c.borderline_oom),
            n(c.no_verdict),
        ]);
    }
    t
}

/// The section from the plan's evidence, the full-size graphs' verdicts and the outcomes of
/// the verdicts on the shipped rows.
pub fn view(
    ev: &Evidence,
    lines: &[VerdictLine],
    outcomes: &BTreeMap<Precision, OutcomeCounts>,
) -> CardsView {
    let context = ev.real_cards.first().map_or(0, |c| c.context_bytes);
    let usable = match &ev.allocator_overhead {
        Some(o) => format!(
            "Usable = (reported total - CUDA context) / the caching allocator's overhead. The context is taken as {} ({}). The overhead is the median ratio of reserved to allocated peak over the {} completed GPU runs of at least 1 GB: {} (q95 {}, largest {}; highest in uncapped runs, where the allocator never has to release its cache). The six-factor plan and the simulator's allocated peak are compared with the usable bytes; the simulator's reserved peak, which already holds the overhead, with the total less the context. The seed cards (16, 24, 40 and 80 GB at 10^9 bytes) stay in memcal plan's list for comparison.",
            units::both(context as f64),
            crate::plan::cards::CUDA_CONTEXT_SOURCE,
            fmt::count(o.rows),
            fmt::ratio(o.median_ratio),
            fmt::ratio(o.q95_ratio),
            fmt::ratio(o.max_ratio),
        ),
        None => format!(
            "No completed GPU run yet: usable = reported total - CUDA context ({}), with no allocator overhead measured.",
            units::both(context as f64)
        ),
    };
    CardsView {
        usable,
        cards: cards_table(ev),
        decides: "memcal plan's verdict comes from the method with the better record on the job's precision profile: fewer missed out-of-memory checks (as a share of the did-not-fit checks), then a smaller median |error|. The six-factor plan's record is its refit without every family that shares an implementation block with the row's (held out by implementation, the strictest of its splits); the simulator has no fitted factor, its rules were checked on single-op fixtures (a few constants calibrated on them) and its record is every row it predicts; its CUDA cross-entropy rule was revised after the first GPU comparison, so those families' GPU figures are not held out (docs/simulator.md). The simulator decides only where it has rules for every op of the graph. Each method's bound is its estimate times its own q95 of measured over predicted on those rows, never below the phase floor or the bound floor.".to_string(),
        methods: methods_table(ev),
        range: "memcal plan compares a job with the range of its profile's fitted rows: parameters, predicted peak and each feature's share of the six features' sum, and says what lies outside and by how much (times beyond the range, or percentage points for a share). Outside the range the bound is the larger of both methods' bounds; where only the six-factor plan covers the job, its verdict is refused.".to_string(),
        ranges: ranges_table(ev),
        verdicts: verdicts_table(lines),
        row_outcomes: outcomes_table(outcomes),
    }
}
