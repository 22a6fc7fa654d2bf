//! The upper-bound section's tables: the multipliers and the bound's verdict counts.

use super::*;

pub(super) fn multipliers_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "multipliers",
        "The upper-bound multipliers, per precision profile",
        vec![
            col("Profile", false),
            col("Multiplier", false),
            col("Held-out ratios", true),
            col("From today's held-out ratios", true),
            col("Used by the checks", true),
            col("In data/factors.json", true),
        ],
        "",
    );
    let q = |v: Option<f64>| match v {
        Some(x) => Cell::num(fmt::ratio(x), fmt::ratio(x)),
        None => Cell::num("none (no ratios)", ""),
    };
    for (p, pf) in &ctx.cal.fits {
        let (u, file) = (&pf.upper, ctx.factors.upper_for(*p));
        let n = u.ratios.len() as u64;
        for (name, today, interval, used, in_file) in [
            ("q90", u.q90, u.q90_interval, u.q90_used, file.q90),
            ("q95", u.q95, u.q95_interval, u.q95_used, file.q95),
        ] {
            t.rows.push(vec![
                Cell::text(p.as_str()),
                Cell::text(name),
                count_cell(n),
                match today {
                    Some(x) => Cell::num(fmt::ratio_interval(x, interval, n), fmt::ratio(x)),
                    None => q(None),
                },
                Cell::num(fmt::ratio(used), fmt::ratio(used)),
                Cell::num(fmt::ratio(in_file), fmt::ratio(in_file)),
            ]);
        }
    }
    t
}

pub(super) fn bound_counts_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "bound-counts",
        "The bound's three verdicts on did-not-fit and fit checks",
        vec![
            col("Multiplier", false),
            col("Did not fit: called fits", true),
            col("Did not fit: borderline", true),
            col("Did not fit: does not fit", true),
            col("Fit: fits", true),
            col("Fit: borderline", true),
            col("Fit: does not fit", true),
        ],
        "",
    );
    for (name, b) in [("q90", &ctx.cal.bound.q90), ("q95", &ctx.cal.bound.q95)] {
        let dnf = &b.on_did_not_fit;
        let fit = &b.on_fit;
        let missed = count_cell(dnf.fits);
        t.rows.push(vec![
            Cell::text(name),
            if dnf.fits > 0 {
                missed.class("bad")
            } else {
                missed
            },
            count_cell(dnf.borderline),
            count_cell(dnf.does_not_fit),
            count_cell(fit.fits),
            count_cell(fit.borderline),
            count_cell(fit.does_not_fit),
        ]);
    }
    t
}

/// Section 5's charts, one per profile with ratios (the distribution its multipliers are read
/// from), and their references on the page.
pub(super) fn ratio_charts(ctx: &Ctx) -> (Vec<Chart>, Vec<ChartRef>) {
    let cal = ctx.cal;
    let mut charts = Vec::new();
    let mut upper_charts = Vec::new();
    for (p, pf) in &cal.fits {
        let u = &pf.upper;
        if u.ratios.is_empty() {
            continue;
        }
        let file = format!("upper-bound-ratios-{}.svg", p.as_str());
        let c = RatioChart {
            file: file.clone(),
            title: format!(
                "Measured / held-out prediction, fitted {} {}",
                p.as_str(),
                ctx.runs_label
            ),
            ratios: {
                // Above the limit, evenly spaced in ratio order (the first and last included).
                let n = u.ratios.len();
                let drawn = n.min(CHART_POINTS_LIMIT);
                (0..drawn)
                    .map(|i| {
                        let j = if drawn > 1 {
                            i * (n - 1) / (drawn - 1)
                        } else {
                            0
                        };
                        u.ratios[j].1
                    })
                    .collect()
            },
            q90: u.q90_used,
            q95: u.q95_used,
            q90_label: format!("q90 = {}", fmt::ratio(u.q90_used)),
            q95_label: format!("q95 = {}", fmt::ratio(u.q95_used)),
        };
        charts.push(Chart::Ratio(c));
        upper_charts.push(ChartRef {
            src: format!("charts/{file}"),
            alt: format!(
                "Each of {}{} of the {} profile as a dot at its ratio of measured peak to held-out prediction, in ratio order, with vertical lines at ratio 1, q90 = {} and q95 = {}.",
                fmt::runs(u.ratios.len() as u64),
                if u.ratios.len() > CHART_POINTS_LIMIT {
                    format!(
                        " ({} of them drawn, evenly spaced in ratio order)",
                        fmt::count(CHART_POINTS_LIMIT as u64)
                    )
                } else {
                    String::new()
                },
                p.as_str(),
                fmt::ratio(u.q90_used),
                fmt::ratio(u.q95_used)
            ),
            caption: format!(
                "The distribution the {} upper-bound multipliers are read from.",
                p.as_str()
            ),
        });
    }
    (charts, upper_charts)
}
