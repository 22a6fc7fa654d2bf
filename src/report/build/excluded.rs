//! The rows not counted, with their computed reasons.

use super::*;

pub(super) fn excluded_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "excluded",
        "Rows not counted, with the reason the engine found",
        vec![
            col("Run", false),
            col("File", false),
            col("Reason", false),
            col("Detail", false),
        ],
        "Every row read is counted.",
    );
    for e in &ctx.cal.exclusions {
        t.rows.push(vec![
            Cell::text(&e.run_id),
            Cell::text(&e.file),
            Cell::text(reason_name(e.reason)),
            Cell::markdown(&e.detail),
        ]);
    }
    t
}
