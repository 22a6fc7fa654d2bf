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
        let (profile_title, _) = headline::profile_title(cal, *p);
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

/// The measured value a chart draws: the peak, or the capacity an out-of-memory run failed on.
fn measured_point(r: &RowResult) -> Option<(f64, bool)> {
    match (r.status, r.measured_bytes, r.oom_capacity_bytes) {
        (RunStatus::Completed, Some(m), _) => Some((m as f64, false)),
        (RunStatus::Oom, _, Some(c)) => Some((c as f64, true)),
        _ => None,
    }
}

/// Every `step`-th of `n` items, so that at most [`CHART_POINTS_LIMIT`] remain.
fn chart_step(n: usize) -> usize {
    n.div_ceil(CHART_POINTS_LIMIT).max(1)
}

/// A scatter chart of `method` over `rows`, and how many runs it stands for: above
/// [`CHART_POINTS_LIMIT`] points it draws every k-th in run-id order.
pub(super) fn scatter<'r>(
    ctx: &Ctx,
    method: Method,
    file: String,
    title: String,
    rows: impl Iterator<Item = &'r RowResult> + Clone,
) -> (ScatterChart, usize) {
    let point = |r: &RowResult| -> Option<(f64, f64, bool)> {
        let p = *r.predictions.get(&method)?;
        let (m, oom) = measured_point(r)?;
        Some((p, m, oom))
    };
    let total = rows.clone().filter(|r| point(r).is_some()).count();
    let step = chart_step(total);
    let points = rows
        .filter_map(|r| point(r).map(|p| (r, p)))
        .step_by(step)
        .map(|(r, (p, m, oom))| ScatterPoint {
            run_id: r.run_id.to_string(),
            family: r.family.to_string(),
            predicted_bytes: p,
            measured_bytes: m,
            oom,
        })
        .collect();
    (
        ScatterChart {
            file,
            title,
            x_label: format!("predicted by {}", method_name(method)),
            families: ctx.families.clone(),
            points,
        },
        total,
    )
}

/// ` (every 3rd of them drawn, in run-id order)` when a chart draws a sample; empty otherwise.
fn sample_note(drawn: usize, total: usize) -> String {
    if drawn == total {
        String::new()
    } else {
        format!(
            " ({} of them drawn: every {}th in run-id order)",
            fmt::count(drawn as u64),
            chart_step(total)
        )
    }
}

/// The caps the chart's out-of-memory crosses sit at, in GB with their GiB: the axes are in
/// GB and the caps were set in GiB. Empty when no run ran out of memory.
fn caps_note(c: &ScatterChart) -> String {
    let caps: std::collections::BTreeSet<u64> = c
        .points
        .iter()
        .filter(|p| p.oom)
        .map(|p| p.measured_bytes as u64)
        .collect();
    if caps.is_empty() {
        return String::new();
    }
    let caps: Vec<String> = caps.iter().map(|&b| units::both(b as f64)).collect();
    format!(
        "; out-of-memory crosses at {} {}",
        if caps.len() == 1 {
            "the cap"
        } else {
            "the caps"
        },
        caps.join(", ")
    )
}

pub(super) fn chart_ref(c: &ScatterChart, total: usize, what: &str) -> ChartRef {
    ChartRef {
        src: format!("charts/{}", c.file),
        alt: format!(
            "Log-log scatter of measured peak against {what} for {}{}, each architecture family in its own colour and shape, with the line measured = predicted and a band of ±{:.0}%; out-of-memory runs are crosses at the capacity they failed on.",
            fmt::runs(total as u64),
            sample_note(c.points.len(), total),
            crate::engine::WITHIN * 100.0
        ),
        caption: format!(
            "{}; log axes, each tick with its unit (GB or MB){}",
            c.title,
            caps_note(c)
        ),
    }
}
