//! The distribution of measured / held-out prediction: every ratio as a dot, in the order the
//! engine sorted them, with the q90 and q95 multipliers and ratio = 1 as vertical lines.

use super::legend::{self, Marker};
use super::style;
use plotters::prelude::*;
use serde::Serialize;

/// The ratio chart's numbers, as the engine computed them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatioChart {
    /// File name under `charts/`.
    pub file: String,
    pub title: String,
    /// Measured / held-out prediction, ascending (the engine's order).
    pub ratios: Vec<f64>,
    pub q90: f64,
    pub q95: f64,
    /// Labels printed next to the two lines (formatted by the view model).
    pub q90_label: String,
    pub q95_label: String,
}

/// Draws the chart into an SVG string.
pub fn render(c: &RatioChart) -> Result<String, String> {
    let (lo, hi) = c
        .ratios
        .iter()
        .chain([&c.q90, &c.q95, &1.0])
        .filter(|v| v.is_finite())
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let pad = ((hi - lo) * 0.05).max(0.05);
    let (lo, hi) = ((lo - pad).max(0.0), hi + pad);
    let n = c.ratios.len().max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, style::RATIO_SIZE).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e}", c.file);
        root.fill(&style::BACKGROUND).map_err(e)?;
        let (plot, legend_area) =
            root.split_horizontally(style::RATIO_SIZE.0 - style::LEGEND_WIDTH);
        let mut chart = super::frame(&plot, &c.title)
            .build_cartesian_2d(lo..hi, 0.0..n + 1.0)
            .map_err(e)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc("measured / held-out prediction")
            .y_desc("runs, in ratio order")
            .x_label_formatter(&|v| format!("{v:.2}"))
            .y_label_formatter(&|v| format!("{v:.0}"));
        super::mesh_style(&mut mesh).draw().map_err(e)?;
        let dot = style::family_colour(0);
        chart
            .draw_series(
                c.ratios
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.is_finite())
                    .map(|(i, r)| {
                        Circle::new((*r, (i + 1) as f64), style::POINT_RADIUS, dot.filled())
                    }),
            )
            .map_err(e)?;
        let mut entries = vec![(
            Marker::Point(style::Shape::Dot, dot),
            "one fitted run".to_string(),
        )];
        for (at, colour, label) in [
            (1.0, style::PARITY, "measured = predicted"),
            (c.q90, style::Q90, c.q90_label.as_str()),
            (c.q95, style::Q95, c.q95_label.as_str()),
        ] {
            chart
                .draw_series(LineSeries::new(
                    vec![(at, 0.0), (at, n + 1.0)],
                    colour.stroke_width(2),
                ))
                .map_err(e)?;
            entries.push((Marker::Line(colour), label.to_string()));
        }
        legend::draw(&legend_area, &entries).map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}
