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
pub mod load;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};

use hdrhistogram::Histogram;

use crate::stats;

pub use clock::{Clock, RealClock, Timer, VirtualClock};

use crate::sched::{JobId, Scheduler, TenantId};

/// Lab time in nanoseconds since the run's t = 0.
pub type Nanos = u64;
/// Marks an instant that never came (a rejected job never starts).
pub const NEVER: Nanos = Nanos::MAX;

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
    pub rejected: u64,
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
}

/// The run was stopped from outside (Ctrl-C) before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("run interrupted")]
pub struct Interrupted;

/// Run one lab: submit every planned job at its instant, start jobs as
/// workers free up, and fill in each record. `plan` must be sorted by
/// planned instant; a job's id is its index in it.
pub async fn run<C: Clock, S: Scheduler>(
    clock: &mut C,
    pool: &Pool,
    sched: &mut S,
    plan: Vec<JobRecord>,
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
    let mut engine = Engine {
        clock,
        pool,
        sched,
        jobs: plan,
        running: BinaryHeap::with_capacity(pool.workers as usize),
        idle: pool.workers,
        next: 0,
        occupancy: Occupancy::new(pool.sample_ns, pool.traffic_ns),
        stats: RunStats {
            dispatch_floor: stats::new_histogram(),
            rejected: 0,
            retry_after_s_max: 0,
            waiting_ns: 0,
            idle_worker_ns_while_waiting: 0,
            waiting_ns_in_traffic: 0,
            idle_worker_ns_while_waiting_in_traffic: 0,
            samples: Vec::new(),
            end: 0,
        },
    };
    engine.run(stop).await?;
    Ok(engine.finish())
}

struct Engine<'a, C, S> {
    clock: &'a mut C,
    pool: &'a Pool,
    sched: &'a mut S,
    jobs: Vec<JobRecord>,
    /// Running jobs by completion instant (ties by job id, for determinism).
    running: BinaryHeap<Reverse<(Nanos, JobId)>>,
    idle: u32,
    /// Index of the next planned arrival.
    next: usize,
    occupancy: Occupancy,
    stats: RunStats,
}

impl<C: Clock, S: Scheduler> Engine<'_, C, S> {
    async fn run(&mut self, stop: &AtomicBool) -> Result<(), Interrupted> {
        while let Some(wake) = min_some(self.next_completion(), self.next_arrival()) {
            self.clock.sleep_until(wake).await;
            if stop.load(Ordering::Relaxed) {
                return Err(Interrupted);
            }
            // Everything due by now, earliest first; a completion before an
            // arrival at the same instant, so the freed worker is there for it.
            loop {
                let now = self.clock.now();
                let done = self.next_completion().filter(|&d| d <= now);
                let arrival = self.next_arrival().filter(|&a| a <= now);
                match (done, arrival) {
                    (Some(d), a) if a.is_none_or(|a| d <= a) => self.complete(now),
                    (_, Some(_)) => self.arrive(now),
                    _ => break,
                }
            }
        }
        Ok(())
    }

    fn next_completion(&self) -> Option<Nanos> {
        self.running.peek().map(|Reverse((due, _))| *due)
    }

    fn next_arrival(&self) -> Option<Nanos> {
        self.jobs.get(self.next).map(|j| j.planned)
    }

    fn is_burst(&self, tenant: TenantId) -> bool {
        tenant >= self.pool.normal_tenants
    }

    fn complete(&mut self, now: Nanos) {
        let Reverse((_, id)) = self.running.pop().expect("a completion is due");
        self.occupancy.advance(now, self.idle);
        let job = &mut self.jobs[id as usize];
        job.finished = now;
        let (tenant, queue) = (job.tenant, job.queue(self.pool.by_key));
        self.occupancy.finished(self.is_burst(tenant));
        self.sched.finished(queue);
        self.idle += 1;
        self.dispatch();
    }

    fn arrive(&mut self, now: Nanos) {
        let id = self.next;
        self.next += 1;
        self.occupancy.advance(now, self.idle);
        let job = &mut self.jobs[id];
        // Read the clock again: the wait starts here, at the push.
        job.enqueued = self.clock.now();
        let (tenant, queue) = (job.tenant, job.queue(self.pool.by_key));
        match self.sched.push(queue, id as JobId) {
            Ok(()) => {
                self.occupancy.queued += 1;
                self.dispatch();
                let job = &self.jobs[id];
                if job.started != NEVER {
                    let floor = job.started - job.enqueued;
                    stats::record(&mut self.stats.dispatch_floor, floor);
                }
            }
            Err(rejected) => {
                self.stats.rejected += 1;
                let hint = self.retry_after_s(tenant, rejected.waiting);
                self.stats.retry_after_s_max = self.stats.retry_after_s_max.max(hint);
            }
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
            let Some((_, id)) = next else {
                break;
            };
            let started = self.clock.now();
            let job = &mut self.jobs[id as usize];
            job.started = started;
            let (tenant, hold) = (
                job.tenant,
                job.duration + self.clock.model_overshoot(self.pool),
            );
            self.running
                .push(Reverse((started.saturating_add(hold), id)));
            self.idle -= 1;
            self.occupancy.started(self.is_burst(tenant));
        }
    }

    /// Seconds until a tenant with `waiting` jobs queued has drained them at
    /// its best rate (its cap, or the whole pool) and its mean job duration,
    /// rounded up as HTTP's Retry-After wants.
    fn retry_after_s(&self, tenant: TenantId, waiting: u32) -> u64 {
        let parallel = self.pool.cap.unwrap_or(u32::MAX).min(self.pool.workers);
        let job_ns = self.pool.mean_job_ns[tenant as usize];
        let ns = u128::from(waiting) * u128::from(job_ns) / u128::from(parallel.max(1));
        ns.div_ceil(1_000_000_000) as u64
    }

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
        (self.jobs, self.stats)
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

    #[inline]
    fn finished(&mut self, burst: bool) {
        if burst {
            self.busy_burst -= 1;
        } else {
            self.busy_normal -= 1;
        }
    }
}

fn min_some(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
