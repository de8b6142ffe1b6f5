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
}
