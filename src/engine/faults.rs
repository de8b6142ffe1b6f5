//! Faults on the engine's own workers: the model of what a queue server's
//! faults do (`[[fault]]`; the backend's `faults.rs` injects the real ones
//! into worker processes and a server).
//!
//! The pool is split into worker processes as a lab on a server splits it
//! (the first ones a worker larger where the split is uneven), and an idle
//! worker is handed work in the order it became idle, as the server's
//! blocked pops are served. Every take holds a lease, renewed as a server's
//! worker renews it: every third of the lease, while more than half of the
//! lease is left of its hold. A fault changes when a worker next reaches
//! the server:
//!
//! - `kill_worker`: never, for the jobs its process held; its workers come
//!   back idle `duration_s` later (a replacement process);
//! - `pause_worker`: not before the process continues, `duration_s` later;
//! - `drop_connections`: every worker's next call fails, and it connects
//!   again after its first backoff step (1 ms);
//! - `slow_link`: for `duration_s`, a job its process's workers take
//!   reaches them `delay_ms`/2 late and their report the server as late
//!   (a job holds its worker `delay_ms` longer), and a worker woken while
//!   idle takes `delay_ms` after the wake (the model hands it the job at
//!   the wake, where a server keeps the job queued until the take arrives
//!   and a worker that comes free meanwhile may take it first); a job held
//!   when the link turns slow or well keeps the timing of its take;
//! - `restart_server`: the server answers nobody for `duration_s` plus the
//!   restart's own time (`restart_ns`: 0 in the model, the measured one
//!   where `validate` replays a run); arrivals wait for it, the workers
//!   connect again on their backoff (1 ms, doubling to 128 ms).
//!
//! A held job whose lease runs out before its worker reaches the server
//! again goes back to its tenant's queue (by its number, ahead of the jobs
//! that never started) at that instant (or when the server is back), and
//! its worker's finish is refused when it comes. Left out of the model (said where its figures are read): on Redis a worker
//! stopped or killed while idle may take a wake token with it, so a job can
//! wait for the next one; a lease renewed after a pause keeps the renewal
//! times it had from its start; the time a replacement process takes to
//! start and connect.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::Nanos;
use super::load::secs_to_ns as secs;
// The scenario's fault timeline, acted out on the simulated pool.
use crate::scenario::faults::Step as Act;
use crate::scenario::faults::{default_lease_ns, share, timeline};
use crate::scenario::{Fault, FaultKind};
use crate::sched::JobId;

const MS: Nanos = 1_000_000;
/// A worker's longest pause between attempts to connect again.
pub const MAX_BACKOFF: Nanos = 128 * MS;
/// A worker's first pause before it tries to connect again (then doubling
/// to [`MAX_BACKOFF`]): the model's and the worker processes' own.
pub const FIRST_BACKOFF: Nanos = MS;

/// A run's faults as the engine simulates them.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Worker processes the pool is split into.
    pub processes: u32,
    /// How long a take's lease lasts unless renewed (`None`: three times
    /// the plan's 99th-percentile hold, as on a server).
    pub lease_ns: Option<Nanos>,
    /// Added to each restart's `duration_s`: how long the server takes to
    /// come back (0 for the model).
    pub restart_ns: Nanos,
    pub faults: Vec<Fault>,
}

impl FaultPlan {
    /// Each slow link's window and delay: (from, until, delay), ns.
    pub fn slow_links(&self) -> Vec<(Nanos, Nanos, Nanos)> {
        self.faults
            .iter()
            .filter(|f| f.kind == FaultKind::SlowLink)
            .map(|f| (secs(f.at_s), secs(f.at_s + f.duration()), f.delay_ns()))
            .collect()
    }
}

