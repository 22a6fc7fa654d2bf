//! The scatter charts of the index: per precision profile (each measured on its own device)
//! and method, predicted against measured over every row.

use super::*;

/// The charts and their groups on the page, one group per profile with metrics.
pub(super) fn scatter_charts(ctx: &Ctx) -> (Vec<Chart>, Vec<ChartGroup>) {
    let cal = ctx.cal;
    let mut charts = Vec::new();
    let mut scatter_refs = Vec::new();
    // One chart per precision profile (each measured on its own device) and method.
    for (p, pf) in &cal.fits {
        if pf.methods.is_empty() {
            continue;
        }
        let devices = cal
            .measured
            .devices_by_profile
            .get(p)
            .cloned()
            .unwrap_or_default();
        let (profile_title, _) = headline::profile_title(&devices, p.as_str());
        let mut group = ChartGroup {
            heading: profile_title.clone(),
            charts: Vec::new(),
        };
        for m in SCATTER_METHODS {
            let (c, total) = scatter(
                ctx,
                m,
                format!("scatter-{}-{}.svg", m.as_str(), p.as_str()),
                format!("{}: {profile_title} runs", method_name(m)),
                cal.rows.iter().filter(|r| r.precision == *p),
            );
            if c.points.is_empty() {
                continue;
            }
            group.charts.push(chart_ref(&c, total, method_name(m)));
            charts.push(Chart::Scatter(c));
        }
        if !group.charts.is_empty() {
            scatter_refs.push(group);
        }
    }
    (charts, scatter_refs)
}
