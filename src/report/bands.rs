//! Seed bands as a table: for each strategy, the post's figures over the
//! seeds (p5, median, p95). `--format json` prints every figure.

use comfy_table::{CellAlignment, Table, TableStyle};

use crate::units::{count, ms, secs_fine};
use crate::validate::bands::{Band, Bands};

/// A column: its label, the figure's key, how its values are written.
type Column = (&'static str, &'static str, fn(f64) -> String);

/// The figures the table shows, with their formatting.
const SHOWN: &[Column] = &[
    ("Normal p50", "normal_wait_ms.p50", ms),
    ("Normal p95", "normal_wait_ms.p95", ms),
    ("Normal p99", "normal_wait_ms.p99", ms),
    ("Noisy done", "noisy_done_s", |v| secs_fine(Some(v))),
    ("Rejected", "rejected", |v| count(v as u64)),
];

pub fn table(b: &Bands, style: TableStyle) -> Table {
    let mut t = Table::new();
    t.load_style(style);
    let mut header = vec!["Strategy".to_string()];
    header.extend(
        SHOWN
            .iter()
            .map(|(label, _, _)| format!("{label} (p5 / median / p95)")),
    );
    t.set_header(header);
    for s in &b.strategies {
        let mut row = vec![s.name.clone()];
        for (_, key, show) in SHOWN {
            row.push(
                s.figures
                    .get(*key)
                    .map_or_else(|| "—".to_string(), |band| shown(band, *show)),
            );
        }
        t.add_row(row);
    }
    for i in 1..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn shown(b: &Band, show: fn(f64) -> String) -> String {
    if b.p5 == b.p95 {
        show(b.median)
    } else {
        format!("{} / {} / {}", show(b.p5), show(b.median), show(b.p95))
    }
}

/// One line saying what the bands cover.
pub fn heading(scenario: &str, b: &Bands) -> String {
    format!(
        "scenario {scenario} on the virtual clock, seeds {}–{} ({} seeds): each figure's p5, median and p95 over the seeds",
        b.first_seed,
        b.first_seed + u64::from(b.seeds) - 1,
        b.seeds
    )
}
