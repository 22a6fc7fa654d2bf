//! Predicted against measured on log-log axes: the y = x line, the ±25% band, one colour per
//! architecture family, and out-of-memory runs drawn at the capacity they failed on with a
//! cross. The axes are in GB (10^9 bytes); each tick says its unit (MB below 1 GB).

use super::legend::{self, Marker};
use super::style;
use crate::engine::WITHIN;
use plotters::prelude::*;
use serde::Serialize;

/// One run on the chart. Bytes as the engine reports them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScatterPoint {
    pub run_id: String,
    pub family: String,
    pub predicted_bytes: f64,
    /// The measured peak, or for an out-of-memory run the capacity it failed on.
    pub measured_bytes: f64,
    pub oom: bool,
}

/// A scatter chart of one method.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScatterChart {
    /// File name under `charts/`.
    pub file: String,
    pub title: String,
    /// The x axis label (names the method).
    pub x_label: String,
    /// Families in legend order; a family's colour and shape come from its index here.
    pub families: Vec<String>,
    pub points: Vec<ScatterPoint>,
}

/// Bytes to GB for the axes.
fn gb(bytes: f64) -> f64 {
    bytes / crate::units::GB
}

/// Draws the chart into an SVG string.
pub fn render(c: &ScatterChart) -> Result<String, String> {
    let shown: Vec<&ScatterPoint> = c
        .points
        .iter()
        .filter(|p| p.predicted_bytes > 0.0 && p.measured_bytes > 0.0)
        .collect();
    // The axes span every drawn value, padded by half a decade, the same on both axes.
    let (mut lo, mut hi) = shown.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        let (a, b) = (gb(p.predicted_bytes), gb(p.measured_bytes));
        (lo.min(a).min(b), hi.max(a).max(b))
    });
    if shown.is_empty() {
        (lo, hi) = (0.1, 10.0);
    }
    let (lo, hi) = (lo / 1.6, hi * 1.6);
    let mut svg = String::new();
    {
        // The drawing grows downwards until the legend holds every entry: the band, the line,
        // each family drawn and the out-of-memory cross.
        let drawn = c
            .families
            .iter()
            .filter(|f| shown.iter().any(|p| &p.family == *f))
            .count();
        let entries_n = 2 + drawn + 2;
        let height = style::SCATTER_SIZE
            .1
            .max(legend::height(entries_n) + style::MARGIN);
        let root =
            SVGBackend::with_string(&mut svg, (style::SCATTER_SIZE.0, height)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e}", c.file);
        root.fill(&style::BACKGROUND).map_err(e)?;
        let (plot, legend_area) =
            root.split_horizontally(style::SCATTER_SIZE.0 - style::LEGEND_WIDTH);
        let (plot, _) = plot.split_vertically(style::SCATTER_SIZE.1);
        let mut chart = super::frame(&plot, &c.title)
            .build_cartesian_2d(
                (lo..hi)
                    .log_scale()
                    .with_key_points(super::log_ticks(lo, hi)),
                (lo..hi)
                    .log_scale()
                    .with_key_points(super::log_ticks(lo, hi)),
            )
            .map_err(e)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&c.x_label)
            .y_desc("measured peak")
            .x_label_formatter(&|v| super::size_tick_label(*v))
            .y_label_formatter(&|v| super::size_tick_label(*v));
        super::mesh_style(&mut mesh).draw().map_err(e)?;
        // The band between predicted x (1 - WITHIN) and x (1 + WITHIN), the engine's constant,
        // cut to the plot's square: its corners are where the band's edges meet the frame
        // (plotters moves a vertex outside the range onto the frame, which bent the band).
        let (below, above) = (1.0 - WITHIN, 1.0 + WITHIN);
        chart
            .draw_series(std::iter::once(Polygon::new(
                vec![
                    (lo, lo),
                    (lo / below, lo),
                    (hi, hi * below),
                    (hi, hi),
                    (hi / above, hi),
                    (lo, lo * above),
                ],
                style::BAND.mix(style::BAND_OPACITY).filled(),
            )))
            .map_err(e)?;
        chart
            .draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], style::INK))
            .map_err(e)?;
        let mut entries = vec![
            (
                Marker::Band(style::BAND),
                format!("within ±{:.0}%", WITHIN * 100.0),
            ),
            (Marker::Line(style::INK), "measured = predicted".to_string()),
        ];
        for (i, family) in c.families.iter().enumerate() {
            let (colour, shape) = (style::family_colour(i), style::family_shape(i));
            let mine: Vec<&&ScatterPoint> = shown.iter().filter(|p| &p.family == family).collect();
            if mine.is_empty() {
                continue;
            }
            entries.push((Marker::Point(shape, colour), family.clone()));
            let at = |p: &&&ScatterPoint| (gb(p.predicted_bytes), gb(p.measured_bytes));
            let fitted = mine.iter().filter(|p| !p.oom);
            match style::shape_outline(shape, style::POINT_RADIUS as i32) {
                None => chart
                    .draw_series(
                        fitted.map(|p| Circle::new(at(p), style::POINT_RADIUS, colour.filled())),
                    )
                    .map_err(e)?,
                Some(outline) => chart
                    .draw_series(fitted.map(|p| {
                        EmptyElement::at(at(p)) + Polygon::new(outline.clone(), colour.filled())
                    }))
                    .map_err(e)?,
            };
            chart
                .draw_series(
                    mine.iter()
                        .filter(|p| p.oom)
                        .map(|p| Cross::new(at(p), style::OOM_MARKER_SIZE, colour.stroke_width(2))),
                )
                .map_err(e)?;
        }
        entries.push((Marker::Cross(style::INK), "out of memory".to_string()));
        entries.push((
            Marker::Line(style::BACKGROUND),
            "(at its capacity)".to_string(),
        ));
        legend::draw(&legend_area, &entries).map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}