/// What faults did in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultTally {
    /// A take's lease.
    pub lease_ns: Nanos,
    /// Faults begun (a kill, a stop, a drop, a restart).
    pub injected: u64,
    /// Workers' connections a `drop_connections` dropped (a restart's are
    /// not counted, as on a server).
    pub dropped: u64,
    /// The longest time the server answered nobody.
    pub restart_ns: Nanos,
    /// Jobs (attempt ids) whose lease ran out, once for each time.
    pub redelivered: Vec<JobId>,
    /// Jobs whose finish was refused, once for each refusal.
    pub refused: Vec<JobId>,
    /// Leases renewed, as the workers renew them ([`renewals`]): a hold's
    /// full count when it reports in time, those made before its lease
    /// was lost otherwise.
    pub renewed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proc {
    Up,
    Dead,
    Stopped(Nanos),
}

/// A job a worker holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    id: JobId,
    ticket: JobId,
    started: Nanos,
    hold: Nanos,
    /// When its worker reports it (the engine's completion instant).
    report: Nanos,
    /// Its lease ran out: the report is a finish the server refuses.
    lost: bool,
}

#[derive(Debug, Clone)]
struct Worker {
    process: u32,
    /// Bumped when its process dies or is replaced: older rejoins are void.
    epoch: u32,
    held: Option<Held>,
    /// Its connection broke while it waited to rejoin: its next call waits
    /// for the server, back at this instant.
    broken: Option<Nanos>,
    /// When it last reported a job (a take at that instant is the
    /// finish's own, not a wake's).
    reported: Option<Nanos>,
}

/// The report of a held job, as [`Faults::report`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The lease held: the job finished.
    Finished,
    /// The lease had run out: the finish is refused, the work done twice
    /// if the job finishes again.
    Refused,
}

/// What a due fault event asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing beyond the pool's own state (and idle workers may have
    /// changed: dispatch).
    Pool,
    /// A lease ran out: hand the attempt `id` (scheduler ticket `ticket`)
    /// back to its queue.
    Requeue { id: JobId, ticket: JobId },
}

/// The pool's workers, their processes and the server, through the faults.
#[derive(Debug)]
pub struct Faults {
    lease: Nanos,
    restart: Nanos,
    /// (instant, action), latest first.
    todo: Vec<(Nanos, Act)>,
    procs: Vec<Proc>,
    /// Each process's added round trip (a slow link; 0: none).
    slow: Vec<Nanos>,
    workers: Vec<Worker>,
    /// Idle workers, the longest idle first.
    idle: VecDeque<u32>,
    /// Leases to run out: (instant, attempt id, ticket).
    expiries: BinaryHeap<Reverse<(Nanos, JobId, JobId)>>,
    /// Workers back to take work: (instant, worker, epoch).
    rejoins: BinaryHeap<Reverse<(Nanos, u32, u32)>>,
    /// The server answers nobody in [from, until).
    down: Option<(Nanos, Nanos)>,
    pub tally: FaultTally,
}

impl Faults {
    /// The pool of `workers` through `plan`'s faults; `holds`: the run's
    /// planned holds, for the default lease.
    pub fn new(plan: &FaultPlan, workers: u32, holds: impl Iterator<Item = Nanos>) -> Faults {
        let processes = plan.processes.clamp(1, workers.max(1));
        let lease = plan
            .lease_ns
            .unwrap_or_else(|| default_lease_ns(holds))
            .max(3);
        let mut todo = timeline(&plan.faults, processes);
        todo.reverse();
        let workers: Vec<Worker> = (0..processes)
            .flat_map(|k| (0..share(workers, processes, k)).map(move |_| k))
            .map(|process| Worker {
                process,
                epoch: 0,
                held: None,
                broken: None,
                reported: None,
            })
            .collect();
        Faults {
            lease,
            restart: plan.restart_ns,
            todo,
            procs: vec![Proc::Up; processes as usize],
            slow: vec![0; processes as usize],
            idle: (0..workers.len() as u32).collect(),
            workers,
            expiries: BinaryHeap::new(),
            rejoins: BinaryHeap::new(),
            down: None,
            tally: FaultTally {
                lease_ns: lease,
                ..FaultTally::default()
            },
        }
    }

    /// Idle workers that can take work now.
    pub fn idle(&self) -> u32 {
        self.idle.len() as u32
    }

