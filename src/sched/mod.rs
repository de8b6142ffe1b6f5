//! Queue disciplines: one file per discipline behind one [`Scheduler`] trait.
//!
//! A scheduler owns the waiting jobs and each tenant's in-flight count, so it
//! can enforce a per-tenant `cap` (most jobs running at once) and `limit` (most
//! jobs waiting) without the engine's help, and, with lending on, start a job
//! of a tenant at its cap when the engine says enough workers are idle
//! ([`Scheduler::take_over_cap`]). Every operation is O(1) (`fair`) or
//! O(log tenants) (`fifo`, `vtc`, lending), never a scan over tenants or
//! queued jobs; the scans live in [`naive`], as the baselines the tests and
//! benchmarks compare with.

mod fair;
mod fifo;
pub mod naive;
mod vtc;

use std::collections::{BTreeSet, VecDeque};

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
    /// With lending on: the oldest waiting job of a tenant at its cap,
    /// started over the cap (the engine asks only while more than the
    /// strategy's `reserve` workers are idle). Without lending: none.
    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        None
    }
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
    /// With lending on: the tenants at their cap with work waiting, by
    /// their oldest waiting job.
    capped: Option<BTreeSet<(JobId, TenantId)>>,
}

impl Tenants {
    pub(crate) fn new(tenants: usize, limits: Limits) -> Tenants {
        Tenants {
            tenants: (0..tenants).map(|_| Tenant::default()).collect(),
            limits,
            queued: 0,
            capped: None,
        }
    }

    /// Keep the tenants at their cap in order, for [`Tenants::take_over`].
    pub(crate) fn lend(&mut self) {
        self.capped = Some(BTreeSet::new());
    }

    /// The tenant [`Tenants::take_over`] would serve next.
    pub(crate) fn oldest_capped(&self) -> Option<TenantId> {
        self.capped.as_ref()?.first().map(|&(_, t)| t)
    }

    /// Start the oldest waiting job of a tenant at its cap, over the cap.
    pub(crate) fn take_over(&mut self) -> Option<(TenantId, JobId)> {
        let capped = self.capped.as_mut()?;
        let (job, tenant) = capped.pop_first()?;
        let t = &mut self.tenants[tenant as usize];
        t.queue.pop_front();
        t.running += 1;
        self.queued -= 1;
        if let Some(&head) = t.queue.front() {
            capped.insert((head, tenant));
        }
        Some((tenant, job))
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
        if let Some(capped) = &mut self.capped
            && waiting == 0
            && t.running >= self.limits.cap
        {
            capped.insert((job, tenant));
        }
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
        if let Some(capped) = &mut self.capped
            && t.running >= self.limits.cap
            && let Some(&head) = t.queue.front()
        {
            capped.insert((head, tenant));
        }
        (job, !t.queue.is_empty() && t.running < self.limits.cap)
    }

    /// Count one job of the tenant finished; `true` when this made it ready.
    #[inline]
    pub(crate) fn finish(&mut self, tenant: TenantId) -> bool {
        let t = &mut self.tenants[tenant as usize];
        let was_capped = t.running == self.limits.cap;
        t.running -= 1;
        let ready = was_capped && !t.queue.is_empty();
        if ready && let Some(capped) = &mut self.capped {
            capped.remove(&(t.queue[0], tenant));
        }
        ready
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
        let mut s = match strategy.queue {
            Queue::Fifo => AnyScheduler::Fifo(Fifo::new(tenants, limits)),
            Queue::Fair => AnyScheduler::Fair(Fair::new(tenants, limits)),
            Queue::Vtc => AnyScheduler::Vtc(Vtc::new(tenants, limits, weights, cost())),
        };
        if strategy.reserve.is_some() {
            s.lend();
        }
        s
    }

    /// Let tenants at their cap borrow idle workers ([`Scheduler::take_over_cap`]).
    pub fn lend(&mut self) {
        match self {
            AnyScheduler::Fifo(s) => s.lend(),
            AnyScheduler::Fair(s) => s.lend(),
            AnyScheduler::Vtc(s) => s.lend(),
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

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        match self {
            AnyScheduler::Fifo(s) => s.take_over_cap(),
            AnyScheduler::Fair(s) => s.take_over_cap(),
            AnyScheduler::Vtc(s) => s.take_over_cap(),
        }
    }
}
