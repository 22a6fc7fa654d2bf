//! The index page: every section in page order, each from its own builder.

use super::*;

/// The index, its sections in page order; `scatter_refs` and `upper_charts` are the charts
/// the build already made, `runs_pages` the runs pages it links.
pub(super) fn page(
    ctx: &Ctx,
    nav: &[Link],
    scatter_refs: Vec<ChartGroup>,
    upper_charts: Vec<ChartRef>,
    runs_pages: Vec<Link>,
) -> IndexPage {
    let cal = ctx.cal;
    IndexPage {
        meta: PageMeta {
            file: "index.html".into(),
            title: TITLE.into(),
            nav: nav.to_vec(),
        },
        empty: cal.totals.inputs == 0,
        empty_text: "No measured rows yet: the sections below fill in once run rows are added under data/runs/ and the site is rebuilt.".into(),
        prose: Prose {
            headline: ctx.block("headline"),
            scatter: ctx.block("scatter"),
            methods: ctx.block("methods"),
            did_not_fit: ctx.block("did_not_fit"),
            upper: ctx.block("upper"),
            how: ctx.block("how"),
            out_of_sample: ctx.block("out_of_sample"),
            misses: ctx.block("misses"),
            excluded: ctx.block("excluded"),
            runs: ctx.block("runs"),
        },
        headline: headline::headline(ctx),
        scatter: scatter_refs,
        methods_by_profile: methods_by_profile_table(ctx),
        simulated_reserved: simulated_reserved_table(ctx),
        did_not_fit: did_not_fit_table(ctx),
        upper: UpperView {
            charts: upper_charts,
            multipliers: multipliers_table(ctx),
            counts: bound_counts_table(ctx),
        },
        how: how(ctx),
        out_of_sample: out_of_sample(ctx),
        misses: misses(ctx),
        misses_by_family: misses::misses_by_family(ctx),
        excluded: excluded_table(ctx),
        all_runs: AllRunsView {
            summary: format!(
                "{} counted, {} not counted. The runs table lists every counted run with every method's prediction.",
                fmt::runs(cal.rows.len() as u64),
                fmt::runs(cal.totals.excluded)
            ),
            pages: runs_pages,
            downloads: downloads(),
        },
        cards: None,
        strategies: None,
        real: None,
    }
}

/// The index's long tables, each moved to a page of its own (the index keeps its caption, its
/// row count and the link): every did-not-fit check and every row not counted (with their
/// sections' prose), the accelerate reproduction, and the out-of-sample tables per family
/// (a row per profile and family).
pub(super) fn move_tables(ctx: &Ctx, index: &mut IndexPage, nav: &[Link]) -> Vec<TablePage> {
    let mut pages: Vec<TablePage> = index
        .out_of_sample
        .iter_mut()
        .filter_map(|t| {
            let (file, title) = match t.id.as_str() {
                "oos-architecture" => (
                    "held-out-by-architecture.html",
                    "Out of sample, by architecture",
                ),
                "oos-implementation" => (
                    "held-out-by-implementation.html",
                    "Out of sample, by implementation",
                ),
                _ => return None,
            };
            Some(move_out(t, file, title, String::new(), nav))
        })
        .collect();
    pages.extend([
        move_out(
            &mut index.did_not_fit,
            "did-not-fit.html",
            "Every time a run did not fit a card",
            ctx.block("did_not_fit"),
            nav,
        ),
        move_out(
            &mut index.excluded,
            "not-counted.html",
            "Not counted",
            ctx.block("excluded"),
            nav,
        ),
        move_out(
            &mut index.misses_by_family,
            "known-misses.html",
            "Every known miss, per family",
            format!("{}{}", ctx.block("misses"), misses::notes_html(ctx)),
            nav,
        ),
        move_out(
            &mut index.how.accelerate,
            "accelerate.html",
            "The accelerate reproduction",
            String::new(),
            nav,
        ),
    ]);
    pages
}
