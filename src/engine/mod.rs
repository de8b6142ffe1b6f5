//! The engine: a worker pool driven by one event loop, on either clock.
//!
//! - [`load`] turns a scenario into the run's arrival plan (open loop: every
//!   job has its planned instant before the run starts).
//! - [`clock`] is the only thing that differs between a real-clock run (tokio
//!   timers plus a precise finish) and a virtual one (time jumps to the next
//!   event, so a run is deterministic and takes milliseconds).
//! - [`run`] is the loop both clocks share. It wakes at the earliest of the next
//!   planned arrival and the next job completion, handles every event due by
//!   then (completions first on a tie), and dispatches a job to an idle worker
//!   in the same step, so the start instant is taken on the submitting path
//!   with no thread hop or channel between enqueue and start.

pub mod clients;
pub mod clock;
pub mod faults;
pub mod jitter;
pub mod lateness;
pub mod limiter;
pub mod load;
mod occupancy;
mod record;
pub mod traffic;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::stats;

pub use clock::{Clock, RealClock, Timer, VirtualClock};
use occupancy::Occupancy;
pub use occupancy::stats_from_records;
pub use record::{Fate, Interrupted, JobRecord, NEVER, Nanos, Pool, RunStats, Sample};

use crate::sched::{JobId, Scheduler, TenantId};
use traffic::{Refusal, Traffic};

/// Run one lab: submit every planned job at its instant, start jobs as
/// workers free up, and fill in each record. `plan` must be sorted by
/// planned instant; a job's id is its index in it. Where the pool has
/// [`Pool::traffic`], retries are added to the records as the run unfolds,
/// their jitter drawn from `seed`.
pub async fn run<C: Clock, S: Scheduler>(
    clock: &mut C,
    pool: &Pool,
    sched: &mut S,
    mut plan: Vec<JobRecord>,
    seed: u64,
    stop: &AtomicBool,
) -> Result<(Vec<JobRecord>, RunStats), Interrupted> {
    assert!(
        plan.windows(2).all(|w| w[0].planned <= w[1].planned),
        "the arrival plan must be sorted"
    );
    assert!(
        plan.len() < JobId::MAX as usize,
        "too many jobs for a JobId"
    );
    for (i, job) in plan.iter_mut().enumerate() {
        job.origin = i as JobId;
    }
    let unique = plan.len();
    let faults = pool
        .faults
        .as_deref()
        .map(|f| faults::Faults::new(f, pool.workers, plan.iter().map(|j| j.duration)));
    let mut engine = Engine {
        clock,
        pool,
        sched,
        jobs: plan,
        running: BinaryHeap::with_capacity(pool.workers as usize),
        idle: pool.workers,
        next: 0,
        unique,
        occupancy: Occupancy::new(pool.sample_ns, pool.traffic_ns),
        clients: pool.traffic.as_deref().map(|p| Door {
            clients: clients::Clients::new(Traffic::new(p, seed)),
            tickets: Vec::new(),
            saturated: Saturation::default(),
            saturated_by_class: vec![Saturation::default(); p.clients.len()],
        }),
        stats: RunStats {
            dispatch_floor: stats::new_histogram(),
            provider_saturated_ns: 0,
            provider_saturated_ns_by_class: Vec::new(),
            reject_hold_ns: 0,
            retry_after_s_max: 0,
            waiting_ns: 0,
            idle_worker_ns_while_waiting: 0,
            waiting_ns_in_traffic: 0,
            idle_worker_ns_while_waiting_in_traffic: 0,
            samples: Vec::new(),
            end: 0,
            faults: None,
            timing: jitter::ClockTiming::default(),
        },
        faults,
    };
    engine.run(stop).await?;
    Ok(engine.finish())
}

