//! A run's data: each attempt's record (its instants, size and fate), the
//! pool it ran on, and what the run leaves besides the records.

use hdrhistogram::Histogram;

use super::faults;
use super::traffic::{Refusal, TrafficPlan};
use crate::sched::{JobId, TenantId};

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
    /// On the virtual clock: each wake and each event takes a time drawn
    /// from a machine's measured ones (`None`: the model itself, every
    /// event at its instant). The real clock ignores it.
    pub jitter: Option<super::jitter::Jitter>,
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

    /// What a queue limit's refusal tells the client to wait, nanoseconds:
    /// the strategy's `fixed` retry-after, else the tenant's drain time.
    pub fn limit_hint_ns(&self, tenant: TenantId, waiting: u32, fixed: Option<Nanos>) -> Nanos {
        fixed.unwrap_or_else(|| self.retry_after_s(tenant, waiting) * 1_000_000_000)
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
    /// The loop's own wakes and events, as its clock measured them (empty
    /// on the plain virtual clock and on a server).
    pub timing: super::jitter::ClockTiming,
}

/// The run was stopped from outside (Ctrl-C) before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("run interrupted")]
pub struct Interrupted;
