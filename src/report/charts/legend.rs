//! A legend drawn in its own panel beside the plot, so it never covers a point.

use super::style;
use plotters::coord::Shift;
use plotters::prelude::*;

/// The marker of a legend entry.
pub enum Marker {
    /// A family's point: its shape and colour.
    Point(style::Shape, RGBColor),
    Cross(RGBColor),
    Line(RGBColor),
    Band(RGBColor),
}

/// Where the first entry sits.
fn top() -> i32 {
    style::MARGIN as i32 + style::CAPTION_SIZE as i32 + 16
}

/// How tall a legend of `n` entries is, from the top of its panel to below its last entry.
pub fn height(n: usize) -> u32 {
    (top() + n as i32 * style::LEGEND_LINE) as u32
}

/// Draws `entries` top-down in `area`.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(Marker, String)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = (style::FONT, style::LABEL_SIZE)
        .into_font()
        .color(&style::INK);
    let x = 8;
    let mut y = top();
    for (marker, label) in entries {
        match marker {
            Marker::Point(shape, c) => {
                match style::shape_outline(*shape, style::POINT_RADIUS as i32) {
                    None => area.draw(&Circle::new((x + 6, y), style::POINT_RADIUS, c.filled()))?,
                    Some(outline) => area.draw(&Polygon::new(
                        outline
                            .into_iter()
                            .map(|(dx, dy)| (x + 6 + dx, y + dy))
                            .collect::<Vec<_>>(),
                        c.filled(),
                    ))?,
                }
            }
            Marker::Cross(c) => area.draw(&Cross::new(
                (x + 6, y),
                style::OOM_MARKER_SIZE,
                c.stroke_width(2),
            ))?,
            Marker::Line(c) => area.draw(&PathElement::new(
                vec![(x, y), (x + 14, y)],
                c.stroke_width(2),
            ))?,
            Marker::Band(c) => {
                area.draw(&Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()))?
            }
        }
        area.draw(&Text::new(label.clone(), (x + 22, y - 7), font.clone()))?;
        y += style::LEGEND_LINE;
    }
    Ok(())
}
