//! SVG charts, drawn with plotters into a `String`. Each chart kind lives in its own file and
//! takes numbers the engine computed; a chart function only scales, places and labels them.
//! Sizes and colours come from [`style`].

pub mod legend;
pub mod ratio;
pub mod scatter;
pub mod style;

use plotters::chart::{ChartBuilder, MeshStyle};
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::drawing::DrawingArea;
use plotters::prelude::{DrawingBackend, IntoFont};
use serde::Serialize;

/// The frame every chart shares: the title, the margin and the label areas.
fn frame<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.caption(title, (style::FONT, style::CAPTION_SIZE).into_font())
        .margin(style::MARGIN)
        .x_label_area_size(style::X_LABEL_AREA)
        .y_label_area_size(style::Y_LABEL_AREA);
    b
}

/// The mesh's look, the same on every chart: fonts, grid and axis colours.
fn mesh_style<'m, 'a, 'b, X, Y, XT, YT, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
    DB: DrawingBackend,
{
    mesh.label_style((style::FONT, style::LABEL_SIZE))
        .axis_desc_style((style::FONT, style::LABEL_SIZE))
        .light_line_style(style::BACKGROUND)
        .bold_line_style(style::GRID)
        .axis_style(style::INK)
}

/// One chart to draw: where it goes and what it shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Chart {
    /// Predicted against measured, log-log.
    Scatter(scatter::ScatterChart),
    /// The distribution of measured / held-out prediction, with q90 and q95 marked.
    Ratio(ratio::RatioChart),
}

impl Chart {
    /// File name under `charts/`.
    pub fn file(&self) -> &str {
        match self {
            Chart::Scatter(c) => &c.file,
            Chart::Ratio(c) => &c.file,
        }
    }

    /// The SVG text.
    pub fn render(&self) -> Result<String, String> {
        match self {
            Chart::Scatter(c) => scatter::render(c),
            Chart::Ratio(c) => ratio::render(c),
        }
    }
}

/// A tick label for a value in GB: three significant figures at most, no trailing zeros.
pub(crate) fn tick_label(v: f64) -> String {
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A log axis's tick label: only 1, 2 and 5 times a power of ten are labelled, so a dense
/// axis stays legible; other ticks keep their mark and lose their text.
pub(crate) fn log_tick_label(v: f64) -> String {
    if !(v.is_finite() && v > 0.0) {
        return String::new();
    }
    let mantissa = v / 10f64.powf(v.log10().floor());
    if [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|m| (mantissa - m).abs() < 1e-6 * m)
    {
        tick_label(v)
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_ticks_skip_crowded_values() {
        assert_eq!(super::log_tick_label(0.5), "0.5");
        assert_eq!(super::log_tick_label(20.0), "20");
        assert_eq!(super::log_tick_label(0.7), "");
        assert_eq!(super::log_tick_label(3.0), "");
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(super::tick_label(250.0), "250");
        assert_eq!(super::tick_label(12.5), "12.5");
        assert_eq!(super::tick_label(1.0), "1");
        assert_eq!(super::tick_label(0.125), "0.125");
    }
}
