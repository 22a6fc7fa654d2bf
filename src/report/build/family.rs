//! A family page: its facts (runs, graphs, held-out error per profile), its chart, its note
//! and its runs table or the links to its runs pages.

use super::*;

/// Family `f`'s page from its `rows` (run-id order), with `links` to its runs pages when the
/// runs table is split (its own table otherwise), and its charts to draw (one per precision profile with rows).
pub(super) fn page<'r>(
    ctx: &Ctx,
    f: &str,
    rows: impl ExactSizeIterator<Item = &'r RowResult> + Clone,
    links: &[Link],
    nav_links: &[Link],
) -> (FamilyPage, Vec<Chart>) {
    let n_rows = rows.len();
    let report = ctx.cal.families.get(f);
    let mut facts = vec![fact("Runs counted", fmt::count(n_rows as u64))];
    if let Some(r) = report {
        facts.push(fact("Graphs", r.graphs.join(", ")));
        // Graphs that approximate: each with how many approximations and the first.
        let approximate: Vec<String> = r
            .graphs
            .iter()
            .filter_map(|g| {
                let a = ctx.cal.approximate_graphs.get(g)?;
                let at = a[0]
                    .node
                    .as_deref()
                    .map_or(String::new(), |n| format!("`{n}`: "));
                Some(match a.len() {
                    1 => format!("{g} (1 approximation: {at}{})", a[0].text),
                    n => format!("{g} ({n} approximations; first {at}{})", a[0].text),
                })
            })
            .collect();
        if !approximate.is_empty() {
            facts.push(fact("Approximate graphs", approximate.join("; ")));
        }
        // Each profile's rows alone (measured on different devices, never pooled).
        let groups = r
            .by_profile
            .iter()
            .map(|(p, ms)| (format!(", {}", p.as_str()), ms));
        for (suffix, ms) in groups {
            let Some(m) = ms.get(&Method::PlanHeldOutArchitecture) else {
                continue;
            };
            facts.push(fact(
                &format!("Held-out-by-architecture median |error|{suffix}"),
                fmt::or_dash(
                    m.median_abs_rel_error
                        .map(|x| fmt::pct_interval(x, m.median_interval, m.error_rows, m.few_runs)),
                ),
            ));
            facts.push(fact(
                &format!(
                    "Held-out-by-architecture within {}{suffix}",
                    fmt::within_band()
                ),
                fmt::or_dash(
                    m.within_25pct.map(|x| {
                        fmt::pct_interval(x, m.within_25pct_interval, m.error_rows, false)
                    }),
                ),
            ));
            facts.push(fact(
                &format!("Held-out did-not-fit checks called fits{suffix}"),
                format!(
                    "{} of {}",
                    fmt::count(m.missed_oom.len() as u64),
                    fmt::count(m.did_not_fit_checks)
                ),
            ));
        }
    }
    let file = ctx.family_files[f].clone();
    // One chart per precision profile: each profile is measured on its own device and its
    // held-out predictions come from its own fits, so no chart pools them.
    let mut charts = Vec::new();
    let mut drawn = Vec::new();
    for &p in ctx.cal.fits.keys() {
        let chart_file = format!("{}-{}.svg", file.trim_end_matches(".html"), p.as_str());
        let (c, total) = scatter(
            ctx,
            Method::PlanHeldOutArchitecture,
            chart_file,
            format!(
                "{f}, {}: {}, {}",
                p.as_str(),
                method_name(Method::PlanHeldOutArchitecture),
                ctx.runs_label
            ),
            rows.clone().filter(|r| r.precision == p),
        );
        if !c.points.is_empty() {
            charts.push(chart_ref(
                &c,
                total,
                method_name(Method::PlanHeldOutArchitecture),
            ));
            drawn.push(Chart::Scatter(c));
        }
    }
    let (runs, runs_pages_of) = if !links.is_empty() {
        (None, links.to_vec())
    } else {
        (
            Some(runs_table(
                "runs",
                &format!("Every counted run of {f}"),
                false,
            )),
            Vec::new(),
        )
    };
    let page = FamilyPage {
        meta: PageMeta {
            file,
            title: format!("Family {f} — {TITLE}"),
            nav: nav_links.to_vec(),
        },
        family: f.to_string(),
        facts,
        charts,
        note_html: ctx.prose.misses.get(f).cloned(),
        runs,
        runs_pages: runs_pages_of,
    };
    (page, drawn)
}
