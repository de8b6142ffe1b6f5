//! One results file as a markdown section: the post's table with the spread
//! of the runs, the harness's own error, the machine and the warnings.

use anyhow::Result;
use comfy_table::Table;
use comfy_table::presets::ASCII_MARKDOWN;

use super::Exporter;
use super::format::header;
use super::table::harness_table;
use crate::results::LabResults;
use crate::units::{count, ms, secs};

pub struct MarkdownExporter;

impl MarkdownExporter {
    /// The section without its heading, so the README can add one and plots.
    pub fn body(results: &LabResults) -> String {
        let mut out = String::new();
        out.push_str(&format!("{}\n\n", header(results)));
        out.push_str(&format!("Machine: {}", results.machine.describe()));
        if let (Some(a), Some(b)) = (results.machine.load_start, results.machine.load_end) {
            out.push_str(&format!(
                "; load average {:.2} at start, {:.2} at end",
                a[0], b[0]
            ));
        }
        if let Some(real) = &results.real {
            let (wall, lab) = (real.wall_s, results.lab_s_total());
            out.push_str(&format!(
                "; the runs took {wall:.1} s of wall time for {lab:.1} s of lab time ({:+.2} %)",
                (wall / lab - 1.0) * 100.0
            ));
            if let Some(rss) = real.peak_rss_mib {
                out.push_str(&format!("; peak memory {rss:.0} MiB"));
            }
        }
        out.push_str(".\n\n");
        out.push_str(
            "Medians of the runs; the min–max of the runs in brackets where they differ.\n\n",
        );
        out.push_str(&spread_table(results).to_string());
        if super::table::has_workload(results) {
            out.push_str("\n\nPer class (medians of the runs; slowdown is (wait + duration) ÷ duration):\n\n");
            out.push_str(&super::table::class_table(results, ASCII_MARKDOWN).to_string());
            out.push_str("\n\nPer tenant, among the non-bursting tenants:\n\n");
            out.push_str(&super::table::tenant_table(results, ASCII_MARKDOWN).to_string());
            out.push_str("\n\nFairness among the tenants with work waiting throughout a window (medians of the runs):\n\n");
            out.push_str(&super::table::fairness_table(results, ASCII_MARKDOWN).to_string());
        }
        if super::table::has_limits(results) {
            out.push_str("\n\nClients and limits (medians of the runs; recovery: after the last burst, until the neighbours' rolling p95 wait is back within twice its value before the first):\n\n");
            out.push_str(&super::table::delivery_table(results, ASCII_MARKDOWN).to_string());
            out.push_str("\n\nWho was refused, per class (medians of the runs):\n\n");
            out.push_str(&super::table::refusal_table(results, ASCII_MARKDOWN).to_string());
        }
        out.push_str("\n\nThe harness's own error (medians of the runs):\n\n");
        out.push_str(&harness_table(results, ASCII_MARKDOWN).to_string());
        out.push_str(&format!("\n\n{}\n", super::table::late_note(results)));
        if let Some(table) = super::table::queue_table(results, ASCII_MARKDOWN) {
            out.push_str("\nThe queue's own cost (medians of the runs; a take is a finish and the next take, or a take after a wake; the worker's timer: how late its own clock says it woke after a job's hold):\n\n");
            out.push_str(&table.to_string());
            out.push('\n');
        }
        if let Some(table) = super::carrier::table(results, ASCII_MARKDOWN) {
            out.push_str(&format!("\n{}:\n\n", super::carrier::HEADING));
            out.push_str(&table.to_string());
            out.push('\n');
        }
        if let Some(table) = super::table::lease_table(results, ASCII_MARKDOWN) {
            out.push_str(&format!(
                "\nLeases and faults (medians of the runs; {}):\n\n",
                super::table::lease_note(results)
            ));
            out.push_str(&table.to_string());
            out.push('\n');
        }
        if let Some(table) = super::table::recovery_table(results, ASCII_MARKDOWN) {
            out.push_str(&format!(
                "\nAcross each fault (medians of the runs; {}):\n\n",
                super::table::recovery_note(results)
            ));
            out.push_str(&table.to_string());
            out.push('\n');
        }
        if !results.warnings.is_empty() {
            out.push_str("\nWarnings:\n\n");
            for w in &results.warnings {
                out.push_str(&format!("- {w}\n"));
            }
        }
        out
    }
}

fn spread_table(results: &LabResults) -> Table {
    use super::format::with_spread;
    let mut table = Table::new();
    table.load_style(ASCII_MARKDOWN);
    table.set_header(vec![
        "Strategy",
        "Normal p50",
        "Normal p95",
        "Normal p99",
        "Normal max",
        "Noisy tenant, time after burst",
        "Jobs rejected",
    ]);
    for s in &results.strategies {
        table.add_row(vec![
            s.name.clone(),
            with_spread(s, |f| f.normal_wait_ms.p50, ms),
            with_spread(s, |f| f.normal_wait_ms.p95, ms),
            with_spread(s, |f| f.normal_wait_ms.p99, ms),
            with_spread(s, |f| f.normal_wait_ms.max, ms),
            with_spread(
                s,
                |f| f.noisy_done_s.unwrap_or(f64::NAN),
                |v| secs((!v.is_nan()).then_some(v)),
            ),
            with_spread(s, |f| f.rejected as f64, |v| count(v as u64)),
        ]);
    }
    table
}

impl Exporter for MarkdownExporter {
    fn export(&self, results: &LabResults) -> Result<Vec<u8>> {
        Ok(format!(
            "## {}\n\n{}",
            results.scenario.name,
            MarkdownExporter::body(results)
        )
        .into_bytes())
    }
}
