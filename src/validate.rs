//! Validate a machine's results against the post: every figure beside the
//! published one, then the post's claims as checks that pass or fail.
//!
//! Strategies are found by what they are, not by name: the baseline is `fifo`
//! with neither cap nor limit, the capped ones have a cap and no limit, the
//! work-conserving fair queue has neither, the limited one has a limit.

use std::fmt::Write as _;

use comfy_table::{Table, TableStyle};
use serde::Serialize;

use crate::reference::{FIGURES, Reference, ratio};
use crate::results::{Figures, LabResults, StrategyResults};
use crate::scenario::{Queue, Strategy};

/// "Within 5 %" of a published figure.
pub const CLOSE: f64 = 0.05;
/// Every fix must beat FIFO by this much on the normal tenants' p95.
pub const FIX_FACTOR: f64 = 350.0;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureRow {
    pub strategy: String,
    pub figure: String,
    pub ours: String,
    pub post: String,
    pub ratio: String,
    pub verdict: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub claim: String,
    /// `None`: the results lack what the check needs (it neither passes nor fails).
    pub pass: Option<bool>,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validation {
    pub figures: Vec<FigureRow>,
    pub checks: Vec<Check>,
}

impl Validation {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass != Some(false))
    }

    pub fn failed(&self) -> usize {
        self.checks.iter().filter(|c| c.pass == Some(false)).count()
    }

    pub fn render(&self, style: TableStyle) -> String {
        let mut figures = Table::new();
        figures.load_style(style);
        figures.set_header(vec![
            "Strategy", "Figure", "Ours", "Post", "Ratio", "Verdict",
        ]);
        for r in &self.figures {
            figures.add_row(vec![
                &r.strategy,
                &r.figure,
                &r.ours,
                &r.post,
                &r.ratio,
                &r.verdict,
            ]);
        }
        let mut checks = Table::new();
        checks.load_style(style);
        checks.set_header(vec!["Check", "Claim", "Measured"]);
        for c in &self.checks {
            let mark = match c.pass {
                Some(true) => "pass",
                Some(false) => "FAIL",
                None => "not run",
            };
            checks.add_row(vec![mark, &c.claim, &c.detail]);
        }
        let mut out = String::new();
        let _ = writeln!(out, "{figures}\n\n{checks}\n");
        let ran = self.checks.iter().filter(|c| c.pass.is_some()).count();
        let _ = writeln!(
            out,
            "{}: {} of {ran} checks hold.",
            if self.passed() {
                "validated"
            } else {
                "not validated"
            },
            ran - self.failed()
        );
        out
    }
}

pub fn validate(results: &LabResults, reference: &Reference) -> Validation {
    Validation {
        figures: figure_rows(results, reference),
        checks: checks(results, reference),
    }
}

fn figure_rows(results: &LabResults, reference: &Reference) -> Vec<FigureRow> {
    let mut rows = Vec::new();
    for s in &results.strategies {
        let Some(post) = reference.strategy(&s.name) else {
            continue;
        };
        for def in FIGURES {
            let (Some(ours), Some(theirs)) = ((def.ours)(&s.median), (def.post)(post)) else {
                continue;
            };
            let verdict = if theirs < def.machine_set_below {
                if ours <= theirs {
                    "machine-set: better".to_string()
                } else if ours <= theirs * 10.0 {
                    "machine-set: same order".to_string()
                } else {
                    format!("machine-set: worse ({})", ratio(ours, theirs))
                }
            } else if close(ours, theirs, CLOSE) {
                "within 5 %".to_string()
            } else if theirs == 0.0 {
                "differs".to_string()
            } else {
                format!("differs by {:+.0} %", (ours / theirs - 1.0) * 100.0)
            };
            rows.push(FigureRow {
                strategy: s.name.clone(),
                figure: def.label.to_string(),
                ours: (def.show)(ours),
                post: (def.show)(theirs),
                ratio: ratio(ours, theirs),
                verdict,
            });
        }
    }
    rows
}

fn close(ours: f64, theirs: f64, within: f64) -> bool {
    if theirs == 0.0 {
        ours == 0.0
    } else {
        ((ours - theirs) / theirs).abs() <= within
    }
}

/// The strategy of the results that is what `pick` looks for, with its
/// definition from the scenario.
fn find(
    results: &LabResults,
    pick: impl Fn(&Strategy) -> bool,
) -> Vec<(&StrategyResults, &Strategy)> {
    results
        .strategies
        .iter()
        .filter_map(|s| {
            let def = results
                .scenario
                .strategy
                .iter()
                .find(|d| d.name == s.name)?;
            pick(def).then_some((s, def))
        })
        .collect()
}

