//! The terminal table: the post's columns, medians of the runs.

use anyhow::Result;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table, TableStyle};

use super::Exporter;
use super::format::header;
use crate::results::{ClockKind, LabResults};
use crate::units::{count, ms, secs, secs_fine, sig3, us};

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
        "Arrival lag p99 (neighbours)",
        "Noisy done (exact)",
        "Idle workers while jobs wait (in traffic)",
        "Late jobs, all runs (stolen / preempted / timer)",
    ]);
    for s in &results.strategies {
        let m = &s.median;
        let late = s.late.as_ref().map_or_else(
            || "n/a".to_string(),
            |l| {
                format!(
                    "{} ({} / {} / {})",
                    l.jobs.total(),
                    l.jobs.stolen,
                    l.jobs.preempted,
                    l.jobs.timer
                )
            },
        );
        table.add_row(vec![
            s.name.clone(),
            ms(m.job_overshoot_ms.p50),
            ms(m.job_overshoot_ms.p99),
            us(m.dispatch_floor_us.p50),
            us(m.dispatch_floor_us.p99),
            match &m.normal_arrival_lag_ms {
                Some(n) => format!("{} ({})", ms(m.arrival_lag_ms.p99), ms(n.p99)),
                None => ms(m.arrival_lag_ms.p99),
            },
            secs_fine(m.noisy_done_s),
            format!(
                "{:.1} ({:.1})",
                m.idle_workers_while_waiting, m.idle_workers_while_waiting_in_traffic
            ),
            late,
        ]);
    }
    right_align(&mut table);
    table
}

/// What the harness table's late-jobs column means for this file, or why
/// it is empty: one line.
pub fn late_note(results: &LabResults) -> String {
    if results.strategies.iter().any(|s| s.late.is_some()) {
        return format!(
            "Late jobs: finished more than {} ms after their instant, in all runs together; stolen: the hypervisor ran something else on the loop's CPU; preempted: another thread of this machine had it; timer: the OS sleep returned late on its own. The rest were late behind the lab's own work or have no measured cause (`validate` names them).",
            crate::engine::lateness::LATE_NS as f64 / 1e6
        );
    }
    let why = if results.backend.is_some() {
        "on a real queue a late hold is the worker's, and shows as its timer in the queue table"
    } else if !results.machine.os.starts_with("Linux") {
        "the OS gives no per-thread run delay nor steal counters, being not Linux"
    } else {
        "the file is from before noisylab measured them"
    };
    format!("Late jobs: not attributed ({why}).")
}

/// On a real queue, per strategy: what the server and the round trips cost
/// (medians of the runs); `None` for a lab in this process.
pub fn queue_table(results: &LabResults, style: TableStyle) -> Option<Table> {
    if results.strategies.iter().all(|s| s.median.queue.is_none()) {
        return None;
    }
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Take round trip p50",
        "Take round trip p99",
        "Worker's timer late p50",
        "Worker's timer late p99",
        "Submit round trip p50",
        "Server time a call",
        "Server CPU",
        "Workers' CPU",
        "Calls a job",
        "Bytes a job",
        "WAL a job",
    ]);
    for s in &results.strategies {
        let Some(q) = &s.median.queue else { continue };
        table.add_row(vec![
            s.name.clone(),
            us(q.take_rtt_us.p50),
            us(q.take_rtt_us.p99),
            us(q.hold_overshoot_us.p50),
            us(q.hold_overshoot_us.p99),
            us(q.submit_rtt_us.p50),
            q.server_us_per_call.map_or_else(|| "n/a".to_string(), us),
            q.server_cpu_s
                .map_or_else(|| "n/a".to_string(), |s| format!("{} s", sig3(s))),
            q.workers_cpu_s
                .map_or_else(|| "n/a".to_string(), |s| format!("{} s", sig3(s))),
            sig3(q.calls_per_job),
            q.bytes_per_job.map_or_else(|| "n/a".to_string(), sig3),
            q.wal_bytes_per_job
                .map_or_else(|| "n/a".to_string(), |b| format!("{} B", sig3(b))),
        ]);
    }
    right_align(&mut table);
    Some(table)
}

