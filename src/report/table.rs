//! The terminal table: the post's columns, medians of the runs.

use anyhow::Result;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table, TableStyle};

use super::Exporter;
use super::format::header;
use crate::results::{ClockKind, LabResults};
use crate::units::{count, ms, secs, secs_fine, us};

pub struct TableExporter;

/// The post's table as comfy-table rows: strategy, normal p50/p95/p99,
/// noisy time after burst, jobs rejected.
pub fn post_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Normal p50",
        "Normal p95",
        "Normal p99",
        "Noisy tenant, time after burst",
        "Jobs rejected",
    ]);
    for s in &results.strategies {
        let m = &s.median;
        table.add_row(vec![
            s.name.clone(),
            ms(m.normal_wait_ms.p50),
            ms(m.normal_wait_ms.p95),
            ms(m.normal_wait_ms.p99),
            secs(m.noisy_done_s),
            count(m.rejected),
        ]);
    }
    right_align(&mut table);
    table
}

/// The harness's own error, per strategy: what the lab adds to every figure.
pub fn harness_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Job overshoot p50",
        "Job overshoot p99",
        "Dispatch floor p50",
        "Dispatch floor p99",
        "Arrival lag p99",
        "Noisy done (exact)",
        "Idle workers while jobs wait (in traffic)",
    ]);
    for s in &results.strategies {
        let m = &s.median;
        table.add_row(vec![
            s.name.clone(),
            ms(m.job_overshoot_ms.p50),
            ms(m.job_overshoot_ms.p99),
            us(m.dispatch_floor_us.p50),
            us(m.dispatch_floor_us.p99),
            ms(m.arrival_lag_ms.p99),
            secs_fine(m.noisy_done_s),
            format!(
                "{:.1} ({:.1})",
                m.idle_workers_while_waiting, m.idle_workers_while_waiting_in_traffic
            ),
        ]);
    }
    right_align(&mut table);
    table
}

/// The exact model figures a virtual run gives, without the harness-error
/// columns that are zero by construction there.
pub fn model_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Noisy done (exact)",
        "Idle workers while jobs wait (in traffic)",
        "Lab time",
    ]);
    for s in &results.strategies {
        let m = &s.median;
        table.add_row(vec![
            s.name.clone(),
            secs_fine(m.noisy_done_s),
            format!(
                "{:.1} ({:.1})",
                m.idle_workers_while_waiting, m.idle_workers_while_waiting_in_traffic
            ),
            secs_fine(Some(m.lab_s)),
        ]);
    }
    right_align(&mut table);
    table
}

/// Wrap cells so the table fits the terminal it is printed on (comfy-table
/// reads the width; piped output is left as it is).
pub fn fit_terminal(mut table: Table) -> Table {
    table.set_content_arrangement(ContentArrangement::Dynamic);
    table
}

fn right_align(table: &mut Table) {
    for i in 1..table.column_count() {
        if let Some(c) = table.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

impl Exporter for TableExporter {
    fn export(&self, results: &LabResults) -> Result<Vec<u8>> {
        let mut out = String::new();
        out.push_str(&header(results));
        out.push('\n');
        out.push_str(&format!("machine: {}\n", results.machine.describe()));
        out.push_str(&fit_terminal(post_table(results, UTF8_FULL_CONDENSED)).to_string());
        match results.clock {
            ClockKind::Real => {
                out.push_str("\nHarness error (medians of the runs):\n");
                let table = harness_table(results, UTF8_FULL_CONDENSED);
                out.push_str(&fit_terminal(table).to_string());
            }
            ClockKind::Virtual => {
                out.push_str(
                    "\nExact model figures (virtual clock: the harness adds no error; medians of the runs):\n",
                );
                out.push_str(&fit_terminal(model_table(results, UTF8_FULL_CONDENSED)).to_string());
            }
        }
        out.push('\n');
        for w in &results.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        Ok(out.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    #[test]
    fn the_harness_table_fits_a_160_column_terminal() {
        let scenario = Scenario::parse(
            std::path::Path::new("lab/article.toml"),
            &std::fs::read_to_string("lab/article.toml").unwrap(),
        )
        .unwrap();
        let plan = crate::lab::LabPlan {
            scenario,
            clock: ClockKind::Virtual,
            timer: Default::default(),
            keep_raw: false,
        };
        let never = std::sync::atomic::AtomicBool::new(false);
        let progress = crate::output::progress::Progress::hidden();
        let results = crate::lab::run(&plan, &never, &progress).unwrap().results;
        let wide = harness_table(&results, UTF8_FULL_CONDENSED).to_string();
        let widest = |text: &str| text.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(
            widest(&wide) > 160,
            "unfitted it is wider: {}",
            widest(&wide)
        );
        let mut table = fit_terminal(harness_table(&results, UTF8_FULL_CONDENSED));
        table.set_width(160);
        assert!(widest(&table.to_string()) <= 160);
    }
}