    /// Whether a job's lease is still to run out (its job to go back).
    pub fn leases_out(&self) -> bool {
        !self.expiries.is_empty()
    }

    /// When the next fault event (an action, a lease running out, a
    /// worker back) is due.
    pub fn next_at(&self) -> Option<Nanos> {
        let a = self.todo.last().map(|(t, _)| *t);
        let e = self.expiries.peek().map(|Reverse((t, ..))| *t);
        let r = self.rejoins.peek().map(|Reverse((t, ..))| *t);
        [a, e, r].into_iter().flatten().min()
    }

    /// `at`, or when the server is back if it is down then: when a call
    /// made at `at` (an arrival, a client giving up) goes through.
    pub fn server_at(&self, at: Nanos) -> Nanos {
        match self.down {
            Some((from, until)) if (from..until).contains(&at) => until,
            _ => at,
        }
    }

    /// The longest idle worker takes attempt `id` at `started`, to hold it
    /// `hold`: its index (the engine's completion carries it), when the
    /// job starts and when its worker reports it. On a slow link (a delay
    /// d) the job reaches the worker d/2 after its take and the report the
    /// server d/2 after the job's end; a worker woken while idle (not
    /// taking on with its own finish) takes d after the wake.
    pub fn assign(
        &mut self,
        id: JobId,
        ticket: JobId,
        started: Nanos,
        hold: Nanos,
    ) -> (u32, Nanos, Nanos) {
        let w = self
            .idle
            .pop_front()
            .expect("the engine starts a job only with a worker idle");
        let worker = &mut self.workers[w as usize];
        let delay = self.slow[worker.process as usize];
        let start = if delay > 0 && worker.reported != Some(started) {
            started + delay
        } else {
            started
        };
        let report = start.saturating_add(hold).saturating_add(delay);
        worker.held = Some(Held {
            id,
            ticket,
            started: start,
            hold,
            report,
            lost: false,
        });
        (w, start, report)
    }

    /// Worker `w` reports its job (the completion due now): finished, or
    /// refused if its lease ran out; the worker takes work again.
    pub fn report(&mut self, w: u32) -> Report {
        let worker = &mut self.workers[w as usize];
        let held = worker
            .held
            .take()
            .expect("a completion's worker holds its job");
        worker.reported = Some(held.report);
        self.idle.push_back(w);
        if !held.lost {
            self.tally.renewed += renewals(held.hold, self.lease);
        }
        if held.lost {
            self.tally.refused.push(held.id);
            Report::Refused
        } else {
            Report::Finished
        }
    }

    /// The fault event due by `now`, done to the pool; `running` holds the
    /// engine's completions (instant, attempt, worker), which move with
    /// the workers' reports.
    pub fn step(
        &mut self,
        now: Nanos,
        running: &mut BinaryHeap<Reverse<(Nanos, JobId, u32)>>,
    ) -> Step {
        if self.todo.last().is_some_and(|(t, _)| *t <= now) {
            let (_, act) = self.todo.pop().expect("an action is due");
            self.act(now, act, running);
            return Step::Pool;
        }
        if let Some(&Reverse((at, id, ticket))) = self.expiries.peek()
            && at <= now
        {
            self.expiries.pop();
            if self.server_at(now) > now {
                // Reaped when the server is back.
                self.expiries
                    .push(Reverse((self.server_at(now), id, ticket)));
                return Step::Pool;
            }
            self.tally.redelivered.push(id);
            return Step::Requeue { id, ticket };
        }
        let Reverse((_, w, epoch)) = self.rejoins.pop().expect("a fault event is due");
        self.rejoin(now, w, epoch);
        Step::Pool
    }

    fn rejoin(&mut self, now: Nanos, w: u32, epoch: u32) {
        let worker = &mut self.workers[w as usize];
        if worker.epoch != epoch {
            return;
        }
        let at = match self.procs[worker.process as usize] {
            Proc::Dead => return,
            Proc::Stopped(until) if until > now => until,
            _ => worker.broken.take().map_or(now, |up| reconnect(now, up)),
        };
        if at > now {
            self.rejoins.push(Reverse((at, w, epoch)));
        } else {
            self.idle.push_back(w);
        }
    }