/// On a queue whose takes hold leases: the lease, the faults injected and
/// what they did (medians of the runs); `None` without leases.
pub fn lease_table(results: &LabResults, style: TableStyle) -> Option<Table> {
    let rows: Vec<_> = results
        .strategies
        .iter()
        .filter_map(|s| Some((s, s.median.fault_figures()?)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Lease",
        "Faults injected",
        "Redelivered (leases run out)",
        "Ran twice",
        "Late finishes refused",
        "Connections dropped",
        "Lost",
        "Restart",
        "Redelivered / ran twice by class",
    ]);
    for (s, f) in rows {
        table.add_row(vec![
            s.name.clone(),
            format!("{} ms", sig3(f.lease_ms)),
            f.injected.to_string(),
            f.redelivered.to_string(),
            f.ran_twice.to_string(),
            f.late_finishes_refused.to_string(),
            f.dropped_connections.to_string(),
            f.lost.to_string(),
            if f.restart_ms > 0.0 {
                format!("{} ms", sig3(f.restart_ms))
            } else {
                "—".to_string()
            },
            by_class(f),
        ]);
    }
    right_align(&mut table);
    Some(table)
}

/// "noisy 8 / 4, normal 2 / 1": each struck class's redelivered and ran
/// twice; "—" with none.
fn by_class(f: &crate::results::FaultFigures) -> String {
    if f.by_class.is_empty() {
        return "—".to_string();
    }
    f.by_class
        .iter()
        .map(|(name, c)| format!("{name} {} / {}", c.redelivered, c.ran_twice))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The neighbours' waits across each fault, a column a fault; `None`
/// without faults measured so (files from before).
pub fn recovery_table(results: &LabResults, style: TableStyle) -> Option<Table> {
    let rows: Vec<_> = results
        .strategies
        .iter()
        .filter_map(|s| Some((s, &s.median.fault_figures()?.recovery)))
        .filter(|(_, r)| !r.is_empty())
        .collect();
    let (_, first) = rows.first()?;
    let mut table = Table::new();
    table.load_style(style);
    let mut header = vec!["Strategy".to_string()];
    header.extend(
        first
            .iter()
            .map(|f| format!("{} at {} s", f.kind, sig3(f.at_s))),
    );
    table.set_header(header);
    for (s, faults) in rows {
        let mut row = vec![s.name.clone()];
        row.extend(faults.iter().map(|f| {
            let ms = |v: Option<f64>| v.map_or("none".to_string(), |v| format!("{} ms", sig3(v)));
            let back = match (f.before_ms, f.recovered_s) {
                (None, _) if f.peak_ms.is_none() => {
                    return "no neighbour's job started".to_string();
                }
                (None, _) => return format!("none before → {}", ms(f.peak_ms)),
                (_, Some(0.0)) => "never over".to_string(),
                (_, Some(t)) => format!("back in {} s", sig3(t)),
                (_, None) => "not back".to_string(),
            };
            format!("{} → {}, {back}", ms(f.before_ms), ms(f.peak_ms))
        }));
        table.add_row(row);
    }
    right_align(&mut table);
    Some(table)
}

/// What the recovery table's cells mean.
pub fn recovery_note(results: &LabResults) -> String {
    let window = results
        .strategies
        .iter()
        .find_map(|s| s.median.fault_figures()?.recovery.first())
        .map_or(0.0, |f| f.window_ms);
    format!(
        "the neighbours' rolling p95 wait (every non-bursting tenant together; a wait counts \
         when it ends, at the job's start; windows of {} ms): in the window just before the \
         fault → its highest until the next fault (none: no neighbour's job started); back: \
         when it was within twice its value before (at least 1 ms) and stayed there until the \
         next fault or the traffic's end; not back: it was not",
        sig3(window)
    )
}

/// What the lease table's columns mean.
pub const LEASE_NOTE: &str = "a take leases its job to the worker; a job whose worker went quiet past its lease went back to its tenant's queue, ahead of the jobs that never started (redelivered); ran twice: its first worker finished it too, and that finish was refused; lost: jobs the server had accepted and no longer held after a restart; restart: the longest, from the kill until the server answered again (Redis: its append-only file loaded; PostgreSQL: its write-ahead log replayed); by class: each class's redelivered and ran-twice jobs (medians taken class by class)";

/// [`LEASE_NOTE`], and where the faults were simulated, what that means.
pub fn lease_note(results: &LabResults) -> String {
    if results.backend.is_some() {
        return LEASE_NOTE.to_string();
    }
    format!(
        "{LEASE_NOTE}; here the faults are simulated on the pool's workers (the model): nothing can be lost, and a restart is the time the server was taken to be away"
    )
}

/// Per class, per strategy: waits, slowdown, counts, tokens and done time
/// (medians of the runs).
pub fn class_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Class",
        "Jobs",
        "Rejected",
        "Wait p50",
        "Wait p95",
        "Wait p99",
        "Wait max",
        "Slowdown p50",
        "Slowdown p95",
        "Tokens in",
        "Tokens out",
        "Done after first arrival",
    ]);
    for s in &results.strategies {
        for (class, c) in &s.median.classes {
            table.add_row(vec![
                s.name.clone(),
                class.clone(),
                // Jobs, each once (files from before retries: their attempts).
                count(if c.delivery.unique_jobs > 0 {
                    c.delivery.unique_jobs
                } else {
                    c.jobs
                }),
                count(c.rejected),
                ms(c.wait_ms.p50),
                ms(c.wait_ms.p95),
                ms(c.wait_ms.p99),
                ms(c.wait_ms.max),
                format!("{}×", sig3(c.slowdown.p50)),
                format!("{}×", sig3(c.slowdown.p95)),
                count(c.tokens_in),
                count(c.tokens_out),
                secs(c.done_s),
            ]);
        }
    }
    right_align_from(&mut table, 2);
    table
}

