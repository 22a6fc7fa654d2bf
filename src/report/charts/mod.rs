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

/// The ticks of a log axis over `lo..hi` (values in GB): 1, 2 and 5 times each power of ten
/// in the range; where that makes more than [`style::LOG_AXIS_MAX_TICKS`], the powers of ten
/// alone; where that makes fewer than two, every whole multiple of a power of ten (1 to 9).
/// Ascending, each value once.
pub(crate) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let with = |mantissas: &[u32]| -> Vec<f64> {
        let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        (first..=last)
            .flat_map(|k| mantissas.iter().map(move |&m| f64::from(m) * 10f64.powi(k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let ticks = with(&[1, 2, 5]);
    if ticks.len() > style::LOG_AXIS_MAX_TICKS {
        let decades = with(&[1]);
        if decades.len() >= 2 {
            return decades;
        }
    }
    if ticks.len() >= 2 {
        ticks
    } else {
        with(&[1, 2, 3, 4, 5, 6, 7, 8, 9])
    }
}

/// A size tick label from a value in GB, in the unit that keeps it a short number: `20 GB`,
/// `1 GB`, `500 MB`, `10 MB`, `2 kB`.
pub(crate) fn size_tick_label(gb: f64) -> String {
    if !(gb.is_finite() && gb > 0.0) {
        return String::new();
    }
    if gb >= 1.0 {
        format!("{} GB", tick_label(gb))
    } else if gb >= 1e-3 {
        format!("{} MB", tick_label(gb * 1e3))
    } else {
        format!("{} kB", tick_label(gb * 1e6))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_ticks_reach_below_one_gb() {
        let labels = |lo: f64, hi: f64| -> Vec<String> {
            super::log_ticks(lo, hi)
                .iter()
                .map(|v| super::size_tick_label(*v))
                .collect()
        };
        // Under a decade and a half: 1, 2 and 5 times a power of ten, MB below 1 GB.
        assert_eq!(
            labels(0.15, 8.0),
            ["200 MB", "500 MB", "1 GB", "2 GB", "5 GB"]
        );
        // Many decades: the powers of ten.
        assert_eq!(
            labels(0.0009, 300.0),
            ["1 MB", "10 MB", "100 MB", "1 GB", "10 GB", "100 GB"]
        );
        // Within one step of 1-2-5: every whole multiple.
        assert_eq!(labels(2.1, 4.5), ["3 GB", "4 GB"]);
        assert_eq!(labels(0.0021, 0.0045), ["3 MB", "4 MB"]);
        assert!(super::log_ticks(0.0, 1.0).is_empty());
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(super::tick_label(250.0), "250");
        assert_eq!(super::tick_label(12.5), "12.5");
        assert_eq!(super::tick_label(1.0), "1");
        assert_eq!(super::tick_label(0.125), "0.125");
    }
}
