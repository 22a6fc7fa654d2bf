//! The out-of-sample section: held out by architecture, the implementation groups and held out by
//! implementation, by regime, and after the fit.

use super::*;

pub(super) fn out_of_sample(ctx: &Ctx) -> Vec<Table> {
    let cal = ctx.cal;
    let arch = per_family(
        ctx,
        "oos-architecture",
        "By architecture: each family predicted by factors refitted without it",
        Method::PlanHeldOutArchitecture,
    );
    let mut groups = table(
        "implementation-groups",
        "Implementation groups: families whose graphs share an implementation block (an attention, mixture-of-experts, recurrent or convolution op, built by one harness builder and simulated by one rule) are held out together",
        vec![
            col("Families held out together", false),
            col("Blocks they share", false),
        ],
        "No family yet.",
    );
    for g in &cal.implementation_groups {
        groups.rows.push(vec![
            Cell::text(g.families.join(", ")),
            Cell::text(if g.shared_blocks.is_empty() {
                "none (a group of its own)".to_string()
            } else {
                g.shared_blocks.join(", ")
            }),
        ]);
    }
    let by_impl = per_family(
        ctx,
        "oos-implementation",
        "By implementation: each family predicted by factors refitted without its whole implementation group",
        Method::PlanHeldOutImplementation,
    );
    let by_regime = one_method(
        ctx,
        "oos-regime",
        "By regime: rows of regimes outside the training regimes, predicted by the shipped factors",
        "No held-out regime has rows yet.",
        Method::PlanHeldOutRegime,
    );
    let after = one_method(
        ctx,
        "oos-after-fit",
        "After the fit: rows measured after the factors were fixed",
        "No row has been measured after the fit yet.",
        Method::PlanAfterFit,
    );
    vec![arch, groups, by_impl, by_regime, after]
}

/// One row per precision profile and family with `method`'s metrics over that family's rows of
/// that profile alone (the profiles are measured on different devices and never pooled).
fn per_family(ctx: &Ctx, id: &str, caption: &str, method: Method) -> Table {
    let mut t = table(
        id,
        caption,
        profile_metrics_columns("Family"),
        "No family has held-out predictions yet.",
    );
    for &p in ctx.cal.fits.keys() {
        for (f, rep) in &ctx.cal.families {
            if let Some(m) = rep.by_profile.get(&p).and_then(|ms| ms.get(&method)) {
                let family = Cell::text(f).link(ctx.family_href(f));
                t.rows.push(profile_metrics_cells(p, family, m));
            }
        }
    }
    t
}

/// One row per precision profile with `method`'s metrics over that profile's rows (none before
/// the method has a row there).
fn one_method(ctx: &Ctx, id: &str, caption: &str, empty: &str, method: Method) -> Table {
    let mut t = table(id, caption, profile_metrics_columns("Method"), empty);
    for (p, pf) in &ctx.cal.fits {
        if let Some(m) = pf.methods.get(&method).filter(|m| m.rows > 0) {
            t.rows.push(profile_metrics_cells(
                *p,
                Cell::text(method_name(method)),
                m,
            ));
        }
    }
    t
}
