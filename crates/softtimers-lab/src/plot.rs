//! Line plots as PNG (via `plotters`), with a bundled font so that they render the same on a
//! machine without any fonts installed.

use std::path::Path;
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// DejaVu Sans (Bitstream Vera license, `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse; a failure would only lose text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One line of a plot (kept in the experiments' JSON, so that plots are drawn from it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points (x, y), in order of x.
    pub points: Vec<(f64, f64)>,
}

/// The largest x (`Axis::X`) or y of every point in `series`, and at least `floor`: the top
/// of an axis range that an empty or all-zero plot still draws.
///
/// ```
/// use softtimers_lab::plot::{Axis, Series, largest};
///
/// let s = vec![Series { label: "a".into(), points: vec![(1.0, 4.0), (3.0, 2.0)] }];
/// assert_eq!(largest(&s, Axis::X, 0.1), 3.0);
/// assert_eq!(largest(&s, Axis::Y, 10.0), 10.0);
/// ```
pub fn largest(series: &[Series], axis: Axis, floor: f64) -> f64 {
    series
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|p| match axis {
            Axis::X => p.0,
            Axis::Y => p.1,
        })
        .fold(floor, f64::max)
}

/// An axis of a [`Series`]' points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// The first coordinate.
    X,
    /// The second.
    Y,
}

/// What to draw.
pub struct LineChart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// X range.
    pub x_range: (f64, f64),
    /// Y range.
    pub y_range: (f64, f64),
    /// The lines.
    pub series: Vec<Series>,
}

impl<'a> LineChart<'a> {
    /// `series` with both axes from 0 to past its largest point: the largest x and y (each
    /// at least `floor`, so that an empty plot still draws) times `room.0` and `room.1`.
    ///
    /// ```
    /// use softtimers_lab::plot::{LineChart, Series};
    ///
    /// let s = vec![Series { label: "a".into(), points: vec![(1.0, 4.0), (2.0, 8.0)] }];
    /// let chart = LineChart::from_origin("t", ("x", "y"), s, 1.0, (1.5, 1.25));
    /// assert_eq!((chart.x_range, chart.y_range), ((0.0, 3.0), (0.0, 10.0)));
    /// ```
    pub fn from_origin(
        title: &'a str,
        (x_label, y_label): (&'a str, &'a str),
        series: Vec<Series>,
        floor: f64,
        room: (f64, f64),
    ) -> Self {
        LineChart {
            title,
            x_label,
            y_label,
            x_range: (0.0, largest(&series, Axis::X, floor) * room.0),
            y_range: (0.0, largest(&series, Axis::Y, floor) * room.1),
            series,
        }
    }
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws `chart` into a 960×600 PNG at `path`.
pub fn line_chart(path: &Path, chart: &LineChart<'_>) -> Result<()> {
    register_font();
    let e = |err: &dyn std::fmt::Display| anyhow!("plotting {}: {err}", path.display());
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut plot = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            chart.x_range.0..chart.x_range.1,
            chart.y_range.0..chart.y_range.1,
        )
        .map_err(|x| e(&x))?;
    plot.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        plot.draw_series(LineSeries::new(
            s.points.iter().copied(),
            color.stroke_width(2),
        ))
        .map_err(|x| e(&x))?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    plot.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        let dir = std::env::temp_dir().join(format!("softtimers-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.png");
        line_chart(
            &path,
            &LineChart {
                title: "test",
                x_label: "x",
                y_label: "y",
                x_range: (0.0, 10.0),
                y_range: (0.0, 1.0),
                series: vec![Series {
                    label: "line".into(),
                    points: (0..=10)
                        .map(|i| (f64::from(i), f64::from(i) / 10.0))
                        .collect(),
                }],
            },
        )
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
        assert!(bytes.len() > 2_000);
        let _ = std::fs::remove_dir_all(dir);
    }
}
