//! The S2 hand-off latency distributions as one SVG chart: for each view, the
//! share of hand-offs (y) that took at most x µs, one line per variant.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::BoxError;

/// One variant's hand-offs, sorted.
pub struct Series {
    name: &'static str,
    handoffs: Vec<Duration>,
}

impl Series {
    pub fn new(name: &'static str, handoffs: Vec<Duration>) -> Self {
        Series { name, handoffs }
    }
}

/// Hand-offs shorter than this (those the next holder saw before the releaser
/// saw its own reply count as 0) are drawn at it: the x axis is logarithmic.
const LEFT_US: f64 = 1.0;

/// At most this many steps per line.
const MAX_STEPS: usize = 400;

const COLOURS: [RGBColor; 3] = [
    RGBColor(0x55, 0x55, 0x55),
    RGBColor(0xd6, 0x60, 0x1e),
    RGBColor(0x1f, 0x6f, 0xb4),
];

/// Writes one panel per view (`views`: its title and its series) to `path`.
pub fn write(path: &Path, title: &str, views: &[(String, Vec<Series>)]) -> Result<(), BoxError> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let width = 560 * views.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| e.to_string())?;
    let panels = root.split_evenly((1, views.len().max(1)));
    let right_us = views
        .iter()
        .flat_map(|(_, series)| series.iter())
        .filter_map(|series| series.handoffs.last())
        .map(|last| last.as_secs_f64() * 1e6)
        .fold(100.0_f64, f64::max)
        * 1.5;
    for (panel, (caption, series)) in panels.iter().zip(views) {
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((LEFT_US..right_us).log_scale(), 0.0..1.0)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(
                "hand-off µs, release returned → next holder's acquire returned (under 1 µs: at 1)",
            )
            .y_desc("share of hand-offs ≤ x")
            .y_label_formatter(&|share| format!("{:.0} %", share * 100.0))
            .x_label_formatter(&|us| format!("{us:.0}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (series, colour) in series.iter().zip(COLOURS) {
            let n = series.handoffs.len();
            if n == 0 {
                continue;
            }
            // The empirical cumulative distribution, one step per hand-off
            // up to `MAX_STEPS`; beyond, one step per group of consecutive
            // hand-offs, so that the file stays small.
            let steps = n.min(MAX_STEPS);
            let x = |i: usize| (series.handoffs[i].as_secs_f64() * 1e6).max(LEFT_US);
            let mut points = vec![(LEFT_US, 0.0)];
            for step in 0..steps {
                let (first, end) = (step * n / steps, (step + 1) * n / steps);
                points.push((x(first), first as f64 / n as f64));
                points.push((x(end - 1), end as f64 / n as f64));
            }
            points.push((right_us, 1.0));
            let style = ShapeStyle::from(colour).stroke_width(2);
            chart
                .draw_series(LineSeries::new(points, style))
                .map_err(|e| e.to_string())?
                .label(format!("{} ({n} hand-offs)", series.name))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
