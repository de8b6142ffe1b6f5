//! Warnings a person needs beside the figures: each names its cause and fix.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::results::{ClockKind, Figures, LabResults};

/// Runs of one strategy should agree within this fraction of their median.
pub const RUN_AGREEMENT: f64 = 0.08;
/// Job-duration overshoot p99 above this means the timer is too coarse.
pub const OVERSHOOT_P99_MS: f64 = 2.0;
/// A 1-minute load average above this share of the cores means a busy machine.
pub const LOAD_PER_CORE: f64 = 0.75;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Warning {
    /// Runs of a strategy disagree by more than 8 % of their median.
    RunsDisagree {
        strategy: String,
        figure: String,
        spread_pct: f64,
    },
    /// Jobs held their worker noticeably longer than `job_ms`.
    TimerOvershoot { strategy: String, p99_ms: f64 },
    /// The machine was busy with other work during the lab.
    HighLoad { load: f64, cores: usize },
    /// The results file was written by another noisylab version.
    OtherToolVersion { file: String, ours: String },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::RunsDisagree {
                strategy,
                figure,
                spread_pct,
            } => write!(
                f,
                "{strategy}: runs disagree by {spread_pct:.0} % on {figure} (more than {:.0} %). \
                 On the real clock a busy machine during one run is the usual cause: close other \
                 programs and rerun. Where the virtual clock disagrees too, the seeds themselves \
                 differ (see the README's \"Why the fair queue's waits vary\"); raise `runs` so \
                 the median settles.",
                RUN_AGREEMENT * 100.0
            ),
            Warning::TimerOvershoot { strategy, p99_ms } => write!(
                f,
                "{strategy}: jobs overshot their duration by {p99_ms:.3} ms at p99 (more than \
                 {OVERSHOOT_P99_MS} ms): the timer is too coarse or the machine is busy. Use \
                 `--timer precise` (the default) and an idle machine."
            ),
            Warning::HighLoad { load, cores } => write!(
                f,
                "the load average reached {load:.2} on {cores} cores during the lab: other work \
                 competed with the harness, so waits and overshoot may be inflated. Rerun on an \
                 idle machine."
            ),
            Warning::OtherToolVersion { file, ours } => write!(
                f,
                "the results were written by noisylab {file}, this is {ours}: figures are \
                 comparable but newer checks may be missing. Rerun `make lab` to refresh them."
            ),
        }
    }
}

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
        if results.clock == ClockKind::Real && s.max.job_overshoot_ms.p99 > OVERSHOOT_P99_MS {
            out.push(Warning::TimerOvershoot {
                strategy: s.name.clone(),
                p99_ms: s.max.job_overshoot_ms.p99,
            });
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
    let ours = env!("CARGO_PKG_VERSION");
    // Only a file read back can be from another version; a fresh lab is ours.
    if results.tool != ours {
        out.push(Warning::OtherToolVersion {
            file: results.tool.clone(),
            ours: ours.to_string(),
        });
    }
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