    fn act(
        &mut self,
        now: Nanos,
        act: Act,
        running: &mut BinaryHeap<Reverse<(Nanos, JobId, u32)>>,
    ) {
        match act {
            Act::Kill(k) => {
                self.tally.injected += 1;
                self.procs[k as usize] = Proc::Dead;
                for w in self.of(k) {
                    self.idle.retain(|&i| i != w);
                    let worker = &mut self.workers[w as usize];
                    worker.epoch += 1;
                    worker.broken = None;
                    if let Some(h) = worker.held.take() {
                        running.retain(|Reverse((_, _, x))| *x != w);
                        if !h.lost {
                            self.tally.renewed += self.renewed_by(&h, now);
                            let at = self.server_at(self.lease_end(&h, now));
                            self.expiries.push(Reverse((at, h.id, h.ticket)));
                        }
                    }
                }
            }
            // A replacement for a process killed and not replaced yet (an
            // earlier kill's replacement may have come first).
            Act::Respawn(k) if self.procs[k as usize] == Proc::Dead => {
                self.procs[k as usize] = Proc::Up;
                for w in self.of(k) {
                    let worker = &mut self.workers[w as usize];
                    worker.epoch += 1;
                    self.idle.push_back(w);
                }
            }
            Act::Stop(k, until) => {
                self.tally.injected += 1;
                self.procs[k as usize] = Proc::Stopped(until);
                for w in self.of(k) {
                    self.pause(now, w, until, running);
                }
            }
            Act::Respawn(_) => {}
            Act::Cont(k) => {
                if matches!(self.procs[k as usize], Proc::Stopped(_)) {
                    self.procs[k as usize] = Proc::Up;
                }
            }
            Act::Drop => {
                self.tally.injected += 1;
                self.break_links(now, now, running);
                self.tally.dropped += self.reachable();
            }
            Act::Slow(k, delay) => {
                self.tally.injected += u64::from(delay > 0);
                self.slow[k as usize] = delay;
            }
            Act::Restart(down) => {
                self.tally.injected += 1;
                let up = now + down + self.restart;
                self.tally.restart_ns = self.tally.restart_ns.max(up - now);
                self.down = Some((now, up));
                self.break_links(now, up, running);
            }
        }
    }

    /// Workers whose process is alive (stopped or not): the connections a
    /// drop strikes.
    fn reachable(&self) -> u64 {
        let alive = |w: &&Worker| self.procs[w.process as usize] != Proc::Dead;
        self.workers.iter().filter(alive).count() as u64
    }

    /// The workers of process `k`.
    fn of(&self, k: u32) -> Vec<u32> {
        (0..self.workers.len() as u32)
            .filter(|&w| self.workers[w as usize].process == k)
            .collect()
    }

    /// Process of worker `w` stopped from `now` until `until`.
    fn pause(
        &mut self,
        now: Nanos,
        w: u32,
        until: Nanos,
        running: &mut BinaryHeap<Reverse<(Nanos, JobId, u32)>>,
    ) {
        if let Some(i) = self.idle.iter().position(|&i| i == w) {
            self.idle.remove(i);
            let epoch = self.workers[w as usize].epoch;
            self.rejoins.push(Reverse((until, w, epoch)));
            return;
        }
        let Some(h) = self.workers[w as usize].held else {
            return; // on its way back: its rejoin waits for the continue
        };
        // It next reaches the server at a renewal or its report; either,
        // due during the stop, waits for the continue.
        let contact = self
            .next_renewal(&h, now)
            .map_or(h.report, |r| r.min(h.report));
        if contact < until {
            self.move_report(now, w, h.report.max(until), until, running);
        }
    }