/// Per strategy: the worst tenant's p95 wait and who it is, the tenants over
/// the scenario's alert, and Jain's index over mean slowdown.
pub fn tenant_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    let alert = results.scenario.alert_p95_ms;
    let mut header = vec![
        "Strategy".to_string(),
        "Worst tenant p95 wait".to_string(),
        "Worst tenant".to_string(),
    ];
    if let Some(a) = alert {
        header.push(format!("Tenants over p95 {}", ms(a)));
    }
    header.push("Jain's index, mean slowdown".to_string());
    table.set_header(header);
    for s in &results.strategies {
        let t = &s.median.tenants;
        let worst = if t.worst.is_empty() {
            "—".to_string()
        } else {
            t.worst.clone()
        };
        let mut row = vec![s.name.clone(), ms(t.worst_p95_ms), worst];
        if alert.is_some() {
            row.push(names(&t.over_alert, 4));
        }
        row.push(format!("{:.3}", t.jain_slowdown));
        table.add_row(row);
    }
    table
}

/// Per strategy: how evenly the tenants with work waiting were served, in
/// windows (Jain's index over service ÷ weight, the largest and mean
/// difference between two of them), beside the idle workers a cap costs.
pub fn fairness_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Jain, service ÷ weight",
        "Max service difference",
        "Mean service difference",
        "Window",
        "Idle workers while jobs wait",
    ]);
    for s in &results.strategies {
        let f = &s.median.fairness;
        table.add_row(vec![
            s.name.clone(),
            format!("{:.3}", f.jain),
            format!("{} {}", sig3(f.max_service_diff), f.unit),
            format!("{} {}", sig3(f.mean_service_diff), f.unit),
            format!("{} s", sig3(f.window_s)),
            format!("{:.1}", s.median.idle_workers_while_waiting),
        ]);
    }
    right_align(&mut table);
    table
}

/// Per strategy, the clients' side: how often jobs were sent, how they
/// ended, where attempts were refused, the work nobody read, the provider's
/// saturation, and how long the neighbours took to recover.
pub fn delivery_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Jobs",
        "Attempts",
        "Completed",
        "Given up",
        "Rejected",
        "Timed out",
        "Refused: limit / rate / budget / provider",
        "Wasted worker-s",
        "Provider saturated",
        "Recovery",
        "Goodput",
    ]);
    for s in &results.strategies {
        let (m, d) = (&s.median, &s.median.delivery);
        table.add_row(vec![
            s.name.clone(),
            count(d.unique_jobs),
            format!("{} (×{:.2})", count(d.attempts), d.amplification),
            count(d.completed),
            count(d.given_up),
            count(m.rejected),
            count(d.timed_out),
            refusals(&d.refused),
            sig3(d.wasted_worker_s),
            format!("{} s", sig3(d.provider_saturated_s)),
            recovery(results, d.recovery_s),
            format!("{} jobs/s", sig3(d.goodput_jobs_per_s)),
        ]);
    }
    right_align(&mut table);
    table
}

/// Per strategy and class: who was refused where, and what they got.
pub fn refusal_table(results: &LabResults, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Class",
        "Jobs",
        "Attempts",
        "Completed",
        "Given up or refused",
        "Refused: limit / rate / budget / provider",
        "Recovery",
    ]);
    for s in &results.strategies {
        for (name, c) in &s.median.classes {
            let d = &c.delivery;
            table.add_row(vec![
                s.name.clone(),
                name.clone(),
                count(d.unique_jobs),
                count(d.attempts),
                count(d.completed),
                count(d.given_up + c.rejected + d.timed_out),
                refusals(&d.refused),
                if results.scenario.burst.iter().any(|b| b.tenant == *name) {
                    // A bursting tenant's own waits are not measured for it.
                    "–".to_string()
                } else {
                    recovery(results, d.recovery_s)
                },
            ]);
        }
    }
    right_align_from(&mut table, 2);
    table
}

