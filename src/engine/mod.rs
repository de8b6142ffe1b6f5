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

pub mod clock;
pub mod faults;
pub mod lateness;
pub mod limiter;
pub mod load;
pub mod traffic;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};

use hdrhistogram::Histogram;

use crate::stats;

pub use clock::{Clock, RealClock, Timer, VirtualClock};

use crate::sched::{JobId, Scheduler, TenantId};
use traffic::{Refusal, Traffic, TrafficPlan};

/// Lab time in nanoseconds since the run's t = 0.
pub type Nanos = u64;
/// Marks an instant that never came (a rejected job never starts).
pub const NEVER: Nanos = Nanos::MAX;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fate {
    /// Not yet (or, at the end of an interrupted run, never) resolved.
    #[default]
    Pending,
    /// It ran and its client read the answer.
    Ran,
    /// Its client stopped waiting (`on_timeout = "waste"`): it ran anyway,
    /// or will, and nobody reads it.
    Wasted,
    /// Its client stopped waiting (`on_timeout = "cancel"`, at `finished`):
    /// dropped when its turn came, without a worker.
    Cancelled,
    /// Refused: by the queue's limit, the tenant's rate limit or budget, or
    /// the provider.
    Refused(Refusal),
}

/// One job's life: planned (by the load plan, with its size), enqueued (when
/// the engine actually submitted it), started and finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRecord {
    pub planned: Nanos,
    pub enqueued: Nanos,
    pub started: Nanos,
    pub finished: Nanos,
    /// How long the job holds its worker.
    pub duration: Nanos,
    pub tenant: TenantId,
    /// The API key the tenant sent it with, numbered across all tenants
    /// (a tenant's first key is numbered as it would be without keys when
    /// no tenant splits itself).
    pub key: u32,
    pub tokens_in: u32,
    pub tokens_out: u32,
    /// The job this attempt sends: its first attempt's id (its own for a
    /// first attempt, which is the job's index in the arrival plan).
    pub origin: JobId,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u16,
    pub fate: Fate,
}

impl JobRecord {
    pub fn planned(tenant: TenantId, at: Nanos, duration: Nanos) -> JobRecord {
        JobRecord {
            planned: at,
            enqueued: NEVER,
            started: NEVER,
            finished: NEVER,
            duration,
            tenant,
            key: tenant,
            tokens_in: 0,
            tokens_out: 0,
            origin: 0,
            attempt: 1,
            fate: Fate::Pending,
        }
    }

    /// The next attempt of the same job, sent at `at`.
    pub fn retry(&self, at: Nanos) -> JobRecord {
        JobRecord {
            planned: at,
            enqueued: NEVER,
            started: NEVER,
            finished: NEVER,
            attempt: self.attempt.saturating_add(1),
            fate: Fate::Pending,
            ..*self
        }
    }

    /// The identity the scheduler queues the job under.
    #[inline]
    pub fn queue(&self, by_key: bool) -> TenantId {
        if by_key { self.key } else { self.tenant }
    }

    pub fn with_key(mut self, key: u32) -> JobRecord {
        self.key = key;
        self
    }

    pub fn with_tokens(mut self, tokens_in: u32, tokens_out: u32) -> JobRecord {
        self.tokens_in = tokens_in;
        self.tokens_out = tokens_out;
        self
    }
}

/// The pool a run uses.
#[derive(Debug, Clone)]
pub struct Pool {
    pub workers: u32,
    /// Each tenant's mean job duration, for the retry-after hint.
    pub mean_job_ns: Vec<Nanos>,
    /// Tenants `0..normal_tenants` are normal; the rest burst.
    pub normal_tenants: u32,
    /// Most jobs one tenant may run at once (for the retry-after hint).
    pub cap: Option<u32>,
    /// Occupancy is sampled on this grid of lab time.
    pub sample_ns: Nanos,
    /// End of the normal tenants' traffic window.
    pub traffic_ns: Nanos,
    /// Added to every job's hold on the virtual clock: a real machine's
    /// measured overshoot, so the model predicts what that machine measures
    /// (0 for the model itself). The real clock ignores it.
    pub model_overshoot_ns: Nanos,
    /// With lending: a tenant at its cap may start a job while more than
    /// this many workers are idle.
    pub reserve: Option<u32>,
    /// The scheduler sees API keys (`true`) rather than tenants: its caps,
    /// limits and turns are per key.
    pub by_key: bool,
    /// Rate limits, budgets, the provider's limits and retrying clients;
    /// `None` where the scenario has none (every job sent once).
    pub traffic: Option<std::sync::Arc<TrafficPlan>>,
    /// Faults on the pool's worker processes and the server, simulated
    /// ([`faults`]); `None` where the scenario has none.
    pub faults: Option<std::sync::Arc<faults::FaultPlan>>,
}

