//! `validate`'s findings as text: the figures beside the post's, the checks,
//! and the one-line verdict.

use std::fmt::Write as _;

use comfy_table::{Table, TableStyle};

use crate::engine::lateness::{Cause, Lateness};
use crate::results::LabResults;
use crate::units::ms;
use crate::validate::model::{FigureCheck, ModelVerdict, Rule};
use crate::validate::{AgainstModel, Outcome, Validation};

pub fn render(v: &Validation, style: TableStyle) -> String {
    let mut figures = Table::new();
    figures.load_style(style);
    let banded = v.figures.iter().any(|r| r.band.is_some());
    let mut header = vec!["Strategy", "Figure", "Ours", "Post", "Ratio", "Verdict"];
    if banded {
        header.push("The model, p5–p95 of the seeds: the post's figure");
    }
    figures.set_header(header);
    for r in &v.figures {
        let mut row = vec![
            r.strategy.clone(),
            r.figure.to_string(),
            r.ours.clone(),
            r.post.clone(),
            r.ratio.clone(),
            r.verdict.to_string(),
        ];
        if banded {
            row.push(match (r.band, r.against_model) {
                (Some(b), Some(against)) => {
                    let range = if b.p5 == b.p95 {
                        crate::units::sig3(b.p5)
                    } else {
                        format!("{}–{}", crate::units::sig3(b.p5), crate::units::sig3(b.p95))
                    };
                    let word = match against {
                        AgainstModel::Reproduced => "reproduced by the model",
                        AgainstModel::Differs => "the model differs",
                        AgainstModel::MachineSet => "machine-set (the model has no harness)",
                    };
                    format!("{range}: {word}")
                }
                _ => String::new(),
            });
        }
        figures.add_row(row);
    }
    let mut checks = Table::new();
    checks.load_style(style);
    checks.set_header(vec!["Check", "Claim", "Measured"]);
    for c in &v.checks {
        let mark = match c.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::NotRun => "not run",
            Outcome::ModelDiffers => "model differs",
        };
        checks.add_row(vec![mark, &c.claim, &c.detail]);
    }
    let mut out = String::new();
    let _ = writeln!(out, "{figures}\n\n{checks}\n");
    let differs = v.model_differs();
    let _ = writeln!(
        out,
        "{}: {} of {} checks hold{}.",
        if v.passed() {
            "the post's claims hold here"
        } else {
            "the post's claims do not all hold here"
        },
        v.ran() - v.failed() - differs,
        v.ran(),
        if differs > 0 {
            format!(
                "; {differs} are not what the model itself gives (model differs), so no machine could hold them"
            )
        } else {
            String::new()
        }
    );
    out
}

/// The machine against the model: the verdict line, then per strategy the
/// figures checked and the closest call, then every figure outside its
/// tolerance.
/// What the lab measured of its own disturbance, as a few lines.
pub fn render_causes(results: &LabResults) -> String {
    let Some(real) = &results.real else {
        return String::new();
    };
    let mut out = String::new();
    if let Some(c) = &real.causes {
        let pct =
            |v: Option<f64>| v.map_or_else(|| "not measured".to_string(), |v| format!("{v:.1} %"));
        let _ = writeln!(
            out,
            "Measured during the lab: other processes {} of the CPUs, steal {}, {:.1} involuntary context switches a second; tokio's timer at most {:.2} ms late in calibration, margin {:.1} ms.",
            pct(c.others_cpu_pct),
            pct(c.steal_pct),
            c.involuntary_switches_per_s,
            real.calibration.tokio_overshoot_ms.max,
            real.timer_margin_ms.unwrap_or(3.0)
        );
    }
    for cause in crate::validate::model::causes(results) {
        let _ = writeln!(out, "- Likely cause: {cause}.");
    }
    out
}

pub fn render_model(v: &ModelVerdict, results: &LabResults, style: TableStyle) -> String {
    if let Some(why) = &v.not_run {
        return format!("Against the model: not run ({why}).\n");
    }
    let failed = v.failed();
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", verdict_line(v, results));
    let _ = writeln!(out, "{}", per_strategy(v, style));
    if !failed.is_empty() {
        let mut t = Table::new();
        t.load_style(style);
        t.set_header(vec![
            "Outside the band",
            "Seed",
            "Machine",
            "Model (band)",
            "Off by",
            "Allowed ±",
        ]);
        for c in failed {
            t.add_row(vec![
                format!("{}: {}", c.strategy, c.figure),
                c.seed.to_string(),
                shown(c.machine, c.unit()),
                model_shown(c),
                shown(c.off_by(), c.unit()),
                shown(c.tolerance, c.unit()),
            ]);
        }
        let _ = writeln!(out, "\n{t}");
    }
    out
}