/// A run's limits and clients, with the events they add: retries waiting to
/// be sent, and clients waiting to give up ([`clients::Clients`]).
struct Door<'a> {
    clients: clients::Clients<'a>,
    /// The scheduler's job ids (in push order) to attempts' ids.
    tickets: Vec<JobId>,
    /// The provider's retry-afters, for anyone and for each class.
    saturated: Saturation,
    saturated_by_class: Vec<Saturation>,
}

/// The union of the intervals a provider told callers to wait, as they come
/// (each starting no earlier than the one before).
#[derive(Debug, Clone, Copy, Default)]
struct Saturation {
    until: Nanos,
    total: Nanos,
}

impl Saturation {
    fn add(&mut self, from: Nanos, until: Nanos) {
        self.total += until.saturating_sub(from.max(self.until));
        self.until = self.until.max(until);
    }
}

struct Engine<'a, C, S> {
    clock: &'a mut C,
    pool: &'a Pool,
    sched: &'a mut S,
    jobs: Vec<JobRecord>,
    /// Running jobs by completion instant (ties by job id, for
    /// determinism), with the worker that holds each (0 without faults).
    running: BinaryHeap<Reverse<(Nanos, JobId, u32)>>,
    idle: u32,
    /// Index of the next planned arrival.
    next: usize,
    /// Jobs in the plan (their first attempts are `jobs[..unique]`).
    unique: usize,
    occupancy: Occupancy,
    clients: Option<Door<'a>>,
    stats: RunStats,
    /// The pool's workers and the server through simulated faults.
    faults: Option<faults::Faults>,
}

/// The next event a run handles, earliest first; on a tie a completion
/// first (so the freed worker is there for what comes), then a client
/// giving up, then a retry, then a planned arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Completion,
    Fault,
    Timeout,
    Retry,
    Arrival,
}

