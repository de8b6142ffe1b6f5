//! On a team's own queue (`--backend http://…`): what crossed the protocol,
//! per strategy (medians of the runs).

use comfy_table::{Table, TableStyle};

use crate::results::LabResults;

/// Accepted, refused and failed posts, lost jobs, the reports refused
/// or repeated, and the jobs passed over (missed wake-ups); `None` for a lab on any other backend.
pub fn table(results: &LabResults, style: TableStyle) -> Option<Table> {
    if results
        .strategies
        .iter()
        .all(|s| s.median.carrier.is_none())
    {
        return None;
    }
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Accepted",
        "Refused (429, 503)",
        "Failed posts",
        "Lost",
        "Reports repeated",
        "Reports refused",
        "Passed over (most idle, longest wait)",
    ]);
    for s in &results.strategies {
        let Some(c) = &s.median.carrier else { continue };
        table.add_row(vec![
            s.name.clone(),
            c.accepted.to_string(),
            c.refused.to_string(),
            c.errors.to_string(),
            c.lost.to_string(),
            c.duplicate_reports.to_string(),
            c.refused_reports.to_string(),
            c.passed_over.map_or("n/a".into(), |p| match p.jobs {
                0 => "0".into(),
                n => format!("{n} ({} idle, {:.2} s)", p.idle_max, p.wait_s_max),
            }),
        ]);
    }
    Some(table)
}

/// What the table's heading says.
pub const HEADING: &str = "What crossed the protocol (medians of the runs; a failed post and a \
                           lost job are in no other figure; passed over: left waiting 100 ms or \
                           more while a worker sat idle and nothing of the job's tenant ran, a \
                           missed wake-up, docs/your-queue.md)";