fn not_run(claim: String, why: &str) -> Check {
    Check {
        claim,
        pass: None,
        detail: why.to_string(),
    }
}

fn check(claim: String, pass: bool, detail: String) -> Check {
    Check {
        claim,
        pass: Some(pass),
        detail,
    }
}

fn checks(results: &LabResults, reference: &Reference) -> Vec<Check> {
    let mut out = Vec::new();
    let post = |name: &str| reference.strategy(name);
    let fifo = find(results, |d| {
        d.queue == Queue::Fifo && d.cap.is_none() && d.limit.is_none()
    })
    .into_iter()
    .next();
    let fixes = find(results, |d| {
        d.cap.is_some() || d.limit.is_some() || d.queue == Queue::Fair
    });
    let capped = find(results, |d| d.cap.is_some() && d.limit.is_none());
    let fair = find(results, |d| {
        d.queue == Queue::Fair && d.cap.is_none() && d.limit.is_none()
    })
    .into_iter()
    .next();
    let limited = find(results, |d| d.limit.is_some());
    let done = |f: &Figures| f.noisy_done_s.unwrap_or(f64::NAN);

    // 1. Every fix beats FIFO by 350× on the neighbours' p95.
    let claim =
        format!("every fix beats Shared FIFO by at least {FIX_FACTOR:.0}× on the normal p95");
    match fifo {
        None => out.push(not_run(
            claim,
            "no Shared FIFO (fifo, no cap) in the results",
        )),
        Some((base, _)) => {
            for (s, _) in &fixes {
                let p95 = s.median.normal_wait_ms.p95;
                let factor = if p95 == 0.0 {
                    f64::INFINITY
                } else {
                    base.median.normal_wait_ms.p95 / p95
                };
                out.push(check(
                    format!(
                        "{}: beats Shared FIFO by ≥ {FIX_FACTOR:.0}× on the normal p95",
                        s.name
                    ),
                    factor >= FIX_FACTOR,
                    if factor.is_infinite() {
                        format!(
                            "p95 0 ms against {}",
                            crate::report::format::ms(base.median.normal_wait_ms.p95)
                        )
                    } else {
                        format!(
                            "{}× ({} against {})",
                            crate::report::format::count(factor.round() as u64),
                            crate::report::format::ms(p95),
                            crate::report::format::ms(base.median.normal_wait_ms.p95)
                        )
                    },
                ));
            }
        }
    }

    // 2. FIFO: noisy done ≈ 10.1 s, normal p95 ≈ 9.6 s.
    match (fifo, post("Shared FIFO")) {
        (Some((s, _)), Some(p)) => {
            out.push(done_check(s, p.noisy_done_s, "noisy tenant done"));
            out.push(check(
                format!(
                    "Shared FIFO: normal p95 ≈ {:.1} s (within 5 %)",
                    p.normal_p95_ms / 1e3
                ),
                close(s.median.normal_wait_ms.p95, p.normal_p95_ms, CLOSE),
                format!("{:.2} s", s.median.normal_wait_ms.p95 / 1e3),
            ));
        }
        _ => out.push(not_run(
            "Shared FIFO figures".into(),
            "no Shared FIFO in the results or the reference",
        )),
    }

    // 3. The cap: ≈ 50 s, about 12 of 20 workers idle while the noisy tenant's jobs wait.
    if capped.is_empty() {
        out.push(not_run(
            "a cap of 4: noisy done ≈ 50 s".into(),
            "no capped strategy in the results",
        ));
    }
    for (s, def) in &capped {
        let Some(p) = post(&s.name) else {
            out.push(not_run(
                format!("{}: figures", s.name),
                "not in the reference",
            ));
            continue;
        };
        out.push(done_check(s, p.noisy_done_s, "noisy tenant done"));
        let idle = s.median.idle_workers_while_waiting_in_traffic;
        let expected = expected_idle(results, def);
        out.push(check(
            format!(
                "{}: about {expected:.0} of {} workers idle while its jobs wait and normal traffic runs",
                s.name, results.scenario.workers
            ),
            (idle - expected).abs() <= 1.0,
            format!("{idle:.1} idle on average"),
        ));
    }

    // 4. The fair queue without cap: work-conserving, ≈ 12.2 s, costs ≈ 2 s against the cap's ≈ 40 s.
    match fair {
        None => out.push(not_run(
            "fair queue without cap".into(),
            "no fair queue without cap in the results",
        )),
        Some((s, _)) => {
            out.push(check(
                format!(
                    "{}: work-conserving (no worker idle while a job waits)",
                    s.name
                ),
                s.max.idle_workers_while_waiting < 0.01,
                format!(
                    "{:.3} idle on average while jobs waited",
                    s.max.idle_workers_while_waiting
                ),
            ));
            if let Some(p) = post(&s.name) {
                out.push(done_check(s, p.noisy_done_s, "noisy tenant done"));
            }
            if let (Some((base, _)), Some((cap, _))) = (fifo, capped.first()) {
                let fair_cost = done(&s.median) - done(&base.median);
                let cap_cost = done(&cap.median) - done(&base.median);
                let post_cap_cost = match (post(&cap.name), post("Shared FIFO")) {
                    (Some(c), Some(b)) => c.noisy_done_s - b.noisy_done_s,
                    _ => f64::NAN,
                };
                out.push(check(
                    format!(
                        "{} costs the noisy tenant about 2 s, the cap about {post_cap_cost:.0} s (within 5 %)",
                        s.name
                    ),
                    (1.0..=3.0).contains(&fair_cost) && close(cap_cost, post_cap_cost, CLOSE),
                    format!("{fair_cost:.2} s against {cap_cost:.2} s"),
                ));
            }
        }
    }

    // 5. The queue limit: 1,896 of 2,000 rejected, the rest done in 2.6 s.
    if limited.is_empty() {
        out.push(not_run(
            "queue limit 100".into(),
            "no strategy with a limit in the results",
        ));
    }
    for (s, _) in &limited {
        let Some(p) = post(&s.name) else {
            out.push(not_run(
                format!("{}: figures", s.name),
                "not in the reference",
            ));
            continue;
        };
        let burst: u64 = results
            .scenario
            .burst
            .iter()
            .map(|b| u64::from(b.jobs))
            .sum();
        out.push(check(
            format!(
                "{}: {} of {} rejected (about {:.0} %)",
                s.name,
                crate::report::format::count(p.rejected),
                crate::report::format::count(burst),
                p.rejected as f64 / burst.max(1) as f64 * 100.0
            ),
            close(s.median.rejected as f64, p.rejected as f64, 0.01),
            format!(
                "{} rejected",
                crate::report::format::count(s.median.rejected)
            ),
        ));
        out.push(done_check(s, p.noisy_done_s, "accepted work done"));
    }

    // 6. Runs agree within 8 % on the p95 where it is above a millisecond.
    for s in &results.strategies {
        let (lo, mid, hi) = (
            s.min.normal_wait_ms.p95,
            s.median.normal_wait_ms.p95,
            s.max.normal_wait_ms.p95,
        );
        if s.runs.len() < 2 || mid <= 1.0 {
            continue;
        }
        let spread = (hi - lo) / mid;
        out.push(check(
            format!(
                "{}: the {} runs agree within 8 % on the normal p95",
                s.name,
                s.runs.len()
            ),
            spread <= crate::output::warnings::RUN_AGREEMENT,
            format!(
                "{:.1} % ({}–{})",
                spread * 100.0,
                crate::report::format::ms(lo),
                crate::report::format::ms(hi)
            ),
        ));
    }
    out
}

/// The noisy tenant's time after its burst against the post's, within 5 %.
fn done_check(s: &StrategyResults, post_s: f64, what: &str) -> Check {
    let ours = s.median.noisy_done_s.unwrap_or(f64::NAN);
    check(
        format!("{}: {what} after ≈ {post_s} s (within 5 %)", s.name),
        close(ours, post_s, CLOSE),
        format!("{ours:.2} s"),
    )
}

/// Workers idle while a capped tenant's jobs wait: the pool, less its cap,
/// less what the normal tenants keep busy (rate × duration, per tenant).
fn expected_idle(results: &LabResults, def: &Strategy) -> f64 {
    let sc = &results.scenario;
    let normal_busy = f64::from(sc.normal.tenants) * sc.normal.rate_per_s * sc.job_ms as f64 / 1e3;
    let bursting = sc.burst_tenants().len() as f64;
    f64::from(sc.workers) - bursting * f64::from(def.cap.unwrap_or(0)) - normal_busy
}