/// Per strategy: the figures within tolerance and the closest call.
fn per_strategy(v: &ModelVerdict, style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style);
    table.set_header(vec![
        "Strategy",
        "Figures within",
        "Closest call (seed)",
        "Machine",
        "Model (band)",
        "Allowed ±",
    ]);
    let mut names: Vec<&str> = Vec::new();
    for c in &v.checks {
        if !names.contains(&c.strategy.as_str()) {
            names.push(&c.strategy);
        }
    }
    for name in names {
        let mine: Vec<&FigureCheck> = v.checks.iter().filter(|c| c.strategy == name).collect();
        let held = mine.iter().filter(|c| c.holds()).count();
        let Some(closest) = mine
            .iter()
            .max_by(|a, b| closeness(a).total_cmp(&closeness(b)))
        else {
            continue;
        };
        table.add_row(vec![
            name.to_string(),
            format!("{held} of {}", mine.len()),
            format!("{} ({})", closest.figure, closest.seed),
            shown(closest.machine, closest.unit()),
            model_shown(closest),
            shown(closest.tolerance, closest.unit()),
        ]);
    }
    table
}

/// "99 % band": the level the lab's figures are judged at together.
fn band_name() -> String {
    format!("{} band", crate::units::pct(crate::validate::model::LEVEL))
}

/// The model's figure, with its band where it has one.
fn model_shown(c: &FigureCheck) -> String {
    if c.model_hi > c.model_lo {
        format!(
            "{} ({}–{})",
            shown(c.model, c.unit()),
            crate::units::sig3(c.model_lo),
            crate::units::sig3(c.model_hi)
        )
    } else {
        shown(c.model, c.unit())
    }
}

