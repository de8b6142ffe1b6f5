//! A lab on a queue server (Redis, PostgreSQL): what the coordinator does
//! the same on every server, through the server's [`Wire`].
//!
//! For each run the coordinator sets the queue up, hands the run to every
//! worker, submits the arrival plan at its planned instants (jobs due at
//! one instant in one round trip), waits until every accepted job has
//! finished, and rebuilds the run's records from the server's stamps. The
//! worker processes it started are checked all along: one that exits is
//! named and the run stops.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::clients::{Clients, Due};
use super::faults::{Action, Injector};
use super::rebuild::{Rebuilt, records};
use super::wire::{Setup, Submit, Wire};
use super::{Backend, RunError, RunInput, RunRecord, ServerKind, ServerMeasures};
use crate::engine::clock::sleep_until_blocking;
use crate::engine::{Nanos, stats_from_records};
use crate::results::{BackendFacts, FaultFigures};
use crate::scenario::Queue;
use crate::scenario::backends::Capability;
use crate::scenario::faults::{default_lease_ns, processes_for, share};
use crate::stats::{decode_histogram, new_histogram, record};

/// How early the submitter's OS sleep ends, to spin to an arrival's instant.
const SUBMIT_MARGIN: Duration = Duration::from_micros(500);
/// How long workers started here may take to join (and to start or end a
/// run), and how long workers started elsewhere (`--processes 0`) are
/// waited for.
pub const JOIN_OWN: Duration = Duration::from_secs(15);
const JOIN_ELSEWHERE: Duration = Duration::from_secs(120);

/// The coordinator of a lab on a queue server, and the worker processes it
/// started (stopped when dropped, before the server).
pub struct Coordinator<W: Wire> {
    pub wire: W,
    workers: u32,
    processes: u32,
    children: Vec<Child>,
    runs: u32,
    worker_exe: Option<std::path::PathBuf>,
    /// Jobs the server accepted so far this run.
    accepted: u64,
    /// This run's longest restart of the server.
    restart_max: Duration,
    /// The relays in front of the server for the processes a `slow_link`
    /// strikes, by process.
    relays: std::collections::BTreeMap<u32, super::relay::Relay>,
}

impl<W: Wire> Coordinator<W> {
    /// Start `processes` worker processes (`None`: enough that none runs
    /// more than [`crate::scenario::faults::WORKERS_PER_PROCESS`], at least 2; 0: workers join from
    /// elsewhere) for a pool of `workers`, and wait until they have joined;
    /// the `slowed` processes connect through a relay of their own.
    pub fn start(
        wire: W,
        workers: u32,
        plan: &super::ServerPlan,
        slowed: &[u32],
    ) -> Result<Coordinator<W>> {
        let processes = processes_for(workers, plan.processes);
        let relays = slowed
            .iter()
            .map(|&k| Ok((k, super::relay::Relay::start(wire.url())?)))
            .collect::<Result<_>>()?;
        let mut c = Coordinator {
            wire,
            workers,
            processes,
            children: Vec::new(),
            runs: 0,
            worker_exe: plan.worker_exe.clone(),
            accepted: 0,
            restart_max: Duration::ZERO,
            relays,
        };
        c.spawn_workers()?;
        c.wait_joined()?;
        Ok(c)
    }

    /// `processes` worker processes sharing the pool's workers evenly.
    fn spawn_workers(&mut self) -> Result<()> {
        for k in 0..self.processes {
            let child = self.spawn_one(k)?;
            self.children.push(child);
        }
        Ok(())
    }

    /// Worker process `k`'s share of the pool's workers.
    fn share(&self, k: u32) -> u32 {
        share(self.workers, self.processes, k)
    }

