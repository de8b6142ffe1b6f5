//! Faults a lab on a queue server injects into every run (`[[fault]]`),
//! and the lease that lets a queue survive them (`lease_s`).
//!
//! A take leases its job to the worker; a worker that dies or stops past
//! its lease loses the job back to its tenant's queue, and its finish, if
//! it ever comes, is refused. The faults are made by the coordinator, at
//! their instants of the run, on the worker processes it started and on the
//! server it started.

use serde::{Deserialize, Serialize};

/// One fault, at `at_s` of every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// When, in seconds from the run's start.
    pub at_s: f64,
    pub kind: FaultKind,
    /// `pause_worker`: how long the process stays stopped (required);
    /// `kill_worker`: how long until a replacement process starts (default
    /// 0: at once, as a supervisor would); `restart_server`: how long the
    /// server stays down (default 0: started again at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Which worker process, from 1 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<u32>,
    /// `slow_link`: how much longer each round trip of the process's
    /// workers takes while it lasts, milliseconds (half each way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
}

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL one worker process; a replacement starts `duration_s` later.
    KillWorker,
    /// SIGSTOP one worker process for `duration_s`, then SIGCONT: a worker
    /// that outlives its lease.
    PauseWorker,
    /// The server drops every worker's connection; they connect again.
    DropConnections,
    /// The server the run owns is killed (SIGKILL, a crash) and started
    /// again from its append-only file.
    RestartServer,
    /// One worker process's round trips to the server take `delay_ms`
    /// longer for `duration_s` (its connections pass a relay that holds
    /// each way's bytes half the delay).
    SlowLink,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillWorker => "kill_worker",
            FaultKind::PauseWorker => "pause_worker",
            FaultKind::DropConnections => "drop_connections",
            FaultKind::RestartServer => "restart_server",
            FaultKind::SlowLink => "slow_link",
        }
    }
}

impl Fault {
    /// The worker process it strikes, from 0.
    pub fn process(&self) -> u32 {
        self.target.unwrap_or(1) - 1
    }

    /// `slow_link`'s added round trip, nanoseconds (0 for the others).
    pub fn delay_ns(&self) -> u64 {
        (self.delay_ms.unwrap_or(0.0) * 1e6).round() as u64
    }

    /// How long it lasts, seconds.
    pub fn duration(&self) -> f64 {
        self.duration_s.unwrap_or(0.0)
    }

    /// One fault's rules (`key`: `fault[i]`): the one-line reason it is
    /// wrong, with what is allowed.
    pub fn check(&self) -> Result<(), String> {
        if !(self.at_s.is_finite() && self.at_s >= 0.0) {
            return Err(format!(
                "at_s must be 0 or more seconds, found {}",
                self.at_s
            ));
        }
        if let Some(d) = self.duration_s
            && !(d.is_finite() && d >= 0.0)
        {
            return Err(format!("duration_s must be 0 or more seconds, found {d}"));
        }
        if self.kind == FaultKind::PauseWorker && self.duration() <= 0.0 {
            return Err(
                "pause_worker needs duration_s, more than 0 seconds: how long the process stays stopped"
                    .into(),
            );
        }
        if self.kind == FaultKind::DropConnections
            && (self.target.is_some() || self.duration_s.is_some())
        {
            return Err(
                "drop_connections drops every worker's connection at once: leave out target and duration_s"
                    .into(),
            );
        }
        if self.kind == FaultKind::RestartServer && self.target.is_some() {
            return Err(
                "restart_server strikes the server, not a worker process: leave out target".into(),
            );
        }
        match (self.kind, self.delay_ms) {
            (FaultKind::SlowLink, Some(d)) if d.is_finite() && d > 0.0 => {}
            (FaultKind::SlowLink, Some(d)) => {
                return Err(format!(
                    "delay_ms must be more than 0 milliseconds, found {d}"
                ));
            }
            (FaultKind::SlowLink, None) => {
                return Err(
                    "slow_link needs delay_ms, more than 0: how much longer each round trip takes"
                        .into(),
                );
            }
            (_, Some(_)) => {
                return Err(format!(
                    "delay_ms goes with slow_link, not {}: leave it out",
                    self.kind.name()
                ));
            }
            (_, None) => {}
        }
        if self.kind == FaultKind::SlowLink && self.duration() <= 0.0 {
            return Err(
                "slow_link needs duration_s, more than 0 seconds: how long the link stays slow"
                    .into(),
            );
        }
        if self.target == Some(0) {
            return Err("target must be a worker process from 1, found 0".into());
        }
        Ok(())
    }
}

