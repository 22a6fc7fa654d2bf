//! The did-not-fit table: every card check a run did not fit, with every method's verdict.

use super::*;

pub(super) fn did_not_fit_table(ctx: &Ctx) -> Table {
    let mut columns = vec![
        col("Run", false),
        col("Regime", false),
        col("Card", false),
        col("What happened", false),
    ];
    for m in Method::ALL {
        columns.push(col(method_name(m), false));
    }
    columns.push(col("Bound at q90", false));
    columns.push(col("Bound at q95", false));
    let mut t = table(
        "did-not-fit",
        "Every check where the run did not fit the card, and what each method said",
        columns,
        "No run has failed to fit a card yet.",
    );
    let verdict_cell = |v: Option<Verdict>| match v {
        None => Cell::text(fmt::MISSING),
        Some(Verdict::Fits) => Cell::text(verdict_name(Verdict::Fits)).class("bad"),
        Some(Verdict::Borderline) => Cell::text(verdict_name(Verdict::Borderline)).class("warn"),
        Some(Verdict::DoesNotFit) => Cell::text(verdict_name(Verdict::DoesNotFit)).class("good"),
    };
    let total: usize = ctx
        .cal
        .rows
        .iter()
        .map(|r| {
            r.checks
                .iter()
                .filter(|c| c.truth == Truth::DoesNotFit)
                .count()
        })
        .sum();
    if total > DID_NOT_FIT_LIMIT {
        t.caption = format!(
            "{}: the first {} in run-id order of {}; memory-calibration.json has every check",
            t.caption,
            fmt::count(DID_NOT_FIT_LIMIT as u64),
            fmt::count(total as u64)
        );
    }
    'rows: for r in &ctx.cal.rows {
        for c in r.checks.iter().filter(|c| c.truth == Truth::DoesNotFit) {
            if t.rows.len() == DID_NOT_FIT_LIMIT {
                break 'rows;
            }
            let what = match (r.status, r.measured_bytes, r.oom_capacity_bytes) {
                (RunStatus::Oom, _, Some(cap)) => {
                    format!("ran out of memory at {}", ctx.card_name(&r.regime, cap))
                }
                (_, Some(m), _) => format!("peaked at {}", units::both(m as f64)),
                _ => status_name(r.status).to_string(),
            };
            let mut row = vec![
                Cell::text(&r.run_id),
                Cell::text(ctx.regime_label(&r.regime)),
                Cell::text(ctx.card_name(&r.regime, c.card_bytes)),
                Cell::text(what),
            ];
            for m in Method::ALL {
                row.push(match c.fits.get(&m) {
                    None => Cell::text(fmt::MISSING),
                    Some(true) => Cell::text("fits").class("bad"),
                    Some(false) => Cell::text("does not fit").class("good"),
                });
            }
            row.push(verdict_cell(c.bound_q90));
            row.push(verdict_cell(c.bound_q95));
            t.rows.push(row);
        }
    }
    t
}