/// How close a figure came to its tolerance: distance ÷ allowance.
fn closeness(c: &FigureCheck) -> f64 {
    let d = c.off_by().abs();
    if c.tolerance > 0.0 {
        d / c.tolerance
    } else if d == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

fn runs(v: &ModelVerdict) -> usize {
    let mut seen: Vec<(&str, u64)> = Vec::new();
    for c in &v.checks {
        if !seen.contains(&(c.strategy.as_str(), c.seed)) {
            seen.push((&c.strategy, c.seed));
        }
    }
    seen.len()
}

fn shown(v: f64, unit: &str) -> String {
    match unit {
        "ms" => ms(v),
        "s" => format!("{v:.4} s"),
        _ => crate::units::sig3(v),
    }
}

/// The machine's verdict in one line: whether it reproduces the model, what
/// is outside, and which measured cause made the late jobs, with how many
/// figures hold once that cause's time is allowed.
pub fn verdict_line(v: &ModelVerdict, results: &LabResults) -> String {
    if let Some(why) = &v.not_run {
        return format!("against the model: not run ({why})");
    }
    let failed = v.failed();
    let (held, all) = (v.checks.len() - failed.len(), v.checks.len());
    if failed.is_empty() {
        let late = v.late_total();
        let tail = late
            .as_ref()
            .map_or_else(String::new, |l| format!("; {}", late_jobs(l)));
        return format!(
            "this machine reproduces the model: {held} of {all} figures of {} runs inside the model's {} of {} replicas on the same seeds{tail}.",
            runs(v),
            band_name(),
            crate::validate::model::REPLICAS
        );
    }
    let mut line = format!(
        "this machine does NOT reproduce the model: {}",
        outside(&failed)
    );
    let Some(late) = v.late_where_failed() else {
        line.push_str(&format!(
            " ({held} of {all} figures within); late jobs were not attributed (a file from before they were, or a run on a queue)."
        ));
        return line;
    };
    let jobs = late.jobs.total();
    let unexplained = late.jobs.unexplained;
    let main = Cause::EXTERNAL
        .into_iter()
        .map(|c| (c, late.jobs.get(c)))
        .filter(|(_, n)| *n > 0)
        .max_by_key(|(_, n)| *n);
    match main {
        _ if jobs == 0 => line.push_str(&format!(
            "; no job finished more than {} ms late, so the machine's timing does not explain it: the lab differs from the model.",
            late.threshold_ms
        )),
        Some((cause, n)) if n >= unexplained => {
            let share = n as f64 / jobs as f64 * 100.0;
            line.push_str(&format!(
                "; in the runs outside, {}",
                named(cause, share, jobs, results)
            ));
            let makespans = failed.iter().any(|c| c.rule == Rule::Makespan);
            if cause == Cause::Stolen && makespans {
                line.push_str(": this VM cannot time its jobs to 0.1 %");
            }
            line.push_str(&format!(
                ". Without the {} time, {} of {all} reproduce.",
                cause.name(),
                v.within_allowing(cause)
            ));
        }
        _ => line.push_str(&format!(
            "; {unexplained} of the {jobs} late jobs have no measured cause (unexplained: the thread ran, waited for no CPU and its timer was on time, yet the wake was late)."
        )),
    }
    line
}

/// The figures outside tolerance, by kind: makespans long or short by up to
/// a share, waits off by up to a time, counts.
fn outside(failed: &[&FigureCheck]) -> String {
    let mut parts = Vec::new();
    let makespans: Vec<&&FigureCheck> =
        failed.iter().filter(|c| c.rule == Rule::Makespan).collect();
    if !makespans.is_empty() {
        let worst = makespans
            .iter()
            .map(|c| c.off_by() / c.model.abs().max(1e-9) * 100.0)
            .max_by(|a, b| a.abs().total_cmp(&b.abs()))
            .unwrap_or(0.0);
        parts.push(format!(
            "{} makespan{} {} by up to {:.2} %",
            makespans.len(),
            if makespans.len() == 1 { "" } else { "s" },
            if worst >= 0.0 { "long" } else { "short" },
            worst.abs()
        ));
    }
    let waits: Vec<&&FigureCheck> = failed.iter().filter(|c| c.rule == Rule::Wait).collect();
    if !waits.is_empty() {
        let worst = waits.iter().map(|c| c.off_by().abs()).fold(0.0, f64::max);
        parts.push(format!(
            "{} wait{} off by up to {}",
            waits.len(),
            if waits.len() == 1 { "" } else { "s" },
            ms(worst)
        ));
    }
    let counts = failed.iter().filter(|c| c.rule == Rule::Exact).count();
    if counts > 0 {
        parts.push(format!(
            "{counts} count{} differ",
            if counts == 1 { "" } else { "s" }
        ));
    }
    parts.join(", ")
}

/// A cause in words, with its share of the late jobs and the lab-wide
/// figure that corroborates it.
fn named(cause: Cause, share: f64, jobs: u64, results: &LabResults) -> String {
    let causes = results.real.as_ref().and_then(|r| r.causes);
    let pct =
        |v: Option<f64>| v.map_or_else(|| "not measured".to_string(), |v| format!("{v:.2} %"));
    match cause {
        Cause::Stolen => format!(
            "the hypervisor took the CPU during {share:.0} % of the {jobs} late jobs (steal {} over the lab)",
            pct(causes.and_then(|c| c.steal_pct))
        ),
        Cause::Preempted => format!(
            "other processes took the CPU during {share:.0} % of the {jobs} late jobs (they kept {} of the CPUs busy)",
            pct(causes.and_then(|c| c.others_cpu_pct))
        ),
        _ => format!(
            "the OS timer itself woke late for {share:.0} % of the {jobs} late jobs (tokio at most {:.2} ms late in calibration)",
            results
                .real
                .as_ref()
                .map_or(0.0, |r| r.calibration.tokio_overshoot_ms.max)
        ),
    }
}

/// Late jobs and arrivals by cause, in a clause.
pub fn late_jobs(l: &Lateness) -> String {
    let by = |b: &crate::engine::lateness::ByCause<u64>| {
        crate::engine::lateness::ALL
            .into_iter()
            .filter(|c| b.get(*c) > 0)
            .map(|c| format!("{} {}", b.get(c), c.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let part = |what: &str, b: &crate::engine::lateness::ByCause<u64>| {
        if b.total() == 0 {
            format!("no {what} late")
        } else {
            format!("{} {what} late ({})", b.total(), by(b))
        }
    };
    format!(
        "{} and {} by more than {} ms",
        part("jobs", &l.jobs),
        part("arrivals", &l.arrivals),
        l.threshold_ms
    )
}

/// Which of the post's strategies a queue with a discipline of its own
/// behaves like: its figures beside the model's under each, nearest first.
pub fn render_behaviour(b: &[crate::validate::behaves::Behaviour], style: TableStyle) -> String {
    use crate::validate::behaves::Compared;
    let mut out = String::new();
    let cells = |c: &Compared| {
        vec![
            ms(c.normal_p50_ms),
            ms(c.normal_p95_ms),
            ms(c.normal_p99_ms),
            c.noisy_done_s
                .map_or_else(|| "n/a".into(), |s| format!("{} s", crate::units::sig3(s))),
            c.rejected.to_string(),
        ]
    };
    for run in b {
        let Some(nearest) = run.candidates.first() else {
            continue;
        };
        let _ = writeln!(
            out,
            "{}: your queue behaves most like {:?} (distance {:.2}: the mean |ln ratio| of the \
             neighbours' wait p50, p95 and p99 + 1 ms, the noisy tenant's time to finish + 0.1 s \
             and the jobs rejected + 1; the post's strategies on the model, same seeds and runs)\n",
            run.run, nearest.strategy, nearest.distance
        );
        let mut t = Table::new();
        t.load_style(style);
        t.set_header(vec![
            "",
            "Distance",
            "Normal p50",
            "Normal p95",
            "Normal p99",
            "Noisy done",
            "Rejected",
        ]);
        let mut row = vec!["Your queue, measured".to_string(), String::new()];
        row.extend(cells(&run.measured));
        t.add_row(row);
        for c in &run.candidates {
            let mut row = vec![
                format!("Model: {}", c.strategy),
                format!("{:.2}", c.distance),
            ];
            row.extend(cells(&c.model));
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
    }
    out
}