impl<C: Clock, S: Scheduler> Engine<'_, C, S> {
    async fn run(&mut self, stop: &AtomicBool) -> Result<(), Interrupted> {
        while let Some((wake, _)) = self.next_event() {
            self.clock.sleep_until(wake).await;
            if stop.load(Ordering::Relaxed) {
                return Err(Interrupted);
            }
            // Everything due by now, earliest first.
            loop {
                let now = self.clock.now();
                match self.next_event() {
                    Some((at, event)) if at <= now => match event {
                        Event::Completion => self.complete(now),
                        Event::Fault => self.fault(now),
                        Event::Timeout => self.time_out(now),
                        Event::Retry => self.resend(now),
                        Event::Arrival => self.arrive(now),
                    },
                    _ => break,
                }
            }
            self.clock.settle();
        }
        Ok(())
    }

    /// Drop the timeouts of attempts that have started or ended: their
    /// clients no longer wait, and the run must not wait for them either.
    fn prune_timeouts(&mut self) {
        let Some(c) = &mut self.clients else { return };
        while let Some((_, id)) = c.clients.next_timeout() {
            let job = &self.jobs[id];
            if job.started == NEVER && job.fate == Fate::Pending {
                break;
            }
            c.clients.pop_timeout();
        }
    }

    fn next_event(&mut self) -> Option<(Nanos, Event)> {
        self.prune_timeouts();
        // A call to the server waits while a simulated restart lasts.
        let server = |at: Option<Nanos>| match &self.faults {
            Some(f) => at.map(|at| f.server_at(at)),
            None => at,
        };
        let mut next = None;
        let mut consider = |at: Option<Nanos>, e: Event| {
            if let Some(at) = at
                && next.is_none_or(|n| (at, e) < n)
            {
                next = Some((at, e));
            }
        };
        consider(
            self.running.peek().map(|Reverse((at, ..))| *at),
            Event::Completion,
        );
        if let Some(c) = &self.clients {
            consider(
                server(c.clients.next_timeout().map(|(at, _)| at)),
                Event::Timeout,
            );
            consider(server(c.clients.next_retry()), Event::Retry);
        }
        consider(
            server(self.jobs[..self.unique].get(self.next).map(|j| j.planned)),
            Event::Arrival,
        );
        // Faults go on while work remains (as on a server, where the run
        // ends with its last job and the faults not begun are dropped).
        if let Some(f) = &self.faults
            && (next.is_some() || self.sched.queued() > 0 || f.leases_out())
            && let Some(at) = f.next_at()
            && next.is_none_or(|n| (at, Event::Fault) < n)
        {
            next = Some((at, Event::Fault));
        }
        next
    }

    fn is_burst(&self, tenant: TenantId) -> bool {
        tenant >= self.pool.normal_tenants
    }

    fn complete(&mut self, now: Nanos) {
        let Reverse((due, id, worker)) = self.running.pop().expect("a completion is due");
        self.clock.handled(due, now, lateness::Late::Job);
        self.occupancy.advance(now, self.idle);
        if let Some(f) = &mut self.faults
            && f.report(worker) == faults::Report::Refused
        {
            // Its lease had run out and the job went back to its queue:
            // the finish is refused, and the worker takes work again.
            self.idle += 1;
            self.dispatch();
            return;
        }
        let job = &mut self.jobs[id as usize];
        let (tenant, queue, out) = (job.tenant, job.queue(self.pool.by_key), job.tokens_out);
        if job.fate == Fate::Refused(Refusal::Provider) {
            // The worker held a refused call for `reject_ms`.
            self.stats.reject_hold_ns += u128::from(now - job.started);
            job.started = NEVER;
        } else {
            job.finished = now;
            if job.fate == Fate::Pending {
                job.fate = Fate::Ran;
            }
            if let Some(c) = &mut self.clients {
                c.clients.traffic.finished(now, tenant, out);
            }
        }
        self.occupancy.finished(self.is_burst(tenant));
        self.sched.finished(queue);
        self.idle += 1;
        self.dispatch();
    }

    /// A simulated fault's event is due: an action on the pool or the
    /// server, a lease run out (its job back in its queue), or a worker
    /// back to take work.
    fn fault(&mut self, now: Nanos) {
        self.occupancy.advance(now, self.idle);
        let f = self.faults.as_mut().expect("fault events come with faults");
        let step = f.step(now, &mut self.running);
        self.idle = f.idle();
        if let faults::Step::Requeue { id, ticket } = step {
            let job = self.jobs[id as usize];
            self.occupancy.finished(self.is_burst(job.tenant));
            self.occupancy.queued += 1;
            self.sched.requeue(job.queue(self.pool.by_key), ticket);
        }
        self.dispatch();
    }

    fn arrive(&mut self, now: Nanos) {
        let id = self.next;
        self.next += 1;
        let due = self.jobs[id].planned;
        let due = self.faults.as_ref().map_or(due, |f| f.server_at(due));
        self.clock.handled(due, now, lateness::Late::Arrival);
        self.submit(now, id as JobId);
    }

    /// A retry is due: send it as a new arrival.
    fn resend(&mut self, now: Nanos) {
        let c = self.clients.as_mut().expect("retries come with clients");
        let id = c.clients.pop_retry().expect("a retry is due");
        self.submit(now, id as JobId);
    }

    /// An attempt reaches the front door: the tenant's budget and rate
    /// limit, then the queue.
    fn submit(&mut self, now: Nanos, id: JobId) {
        self.occupancy.advance(now, self.idle);
        let ticket = self.ticket(id);
        let job = &mut self.jobs[id as usize];
        // Read the clock again: the wait starts here, at the push.
        job.enqueued = self.clock.now();
        let job = *job;
        let queue = job.queue(self.pool.by_key);
        if let Some(c) = &mut self.clients {
            if job.attempt == 1 {
                c.clients.traffic.sent_first(job.tenant);
            }
            let tokens = f64::from(job.tokens_in) + f64::from(job.tokens_out);
            if let Err((layer, wait)) = c.clients.traffic.admit(now, job.tenant, tokens) {
                self.refuse(now, id, layer, wait);
                return;
            }
            let strategy = &c.clients.traffic.plan().strategy;
            let cost = strategy.job_cost(job.duration, job.tokens_in, job.tokens_out);
            c.tickets.push(id);
            self.sched.note(ticket, cost, job.key);
        }
        match self.sched.push(queue, ticket) {
            Ok(()) => {
                self.occupancy.queued += 1;
                self.watch_timeout(id);
                self.dispatch();
                let job = &self.jobs[id as usize];
                if job.started != NEVER && job.fate != Fate::Refused(Refusal::Provider) {
                    let floor = job.started - job.enqueued;
                    stats::record(&mut self.stats.dispatch_floor, floor);
                }
            }
            Err(rejected) => {
                let fixed = self
                    .clients
                    .as_ref()
                    .and_then(|c| c.clients.traffic.plan().limit_retry_after_ns);
                let hint = self.pool.limit_hint_ns(job.tenant, rejected.waiting, fixed);
                self.refuse(now, id, Refusal::Limit, Some(hint));
            }
        }
    }

    /// The id the scheduler knows an attempt by: with clients, the order of
    /// pushes (retries interleave with the plan); else the plan's own.
    fn ticket(&self, id: JobId) -> JobId {
        self.clients
            .as_ref()
            .map_or(id, |c| c.tickets.len() as JobId)
    }

    fn attempt_of(&self, ticket: JobId) -> JobId {
        self.clients
            .as_ref()
            .map_or(ticket, |c| c.tickets[ticket as usize])
    }

    /// Start the clock on the client's patience, if it has a timeout.
    fn watch_timeout(&mut self, id: JobId) {
        let Some(c) = &mut self.clients else { return };
        let job = &self.jobs[id as usize];
        if job.started == NEVER {
            c.clients.watch(job.tenant, id as usize, job.enqueued);
        }
    }

    /// A client's timeout is due: if its job has not started, it stops
    /// waiting (the job is dropped at its turn, or runs unread) and may
    /// send it again.
    fn time_out(&mut self, now: Nanos) {
        let c = self.clients.as_mut().expect("timeouts come with clients");
        let id = c.clients.pop_timeout().expect("a timeout is due") as JobId;
        let job = &mut self.jobs[id as usize];
        if job.started != NEVER || job.fate != Fate::Pending {
            return;
        }
        if c.clients.traffic.client(job.tenant).waste {
            job.fate = Fate::Wasted;
        } else {
            // It never starts; `finished` keeps when its client left.
            job.fate = Fate::Cancelled;
            job.finished = now;
        }
        self.follow_up(now, id, None);
    }

    /// An attempt was refused at `layer`, told to wait `wait`. Its client
    /// acts on it, unless it had already stopped waiting for this attempt
    /// (timed out, `waste`: it has sent or given up on the job since).
    fn refuse(&mut self, now: Nanos, id: JobId, layer: Refusal, wait: Option<Nanos>) {
        let abandoned = self.jobs[id as usize].fate == Fate::Wasted;
        self.jobs[id as usize].fate = Fate::Refused(layer);
        if let Some(w) = wait {
            self.stats.retry_after_s_max =
                self.stats.retry_after_s_max.max(w.div_ceil(1_000_000_000));
        }
        if layer == Refusal::Provider
            && let Some(c) = &mut self.clients
        {
            // The provider is saturated from now until its retry-after ends.
            let until = now.saturating_add(wait.unwrap_or(0));
            let class = c.clients.traffic.class_of(self.jobs[id as usize].tenant);
            c.saturated.add(now, until);
            c.saturated_by_class[class].add(now, until);
        }
        if !abandoned {
            self.follow_up(now, id, wait);
        }
    }

    /// The client of a refused or timed-out attempt sends it again later,
    /// or gives up.
    fn follow_up(&mut self, now: Nanos, id: JobId, hint: Option<Nanos>) {
        let Some(c) = &mut self.clients else { return };
        if let Some(new) = c.clients.follow_up(&mut self.jobs, id as usize, now, hint) {
            assert!(new < JobId::MAX as usize, "too many attempts for a JobId");
        }
    }

    /// Start waiting jobs while workers are idle. The start instant is read
    /// here, on the submitting path, right after the scheduler's choice.
    fn dispatch(&mut self) {
        while self.idle > 0 {
            let lend = self.pool.reserve.is_some_and(|r| self.idle > r);
            let next = match self.sched.take() {
                None if lend => self.sched.take_over_cap(),
                next => next,
            };
            let Some((_, ticket)) = next else {
                break;
            };
            let id = self.attempt_of(ticket);
            let started = self.clock.now();
            let job = self.jobs[id as usize];
            let (burst, queue) = (self.is_burst(job.tenant), job.queue(self.pool.by_key));
            if job.fate == Fate::Cancelled {
                // Its client left: dropped without a worker.
                self.occupancy.dropped();
                self.sched.finished(queue);
                continue;
            }
            if let Some(c) = &mut self.clients
                && let Err(wait) =
                    c.clients
                        .traffic
                        .start(started, job.tenant, job.tokens_in, job.tokens_out)
            {
                let reject_ns = c.clients.traffic.plan().reject_ns;
                self.occupancy.started(burst);
                if reject_ns > 0 {
                    // The refusal holds the worker; see `complete`.
                    let (w, start, done) = self.hand(id, ticket, started, reject_ns);
                    self.jobs[id as usize].started = start;
                    self.running.push(Reverse((done, id, w)));
                    self.idle -= 1;
                } else {
                    self.occupancy.finished(burst);
                    self.sched.finished(queue);
                }
                self.refuse(started, id, Refusal::Provider, wait);
                continue;
            }
            let hold = job.duration + self.clock.model_overshoot(self.pool);
            let (w, start, done) = self.hand(id, ticket, started, hold);
            self.jobs[id as usize].started = start;
            self.running.push(Reverse((done, id, w)));
            self.idle -= 1;
            self.occupancy.started(burst);
        }
    }

    /// The worker that takes attempt `id` (0 without simulated faults,
    /// where workers have no identity), when the job starts and when it
    /// completes (`started` and `hold` later, but on a simulated slow link).
    fn hand(
        &mut self,
        id: JobId,
        ticket: JobId,
        started: Nanos,
        hold: Nanos,
    ) -> (u32, Nanos, Nanos) {
        self.faults
            .as_mut()
            .map_or((0, started, started.saturating_add(hold)), |f| {
                f.assign(id, ticket, started, hold)
            })
    }

    /// Seconds until a tenant with `waiting` jobs queued has drained them at
    /// its best rate (its cap, or the whole pool) and its mean job duration,
    /// rounded up as HTTP's Retry-After wants.
    fn finish(mut self) -> (Vec<JobRecord>, RunStats) {
        let end = self.clock.now();
        self.occupancy.advance(end, self.idle);
        self.stats.end = end;
        self.stats.waiting_ns = self.occupancy.waiting_ns;
        self.stats.idle_worker_ns_while_waiting = self.occupancy.idle_worker_ns;
        self.stats.waiting_ns_in_traffic = self.occupancy.waiting_ns_in_traffic;
        self.stats.idle_worker_ns_while_waiting_in_traffic =
            self.occupancy.idle_worker_ns_in_traffic;
        self.stats.samples = std::mem::take(&mut self.occupancy.samples);
        self.stats.faults = self.faults.take().map(|f| f.tally);
        self.stats.timing = self.clock.timing();
        if let Some(c) = &self.clients {
            self.stats.provider_saturated_ns = c.saturated.total;
            self.stats.provider_saturated_ns_by_class =
                c.saturated_by_class.iter().map(|s| s.total).collect();
        }
        (self.jobs, self.stats)
    }
}
