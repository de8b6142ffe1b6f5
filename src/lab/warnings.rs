//! Which warnings apply to a finished lab. Computed once, when the lab ends,
//! and saved with the results; printers only read them.

use crate::output::warnings::{LOAD_PER_CORE, OVERSHOOT_P99_MS, RUN_AGREEMENT, Warning};
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
                });
            }
            _ => {}
        }
    }
    let m = &results.machine;
    let load = [m.load_start, m.load_end]
        .iter()
        .flatten()
        .map(|l| l[0])
        .fold(f64::NAN, f64::max);
    if load > LOAD_PER_CORE * m.cores as f64 {
        out.push(Warning::HighLoad {
            load,
            cores: m.cores,
        });
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
