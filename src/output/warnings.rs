//! Warnings a person needs beside the figures: each names its cause and fix.
//! The type and its text live here; `lab::warnings` decides which apply, once,
//! and every printer reads them from the results.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::engine::lateness::Cause;

/// Runs of one strategy should agree within this fraction of their median.
pub const RUN_AGREEMENT: f64 = 0.08;
/// Job-duration overshoot p99 above this means the timer is too coarse.
pub const OVERSHOOT_P99_MS: f64 = 2.0;
/// Other processes keeping more than this share of all CPUs busy over the
/// lab's own window compete with its loop.
pub const OTHERS_CPU_PCT: f64 = 5.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Warning {
    /// Runs of a strategy disagree by more than 8 % of their median.
    RunsDisagree {
        strategy: String,
        figure: String,
        spread_pct: f64,
    },
    /// Jobs held their worker noticeably longer than `job_ms`; `cause`: the
    /// measured cause of most late jobs, with their count and the late jobs'
    /// (absent where they were not attributed).
    TimerOvershoot {
        strategy: String,
        p99_ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<(Cause, u64, u64)>,
    },
    /// On a real queue: the worker processes' own timers woke late after a
    /// job's hold (a job's overshoot on the server's stamps also holds the
    /// round trips, a cost of the queue, and is not judged here).
    WorkerTimerLate { strategy: String, p99_ms: f64 },
    /// Other processes kept the CPUs busy during the lab's own window.
    OthersBusy { others_cpu_pct: f64 },
    /// The load average was high (files from before the lab measured other
    /// processes' CPU over its own window; no longer raised: the 1-minute
    /// average carries the build before the lab into it).
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
                 differ (docs/validation.md, \"Why the fair queue's waits vary\"); raise `runs` so \
                 the median settles.",
                RUN_AGREEMENT * 100.0
            ),
            Warning::TimerOvershoot {
                strategy,
                p99_ms,
                cause,
            } => {
                write!(
                    f,
                    "{strategy}: jobs overshot their duration by {p99_ms:.3} ms at p99 (more than \
                     {OVERSHOOT_P99_MS} ms): "
                )?;
                overshoot_cause(f, cause)
            }
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
            Warning::OthersBusy { others_cpu_pct } => write!(
                f,
                "other processes kept {others_cpu_pct:.1} % of the CPUs busy during the lab \
                 (more than {OTHERS_CPU_PCT:.0} %): they competed with the harness, so waits and \
                 overshoot may be inflated. Rerun on an idle machine."
            ),
            Warning::OtherToolVersion { file, ours } => write!(
                f,
                "the results were written by noisylab {file}, this is {ours}: figures are \
                 comparable but newer checks may be missing. Rerun `make lab` to refresh them."
            ),
        }
    }
}

/// What a `TimerOvershoot` warning says of its measured cause, and the fix.
fn overshoot_cause(f: &mut fmt::Formatter<'_>, cause: &Option<(Cause, u64, u64)>) -> fmt::Result {
    match cause {
        Some((Cause::Stolen, n, of)) => write!(
            f,
            "the hypervisor took the loop's CPU during {n} of the {of} late jobs. \
             A VM with steal cannot time jobs finer than its steal episodes: run \
             on a dedicated host or a VM with dedicated cores to measure the lab \
             itself, or read this run as the figure of this VM."
        ),
        Some((Cause::Preempted, n, of)) => write!(
            f,
            "another thread of this machine had the loop's CPU during {n} of the \
             {of} late jobs. Close other programs (builds, browsers) and rerun."
        ),
        Some((Cause::Timer, n, of)) => write!(
            f,
            "the OS timer returned late on its own for {n} of the {of} late jobs. \
             Use `--timer precise` (the default), which spins the last \
             milliseconds."
        ),
        Some((Cause::Busy, n, of)) => write!(
            f,
            "{n} of the {of} late jobs waited behind the lab's own work (events due \
             before them in the same wake): the harness is too slow for this load \
             on this machine; a faster CPU, or fewer events per instant."
        ),
        Some((Cause::Unexplained, n, of)) => write!(
            f,
            "{n} of the {of} late jobs have no measured cause: the thread ran, \
             waited for no CPU and its timer was on time. Report it with the \
             results file."
        ),
        None => write!(
            f,
            "the late jobs were not attributed to a cause. Use `--timer precise` \
             (the default) on an idle machine, and see `validate`'s verdict."
        ),
    }
}
