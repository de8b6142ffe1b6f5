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
    /// Job `job`, about to be pushed, costs `cost` (for `vtc`) and was sent
    /// with API key `key` (for key turns). Where jobs are known before the
    /// run the scheduler is built with both instead; a run whose retries
    /// interleave with its plan tells it job by job.
    fn note(&mut self, _job: JobId, _cost: f64, _key: u32) {}
    /// A running job of `tenant` goes back to be started again (its
    /// worker's lease ran out): see [`AnyScheduler`]'s. Only the three
    /// disciplines have it, not the reference scans.
    fn requeue(&mut self, _tenant: TenantId, _job: JobId) {
        unimplemented!(
            "this scheduler cannot take a running job back (a run with faults needs fifo, fair or vtc)"
        )
    }
}

/// A handed-back job into a queue by its number: ahead of every job that
/// never started (all numbered after it), behind the older ones handed
/// back before it. The scan stops at the first of those: it covers the
/// handed-back jobs only.
fn put_back(queue: &mut VecDeque<JobId>, job: JobId) {
    let at = queue.iter().position(|&j| j > job).unwrap_or(queue.len());
    queue.insert(at, job);
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
    /// The waiting jobs in arrival order (empty with key turns, where
    /// [`KeyTurns`] holds them).
    queue: VecDeque<JobId>,
    running: u32,
}

/// Two-level fairness (`fair_by = "tenant"`): a tenant's waiting jobs queued
/// per API key, and the tenant's keys with work served in rotation, one job a
/// turn; a key that gets work after having none joins the back of its
/// tenant's rotation. The discipline picks the tenant; this picks its key.
#[derive(Debug, Default)]
struct KeyTurns {
    /// Each job's API key, by job id.
    key_of: Vec<u32>,
    /// Each key's waiting jobs, by key.
    queues: Vec<VecDeque<JobId>>,
    /// Each tenant's keys with work, the next to serve first.
    turns: Vec<VecDeque<u32>>,
    /// Each tenant's waiting jobs, all keys together.
    waiting: Vec<u32>,
}

impl KeyTurns {
    fn push(&mut self, tenant: TenantId, job: JobId) {
        let key = self.key_of[job as usize] as usize;
        if key >= self.queues.len() {
            self.queues.resize_with(key + 1, VecDeque::new);
        }
        if self.queues[key].is_empty() {
            self.turns[tenant as usize].push_back(key as u32);
        }
        self.queues[key].push_back(job);
        self.waiting[tenant as usize] += 1;
    }

    fn front(&self, tenant: TenantId) -> Option<JobId> {
        let key = *self.turns[tenant as usize].front()?;
        self.queues[key as usize].front().copied()
    }

    /// `job` back among its key's jobs by its number (`put_back`), its
    /// key first of the tenant's turns if it had no work.
    fn hand_back(&mut self, tenant: TenantId, job: JobId) {
        let key = self.key_of[job as usize] as usize;
        if self.queues[key].is_empty() {
            self.turns[tenant as usize].push_front(key as u32);
        }
        put_back(&mut self.queues[key], job);
        self.waiting[tenant as usize] += 1;
    }

    fn pop(&mut self, tenant: TenantId) -> Option<JobId> {
        let turns = &mut self.turns[tenant as usize];
        let key = turns.pop_front()?;
        let queue = &mut self.queues[key as usize];
        let job = queue.pop_front();
        if !queue.is_empty() {
            turns.push_back(key);
        }
        self.waiting[tenant as usize] -= 1;
        job
    }
}

/// Where a job handed back ([`Tenants::requeue`]) leaves its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Back {
    /// It had nothing else waiting and is below its cap: a newcomer.
    New,
    /// It was at its cap with work waiting and is below it now.
    Ready,
    /// It was ready already; the job handed back is its next now.
    Head,
    /// It is at (or, lent, over) its cap.
    Capped,
}

/// Per-tenant queues and in-flight counts, the state both disciplines share.
#[derive(Debug)]
pub(crate) struct Tenants {
    tenants: Vec<Tenant>,
    limits: Limits,
    queued: usize,
    /// With lending on: the tenants at their cap with work waiting, by
    /// their next waiting job.
    capped: Option<BTreeSet<(JobId, TenantId)>>,
    /// With two-level fairness: the jobs by key, the keys in rotation.
    keys: Option<Box<KeyTurns>>,
}