fn refusals(r: &crate::results::Refused) -> String {
    format!(
        "{} / {} / {} / {}",
        count(r.limit),
        count(r.rate),
        count(r.budget),
        count(r.provider)
    )
}

/// A recovery time, "never" (within the run), or "–" without a burst.
fn recovery(results: &LabResults, r: Option<f64>) -> String {
    match r {
        Some(s) => format!("{} s", sig3(s)),
        None if results.scenario.burst.is_empty() => "–".to_string(),
        None => "never".to_string(),
    }
}

/// Whether the lab had limits or clients that retry (see
/// [`crate::scenario::Scenario::has_limits`]).
pub fn has_limits(results: &LabResults) -> bool {
    results.scenario.has_limits()
}

/// `n: a, b, c, …` for a list of tenant names, the first `shown` of them.
fn names(list: &[String], shown: usize) -> String {
    if list.is_empty() {
        return "none".to_string();
    }
    let mut out = format!(
        "{}: {}",
        list.len(),
        list[..list.len().min(shown)].join(", ")
    );
    if list.len() > shown {
        out.push_str(", …");
    }
    out
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

/// Whether the results carry per-class figures (files from before they
/// existed do not).
pub fn has_workload(results: &LabResults) -> bool {
    results
        .strategies
        .iter()
        .any(|s| !s.median.classes.is_empty())
}

/// Wrap cells so the table fits the terminal it is printed on (comfy-table
/// reads the width; piped output is left as it is).
pub fn fit_terminal(mut table: Table) -> Table {
    table.set_content_arrangement(ContentArrangement::Dynamic);
    table
}

fn right_align(table: &mut Table) {
    right_align_from(table, 1);
}

fn right_align_from(table: &mut Table, first: usize) {
    for i in first..table.column_count() {
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
                out.push_str(&format!("\n{}\n", late_note(results)));
                if let Some(table) = queue_table(results, UTF8_FULL_CONDENSED) {
                    out.push_str("\nThe queue's own cost (medians of the runs):\n");
                    out.push_str(&fit_terminal(table).to_string());
                }
                if let Some(table) = super::carrier::table(results, UTF8_FULL_CONDENSED) {
                    out.push_str(&format!("\n{}:\n", super::carrier::HEADING));
                    out.push_str(&fit_terminal(table).to_string());
                }
            }
            ClockKind::Virtual => {
                out.push_str(
                    "\nExact model figures (virtual clock: the harness adds no error; medians of the runs):\n",
                );
                out.push_str(&fit_terminal(model_table(results, UTF8_FULL_CONDENSED)).to_string());
            }
        }
        if let Some(table) = lease_table(results, UTF8_FULL_CONDENSED) {
            out.push_str("\nLeases and faults (medians of the runs):\n");
            out.push_str(&fit_terminal(table).to_string());
            out.push_str(&format!("\nLeases: {}.\n", lease_note(results)));
        }
        if let Some(table) = recovery_table(results, UTF8_FULL_CONDENSED) {
            out.push_str("\nAcross each fault (medians of the runs):\n");
            out.push_str(&fit_terminal(table).to_string());
            out.push_str(&format!(
                "\nAcross each fault: {}.\n",
                recovery_note(results)
            ));
        }
        if has_workload(results) {
            out.push_str("\nPer class (medians of the runs):\n");
            out.push_str(&fit_terminal(class_table(results, UTF8_FULL_CONDENSED)).to_string());
            out.push_str("\nPer tenant, among the non-bursting tenants:\n");
            out.push_str(&fit_terminal(tenant_table(results, UTF8_FULL_CONDENSED)).to_string());
            out.push_str("\nFairness among the tenants with work waiting (medians of the runs):\n");
            out.push_str(&fit_terminal(fairness_table(results, UTF8_FULL_CONDENSED)).to_string());
        }
        if has_limits(results) {
            out.push_str("\nClients and limits (medians of the runs):\n");
            out.push_str(&fit_terminal(delivery_table(results, UTF8_FULL_CONDENSED)).to_string());
            out.push_str("\nWho was refused, per class (medians of the runs):\n");
            out.push_str(&fit_terminal(refusal_table(results, UTF8_FULL_CONDENSED)).to_string());
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
            backend: Default::default(),
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
