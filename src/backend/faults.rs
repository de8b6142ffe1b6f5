//! A run's faults as timed actions on the worker processes: a scenario's
//! `[[fault]]` entries, each turned into a pair (kill, then a replacement;
//! stop, then continue; a slow link, then a well one) or one action (drop
//! the workers' connections; restart the server, down for its duration) at
//! instants from the run's start. The coordinator
//! sleeps to the next one, does it, and at the run's end undoes whatever
//! is still undone, so every run ends with the whole pool.

use std::time::{Duration, Instant};

use crate::scenario::Fault;
use crate::scenario::faults::{Step, timeline};

/// What to do to worker process `k` (from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL it.
    Kill(u32),
    /// Start a replacement for it.
    Respawn(u32),
    /// SIGSTOP it.
    Stop(u32),
    /// SIGCONT it.
    Cont(u32),
    /// Drop every worker's connection to the server.
    Drop,
    /// Kill the server and start it again after this long.
    Restart(Duration),
    /// From now, process `k`'s round trips take this much longer (0: its
    /// link is well again).
    Slow(u32, Duration),
}

impl From<Step> for Action {
    fn from(step: Step) -> Action {
        match step {
            Step::Kill(k) => Action::Kill(k),
            Step::Respawn(k) => Action::Respawn(k),
            Step::Stop(k, _) => Action::Stop(k),
            Step::Cont(k) => Action::Cont(k),
            Step::Drop => Action::Drop,
            Step::Restart(down) => Action::Restart(Duration::from_nanos(down)),
            Step::Slow(k, delay) => Action::Slow(k, Duration::from_nanos(delay)),
        }
    }
}

/// The actions of one run, in time order.
#[derive(Debug, Default)]
pub struct Injector {
    /// (instant, action), latest first: the next is the last.
    todo: Vec<(Instant, Action)>,
    /// Faults begun (a kill, a stop or a drop done).
    pub injected: u64,
    /// Workers' connections the server dropped.
    pub dropped: u64,
    /// Processes killed and not yet replaced, stopped and not continued.
    dead: std::collections::BTreeSet<u32>,
    stopped: std::collections::BTreeSet<u32>,
    /// Processes whose link is slow.
    slowed: std::collections::BTreeSet<u32>,
}

impl Injector {
    /// The actions of `faults` (the scenario's one timeline) on a pool of
    /// `processes`, for a run that started at `origin`.
    pub fn new(faults: &[Fault], processes: u32, origin: Instant) -> Injector {
        let mut todo: Vec<(Instant, Action)> = timeline(faults, processes)
            .into_iter()
            .map(|(t, step)| (origin + Duration::from_nanos(t), Action::from(step)))
            .collect();
        // Reversed, the next action is the last.
        todo.reverse();
        Injector {
            todo,
            ..Injector::default()
        }
    }

    /// When the next action is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.todo.last().map(|(t, _)| *t)
    }

    /// The next action, if it is due by `now`.
    pub fn due(&mut self, now: Instant) -> Option<Action> {
        if self.next_at()? > now {
            return None;
        }
        let (_, a) = self.todo.pop()?;
        match a {
            Action::Kill(k) => {
                self.injected += 1;
                self.dead.insert(k);
            }
            Action::Stop(k) => {
                self.injected += 1;
                self.stopped.insert(k);
            }
            Action::Drop | Action::Restart(_) => self.injected += 1,
            Action::Slow(k, d) if !d.is_zero() => {
                self.injected += 1;
                self.slowed.insert(k);
            }
            Action::Slow(k, _) => {
                self.slowed.remove(&k);
            }
            Action::Respawn(k) => {
                self.dead.remove(&k);
            }
            Action::Cont(k) => {
                self.stopped.remove(&k);
            }
        }
        Some(a)
    }

    /// Whether process `k` was killed and is not replaced yet.
    pub fn is_dead(&self, k: u32) -> bool {
        self.dead.contains(&k)
    }

    /// The run is over: the actions that undo the faults begun and not yet
    /// undone (a replacement for a process killed, a continue for one
    /// stopped), now; the faults not begun are dropped.
    pub fn finish(&mut self) -> Vec<Action> {
        self.todo.clear();
        let respawn = std::mem::take(&mut self.dead)
            .into_iter()
            .map(Action::Respawn);
        let cont = std::mem::take(&mut self.stopped)
            .into_iter()
            .map(Action::Cont);
        let well = std::mem::take(&mut self.slowed)
            .into_iter()
            .map(|k| Action::Slow(k, Duration::ZERO));
        cont.chain(respawn).chain(well).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::FaultKind;

    fn fault(at_s: f64, kind: FaultKind, duration_s: f64, target: u32) -> Fault {
        Fault {
            at_s,
            kind,
            duration_s: Some(duration_s),
            target: Some(target),
            delay_ms: None,
        }
    }

    #[test]
    fn a_run_that_ends_first_replaces_what_was_killed() {
        let t0 = Instant::now();
        let faults = [
            fault(1.0, FaultKind::KillWorker, 2.0, 1),
            fault(5.0, FaultKind::KillWorker, 1.0, 1),
        ];
        let mut inj = Injector::new(&faults, 4, t0);
        assert_eq!(inj.due(t0 + Duration::from_secs(2)), Some(Action::Kill(0)));
        assert!(inj.is_dead(0));
        assert_eq!(inj.finish(), vec![Action::Respawn(0)]);
    }

    #[test]
    fn faults_become_timed_pairs_and_the_end_undoes_what_began() {
        let t0 = Instant::now();
        let faults = [
            fault(1.0, FaultKind::PauseWorker, 0.5, 2),
            fault(0.2, FaultKind::KillWorker, 0.0, 1),
            fault(5.0, FaultKind::KillWorker, 1.0, 1),
        ];
        let mut inj = Injector::new(&faults, 4, t0);
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        assert_eq!(inj.next_at(), Some(s(0.2)));
        assert_eq!(inj.due(s(0.1)), None, "nothing before its instant");
        // The kill and its replacement share an instant: the kill first.
        assert_eq!(inj.due(s(0.2)), Some(Action::Kill(0)));
        assert_eq!(inj.due(s(0.2)), Some(Action::Respawn(0)));
        assert_eq!(inj.due(s(1.2)), Some(Action::Stop(1)));
        assert_eq!(inj.due(s(1.2)), None, "the continue is at 1.5 s");
        assert_eq!(inj.injected, 2);
        assert!(!inj.is_dead(0), "replaced");
        // The run ends at 1.3 s: process 2 continues; the kill at 5 s never
        // began, so nothing replaces it.
        assert_eq!(inj.finish(), vec![Action::Cont(1)]);
        assert_eq!(inj.next_at(), None);
    }
}