impl Tenants {
    pub(crate) fn new(tenants: usize, limits: Limits) -> Tenants {
        Tenants {
            tenants: (0..tenants).map(|_| Tenant::default()).collect(),
            limits,
            queued: 0,
            capped: None,
            keys: None,
        }
    }

    /// Keep the tenants at their cap in order, for [`Tenants::take_over`].
    pub(crate) fn lend(&mut self) {
        self.capped = Some(BTreeSet::new());
    }

    /// Serve each tenant's API keys in rotation; `key_of` gives each job's
    /// key by job id.
    pub(crate) fn turn_keys(&mut self, key_of: Vec<u32>) {
        let tenants = self.tenants.len();
        self.keys = Some(Box::new(KeyTurns {
            key_of,
            queues: Vec::new(),
            turns: (0..tenants).map(|_| VecDeque::new()).collect(),
            waiting: vec![0; tenants],
        }));
    }

    /// With key turns: job `job` was sent with API key `key`.
    pub(crate) fn note_key(&mut self, job: JobId, key: u32) {
        if let Some(k) = &mut self.keys {
            set_grown(&mut k.key_of, job, key);
        }
    }

    /// The tenant's next job: its oldest, or with key turns the oldest of
    /// the key whose turn it is.
    #[inline]
    fn front(&self, tenant: TenantId) -> Option<JobId> {
        match &self.keys {
            None => self.tenants[tenant as usize].queue.front().copied(),
            Some(k) => k.front(tenant),
        }
    }

    #[inline]
    fn pop(&mut self, tenant: TenantId) -> JobId {
        let job = match &mut self.keys {
            None => self.tenants[tenant as usize].queue.pop_front(),
            Some(k) => k.pop(tenant),
        };
        self.queued -= 1;
        job.expect("a tenant served has a job waiting")
    }

    /// The tenant at its cap [`Tenants::take_over`] would serve next.
    pub(crate) fn oldest_capped(&self) -> Option<TenantId> {
        self.capped.as_ref()?.first().map(|&(_, t)| t)
    }

    /// Start the next waiting job of a tenant at its cap, over the cap
    /// (the tenant whose next job is oldest first).
    pub(crate) fn take_over(&mut self) -> Option<(TenantId, JobId)> {
        let (_, tenant) = self.capped.as_mut()?.pop_first()?;
        let job = self.pop(tenant);
        self.tenants[tenant as usize].running += 1;
        if let Some(head) = self.front(tenant)
            && let Some(capped) = &mut self.capped
        {
            capped.insert((head, tenant));
        }
        Some((tenant, job))
    }

    /// Append a job; `Ok(true)` when this made the tenant ready to be served.
    #[inline]
    pub(crate) fn admit(&mut self, tenant: TenantId, job: JobId) -> Result<bool, Rejected> {
        let waiting = self.waiting(tenant) as u32;
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        match &mut self.keys {
            None => self.tenants[tenant as usize].queue.push_back(job),
            Some(k) => k.push(tenant, job),
        }
        self.queued += 1;
        let running = self.tenants[tenant as usize].running;
        if let Some(capped) = &mut self.capped
            && waiting == 0
            && running >= self.limits.cap
        {
            capped.insert((job, tenant));
        }
        Ok(waiting == 0 && running < self.limits.cap)
    }

    /// Pop the tenant's next job and count it running; also says whether
    /// the tenant is still ready (work left and below its cap).
    #[inline]
    pub(crate) fn start_next(&mut self, tenant: TenantId) -> (JobId, bool) {
        let job = self.pop(tenant);
        let running = {
            let t = &mut self.tenants[tenant as usize];
            t.running += 1;
            t.running
        };
        let head = self.front(tenant);
        if let Some(capped) = &mut self.capped
            && running >= self.limits.cap
            && let Some(head) = head
        {
            capped.insert((head, tenant));
        }
        (job, head.is_some() && running < self.limits.cap)
    }

