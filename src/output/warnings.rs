//! Warnings a person needs beside the figures: each names its cause and fix.
//! The type and its text live here; `lab::warnings` decides which apply, once,
//! and every printer reads them from the results.

use std::fmt;

use serde::{Deserialize, Serialize};

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
    /// On a real queue: the worker processes' own timers woke late after a
    /// job's hold (a job's overshoot on the server's stamps also holds the
    /// round trips, a cost of the queue, and is not judged here).
    WorkerTimerLate { strategy: String, p99_ms: f64 },
    /// The machine was busy with other work during the lab.
    HighLoad { load: f64, cores: usize },
    /// The results file was written by another noisylab version.
    OtherToolVersion { file: String, ours: String },
}

impl Warning {
    /// The warning for a results file written by another noisylab version.
    pub fn other_version(file_tool: &str) -> Option<Warning> {
        let ours = env!("CARGO_PKG_VERSION");
        (file_tool != ours).then(|| Warning::OtherToolVersion {
            file: file_tool.to_string(),
            ours: ours.to_string(),
        })
    }
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
            Warning::WorkerTimerLate { strategy, p99_ms } => write!(
                f,
                "{strategy}: the worker processes' timers woke {p99_ms:.3} ms late at p99 after a \
                 job's hold (more than {OVERSHOOT_P99_MS} ms): the worker threads waited for a \
                 CPU. Rerun on an idle machine, or with fewer worker processes beside the server \
                 (--processes)."
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