    /// Start worker process `k`.
    fn spawn_one(&self, k: u32) -> Result<Child> {
        let exe = match &self.worker_exe {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().context("cannot find noisylab's own binary")?,
        };
        let url = self.relays.get(&k).map_or(self.wire.url(), |r| r.url());
        let mut cmd = Command::new(&exe);
        cmd.args(["worker", "--backend", url, "--run"])
            .arg(self.wire.lab_id())
            .args(["--workers", &self.share(k).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        super::process::die_with_parent(&mut cmd);
        cmd.spawn().context("cannot start a worker process")
    }

    /// Do a fault's action to its worker process (or, dropping
    /// connections, to every worker): how many connections it dropped.
    fn inject(&mut self, action: Action) -> Result<u64> {
        let (k, signal) = match action {
            Action::Drop => return self.wire.drop_workers(),
            Action::Restart(down) => return self.restart(down).map(|_| 0),
            Action::Slow(k, delay) => {
                let relay = self.relays.get(&k).ok_or_else(|| {
                    anyhow!("a slow_link strikes worker process {}, which the lab started without a relay", k + 1)
                })?;
                relay.set_delay(delay);
                return Ok(0);
            }
            Action::Respawn(k) => {
                self.child(k)?;
                let child = self.spawn_one(k)?;
                *self.child(k)? = child;
                // Its workers join the run under way.
                return self.wire.start_run(self.share(k)).map(|_| 0);
            }
            Action::Kill(k) => (k, libc::SIGKILL),
            Action::Stop(k) => (k, libc::SIGSTOP),
            Action::Cont(k) => (k, libc::SIGCONT),
        };
        let child = self.child(k)?;
        // SAFETY: a signal to a worker process this coordinator started and
        // has not reaped (a killed one is reaped just below).
        if unsafe { libc::kill(child.id() as libc::pid_t, signal) } != 0 {
            bail!(
                "cannot signal worker process {} (pid {}): {}",
                k + 1,
                child.id(),
                std::io::Error::last_os_error()
            );
        }
        if signal == libc::SIGKILL {
            child.wait()?;
        }
        Ok(0)
    }

    /// Kill the server and start it again after `down`; every job it had
    /// accepted must still be there.
    fn restart(&mut self, down: Duration) -> Result<()> {
        let began = Instant::now();
        self.wire.restart(down)?;
        self.restart_max = self.restart_max.max(began.elapsed());
        let kept = self.wire.enqueued()?;
        if kept < self.accepted {
            bail!(
                "{} of the {} jobs the server had accepted were lost across its restart ({})",
                self.accepted - kept,
                self.accepted,
                self.wire.promise()
            );
        }
        Ok(())
    }

    /// Each worker process's CPU seconds so far, by pid (with the threads
    /// and processes it started).
    fn workers_cpu(&self) -> Vec<(u32, f64)> {
        let Some(tree) = crate::machine::ProcessTree::read() else {
            return Vec::new();
        };
        self.children
            .iter()
            .filter_map(|c| Some((c.id(), tree.cpu_s(c.id(), true)?)))
            .collect()
    }

    /// The worker processes' CPU seconds since `before` (a replacement
    /// counted from its start; `None` with no process to read).
    fn workers_cpu_since(&self, before: &[(u32, f64)]) -> Option<f64> {
        let now = self.workers_cpu();
        (!now.is_empty()).then(|| {
            now.iter()
                .map(|(pid, s)| {
                    let was = before.iter().find(|(p, _)| p == pid).map_or(0.0, |b| b.1);
                    (s - was).max(0.0)
                })
                .sum()
        })
    }

    /// Worker process `k` (from 0), or why a fault cannot name it.
    fn child(&mut self, k: u32) -> Result<&mut Child> {
        let started = self.children.len();
        self.children.get_mut(k as usize).ok_or_else(|| {
            anyhow!(
                "a fault names worker process {}, but the lab started {started}",
                k + 1
            )
        })
    }

    /// Every fault action due by now.
    fn inject_due(&mut self, faults: &mut Injector) -> Result<()> {
        while let Some(action) = faults.due(Instant::now()) {
            faults.dropped += self.inject(action)?;
        }
        Ok(())
    }

    fn wait_joined(&mut self) -> Result<()> {
        let deadline = if self.processes == 0 {
            eprintln!(
                "noisylab: waiting for {} workers to join: run `noisylab worker --backend {} --run {} \
                 --workers N` where they should run",
                self.workers,
                self.wire.url(),
                self.wire.lab_id()
            );
            JOIN_ELSEWHERE
        } else {
            JOIN_OWN
        };
        let workers = self.workers;
        self.wait_for(deadline, |w| Ok(w.joined()? >= workers))
            .map_err(|e| {
                anyhow!(
                    "{e:#} (waiting for {workers} workers to join lab {})",
                    self.wire.lab_id()
                )
            })
    }

    /// Until `done`, checking the worker processes and the deadline.
    fn wait_for(
        &mut self,
        deadline: Duration,
        mut done: impl FnMut(&mut W) -> Result<bool>,
    ) -> Result<()> {
        let until = Instant::now() + deadline;
        loop {
            if done(&mut self.wire)? {
                return Ok(());
            }
            self.check_children(|_| false)?;
            if Instant::now() > until {
                bail!("gave up after {} s", deadline.as_secs());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// An error naming the first worker process that has exited (but for
    /// those a fault killed: `killed`).
    fn check_children(&mut self, killed: impl Fn(u32) -> bool) -> Result<()> {
        let total = self.children.len();
        for (k, child) in self.children.iter_mut().enumerate() {
            if killed(k as u32) {
                continue;
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "worker process {} of {total} (pid {}) exited ({status}): the run cannot finish",
                    k + 1,
                    child.id()
                );
            }
        }
        Ok(())
    }

    /// One run's queue, as the server is told it.
    fn setup_for<'a>(
        &self,
        input: &RunInput<'a>,
        clients: &Clients<'_>,
        lease: Nanos,
    ) -> Setup<'a> {
        let s = input.strategy;
        Setup {
            strategy: s,
            weights: match s.queue {
                Queue::Vtc => input.scenario.population().queue_weights(s),
                _ => Vec::new(),
            },
            durations: input.plan.iter().map(|j| j.duration).collect(),
            lease_us: (self.wire.kind().declared())
                .carries(Capability::Leases, false)
                .then_some(lease / 1_000),
            watch: clients.watch(),
            keys: clients.keys(),
        }
    }

    /// One run, set up as run number `run`.
    fn run_on(
        &mut self,
        run: u32,
        input: RunInput<'_>,
        stop: &AtomicBool,
    ) -> Result<RunRecord, RunError> {
        let s = input.strategy;
        let lease = lease_ns(&input);
        let keys = s.queue != Queue::Fifo && input.scenario.population().turns_keys(s);
        let mut clients = Clients::new(input.plan.clone(), input.pool, input.seed, s, keys);
        let setup = self.setup_for(&input, &clients, lease);
        let kind = self.wire.kind();
        let failed = move |e| self_failed(kind, e);
        self.wire.setup(run, &setup).map_err(failed)?;
        self.start_run().map_err(failed)?;
        let before = self.wire.mark().map_err(failed)?;
        let workers_before = self.workers_cpu();
        let t0_us = self.wire.now_us().map_err(failed)?;
        let origin = Instant::now();
        let mut faults = Injector::new(&input.scenario.fault, self.processes, origin);
        self.accepted = 0;
        self.restart_max = Duration::ZERO;
        let submitted = self.submit_all(&input, &mut clients, origin, &mut faults, stop)?;
        self.wait_end(&input, self.accepted, lease, &mut faults, stop)?;
        self.undo_faults(&mut faults).map_err(failed)?;
        let cost = self.wire.cost_since(before).map_err(failed)?;
        let workers_cpu_s = self.workers_cpu_since(&workers_before);
        let (take_rtt, hold_late) = self.end_workers().map_err(failed)?;
        let stamps = self.wire.stamps().map_err(failed)?;
        // The attempts move into the records; the clients still name them.
        let attempts = std::mem::take(&mut clients.jobs);
        let index = |id: u32| clients.index(id);
        let Rebuilt {
            jobs,
            found_idle,
            end,
            faults: mut leases,
            redelivered,
            ran_twice,
        } = records(attempts, index, &stamps, t0_us).map_err(failed)?;
        leases.injected = faults.injected;
        leases.renewals = self.wire.renewals().map_err(failed)?;
        leases.dropped_connections = faults.dropped;
        leases.restart_ms = self.restart_max.as_secs_f64() * 1e3;
        let server = ServerMeasures {
            take_rtt,
            hold_late,
            submit_rtt: submitted.rtt,
            cost,
            workers_cpu_s,
            planned: input.plan.len(),
        };
        let faults = setup.lease_us.map(|us| FaultFigures {
            lease_ms: us as f64 / 1e3,
            ..leases
        });
        let mut stats = stats_from_records(input.pool, &jobs, &found_idle, end);
        stats.retry_after_s_max = submitted.retry_after_s_max;
        Ok(RunRecord {
            jobs,
            stats,
            server: Some(server),
            late: None,
            redelivered,
            ran_twice,
            faults,
            carried: None,
        })
    }

    /// Hand the run to every worker and wait until all are idle on it.
    fn start_run(&mut self) -> Result<()> {
        self.wire.start_run(self.workers)?;
        let workers = self.workers;
        self.wait_for(JOIN_OWN, |w| Ok(w.idle()? >= workers))
            .context("the workers did not start the run")
    }

    /// Every planned job at its instant (with vtc, its cost), those due at
    /// one instant in one round trip; the clients' retries and give-ups as
    /// they fall due. A fault's action due before them is done on the way.
    fn submit_all(
        &mut self,
        input: &RunInput<'_>,
        clients: &mut Clients<'_>,
        origin: Instant,
        faults: &mut Injector,
        stop: &AtomicBool,
    ) -> Result<Submitted, RunError> {
        let kind = self.wire.kind();
        let failed = move |e| self_failed(kind, e);
        let mut out = Submitted {
            rtt: new_histogram(),
            retry_after_s_max: 0,
        };
        while let Some(at) = clients.next_at() {
            let instant = origin + Duration::from_nanos(at);
            if let Some(fault) = faults.next_at().filter(|f| *f < instant) {
                sleep_until_blocking(fault, SUBMIT_MARGIN);
                self.inject_due(faults).map_err(failed)?;
                continue;
            }
            sleep_until_blocking(instant, SUBMIT_MARGIN);
            if stop.load(Ordering::Relaxed) {
                self.halt(faults);
                return Err(RunError::Interrupted);
            }
            match clients.due().expect("something is due").1 {
                Due::Timeouts(due) => self.give_up(clients, &due, origin),
                Due::Send(due) => self.send(input, clients, &due, origin, &mut out),
            }
            .map_err(failed)?;
        }
        Ok(out)
    }

    /// The clients of `due` stop waiting: those whose job had not started
    /// give up on it (and may send it again).
    fn give_up(&mut self, clients: &mut Clients<'_>, due: &[usize], origin: Instant) -> Result<()> {
        let jobs: Vec<(u32, bool)> = due
            .iter()
            .map(|&i| (clients.wire_of(i), clients.cancels(i)))
            .collect();
        let waiting = self.wire.abandon(&jobs)?;
        let now = origin.elapsed().as_nanos() as Nanos;
        for (&i, _) in due.iter().zip(waiting).filter(|(_, w)| *w) {
            clients.abandoned(i, now);
        }
        Ok(())
    }

    /// Send the attempts `due` in one round trip; a refused one's client
    /// is told the queue limit's retry-after.
    fn send(
        &mut self,
        input: &RunInput<'_>,
        clients: &mut Clients<'_>,
        due: &[usize],
        origin: Instant,
        out: &mut Submitted,
    ) -> Result<()> {
        for &i in due {
            clients.send(i)?;
        }
        let batch: Vec<Submit<'_>> = due.iter().map(|&i| clients.submit(i)).collect();
        let sent = Instant::now();
        let replies = self.wire.submit(&batch)?;
        record(&mut out.rtt, sent.elapsed().as_nanos() as u64);
        let now = origin.elapsed().as_nanos() as Nanos;
        let fixed = clients.fixed_retry_after();
        for (&i, (ok, x)) in due.iter().zip(replies) {
            if ok {
                self.accepted += 1;
                clients.accepted(i, now);
                continue;
            }
            let tenant = clients.jobs[i].tenant;
            let hint = input.pool.limit_hint_ns(tenant, x as u32, fixed);
            out.retry_after_s_max = out.retry_after_s_max.max(hint.div_ceil(1_000_000_000));
            clients.refused(i, now, Some(hint));
        }
        Ok(())
    }

    /// Until every accepted job has finished; fails on a worker process that
    /// exits, or a run far past any length the plan allows.
    /// Meanwhile, faults' actions are done when due and expired leases
    /// reaped, at least every quarter `lease`.
    fn wait_end(
        &mut self,
        input: &RunInput<'_>,
        accepted: u64,
        lease: Nanos,
        faults: &mut Injector,
        stop: &AtomicBool,
    ) -> Result<(), RunError> {
        let kind = self.wire.kind();
        self.wire
            .expect(accepted)
            .map_err(|e| self_failed(kind, e))?;
        // Every job one after another, after the last arrival: the longest a
        // run can take; then 30 s more.
        let work: Nanos = input.plan.iter().map(|j| j.duration).sum();
        let last = input.plan.last().map_or(0, |j| j.planned);
        let deadline = Instant::now() + Duration::from_nanos(last + work) + Duration::from_secs(30);
        let tick = Duration::from_millis(250).min(Duration::from_nanos(lease / 4));
        loop {
            let now = Instant::now();
            let wait = faults
                .next_at()
                .map_or(tick, |f| tick.min(f.saturating_duration_since(now)))
                .max(Duration::from_millis(1));
            let over = self.wire.wait_end(wait).and_then(|over| {
                self.inject_due(faults)?;
                self.wire.reap()?;
                Ok(over)
            });
            match over {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    self.halt(faults);
                    return Err(self_failed(kind, e));
                }
            }
            if stop.load(Ordering::Relaxed) {
                self.halt(faults);
                return Err(RunError::Interrupted);
            }
            if let Err(e) = self.check_children(|k| faults.is_dead(k)) {
                self.halt(faults);
                return Err(self_failed(kind, e));
            }
            if Instant::now() > deadline {
                self.halt(faults);
                return Err(self_failed(
                    kind,
                    anyhow!(
                        "the run did not finish in time: {accepted} jobs accepted, not all finished"
                    ),
                ));
            }
        }
    }

    /// Stop every worker's run and merge their round-trip times and their
    /// timers' lateness.
    fn end_workers(
        &mut self,
    ) -> Result<(hdrhistogram::Histogram<u64>, hdrhistogram::Histogram<u64>)> {
        self.wire.stop_workers(self.workers)?;
        let workers = self.workers;
        self.wait_for(JOIN_OWN, |w| Ok(w.left()? >= workers))
            .context("the workers did not end the run")?;
        let (mut rtt, mut late) = (new_histogram(), new_histogram());
        for text in self.wire.figures()? {
            let (a, b) = text
                .split_once(' ')
                .ok_or_else(|| anyhow!("a worker's figures that are not two histograms"))?;
            rtt.add(decode_histogram(a)?)?;
            late.add(decode_histogram(b)?)?;
        }
        Ok((rtt, late))
    }

    /// No more jobs for anyone; the faults undone, the workers leave the
    /// run (best effort: the run is failing or interrupted already).
    fn halt(&mut self, faults: &mut Injector) {
        let _ = self.undo_faults(faults);
        let _ = self.wire.halt();
        let _ = self.end_workers();
    }

    /// Undo the faults begun and not yet undone (a replacement started, a
    /// stopped process continued), so every run ends with the whole pool.
    fn undo_faults(&mut self, faults: &mut Injector) -> Result<()> {
        for action in faults.finish() {
            self.inject(action)?;
        }
        Ok(())
    }
}

impl<W: Wire> Backend for Coordinator<W> {
    fn run(&mut self, input: RunInput<'_>, stop: &AtomicBool) -> Result<RunRecord, RunError> {
        let run = self.runs;
        self.runs += 1;
        let out = self.run_on(run, input, stop);
        let _ = self.wire.end_run();
        out
    }