    /// Count one job of the tenant finished; `true` when this made it ready.
    #[inline]
    pub(crate) fn finish(&mut self, tenant: TenantId) -> bool {
        let t = &mut self.tenants[tenant as usize];
        let was_capped = t.running == self.limits.cap;
        t.running -= 1;
        let head = if was_capped { self.front(tenant) } else { None };
        if let Some(head) = head
            && let Some(capped) = &mut self.capped
        {
            capped.remove(&(head, tenant));
        }
        head.is_some()
    }

    /// A running job back among the tenant's waiting jobs by its number
    /// (see [`AnyScheduler::requeue`]), the tenants at their cap kept in
    /// order; says where that leaves the tenant.
    pub(crate) fn requeue(&mut self, tenant: TenantId, job: JobId) -> Back {
        let old = self.front(tenant);
        match &mut self.keys {
            None => put_back(&mut self.tenants[tenant as usize].queue, job),
            Some(k) => k.hand_back(tenant, job),
        }
        self.queued += 1;
        let t = &mut self.tenants[tenant as usize];
        t.running -= 1;
        let (running, cap) = (t.running, self.limits.cap);
        if let (Some(capped), Some(old)) = (&mut self.capped, old) {
            capped.remove(&(old, tenant));
        }
        if running >= cap {
            // By its next job: this one (with key turns, its key's turn may
            // come later).
            let head = self.head(tenant);
            if let Some(capped) = &mut self.capped {
                capped.insert((head, tenant));
            }
            return Back::Capped;
        }
        match old {
            None => Back::New,
            Some(_) if running + 1 == cap => Back::Ready,
            Some(_) => Back::Head,
        }
    }

    /// Jobs the tenant has waiting.
    #[inline]
    pub(crate) fn waiting(&self, tenant: TenantId) -> usize {
        match &self.keys {
            None => self.tenants[tenant as usize].queue.len(),
            Some(k) => k.waiting[tenant as usize] as usize,
        }
    }

    /// The tenant's next job (it must have one waiting).
    #[inline]
    pub(crate) fn head(&self, tenant: TenantId) -> JobId {
        self.front(tenant)
            .expect("a ready tenant has a job waiting")
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

    /// Two-level fairness: within a tenant, its API keys in rotation
    /// (`key_of`: each job's key by job id). `fifo` keeps arrival order,
    /// which knows no turns, so it ignores this.
    pub fn turn_keys(&mut self, key_of: Vec<u32>) {
        match self {
            AnyScheduler::Fifo(_) => {}
            AnyScheduler::Fair(s) => s.turn_keys(key_of),
            AnyScheduler::Vtc(s) => s.turn_keys(key_of),
        }
    }
}

impl Scheduler for AnyScheduler {
    /// A running job of `tenant` goes back to be started again (its
    /// worker's lease ran out on a queue server): among its tenant's
    /// waiting jobs by its number, so ahead of every one that never started
    /// (`put_back`), no longer running, so its cap slot is free. `fifo`
    /// serves it by its own arrival; `fair` in its tenant's turn,
    /// the tenant a newcomer if it had nothing else waiting (back in the
    /// ring if it was at its cap); `vtc` refunds the start's charge. The
    /// queue servers' functions keep the same rule, and the tests hold them
    /// to it. (The scans in [`naive`] have no such step.)
    fn requeue(&mut self, tenant: TenantId, job: JobId) {
        match self {
            AnyScheduler::Fifo(s) => s.requeue(tenant, job),
            AnyScheduler::Fair(s) => s.requeue(tenant, job),
            AnyScheduler::Vtc(s) => s.requeue(tenant, job),
        }
    }

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

    fn note(&mut self, job: JobId, cost: f64, key: u32) {
        match self {
            AnyScheduler::Fifo(_) => {}
            AnyScheduler::Fair(s) => s.note(job, cost, key),
            AnyScheduler::Vtc(s) => s.note(job, cost, key),
        }
    }
}

/// `table[i] = value`, growing the table (with defaults) to reach `i`.
pub(crate) fn set_grown<T: Default + Clone>(table: &mut Vec<T>, i: JobId, value: T) {
    let i = i as usize;
    if i >= table.len() {
        table.resize(i + 1, T::default());
    }
    table[i] = value;
}
