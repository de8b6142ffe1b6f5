//! Queue disciplines: one file per discipline behind one [`Scheduler`] trait.
//!
//! A scheduler owns the waiting jobs and each tenant's in-flight count, so it
//! can enforce a per-tenant `cap` (most jobs running at once) and `limit` (most
//! jobs waiting) without the engine's help. Every operation is O(1) (`fair`) or
//! O(log tenants) (`fifo`), never a scan over tenants or queued jobs; the scans
//! live in [`naive`], as the baselines the tests and benchmarks compare with.

mod fair;
mod fifo;
pub mod naive;
mod vtc;

use std::collections::VecDeque;

pub use fair::Fair;
pub use fifo::Fifo;
pub use vtc::Vtc;

use crate::scenario::{Queue, Strategy};

/// A tenant's index: normal tenants first, then bursting tenants.
pub type TenantId = u32;
/// A job's index in its run's arrival plan; lower ids arrived earlier.
pub type JobId = u32;

/// A push refused because the tenant already had `limit` jobs waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    pub waiting: u32,
}

/// The contract every discipline keeps: no job lost or duplicated, a tenant's
/// own jobs taken in the order they were pushed, no tenant above its cap.
pub trait Scheduler {
    /// Queue `job` of `tenant`, or refuse it when the tenant's queue is full.
    /// Job ids must be pushed in increasing order.
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected>;
    /// The next job to start, if any tenant below its cap has one waiting.
    /// The job counts as running for its tenant until [`Scheduler::finished`].
    fn take(&mut self) -> Option<(TenantId, JobId)>;
    /// A running job of `tenant` has finished.
    fn finished(&mut self, tenant: TenantId);
    /// Jobs waiting, all tenants together.
    fn queued(&self) -> usize;
}

/// Limits shared by every discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most jobs one tenant may run at once (`u32::MAX`: no cap).
    pub cap: u32,
    /// Most jobs one tenant may have waiting (`u32::MAX`: no limit).
    pub limit: u32,
}

impl Limits {
    pub fn of(strategy: &Strategy) -> Limits {
        Limits {
            cap: strategy.cap.unwrap_or(u32::MAX),
            limit: strategy.limit.unwrap_or(u32::MAX),
        }
    }
}

/// One tenant's waiting jobs and running count, kept side by side so a
/// scheduling step touches one cache line of tenant state, not two.
#[derive(Debug, Default)]
struct Tenant {
    queue: VecDeque<JobId>,
    running: u32,
}

/// Per-tenant queues and in-flight counts, the state both disciplines share.
#[derive(Debug)]
pub(crate) struct Tenants {
    tenants: Vec<Tenant>,
    limits: Limits,
    queued: usize,
}

impl Tenants {
    pub(crate) fn new(tenants: usize, limits: Limits) -> Tenants {
        Tenants {
            tenants: (0..tenants).map(|_| Tenant::default()).collect(),
            limits,
            queued: 0,
        }
    }

    /// Append a job; `Ok(true)` when this made the tenant ready to be served.
    #[inline]
    pub(crate) fn admit(&mut self, tenant: TenantId, job: JobId) -> Result<bool, Rejected> {
        let t = &mut self.tenants[tenant as usize];
        let waiting = t.queue.len() as u32;
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        t.queue.push_back(job);
        self.queued += 1;
        Ok(waiting == 0 && t.running < self.limits.cap)
    }

    /// Pop the tenant's oldest job and count it running; also says whether
    /// the tenant is still ready (work left and below its cap).
    #[inline]
    pub(crate) fn start_next(&mut self, tenant: TenantId) -> (JobId, bool) {
        let t = &mut self.tenants[tenant as usize];
        let job = t
            .queue
            .pop_front()
            .expect("a ready tenant has a job waiting");
        self.queued -= 1;
        t.running += 1;
        (job, !t.queue.is_empty() && t.running < self.limits.cap)
    }

    /// Count one job of the tenant finished; `true` when this made it ready.
    #[inline]
    pub(crate) fn finish(&mut self, tenant: TenantId) -> bool {
        let t = &mut self.tenants[tenant as usize];
        let was_capped = t.running == self.limits.cap;
        t.running -= 1;
        was_capped && !t.queue.is_empty()
    }

    /// Jobs the tenant has waiting.
    #[inline]
    pub(crate) fn waiting(&self, tenant: TenantId) -> usize {
        self.tenants[tenant as usize].queue.len()
    }

    #[inline]
    pub(crate) fn head(&self, tenant: TenantId) -> JobId {
        self.tenants[tenant as usize].queue[0]
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued
    }
}

/// The scheduler a strategy asks for, chosen once per run.
pub enum AnyScheduler {
    Fifo(Fifo),
    Fair(Fair),
    Vtc(Vtc),
}

impl AnyScheduler {
    /// The strategy's scheduler for `weights.len()` tenants; `cost` gives
    /// each job's cost by id (used by `vtc` only).
    pub fn new(
        strategy: &Strategy,
        weights: Vec<f64>,
        cost: impl FnOnce() -> Vec<f64>,
    ) -> AnyScheduler {
        let limits = Limits::of(strategy);
        let tenants = weights.len();
        match strategy.queue {
            Queue::Fifo => AnyScheduler::Fifo(Fifo::new(tenants, limits)),
            Queue::Fair => AnyScheduler::Fair(Fair::new(tenants, limits)),
            Queue::Vtc => AnyScheduler::Vtc(Vtc::new(tenants, limits, weights, cost())),
        }
    }
}

impl Scheduler for AnyScheduler {
    #[inline]
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        match self {
            AnyScheduler::Fifo(s) => s.push(tenant, job),
            AnyScheduler::Fair(s) => s.push(tenant, job),
            AnyScheduler::Vtc(s) => s.push(tenant, job),
        }
    }

    #[inline]
    fn take(&mut self) -> Option<(TenantId, JobId)> {
        match self {
            AnyScheduler::Fifo(s) => s.take(),
            AnyScheduler::Fair(s) => s.take(),
            AnyScheduler::Vtc(s) => s.take(),
        }
    }

    #[inline]
    fn finished(&mut self, tenant: TenantId) {
        match self {
            AnyScheduler::Fifo(s) => s.finished(tenant),
            AnyScheduler::Fair(s) => s.finished(tenant),
            AnyScheduler::Vtc(s) => s.finished(tenant),
        }
    }

    fn queued(&self) -> usize {
        match self {
            AnyScheduler::Fifo(s) => s.queued(),
            AnyScheduler::Fair(s) => s.queued(),
            AnyScheduler::Vtc(s) => s.queued(),
        }
    }
}