/// One step of a run's fault timeline, on worker process `k` (from 0) or
/// on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// SIGKILL process k.
    Kill(u32),
    /// Start a replacement for process k.
    Respawn(u32),
    /// SIGSTOP process k, until the instant (nanoseconds from the run's
    /// start) its `Cont` comes.
    Stop(u32, u64),
    /// SIGCONT process k.
    Cont(u32),
    /// The server drops every worker's connection.
    Drop,
    /// The server is down this long (nanoseconds), then back.
    Restart(u64),
    /// Process k's round trips take this much longer from now (nanoseconds;
    /// 0: its link is well again).
    Slow(u32, u64),
}

/// The run's faults as timed steps (nanoseconds from the run's start), in
/// time order: a kill and its replacement, a stop and its continue, a slow
/// link and its end, a drop, a restart. A fault's end stays after its
/// begin at one instant. A target past the pool's `processes` strikes the
/// last one. The one timeline of a scenario's faults: the model simulates
/// it, the coordinator injects it.
pub fn timeline(faults: &[Fault], processes: u32) -> Vec<(u64, Step)> {
    let ns = |s: f64| (s * 1e9).round() as u64;
    let mut steps = Vec::new();
    for f in faults {
        let (at, until) = (ns(f.at_s), ns(f.at_s + f.duration()));
        let k = f.process().min(processes.max(1) - 1);
        match f.kind {
            FaultKind::KillWorker => steps.extend([(at, Step::Kill(k)), (until, Step::Respawn(k))]),
            FaultKind::PauseWorker => {
                steps.extend([(at, Step::Stop(k, until)), (until, Step::Cont(k))])
            }
            FaultKind::DropConnections => steps.push((at, Step::Drop)),
            FaultKind::RestartServer => steps.push((at, Step::Restart(until - at))),
            FaultKind::SlowLink => {
                steps.extend([(at, Step::Slow(k, f.delay_ns())), (until, Step::Slow(k, 0))])
            }
        }
    }
    steps.sort_by_key(|(t, _)| *t);
    steps
}

/// Most workers one process runs by default on a queue server.
pub const WORKERS_PER_PROCESS: u32 = 5;

/// Worker processes for a pool of `workers`: `processes`, or by default
/// enough that none runs more than [`WORKERS_PER_PROCESS`], at least 2.
pub fn processes_for(workers: u32, processes: Option<u32>) -> u32 {
    processes.unwrap_or_else(|| workers.div_ceil(WORKERS_PER_PROCESS).max(2).min(workers))
}

/// Process k's share of `workers` split over `processes`: the first
/// `workers % processes` run one more.
pub fn share(workers: u32, processes: u32, k: u32) -> u32 {
    workers / processes + u32::from(k < workers % processes)
}

/// A lease's length when the scenario gives none: three times the plan's
/// 99th-percentile hold, and at least 50 ms.
pub fn default_lease_ns(durations: impl Iterator<Item = u64>) -> u64 {
    let mut d: Vec<u64> = durations.collect();
    if d.is_empty() {
        return MIN_LEASE_NS;
    }
    d.sort_unstable();
    let p99 = d[(d.len() - 1) * 99 / 100];
    (3 * p99).max(MIN_LEASE_NS)
}

