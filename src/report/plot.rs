//! SVG charts of one results file (plotters' SVG backend: no system fonts).
//! Each chart uses the first run of every strategy, one panel per strategy
//! on shared axes (small multiples), so no strategy's series can hide
//! another's; counts sit on integer axes. Every function returns the SVG
//! text and does no I/O.

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::results::{LabResults, RawRun};

const WIDTH: u32 = 960;
/// Height of one strategy's panel.
const PANEL_H: u32 = 210;
/// Height of a chart's title band.
const TITLE_H: u32 = 36;
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

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart failed: {e:?}")
}

/// A chart of `panels` stacked panels under a title: draws the title and
/// hands each panel's area to `draw`.
fn stacked<F>(title: &str, panels: usize, mut draw: F) -> Result<String>
where
    F: FnMut(usize, &DrawingArea<SVGBackend<'_>, Shift>) -> Result<()>,
{
    let mut svg = String::new();
    {
        let height = TITLE_H + PANEL_H * panels.max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, body) = root.split_vertically(TITLE_H);
        top.titled(title, ("sans-serif", 18)).map_err(err)?;
        for (i, panel) in body.split_evenly((panels.max(1), 1)).iter().enumerate() {
            if i < panels {
                draw(i, panel)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A tick label without trailing zeros: `5`, `2.5`, `0.001`, `10,000`.
fn short(v: f64) -> String {
    if v.abs() >= 1000.0 {
        return crate::units::count(v.round() as u64);
    }
    let rounded = format!("{:.6}", v);
    rounded
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_string()
}

/// Lab time the longest trace covers, in seconds.
fn trace_end_s(runs: &[(&str, &RawRun)], len: impl Fn(&RawRun) -> usize) -> f64 {
    runs.iter()
        .map(|(_, r)| len(r) as f64 * r.occupancy.step_ms / 1e3)
        .fold(1.0, f64::max)
}

/// Normal tenants' wait against their enqueue time, a panel per strategy on
/// one log scale.
pub fn waits(results: &LabResults) -> Result<String> {
    let runs = first_runs(results);
    let t_max = runs
        .iter()
        .flat_map(|(_, r)| r.normal_waits.iter().map(|p| p[0]))
        .fold(1.0, f64::max);
    let w_max = runs
        .iter()
        .flat_map(|(_, r)| r.normal_waits.iter().map(|p| p[1]))
        .fold(1.0, f64::max);
    let title = "Normal tenants' wait by enqueue time (first run of each strategy; waits under 0.0001 ms drawn at it)";
    stacked(title, runs.len(), |i, panel| {
        let (name, run) = runs[i];
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t_max * 1.02, (WAIT_FLOOR_MS..w_max * 2.0).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("enqueued at (s)")
            .x_label_formatter(&|v| short(*v))
            .y_desc("wait (ms, log)")
            .y_label_formatter(&|v| short(*v))
            .draw()
            .map_err(err)?;
        let color = palette(i);
        let points = run
            .normal_waits
            .iter()
            .map(|p| (p[0], p[1].max(WAIT_FLOOR_MS)));
        chart
            .draw_series(points.map(|p| Circle::new(p, 2, color.filled())))
            .map_err(err)?;
        Ok(())
    })
}

/// Busy workers over time, normal and noisy, one panel per strategy.
pub fn busy(results: &LabResults) -> Result<String> {
    let runs = first_runs(results);
    let workers = results.scenario.workers;
    let title = format!(
        "Busy workers of {workers}: bursting tenants in red, normal tenants in blue (first run of each strategy)"
    );
    stacked(&title, runs.len(), |i, panel| {
        let (name, run) = runs[i];
        let occ = &run.occupancy;
        let step = occ.step_ms / 1e3;
        let t_max = (occ.busy_normal.len() as f64 * step).max(step);
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t_max, 0u32..workers + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("lab time (s)")
            .x_label_formatter(&|v| short(*v))
            .y_desc("busy workers")
            .draw()
            .map_err(err)?;
        let series = |v: &[u32]| -> Vec<(f64, u32)> {
            v.iter()
                .enumerate()
                .map(|(i, &b)| (i as f64 * step, b))
                .collect()
        };
        // The title names the colours: a legend box would hide the lines.
        for (values, color) in [
            (&occ.busy_burst, palette(0)),
            (&occ.busy_normal, palette(1)),
        ] {
            chart
                .draw_series(LineSeries::new(series(values), color.stroke_width(2)))
                .map_err(err)?;
        }
        Ok(())
    })
}

/// Jobs waiting over time, a panel per strategy on shared axes.
pub fn queued(results: &LabResults) -> Result<String> {
    let runs = first_runs(results);
    let t_max = trace_end_s(&runs, |r| r.occupancy.queued.len());
    let q_max = runs
        .iter()
        .flat_map(|(_, r)| r.occupancy.queued.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let title = "Jobs waiting (first run of each strategy)";
    stacked(title, runs.len(), |i, panel| {
        let (name, run) = runs[i];
        let occ = &run.occupancy;
        let step = occ.step_ms / 1e3;
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t_max, 0u32..q_max + q_max / 20 + 1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("lab time (s)")
            .x_label_formatter(&|v| short(*v))
            .y_desc("queued jobs")
            .draw()
            .map_err(err)?;
        let points = occ
            .queued
            .iter()
            .enumerate()
            .map(|(k, &q)| (k as f64 * step, q));
        chart
            .draw_series(LineSeries::new(points, palette(i).stroke_width(2)))
            .map_err(err)?;
        Ok(())
    })
}

/// Every tenant's p95 wait, a panel per strategy on one log scale, tenants
/// in id order and coloured by class; `None` when the file predates
/// per-tenant figures.
pub fn tenants(results: &LabResults) -> Result<Option<String>> {
    let population = results.scenario.population();
    let runs: Vec<(&str, &[Option<f32>])> = first_runs(results)
        .into_iter()
        .map(|(name, raw)| (name, raw.tenant_p95_wait_ms.as_slice()))
        .filter(|(_, w)| !w.is_empty())
        .collect();
    if runs.is_empty() {
        return Ok(None);
    }
    let n = runs.iter().map(|(_, w)| w.len()).max().unwrap_or(1) as u32;
    let w_max = runs
        .iter()
        .flat_map(|(_, w)| w.iter().flatten())
        .fold(1.0f64, |m, &v| m.max(f64::from(v)));
    let classes: Vec<String> = population
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{} ({})", c.name, colour_name(i)))
        .collect();
    let title = format!(
        "p95 wait of every tenant (first run of each strategy; by tenant, coloured by class: {})",
        classes.join(", ")
    );
    let svg = stacked(&title, runs.len(), |i, panel| {
        let (name, waits) = runs[i];
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0u32..n, (WAIT_FLOOR_MS..w_max * 2.0).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("tenant (id)")
            .y_desc("p95 wait (ms, log)")
            .y_label_formatter(&|v| short(*v))
            .draw()
            .map_err(err)?;
        let points = waits.iter().enumerate().filter_map(|(t, w)| {
            let w = f64::from((*w)?).max(WAIT_FLOOR_MS);
            let class = population.class_of.get(t).copied().unwrap_or(0) as usize;
            Some(Circle::new((t as u32, w), 3, palette(class).filled()))
        });
        chart.draw_series(points).map_err(err)?;
        Ok(())
    })?;
    Ok(Some(svg))
}

/// The name of `palette(i)`, for titles that stand in for a legend.
fn colour_name(i: usize) -> &'static str {
    ["red", "blue", "green", "orange", "purple", "brown"][i % 6]
}
