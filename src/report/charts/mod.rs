//! SVG charts, drawn with plotters into a `String`. Each chart kind lives in its own file and
//! takes numbers the engine computed; a chart function only scales, places and labels them.
//! Sizes and colours come from [`style`].

pub mod legend;
pub mod ratio;
pub mod scatter;
pub mod style;

use serde::Serialize;

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

#[cfg(test)]
mod tests {
    #[test]
    fn tick_labels_are_short() {
        assert_eq!(super::tick_label(250.0), "250");
        assert_eq!(super::tick_label(12.5), "12.5");
        assert_eq!(super::tick_label(1.0), "1");
        assert_eq!(super::tick_label(0.125), "0.125");
    }
}