/// The shortest default lease, nanoseconds.
pub const MIN_LEASE_NS: u64 = 50_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lease_is_three_p99_holds_and_at_least_50_ms() {
        assert_eq!(default_lease_ns([100_000_000; 10].into_iter()), 300_000_000);
        assert_eq!(default_lease_ns([10_000_000; 10].into_iter()), 50_000_000);
        // 100 holds of 1..=100 ms: p99 is the 99th smallest, 99 ms.
        let holds = (1..=100u64).map(|ms| ms * 1_000_000);
        assert_eq!(default_lease_ns(holds), 297_000_000);
        assert_eq!(default_lease_ns(std::iter::empty()), MIN_LEASE_NS);
    }

    #[test]
    fn a_bad_fault_says_what_is_allowed() {
        let f = |kind, duration_s, target| Fault {
            at_s: 1.0,
            kind,
            duration_s,
            target,
            delay_ms: None,
        };
        assert!(f(FaultKind::KillWorker, None, None).check().is_ok());
        let pause = f(FaultKind::PauseWorker, None, None).check().unwrap_err();
        assert!(pause.contains("needs duration_s"), "{pause}");
        let zero = f(FaultKind::KillWorker, None, Some(0)).check().unwrap_err();
        assert!(zero.contains("from 1, found 0"), "{zero}");
        let slow = |duration_s, delay_ms| Fault {
            delay_ms,
            ..f(FaultKind::SlowLink, duration_s, None)
        };
        assert!(slow(Some(1.0), Some(20.0)).check().is_ok());
        let no_delay = slow(Some(1.0), None).check().unwrap_err();
        assert!(no_delay.contains("slow_link needs delay_ms"), "{no_delay}");
        let no_time = slow(None, Some(20.0)).check().unwrap_err();
        assert!(no_time.contains("slow_link needs duration_s"), "{no_time}");
        let zero = slow(Some(1.0), Some(0.0)).check().unwrap_err();
        assert!(zero.contains("more than 0 milliseconds, found 0"), "{zero}");
        let stray = Fault {
            delay_ms: Some(5.0),
            ..f(FaultKind::KillWorker, None, None)
        };
        let stray = stray.check().unwrap_err();
        assert!(
            stray.contains("delay_ms goes with slow_link, not kill_worker"),
            "{stray}"
        );
        assert!(f(FaultKind::RestartServer, None, None).check().is_ok());
        let aimed = f(FaultKind::RestartServer, None, Some(1))
            .check()
            .unwrap_err();
        assert!(aimed.contains("strikes the server"), "{aimed}");
        assert!(f(FaultKind::DropConnections, None, None).check().is_ok());
        let aimed = f(FaultKind::DropConnections, None, Some(2))
            .check()
            .unwrap_err();
        assert!(aimed.contains("leave out target"), "{aimed}");
    }

    #[test]
    fn the_timeline_is_in_time_order_with_each_end_after_its_begin() {
        let f = |at_s: f64, kind, duration_s: f64, target: u32| Fault {
            at_s,
            kind,
            duration_s: Some(duration_s),
            target: Some(target),
            delay_ms: Some(50.0),
        };
        let faults = [
            f(1.0, FaultKind::PauseWorker, 0.5, 2),
            f(0.2, FaultKind::KillWorker, 0.0, 9),
            f(3.0, FaultKind::RestartServer, 0.25, 1),
            f(2.0, FaultKind::SlowLink, 1.0, 1),
            f(2.0, FaultKind::DropConnections, 0.0, 1),
        ];
        let ms = 1_000_000;
        assert_eq!(
            timeline(&faults, 4),
            [
                // Target 9 of 4 processes strikes the last; the replacement
                // shares the kill's instant and comes after it.
                (200 * ms, Step::Kill(3)),
                (200 * ms, Step::Respawn(3)),
                (1_000 * ms, Step::Stop(1, 1_500 * ms)),
                (1_500 * ms, Step::Cont(1)),
                (2_000 * ms, Step::Slow(0, 50 * ms)),
                (2_000 * ms, Step::Drop),
                // At one instant, steps keep the order of their faults.
                (3_000 * ms, Step::Restart(250 * ms)),
                (3_000 * ms, Step::Slow(0, 0)),
            ]
        );
        assert_eq!(
            (share(20, 3, 0), share(20, 3, 1), share(20, 3, 2)),
            (7, 7, 6)
        );
        assert_eq!(processes_for(20, None), 4);
        assert_eq!(processes_for(3, None), 2);
        assert_eq!(processes_for(20, Some(1)), 1);
    }
}
