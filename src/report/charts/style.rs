//! The one place that says how charts look: sizes, palette, marker sizes and fonts. Chart
//! functions read these constants and never pick a colour or a size of their own.

use plotters::style::RGBColor;

/// Width and height of every scatter chart, in SVG user units (pixels).
pub const SCATTER_SIZE: (u32, u32) = (760, 560);
/// Width of the legend panel on the right of a chart.
pub const LEGEND_WIDTH: u32 = 200;
/// Vertical distance between legend entries.
pub const LEGEND_LINE: i32 = 22;
/// Width and height of the ratio distribution chart.
pub const RATIO_SIZE: (u32, u32) = (760, 420);
/// Space around the plot area.
pub const MARGIN: u32 = 12;
/// Height of the x label area and width of the y label area.
pub const X_LABEL_AREA: u32 = 44;
pub const Y_LABEL_AREA: u32 = 64;
/// The most ticks a log axis labels with 1, 2 and 5 times each power of ten; above it, the
/// powers of ten alone.
pub const LOG_AXIS_MAX_TICKS: usize = 9;
/// Font family and sizes (SVG text; the viewer picks the face).
pub const FONT: &str = "sans-serif";
pub const CAPTION_SIZE: u32 = 18;
pub const LABEL_SIZE: u32 = 14;
/// Radius of a measured run's dot and size of an out-of-memory run's marker.
pub const POINT_RADIUS: u32 = 4;
pub const OOM_MARKER_SIZE: u32 = 6;

/// Page background.
pub const BACKGROUND: RGBColor = RGBColor(255, 255, 255);
/// Axes, text and the y = x line.
pub const INK: RGBColor = RGBColor(33, 37, 41);
/// The ±25% band.
pub const BAND: RGBColor = RGBColor(222, 226, 230);
/// Grid lines.
pub const GRID: RGBColor = RGBColor(241, 243, 245);
/// The q90 and q95 markers of the ratio chart.
pub const Q90: RGBColor = RGBColor(230, 119, 0);
pub const Q95: RGBColor = RGBColor(201, 42, 42);
/// Ratio = 1 (measured equals predicted).
pub const PARITY: RGBColor = RGBColor(73, 80, 87);

/// Colours of architecture families, in the order the families are listed (sorted by name):
/// sixteen of Kelly's colours of maximum contrast (K. L. Kelly, "Twenty-two colors of maximum
/// contrast", 1965; white and black left out, the palest yellows too), so that the fifteen
/// families of the shipped data never share a colour. The list repeats past its end.
pub const FAMILY_PALETTE: [RGBColor; 16] = [
    RGBColor(0x00, 0x67, 0xA5),
    RGBColor(0xF3, 0x84, 0x00),
    RGBColor(0x00, 0x88, 0x56),
    RGBColor(0xBE, 0x00, 0x32),
    RGBColor(0x87, 0x56, 0x92),
    RGBColor(0xA1, 0xCA, 0xF1),
    RGBColor(0x88, 0x2D, 0x17),
    RGBColor(0xE6, 0x8F, 0xAC),
    RGBColor(0x84, 0x84, 0x82),
    RGBColor(0x8D, 0xB6, 0x00),
    RGBColor(0x60, 0x4E, 0x97),
    RGBColor(0xF6, 0xA6, 0x00),
    RGBColor(0x2B, 0x3D, 0x26),
    RGBColor(0xF9, 0x93, 0x79),
    RGBColor(0xB3, 0x44, 0x6C),
    RGBColor(0xC2, 0xB2, 0x80),
];

/// The colour of the `index`-th family.
pub fn family_colour(index: usize) -> RGBColor {
    FAMILY_PALETTE[index % FAMILY_PALETTE.len()]
}

/// The shape a family's points are drawn with, beside its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Dot,
    Square,
    Diamond,
    Triangle,
    TriangleDown,
}

/// The shapes in the order families take them. Five shapes against sixteen colours: the
/// `index`-th family's (colour, shape) pair is its own for the first 80 families (16 and 5 are
/// coprime), so no two families of a chart share both.
pub const FAMILY_SHAPES: [Shape; 5] = [
    Shape::Dot,
    Shape::Square,
    Shape::Diamond,
    Shape::Triangle,
    Shape::TriangleDown,
];

/// The shape of the `index`-th family.
pub fn family_shape(index: usize) -> Shape {
    FAMILY_SHAPES[index % FAMILY_SHAPES.len()]
}

/// `shape` as pixel offsets around its centre (`r` its half size): a polygon, or `None` for the
/// dot, which is drawn as a circle.
pub fn shape_outline(shape: Shape, r: i32) -> Option<Vec<(i32, i32)>> {
    match shape {
        Shape::Dot => None,
        Shape::Square => Some(vec![(-r, -r), (r, -r), (r, r), (-r, r)]),
        Shape::Diamond => Some(vec![(0, -r - 1), (r + 1, 0), (0, r + 1), (-r - 1, 0)]),
        Shape::Triangle => Some(vec![(0, -r - 1), (r + 1, r), (-r - 1, r)]),
        Shape::TriangleDown => Some(vec![(0, r + 1), (r + 1, -r), (-r - 1, -r)]),
    }
}

/// Opacity of the ±25% band fill.
pub const BAND_OPACITY: f64 = 0.6;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_eighty_families_each_have_their_own_colour_and_shape() {
        let looks: Vec<_> = (0..80)
            .map(|i| (family_colour(i), family_shape(i)))
            .collect();
        for (i, a) in looks.iter().enumerate() {
            for (j, b) in looks.iter().enumerate().skip(i + 1) {
                assert!(a != b, "families {i} and {j} look the same");
            }
        }
        // The 81st takes the first's look again: the guarantee stops where the doc says.
        assert_eq!(
            (family_colour(80), family_shape(80)),
            (family_colour(0), family_shape(0))
        );
    }
}