impl Pool {
    /// The retry-after a queue limit's refusal carries, in whole seconds:
    /// how long the tenant's `waiting` jobs take to drain at its share of
    /// the pool (its cap, or every worker).
    pub fn retry_after_s(&self, tenant: TenantId, waiting: u32) -> u64 {
        let parallel = self.cap.unwrap_or(u32::MAX).min(self.workers);
        let job_ns = self.mean_job_ns[tenant as usize];
        let ns = u128::from(waiting) * u128::from(job_ns) / u128::from(parallel.max(1));
        ns.div_ceil(1_000_000_000) as u64
    }
}

/// Busy workers by tenant class and jobs waiting, at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    pub busy_normal: u32,
    pub busy_burst: u32,
    pub queued: u32,
}

/// What a run leaves behind besides the job records.
#[derive(Debug)]
pub struct RunStats {
    /// Enqueue-to-start wait (ns) of jobs that found a worker idle: the
    /// harness's own dispatch cost.
    pub dispatch_floor: Histogram<u64>,
    /// Lab time during which the provider had told some caller to wait,
    /// and some caller of each class (by class index).
    pub provider_saturated_ns: Nanos,
    pub provider_saturated_ns_by_class: Vec<Nanos>,
    /// Worker time spent on calls the provider refused (`reject_ms` each).
    pub reject_hold_ns: u128,
    /// Largest retry-after hint handed out with a rejection, in seconds.
    pub retry_after_s_max: u64,
    /// Lab time during which at least one job waited.
    pub waiting_ns: Nanos,
    /// Sum over that time of idle workers × duration (worker-nanoseconds).
    pub idle_worker_ns_while_waiting: u128,
    /// The same two, counted only inside the normal traffic window.
    pub waiting_ns_in_traffic: Nanos,
    pub idle_worker_ns_while_waiting_in_traffic: u128,
    /// Occupancy at `sample_ns` intervals from t = 0.
    pub samples: Vec<Sample>,
    /// When the last job finished (or the last arrival, if later).
    pub end: Nanos,
    /// What simulated faults did (`None`: the run had none, or ran on a
    /// server, whose records say it).
    pub faults: Option<faults::FaultTally>,
}

/// The run was stopped from outside (Ctrl-C) before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("run interrupted")]
pub struct Interrupted;

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
        clients: pool.traffic.as_deref().map(|p| Clients {
            traffic: Traffic::new(p, seed),
            tickets: Vec::new(),
            retries: BinaryHeap::new(),
            timeouts: BinaryHeap::new(),
            delay: Vec::new(),
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
        },
        faults,
    };
    engine.run(stop).await?;
    Ok(engine.finish())
}

