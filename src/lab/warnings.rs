//! Which warnings apply to a finished lab. Computed once, when the lab ends,
//! and saved with the results; printers only read them.

use crate::output::warnings::{OTHERS_CPU_PCT, OVERSHOOT_P99_MS, RUN_AGREEMENT, Warning};
use crate::results::{ClockKind, Figures, LabResults};

/// Every warning that applies to a lab's results.
pub fn check(results: &LabResults) -> Vec<Warning> {
    let mut out = Vec::new();
    for s in &results.strategies {
        if s.runs.len() > 1 {
            for (figure, get) in agreement_figures() {
                let (Some(lo), Some(mid), Some(hi)) = (get(&s.min), get(&s.median), get(&s.max))
                else {
                    continue;
                };
                if mid > 0.0 && (hi - lo) / mid > RUN_AGREEMENT {
                    out.push(Warning::RunsDisagree {
                        strategy: s.name.clone(),
                        figure: figure.to_string(),
                        spread_pct: (hi - lo) / mid * 100.0,
                    });
                }
            }
        }
        // On a real queue the timer is the workers' own; in this process
        // the job's overshoot is the timer's.
        match &s.max.queue {
            Some(q) if q.hold_overshoot_us.p99 / 1e3 > OVERSHOOT_P99_MS => {
                out.push(Warning::WorkerTimerLate {
                    strategy: s.name.clone(),
                    p99_ms: q.hold_overshoot_us.p99 / 1e3,
                });
            }
            None if results.clock == ClockKind::Real
                && s.max.job_overshoot_ms.p99 > OVERSHOOT_P99_MS =>
            {
                out.push(Warning::TimerOvershoot {
                    strategy: s.name.clone(),
                    p99_ms: s.max.job_overshoot_ms.p99,
                    cause: s.late.as_ref().and_then(|l| {
                        let (cause, n) = crate::engine::lateness::ALL
                            .into_iter()
                            .map(|c| (c, l.jobs.get(c)))
                            .max_by_key(|(_, n)| *n)
                            .filter(|(_, n)| *n > 0)?;
                        Some((cause, n, l.jobs.total()))
                    }),
                });
            }
            _ => {}
        }
    }
    // Measured over the lab's own window (a load average would carry the
    // build that ran before it).
    let others = results
        .real
        .as_ref()
        .and_then(|r| r.causes)
        .and_then(|c| c.others_cpu_pct);
    if let Some(others_cpu_pct) = others.filter(|p| *p > OTHERS_CPU_PCT) {
        out.push(Warning::OthersBusy { others_cpu_pct });
    }
    out.extend(Warning::other_version(&results.tool));
    out
}

type Pick = fn(&Figures) -> Option<f64>;

/// Figures the runs must agree on; waits only where they are above a
/// millisecond (below that they are the machine's dispatch noise).
fn agreement_figures() -> [(&'static str, Pick); 3] {
    fn above_ms(v: f64) -> Option<f64> {
        (v > 1.0).then_some(v)
    }
    [
        ("normal p95 wait", |f| above_ms(f.normal_wait_ms.p95)),
        ("normal p50 wait", |f| above_ms(f.normal_wait_ms.p50)),
        ("noisy done", |f| f.noisy_done_s),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::lateness::{Cause, Lateness};

    fn committed() -> LabResults {
        crate::store::load(std::path::Path::new(
            "reports/runs/2026-12-03-vm-article.json",
        ))
        .unwrap()
    }

    fn kinds(w: &[Warning]) -> Vec<&'static str> {
        w.iter()
            .filter_map(|w| match w {
                Warning::TimerOvershoot { .. } => Some("overshoot"),
                Warning::OthersBusy { .. } => Some("others"),
                Warning::HighLoad { .. } => Some("load"),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_busy_machine_is_judged_by_the_lab_s_own_window_not_the_load_average() {
        let mut r = committed();
        // The build before the lab left a 1-minute load of 1.8 on 2 cores.
        r.machine.load_start = Some([1.8, 1.0, 0.5]);
        r.machine.load_end = Some([1.6, 1.0, 0.5]);
        assert_eq!(kinds(&check(&r)), Vec::<&str>::new());
        let causes = r.real.as_mut().unwrap().causes.as_mut().unwrap();
        causes.others_cpu_pct = Some(12.5);
        let w = check(&r);
        assert_eq!(kinds(&w), ["others"]);
        let others = w.iter().find(|w| matches!(w, Warning::OthersBusy { .. }));
        assert!(
            others
                .unwrap()
                .to_string()
                .starts_with("other processes kept 12.5 % of the CPUs busy"),
            "{w:?}"
        );
    }

    #[test]
    fn the_overshoot_warning_names_the_cause_of_most_late_jobs() {
        let mut r = committed();
        let s = &mut r.strategies[1];
        s.max.job_overshoot_ms.p99 = 3.4;
        s.late = None;
        let overshoot = |w: &[Warning]| {
            w.iter()
                .find(|w| matches!(w, Warning::TimerOvershoot { .. }))
                .cloned()
                .unwrap()
        };
        let w = check(&r);
        assert_eq!(kinds(&w), ["overshoot"]);
        assert!(
            overshoot(&w).to_string().contains("not attributed"),
            "{w:?}"
        );
        let mut late = Lateness::default();
        late.jobs.stolen = 24;
        late.jobs.timer = 10;
        late.jobs.busy = 2;
        r.strategies[1].late = Some(late);
        let w = overshoot(&check(&r));
        let Warning::TimerOvershoot { cause, .. } = &w else {
            unreachable!()
        };
        assert_eq!(*cause, Some((Cause::Stolen, 24, 36)));
        assert!(
            w.to_string()
                .contains("the hypervisor took the loop's CPU during 24 of the 36 late jobs"),
            "{w}"
        );
    }
}