    fn facts(&self) -> Option<BackendFacts> {
        Some(BackendFacts {
            kind: self.wire.kind().name().to_string(),
            version: self.wire.version().to_string(),
            processes: self.processes,
            durability: self.wire.durability(),
        })
    }
}

impl<W: Wire> Drop for Coordinator<W> {
    fn drop(&mut self) {
        self.wire.quit(self.workers);
        let deadline = Instant::now() + Duration::from_secs(5);
        for child in &mut self.children {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What `submit_all` learned.
struct Submitted {
    rtt: hdrhistogram::Histogram<u64>,
    retry_after_s_max: u64,
}

fn self_failed(kind: ServerKind, e: anyhow::Error) -> RunError {
    RunError::Failed(e.context(format!("the {} backend failed", kind.title())))
}

/// A fresh id for a lab's data: this process and the clock, in hex.
pub fn lab_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos & 0xff_ffff_ffff)
}

/// A take's lease for `input`'s run: the scenario's `lease_s`, or three
/// times its plan's 99th-percentile hold (at least 50 ms).
pub fn lease_ns(input: &RunInput<'_>) -> Nanos {
    match input.scenario.lease_s {
        Some(s) => (s * 1e9).round() as Nanos,
        None => default_lease_ns(input.plan.iter().map(|j| j.duration)),
    }
}