    /// Every worker's connection breaks at `now`; the server answers again
    /// from `up`.
    fn break_links(
        &mut self,
        now: Nanos,
        up: Nanos,
        running: &mut BinaryHeap<Reverse<(Nanos, JobId, u32)>>,
    ) {
        for w in 0..self.workers.len() as u32 {
            let worker = &self.workers[w as usize];
            if self.procs[worker.process as usize] == Proc::Dead {
                continue;
            }
            if let Some(i) = self.idle.iter().position(|&i| i == w) {
                self.idle.remove(i);
                let epoch = worker.epoch;
                self.rejoins.push(Reverse((reconnect(now, up), w, epoch)));
            } else if let Some(h) = worker.held {
                let at = reconnect(h.report, up);
                self.move_report(now, w, at, at, running);
            } else {
                self.workers[w as usize].broken = Some(up);
            }
        }
    }

    /// Worker `w`'s report moves to `report`; it next reaches the server at
    /// `contact`: its lease, as it stood at `now`, runs out first if it ends
    /// by then.
    fn move_report(
        &mut self,
        now: Nanos,
        w: u32,
        report: Nanos,
        contact: Nanos,
        running: &mut BinaryHeap<Reverse<(Nanos, JobId, u32)>>,
    ) {
        let mut h = self.workers[w as usize].held.expect("a held job");
        running.retain(|Reverse((_, _, x))| *x != w);
        running.push(Reverse((report, h.id, w)));
        h.report = report;
        let end = self.lease_end(&h, now);
        if !h.lost && end <= contact {
            h.lost = true;
            self.tally.renewed += self.renewed_by(&h, end);
            let at = self.server_at(end);
            self.expiries.push(Reverse((at, h.id, h.ticket)));
        }
        self.workers[w as usize].held = Some(h);
    }

    /// Renewals of a hold ([`renewals`]).
    fn renewals(&self, h: &Held) -> Nanos {
        renewals(h.hold, self.lease)
    }

    /// The renewals of `h` made by `now` (at most its count).
    fn renewed_by(&self, h: &Held, now: Nanos) -> u64 {
        (now.saturating_sub(h.started) / (self.lease / 3)).min(self.renewals(h))
    }

    /// When the lease of `h` runs out, counting the renewals made by `now`.
    fn lease_end(&self, h: &Held, now: Nanos) -> Nanos {
        let step = self.lease / 3;
        h.started + self.renewed_by(h, now) * step + self.lease
    }

    /// The next renewal after `now`, if the hold has one left.
    fn next_renewal(&self, h: &Held, now: Nanos) -> Option<Nanos> {
        let step = self.lease / 3;
        let k = now.saturating_sub(h.started) / step + 1;
        (k <= self.renewals(h)).then(|| h.started + k * step)
    }
}

/// Renewals of a job held `hold` under a lease of `lease`: one at every
/// third of the lease from its start, while more than half of the lease
/// is left of the hold, as the worker processes' loop renews
/// (`backend::worker`, tested against this).
pub fn renewals(hold: Nanos, lease: Nanos) -> Nanos {
    let half = lease / 2;
    match hold.checked_sub(half) {
        Some(left) if left > 0 => (left - 1) / (lease / 3) + 1,
        _ => 0,
    }
}