/// A run's limits and clients, with the events they add: retries waiting to
/// be sent, and clients waiting to give up.
struct Clients<'a> {
    traffic: Traffic<'a>,
    /// The scheduler's job ids (in push order) to attempts' ids.
    tickets: Vec<JobId>,
    /// Retries by the instant they are sent.
    retries: BinaryHeap<Reverse<(Nanos, JobId)>>,
    /// Queued attempts by the instant their client stops waiting.
    timeouts: BinaryHeap<Reverse<(Nanos, JobId)>>,
    /// The delay that led to each attempt (0 for a first attempt), by id.
    delay: Vec<Nanos>,
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
    clients: Option<Clients<'a>>,
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
        while let Some(&Reverse((_, id))) = c.timeouts.peek() {
            let job = &self.jobs[id as usize];
            if job.started == NEVER && job.fate == Fate::Pending {
                break;
            }
            c.timeouts.pop();
        }
    }

    fn next_event(&mut self) -> Option<(Nanos, Event)> {
        self.prune_timeouts();
        let peek = |h: &BinaryHeap<Reverse<(Nanos, JobId)>>| h.peek().map(|Reverse((at, _))| *at);
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
            consider(server(peek(&c.timeouts)), Event::Timeout);
            consider(server(peek(&c.retries)), Event::Retry);
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
                c.traffic.finished(now, tenant, out);
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
        let Reverse((_, id)) = c.retries.pop().expect("a retry is due");
        self.submit(now, id);
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
                c.traffic.sent_first(job.tenant);
            }
            let tokens = f64::from(job.tokens_in) + f64::from(job.tokens_out);
            if let Err((layer, wait)) = c.traffic.admit(now, job.tenant, tokens) {
                self.refuse(now, id, layer, wait);
                return;
            }
            let strategy = &c.traffic.plan().strategy;
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
                    .and_then(|c| c.traffic.plan().limit_retry_after_ns);
                let hint = fixed.unwrap_or_else(|| {
                    self.pool.retry_after_s(job.tenant, rejected.waiting) * 1_000_000_000
                });
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
        if let Some(t) = c.traffic.client(job.tenant).timeout_ns
            && job.started == NEVER
        {
            c.timeouts
                .push(Reverse((job.enqueued.saturating_add(t), id)));
        }
    }

    /// A client's timeout is due: if its job has not started, it stops
    /// waiting (the job is dropped at its turn, or runs unread) and may
    /// send it again.
    fn time_out(&mut self, now: Nanos) {
        let c = self.clients.as_mut().expect("timeouts come with clients");
        let Reverse((_, id)) = c.timeouts.pop().expect("a timeout is due");
        let job = &mut self.jobs[id as usize];
        if job.started != NEVER || job.fate != Fate::Pending {
            return;
        }
        if c.traffic.client(job.tenant).waste {
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
            let class = c.traffic.class_of(self.jobs[id as usize].tenant);
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
        let job = &self.jobs[id as usize];
        let prev = c.delay.get(id as usize).copied().unwrap_or(0);
        let Some(delay) = c
            .traffic
            .retry_delay(job.tenant, u32::from(job.attempt), hint, prev)
        else {
            return;
        };
        let at = now.saturating_add(delay);
        let retry = job.retry(at);
        let new = self.jobs.len() as JobId;
        assert!(new < JobId::MAX, "too many attempts for a JobId");
        self.jobs.push(retry);
        if c.delay.len() <= new as usize {
            c.delay.resize(new as usize + 1, 0);
        }
        c.delay[new as usize] = delay;
        c.retries.push(Reverse((at, new)));
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
                    c.traffic
                        .start(started, job.tenant, job.tokens_in, job.tokens_out)
            {
                let reject_ns = c.traffic.plan().reject_ns;
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
        if let Some(c) = &self.clients {
            self.stats.provider_saturated_ns = c.saturated.total;
            self.stats.provider_saturated_ns_by_class =
                c.saturated_by_class.iter().map(|s| s.total).collect();
        }
        (self.jobs, self.stats)
    }
}

/// A run's [`RunStats`] from its records alone, for a run whose events the
/// engine did not see (a queue on a server): occupancy samples and idle
/// capacity while work waits, exactly as [`run`] integrates them, and the
/// dispatch floor over the jobs that `found_idle` marks (their submit found
/// a worker idle). Every attempt counts (a retry is a new job); one its
/// client cancelled leaves the queue when its client left, since the
/// records keep no later instant (the engine counts it waiting until its
/// turn came and it was dropped: the one difference, and only in how long
/// work waited). `end` is when the run ended (at least its last event).
/// The records keep no retry-after: `retry_after_s_max` is 0.
pub fn stats_from_records(
    pool: &Pool,
    jobs: &[JobRecord],
    found_idle: &[bool],
    end: Nanos,
) -> RunStats {
    // (instant, queued delta, busy normal delta, busy burst delta)
    let mut events: Vec<(Nanos, i32, i32, i32)> = Vec::with_capacity(3 * jobs.len());
    let mut floor = stats::new_histogram();
    for (j, &idle) in jobs.iter().zip(found_idle) {
        if j.enqueued == NEVER {
            continue;
        }
        if let Fate::Refused(Refusal::Limit) = j.fate {
            continue; // refused at the door: never queued
        }
        events.push((j.enqueued, 1, 0, 0));
        if j.fate == Fate::Cancelled {
            events.push((j.finished, -1, 0, 0));
        } else if j.started != NEVER {
            let burst = j.tenant >= pool.normal_tenants;
            let (n, b) = if burst { (0, 1) } else { (1, 0) };
            events.push((j.started, -1, n, b));
            if j.finished != NEVER {
                events.push((j.finished, 0, -n, -b));
            }
            if idle {
                stats::record(&mut floor, j.started - j.enqueued);
            }
        }
    }
    events.sort_unstable_by_key(|e| e.0);
    let mut occupancy = Occupancy::new(pool.sample_ns, pool.traffic_ns);
    let (mut busy_normal, mut busy_burst, mut queued) = (0i64, 0i64, 0i64);
    let mut k = 0;
    while k < events.len() {
        let at = events[k].0;
        let idle = i64::from(pool.workers) - busy_normal - busy_burst;
        occupancy.advance(at, idle.max(0) as u32);
        while k < events.len() && events[k].0 == at {
            queued += i64::from(events[k].1);
            busy_normal += i64::from(events[k].2);
            busy_burst += i64::from(events[k].3);
            k += 1;
        }
        occupancy.busy_normal = busy_normal.max(0) as u32;
        occupancy.busy_burst = busy_burst.max(0) as u32;
        occupancy.queued = queued.max(0) as u32;
    }
    let idle = i64::from(pool.workers) - busy_normal - busy_burst;
    occupancy.advance(end, idle.max(0) as u32);
    RunStats {
        dispatch_floor: floor,
        provider_saturated_ns: 0,
        provider_saturated_ns_by_class: Vec::new(),
        reject_hold_ns: 0,
        retry_after_s_max: 0, // the records keep no hint: the caller's to set
        waiting_ns: occupancy.waiting_ns,
        idle_worker_ns_while_waiting: occupancy.idle_worker_ns,
        waiting_ns_in_traffic: occupancy.waiting_ns_in_traffic,
        idle_worker_ns_while_waiting_in_traffic: occupancy.idle_worker_ns_in_traffic,
        samples: occupancy.samples,
        end,
        faults: None,
    }
}

/// Tracks busy workers and queued jobs through a run: exact integrals of idle
/// capacity while work waits, and samples on a fixed grid for the plots.
#[derive(Debug)]
struct Occupancy {
    step: Nanos,
    next_sample: Nanos,
    last: Nanos,
    busy_normal: u32,
    busy_burst: u32,
    queued: u32,
    traffic_end: Nanos,
    waiting_ns: Nanos,
    idle_worker_ns: u128,
    waiting_ns_in_traffic: Nanos,
    idle_worker_ns_in_traffic: u128,
    samples: Vec<Sample>,
}

impl Occupancy {
    fn new(step: Nanos, traffic_end: Nanos) -> Occupancy {
        Occupancy {
            traffic_end,
            waiting_ns_in_traffic: 0,
            idle_worker_ns_in_traffic: 0,
            step: step.max(1),
            next_sample: 0,
            last: 0,
            busy_normal: 0,
            busy_burst: 0,
            queued: 0,
            waiting_ns: 0,
            idle_worker_ns: 0,
            samples: Vec::new(),
        }
    }

    /// Account for the time from the last event to `now`, in the state that held.
    #[inline]
    fn advance(&mut self, now: Nanos, idle: u32) {
        while self.next_sample <= now {
            self.sample_now();
            self.next_sample += self.step;
        }
        if self.queued > 0 {
            let dt = now.saturating_sub(self.last);
            self.waiting_ns += dt;
            self.idle_worker_ns += u128::from(idle) * u128::from(dt);
            let in_traffic = now.min(self.traffic_end).saturating_sub(self.last);
            self.waiting_ns_in_traffic += in_traffic;
            self.idle_worker_ns_in_traffic += u128::from(idle) * u128::from(in_traffic);
        }
        self.last = self.last.max(now);
    }

    fn sample_now(&mut self) {
        self.samples.push(Sample {
            busy_normal: self.busy_normal,
            busy_burst: self.busy_burst,
            queued: self.queued,
        });
    }

    #[inline]
    fn started(&mut self, burst: bool) {
        self.queued -= 1;
        if burst {
            self.busy_burst += 1;
        } else {
            self.busy_normal += 1;
        }
    }

    /// A queued job left without a worker (its client had gone).
    fn dropped(&mut self) {
        self.queued -= 1;
    }

    #[inline]
    fn finished(&mut self, burst: bool) {
        if burst {
            self.busy_burst -= 1;
        } else {
            self.busy_normal -= 1;
        }
    }
}
