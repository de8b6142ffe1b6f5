//! SVG charts of one results file (plotters' SVG backend: no system fonts).
//! Each chart uses the first run of every strategy; every function returns
//! the SVG text and does no I/O.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::results::{LabResults, RawRun};

const WIDTH: u32 = 960;
/// Waits below this (including 0) are drawn at it, so a log axis can show them.
const WAIT_FLOOR_MS: f64 = 1e-4;

fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    COLORS[i % COLORS.len()]
}

/// Each strategy's first run that kept its traces.
fn first_runs(results: &LabResults) -> Vec<(&str, &RawRun)> {
    results
        .strategies
        .iter()
        .filter_map(|s| {
            s.runs
                .iter()
                .find_map(|r| r.raw.as_ref())
                .map(|raw| (s.name.as_str(), raw))
        })
        .collect()
}

/// The legend box every chart draws.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart failed: {e:?}")
}

/// Normal tenants' wait against their enqueue time, a series per strategy, log scale.
pub fn waits(results: &LabResults) -> Result<String> {
    let runs = first_runs(results);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let t_max = runs
            .iter()
            .flat_map(|(_, r)| r.normal_waits.iter().map(|p| p[0]))
            .fold(1.0, f64::max);
        let w_max = runs
            .iter()
            .flat_map(|(_, r)| r.normal_waits.iter().map(|p| p[1]))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Normal tenants' wait by enqueue time (first run of each strategy)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t_max * 1.02, (WAIT_FLOOR_MS..w_max * 2.0).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("enqueued at (s)")
            .y_desc("wait (ms, log)")
            .draw()
            .map_err(err)?;
        for (i, (name, run)) in runs.iter().enumerate() {
            let color = palette(i);
            let points = run
                .normal_waits
                .iter()
                .map(|p| (p[0], p[1].max(WAIT_FLOOR_MS)));
            chart
                .draw_series(points.map(|p| Circle::new(p, 2, color.filled())))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| Circle::new((x + 6, y), 4, color.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Busy workers over time, normal and noisy, one panel per strategy.
pub fn busy(results: &LabResults) -> Result<String> {
    let runs = first_runs(results);
    let workers = f64::from(results.scenario.workers);
    let panel_h = 200;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, panel_h * runs.len().max(1) as u32))
            .into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let panels = root.split_evenly((runs.len().max(1), 1));
        for ((name, run), panel) in runs.iter().zip(panels.iter()) {
            let occ = &run.occupancy;
            let step = occ.step_ms / 1e3;
            let t_max = (occ.busy_normal.len() as f64 * step).max(step);
            let mut chart = ChartBuilder::on(panel)
                .caption(
                    format!("{name}: busy workers (of {workers})"),
                    ("sans-serif", 15),
                )
                .margin(8)
                .x_label_area_size(26)
                .y_label_area_size(44)
                .build_cartesian_2d(0.0..t_max, 0.0..workers * 1.05)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("lab time (s)")
                .draw()
                .map_err(err)?;
            let series = |v: &[u32]| -> Vec<(f64, f64)> {
                v.iter()
                    .enumerate()
                    .map(|(i, &b)| (i as f64 * step, f64::from(b)))
                    .collect()
            };
            chart
                .draw_series(LineSeries::new(
                    series(&occ.busy_burst),
                    palette(0).stroke_width(2),
                ))
                .map_err(err)?
                .label("noisy")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], palette(0)));
            chart
                .draw_series(LineSeries::new(
                    series(&occ.busy_normal),
                    palette(1).stroke_width(2),
                ))
                .map_err(err)?
                .label("normal")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], palette(1)));
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Jobs waiting over time, a line per strategy.
pub fn queued(results: &LabResults) -> Result<String> {
    let runs = first_runs(results);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut t_max: f64 = 1.0;
        let mut q_max: f64 = 1.0;
        for (_, r) in &runs {
            let occ = &r.occupancy;
            t_max = t_max.max(occ.queued.len() as f64 * occ.step_ms / 1e3);
            q_max = q_max.max(occ.queued.iter().copied().max().unwrap_or(0) as f64);
        }
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Jobs waiting (first run of each strategy)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t_max, 0.0..q_max * 1.05)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("lab time (s)")
            .y_desc("queued jobs")
            .draw()
            .map_err(err)?;
        for (i, (name, run)) in runs.iter().enumerate() {
            let occ = &run.occupancy;
            let step = occ.step_ms / 1e3;
            let color = palette(i);
            chart
                .draw_series(LineSeries::new(
                    occ.queued
                        .iter()
                        .enumerate()
                        .map(|(i, &q)| (i as f64 * step, f64::from(q))),
                    color.stroke_width(2),
                ))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}
