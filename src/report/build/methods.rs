//! The methods sections: every method's error and card checks per precision profile, and the
//! simulator's reserved peak against the measured one.

use super::*;

/// Every method over each precision profile's rows alone: the profiles are measured on different
/// devices, so no figure pools them (one profile's rows never flatter or spoil the other's).
pub(super) fn methods_by_profile_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "methods-by-profile",
        "Each method's error and card checks, per precision profile",
        profile_metrics_columns("Method"),
        "No method has predicted a row yet.",
    );
    for (p, pf) in &ctx.cal.fits {
        for m in Method::ALL {
            if let Some(mm) = pf.methods.get(&m) {
                t.rows
                    .push(profile_metrics_cells(*p, Cell::text(method_name(m)), mm));
            }
        }
    }
    t
}

/// The simulator's reserved peak (the CUDA caching-allocator replay) against the rows'
/// measured reserved peak, per profile: apart from the methods, which predict allocated bytes.
pub(super) fn simulated_reserved_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "simulated-reserved",
        "The simulated training step's reserved peak (a replay of the CUDA caching allocator), against each completed GPU run's measured reserved peak",
        vec![
            col("Precision profile", false),
            col("Rows", true),
            col("Median |error|", true),
            col("Max |error|", true),
            col("Rows >= 1 GB", true),
            col("Median |error| (>= 1 GB)", true),
            col("Max |error| (>= 1 GB)", true),
        ],
        "No row has a simulated reserved peak yet (only CUDA rows have one).",
    );
    for (p, r) in &ctx.cal.simulated_reserved {
        t.rows.push(vec![
            Cell::text(p.as_str()),
            count_cell(r.rows),
            opt_pct(r.median_abs_rel_error),
            opt_pct(r.max_abs_rel_error),
            count_cell(r.large_rows),
            opt_pct(r.large_median_abs_rel_error),
            opt_pct(r.large_max_abs_rel_error),
        ]);
    }
    t
}