/// A worker whose call failed at `failed` tries again after 1 ms, then
/// after pauses doubling to 128 ms, until the server answers (from `up`):
/// the instant its call goes through.
pub fn reconnect(failed: Nanos, up: Nanos) -> Nanos {
    let (mut at, mut pause) = (failed, FIRST_BACKOFF);
    loop {
        at += pause;
        pause = (pause * 2).min(MAX_BACKOFF);
        if at >= up {
            return at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(at_s: f64, kind: FaultKind, duration_s: Option<f64>, target: Option<u32>) -> Fault {
        Fault {
            at_s,
            kind,
            duration_s,
            target,
            delay_ms: None,
        }
    }

    fn plan(faults: Vec<Fault>) -> FaultPlan {
        FaultPlan {
            processes: 2,
            lease_ns: Some(300 * MS),
            restart_ns: 0,
            faults,
        }
    }

    #[test]
    fn a_worker_connects_again_on_its_backoff() {
        // A drop: the server is there; the next call goes after 1 ms.
        assert_eq!(reconnect(5 * MS, 5 * MS), 6 * MS);
        // A server down for 100 ms: tries at +1, +3, +7, +15, +31, +63, +127.
        assert_eq!(reconnect(0, 100 * MS), 127 * MS);
        // Past the doubling, every 128 ms: +255, +383.
        assert_eq!(reconnect(0, 300 * MS), 383 * MS);
    }

    #[test]
    fn a_lease_is_renewed_every_third_while_half_of_it_is_left() {
        let f = Faults::new(&plan(Vec::new()), 4, std::iter::empty());
        let held = |hold| Held {
            id: 0,
            ticket: 0,
            started: 0,
            hold,
            report: hold,
            lost: false,
        };
        // A 100 ms job under a 300 ms lease is never renewed.
        assert_eq!(f.renewals(&held(100 * MS)), 0);
        assert_eq!(f.lease_end(&held(100 * MS), 90 * MS), 300 * MS);
        // 400 ms: renewed at 100, 200 and 300 ms (300, 200 and 100 ms left... the
        // last while 200 > 150 was left at 200 ms).
        let long = held(400 * MS);
        assert_eq!(f.renewals(&long), 3);
        assert_eq!(f.lease_end(&long, 150 * MS), 400 * MS);
        assert_eq!(f.lease_end(&long, 350 * MS), 600 * MS);
        assert_eq!(f.next_renewal(&long, 150 * MS), Some(200 * MS));
        assert_eq!(f.next_renewal(&long, 300 * MS), None);
    }

    #[test]
    fn a_slow_link_holds_its_workers_jobs_the_delay_longer_and_wakes_them_late() {
        let slow = Fault {
            delay_ms: Some(20.0),
            ..fault(0.0, FaultKind::SlowLink, Some(10.0), Some(1))
        };
        let mut f = Faults::new(&plan(vec![slow]), 4, std::iter::empty());
        let mut running = BinaryHeap::new();
        assert_eq!(f.step(0, &mut running), Step::Pool);
        assert_eq!(f.tally.injected, 1);
        // Four 100 ms jobs woken onto idle workers at 10 ms: process 1's
        // (workers 0 and 1) take 20 ms after the wake and report 20 ms
        // after their job's end; process 2's as without the fault.
        let taken: Vec<_> = (0..4)
            .map(|id| f.assign(id, id, 10 * MS, 100 * MS))
            .collect();
        assert_eq!(
            taken,
            [
                (0, 30 * MS, 150 * MS),
                (1, 30 * MS, 150 * MS),
                (2, 10 * MS, 110 * MS),
                (3, 10 * MS, 110 * MS)
            ]
        );
        // Worker 0 reports and takes on at once (no wake): 150 → 270 ms.
        assert_eq!(f.report(0), Report::Finished);
        assert_eq!(f.assign(4, 4, 150 * MS, 100 * MS), (0, 150 * MS, 270 * MS));
        // The link well again at 10 s: no delay.
        assert_eq!(f.next_at(), Some(10_000 * MS));
        assert_eq!(f.step(10_000 * MS, &mut running), Step::Pool);
        assert_eq!(f.report(1), Report::Finished);
        assert_eq!(
            f.assign(5, 5, 10_010 * MS, 100 * MS),
            (1, 10_010 * MS, 10_110 * MS)
        );
    }

    #[test]
    fn a_pause_past_the_lease_hands_the_job_back_and_refuses_the_finish() {
        let pause = fault(0.05, FaultKind::PauseWorker, Some(1.0), Some(1));
        let mut f = Faults::new(&plan(vec![pause]), 4, std::iter::empty());
        let mut running = BinaryHeap::new();
        // Workers 0 and 1 are process 1's; worker 0 takes a 100 ms job at 0.
        let (w, ..) = f.assign(7, 7, 0, 100 * MS);
        assert_eq!(w, 0);
        running.push(Reverse((100 * MS, 7, w)));
        assert_eq!(f.next_at(), Some(50 * MS));
        assert_eq!(f.step(50 * MS, &mut running), Step::Pool);
        // Worker 1 was idle: gone until the continue; 2 and 3 remain.
        assert_eq!(f.idle(), 2);
        // The report waits for the continue at 1.05 s; the lease ends at 0.3 s.
        assert_eq!(running.peek(), Some(&Reverse((1050 * MS, 7, 0))));
        assert_eq!(f.next_at(), Some(300 * MS));
        assert_eq!(
            f.step(300 * MS, &mut running),
            Step::Requeue { id: 7, ticket: 7 }
        );
        assert_eq!(f.tally.redelivered, vec![7]);
        // At 1.05 s: the finish (a completion first) is refused.
        assert_eq!(f.report(0), Report::Refused);
        assert_eq!(f.step(1050 * MS, &mut running), Step::Pool); // the continue
        assert_eq!(f.step(1050 * MS, &mut running), Step::Pool); // worker 1 back
        assert_eq!(f.idle(), 4);
        assert_eq!(f.tally.refused, vec![7]);
        assert_eq!(f.next_at(), None);
    }

    #[test]
    fn a_short_pause_delays_the_finish_and_keeps_the_lease() {
        let pause = fault(0.05, FaultKind::PauseWorker, Some(0.1), Some(1));
        let mut f = Faults::new(&plan(vec![pause]), 4, std::iter::empty());
        let mut running = BinaryHeap::new();
        let (w, ..) = f.assign(3, 3, 0, 100 * MS);
        running.push(Reverse((100 * MS, 3, w)));
        f.step(50 * MS, &mut running);
        assert_eq!(running.peek(), Some(&Reverse((150 * MS, 3, 0))));
        assert_eq!(f.report(0), Report::Finished);
        assert!(f.tally.redelivered.is_empty());
    }

    #[test]
    fn a_killed_process_loses_its_jobs_at_their_lease_and_comes_back() {
        let kill = fault(0.05, FaultKind::KillWorker, Some(1.0), Some(2));
        let mut f = Faults::new(&plan(vec![kill]), 4, std::iter::empty());
        let mut running = BinaryHeap::new();
        for id in 0..4 {
            let (w, ..) = f.assign(id, id, 0, 100 * MS);
            running.push(Reverse((100 * MS, id, w)));
        }
        f.step(50 * MS, &mut running);
        // Process 2's workers (2, 3) held jobs 2 and 3: no report comes.
        assert_eq!(running.len(), 2);
        assert_eq!(
            f.step(300 * MS, &mut running),
            Step::Requeue { id: 2, ticket: 2 }
        );
        assert_eq!(
            f.step(300 * MS, &mut running),
            Step::Requeue { id: 3, ticket: 3 }
        );
        assert_eq!(f.idle(), 0);
        f.step(1050 * MS, &mut running); // the replacement
        assert_eq!(f.idle(), 2);
        assert!(f.tally.refused.is_empty());
        assert_eq!(f.tally.injected, 1);
    }

    #[test]
    fn a_restart_holds_arrivals_and_reports_until_the_server_is_back() {
        let restart = fault(0.05, FaultKind::RestartServer, Some(0.1), None);
        let mut f = Faults::new(&plan(vec![restart]), 2, std::iter::empty());
        let mut running = BinaryHeap::new();
        let (w, ..) = f.assign(0, 0, 0, 100 * MS);
        running.push(Reverse((100 * MS, 0, w)));
        f.step(50 * MS, &mut running);
        assert_eq!(f.server_at(60 * MS), 150 * MS);
        assert_eq!(f.server_at(150 * MS), 150 * MS);
        // The report fails at 100 ms: tries at 101, 103, 107, 115, 131, 163.
        assert_eq!(running.peek(), Some(&Reverse((163 * MS, 0, 0))));
        // The idle worker failed at 50 ms: back at 177 (50 + 127).
        assert_eq!(f.idle(), 0);
        assert_eq!(f.next_at(), Some(177 * MS));
        assert_eq!(
            f.tally.dropped, 0,
            "a restart's connections are not counted as dropped"
        );
        assert_eq!(f.tally.restart_ns, 100 * MS);
    }
}
