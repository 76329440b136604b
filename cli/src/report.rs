//! The picture: hit rate and median TTFT per policy over trace time, as SVG (or an HTML page
//! holding the SVG and the table).

use std::path::Path;

use kvroute::sim::SimResult;
use plotters::prelude::*;

/// Refuses a report path that is neither `.svg` nor `.html` before any work is done.
pub fn check_extension(path: &Path) -> Result<(), String> {
    match extension(path).as_deref() {
        Some("svg" | "html" | "htm") => Ok(()),
        _ => Err(format!("{}: the report must be a .svg or .html file", path.display())),
    }
}

fn extension(path: &Path) -> Option<String> {
    path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase())
}

/// Writes the report of `results` (and, for HTML, `table`) to `path`.
pub fn write(path: &Path, results: &[SimResult], table: &str) -> Result<(), String> {
    let svg = draw(results).map_err(|e| e.to_string())?;
    let body = match extension(path).as_deref() {
        Some("svg") => svg,
        _ => format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>kvroute replay</title></head>\
             <body style=\"font-family:sans-serif\"><h1>kvroute replay</h1>\n{svg}\n<pre>{}</pre></body></html>\n",
            table.replace('&', "&amp;").replace('<', "&lt;")
        ),
    };
    std::fs::write(path, body).map_err(|e| e.to_string())
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Two charts stacked: block hit rate (%) and TTFT p50 (s), per policy over trace time.
fn draw(results: &[SimResult]) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 700)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(350);
        let end = results
            .iter()
            .flat_map(|r| r.timeline.last())
            .map(|p| p.trace_seconds)
            .fold(1.0, f64::max);
        let max_ttft = results
            .iter()
            .flat_map(|r| r.timeline.iter().map(|p| p.ttft_p50))
            .fold(0.0, f64::max)
            .max(1e-3);
        let max_hit = results
            .iter()
            .flat_map(|r| r.timeline.iter().map(|p| 100.0 * p.hit_rate))
            .fold(0.0, f64::max);
        let charts = [
            ("block hit rate (%) over trace time (s)", (max_hit * 1.2).clamp(10.0, 100.0), &top),
            ("TTFT p50 (s) over trace time (s)", max_ttft * 1.1, &bottom),
        ];
        for (at, (title, y_max, area)) in charts.into_iter().enumerate() {
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d(0.0..end, 0.0..y_max)?;
            chart.configure_mesh().draw()?;
            for (i, result) in results.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                let points = result.timeline.iter().map(|p| {
                    (p.trace_seconds, if at == 0 { 100.0 * p.hit_rate } else { p.ttft_p50 })
                });
                let name = result.policy.map_or("?", |p| p.name());
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                    .label(name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}
