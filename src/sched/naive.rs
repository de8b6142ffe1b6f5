//! Baselines that scan, as a 25-line queue would: the definition the fast
//! disciplines must match job for job, and the yardstick of `make bench`.

use std::collections::VecDeque;

use super::{JobId, Limits, Rejected, Scheduler, TenantId};

/// `fifo` by scanning every queued job for the earliest whose tenant is below
/// its cap. O(queued jobs) per take.
#[derive(Debug)]
pub struct NaiveFifo {
    waiting: VecDeque<(JobId, TenantId)>,
    queued_by_tenant: Vec<u32>,
    running: Vec<u32>,
    limits: Limits,
}

impl NaiveFifo {
    pub fn new(tenants: usize, limits: Limits) -> NaiveFifo {
        NaiveFifo {
            waiting: VecDeque::new(),
            queued_by_tenant: vec![0; tenants],
            running: vec![0; tenants],
            limits,
        }
    }
}

impl Scheduler for NaiveFifo {
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        let waiting = self.queued_by_tenant[tenant as usize];
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        self.queued_by_tenant[tenant as usize] += 1;
        self.waiting.push_back((job, tenant));
        Ok(())
    }

    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let i = self
            .waiting
            .iter()
            .position(|&(_, t)| self.running[t as usize] < self.limits.cap)?;
        let (job, tenant) = self.waiting.remove(i)?;
        self.queued_by_tenant[tenant as usize] -= 1;
        self.running[tenant as usize] += 1;
        Some((tenant, job))
    }

    fn finished(&mut self, tenant: TenantId) {
        self.running[tenant as usize] -= 1;
    }

    fn queued(&self) -> usize {
        self.waiting.len()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        let i = self
            .waiting
            .iter()
            .position(|&(_, t)| self.running[t as usize] >= self.limits.cap)?;
        let (job, tenant) = self.waiting.remove(i)?;
        self.queued_by_tenant[tenant as usize] -= 1;
        self.running[tenant as usize] += 1;
        Some((tenant, job))
    }
}

/// Each tenant's waiting jobs, for the scans: one queue per tenant, or with
/// key turns one queue per API key, a tenant's next job coming from its key
/// with work whose turn was stamped first (stamped when the key gets work
/// after having none, and again after each job it gives).
#[derive(Debug, Clone)]
pub struct NaiveQueues {
    /// By tenant, or by key with key turns.
    queue: Vec<VecDeque<JobId>>,
    /// With key turns: each key's tenant, each job's key, each key's turn.
    keys: Option<(Vec<TenantId>, Vec<u32>, Vec<u64>)>,
    next_turn: u64,
    tenants: usize,
}

impl NaiveQueues {
    pub fn new(tenants: usize) -> NaiveQueues {
        NaiveQueues {
            queue: vec![VecDeque::new(); tenants],
            keys: None,
            next_turn: 0,
            tenants,
        }
    }

    /// Queue by key: `owner` gives each key's tenant, `key_of` each job's key.
    pub fn by_key(tenants: usize, owner: Vec<TenantId>, key_of: Vec<u32>) -> NaiveQueues {
        NaiveQueues {
            queue: vec![VecDeque::new(); owner.len()],
            keys: Some((owner.clone(), key_of, vec![0; owner.len()])),
            next_turn: 0,
            tenants,
        }
    }

    /// The queue the tenant's next job comes from.
    fn next_queue(&self, tenant: TenantId) -> Option<usize> {
        match &self.keys {
            None => (!self.queue[tenant as usize].is_empty()).then_some(tenant as usize),
            Some((owner, _, turn)) => (0..self.queue.len())
                .filter(|&k| owner[k] == tenant && !self.queue[k].is_empty())
                .min_by_key(|&k| turn[k]),
        }
    }

    fn len(&self, tenant: TenantId) -> usize {
        match &self.keys {
            None => self.queue[tenant as usize].len(),
            Some((owner, _, _)) => (0..self.queue.len())
                .filter(|&k| owner[k] == tenant)
                .map(|k| self.queue[k].len())
                .sum(),
        }
    }

    fn is_empty(&self, tenant: TenantId) -> bool {
        self.len(tenant) == 0
    }

    fn front(&self, tenant: TenantId) -> Option<JobId> {
        self.queue[self.next_queue(tenant)?].front().copied()
    }

    fn push(&mut self, tenant: TenantId, job: JobId) {
        let q = match &mut self.keys {
            None => tenant as usize,
            Some((_, key_of, turn)) => {
                let k = key_of[job as usize] as usize;
                if self.queue[k].is_empty() {
                    turn[k] = self.next_turn;
                    self.next_turn += 1;
                }
                k
            }
        };
        self.queue[q].push_back(job);
    }

    fn pop(&mut self, tenant: TenantId) -> Option<JobId> {
        let q = self.next_queue(tenant)?;
        if let Some((_, _, turn)) = &mut self.keys {
            turn[q] = self.next_turn;
            self.next_turn += 1;
        }
        self.queue[q].pop_front()
    }

    fn total(&self) -> usize {
        self.queue.iter().map(VecDeque::len).sum()
    }

    fn tenants(&self) -> usize {
        self.tenants
    }
}

/// `fair` by scanning every tenant for the ready one whose turn comes first.
/// A tenant's turn is stamped when it becomes ready and again after each job
/// it is served; a tenant that got work after having none goes before every
/// tenant already served. That is the order of [`super::Fair`]'s two rings.
/// O(tenants) per take.
#[derive(Debug)]
pub struct NaiveFair {
    queue: NaiveQueues,
    running: Vec<u32>,
    /// (0 for a fresh tenant, 1 for one already served, stamp).
    turn: Vec<(u8, u64)>,
    next_turn: u64,
    limits: Limits,
}

impl NaiveFair {
    pub fn new(tenants: usize, limits: Limits) -> NaiveFair {
        NaiveFair::with_queues(NaiveQueues::new(tenants), limits)
    }

    /// The same over given queues (for key turns, [`NaiveQueues::by_key`]).
    pub fn with_queues(queue: NaiveQueues, limits: Limits) -> NaiveFair {
        let tenants = queue.tenants();
        NaiveFair {
            queue,
            running: vec![0; tenants],
            turn: vec![(0, 0); tenants],
            next_turn: 0,
            limits,
        }
    }

    /// The state the benchmarks start from, built without `tenants` scans:
    /// every tenant has one job running and job `tenants + t` waiting, as
    /// after pushing jobs `0..2 × tenants` round robin and taking the first
    /// `tenants`.
    pub fn one_running_one_waiting(tenants: usize, limits: Limits) -> NaiveFair {
        let mut s = NaiveFair::new(tenants, limits);
        for t in 0..tenants {
            s.queue.push(t as TenantId, (tenants + t) as JobId);
            s.running[t] = 1;
            s.stamp(t, true);
        }
        s
    }

    fn ready(&self, t: usize) -> bool {
        !self.queue.is_empty(t as TenantId) && self.running[t] < self.limits.cap
    }

    fn stamp(&mut self, t: usize, served: bool) {
        self.turn[t] = (u8::from(served), self.next_turn);
        self.next_turn += 1;
    }
}

impl Scheduler for NaiveFair {
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        let t = tenant as usize;
        let waiting = self.queue.len(tenant) as u32;
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        self.queue.push(tenant, job);
        if waiting == 0 && self.ready(t) {
            self.stamp(t, false);
        }
        Ok(())
    }

    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let t = (0..self.running.len())
            .filter(|&t| self.ready(t))
            .min_by_key(|&t| self.turn[t])?;
        let job = self.queue.pop(t as TenantId)?;
        self.running[t] += 1;
        if self.ready(t) {
            self.stamp(t, true);
        }
        Some((t as TenantId, job))
    }

    fn finished(&mut self, tenant: TenantId) {
        let t = tenant as usize;
        let was_ready = self.ready(t);
        self.running[t] -= 1;
        if !was_ready && self.ready(t) {
            self.stamp(t, true);
        }
    }

    fn queued(&self) -> usize {
        self.queue.total()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        let t = oldest_capped(&self.queue, &self.running, self.limits.cap)?;
        let job = self.queue.pop(t as TenantId)?;
        self.running[t] += 1;
        Some((t as TenantId, job))
    }
}

/// The tenant at its cap whose next waiting job is oldest.
fn oldest_capped(queue: &NaiveQueues, running: &[u32], cap: u32) -> Option<usize> {
    (0..running.len())
        .filter(|&t| running[t] >= cap)
        .filter_map(|t| Some((queue.front(t as TenantId)?, t)))
        .min()
        .map(|(_, t)| t)
}

/// `vtc` by scanning every tenant for the ready one with the lowest counter
/// (ties to the lower id), and every tenant again for the lift's floor (the
/// counter of the last tenant to leave the backlog when nobody else waits).
#[derive(Debug)]
pub struct NaiveVtc {
    queue: NaiveQueues,
    running: Vec<u32>,
    counter: Vec<f64>,
    weight: Vec<f64>,
    cost: Vec<f64>,
    last_left: f64,
    limits: Limits,
}

impl NaiveVtc {
    pub fn new(tenants: usize, limits: Limits, weight: Vec<f64>, cost: Vec<f64>) -> NaiveVtc {
        NaiveVtc::with_queues(NaiveQueues::new(tenants), limits, weight, cost)
    }

    /// The same over given queues (for key turns, [`NaiveQueues::by_key`]).
    pub fn with_queues(
        queue: NaiveQueues,
        limits: Limits,
        weight: Vec<f64>,
        cost: Vec<f64>,
    ) -> NaiveVtc {
        let tenants = queue.tenants();
        NaiveVtc {
            queue,
            running: vec![0; tenants],
            counter: vec![0.0; tenants],
            weight,
            cost,
            last_left: 0.0,
            limits,
        }
    }

    /// Every tenant with one job running (counter 1) and one waiting, as the
    /// benchmark's loading leaves them, built directly (loading by pushes and
    /// takes would cost tenants² scans).
    pub fn one_running_one_waiting(tenants: usize, limits: Limits, cost: Vec<f64>) -> NaiveVtc {
        let mut s = NaiveVtc::new(tenants, limits, vec![1.0; tenants], cost);
        for t in 0..tenants {
            s.queue.push(t as TenantId, (tenants + t) as JobId);
            s.running[t] = 1;
            s.counter[t] = 1.0;
        }
        s
    }

    /// Count the job against its tenant; the last to leave the backlog sets
    /// the floor for the next newcomer.
    fn serve(&mut self, t: usize, job: JobId) {
        self.running[t] += 1;
        self.counter[t] += self.cost[job as usize] / self.weight[t];
        if self.queue.total() == 0 {
            self.last_left = self.counter[t];
        }
    }
}

impl Scheduler for NaiveVtc {
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        let t = tenant as usize;
        let waiting = self.queue.len(tenant) as u32;
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        if waiting == 0 {
            let floor = (0..self.running.len())
                .filter(|&o| o != t && !self.queue.is_empty(o as TenantId))
                .map(|o| self.counter[o])
                .fold(f64::INFINITY, f64::min);
            let floor = if floor.is_finite() {
                floor
            } else {
                self.last_left
            };
            self.counter[t] = self.counter[t].max(floor);
        }
        self.queue.push(tenant, job);
        Ok(())
    }

    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let t = (0..self.running.len())
            .filter(|&t| !self.queue.is_empty(t as TenantId) && self.running[t] < self.limits.cap)
            .min_by(|&a, &b| self.counter[a].total_cmp(&self.counter[b]).then(a.cmp(&b)))?;
        let job = self.queue.pop(t as TenantId)?;
        self.serve(t, job);
        Some((t as TenantId, job))
    }

    fn finished(&mut self, tenant: TenantId) {
        self.running[tenant as usize] -= 1;
    }

    fn queued(&self) -> usize {
        self.queue.total()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        let t = oldest_capped(&self.queue, &self.running, self.limits.cap)?;
        let job = self.queue.pop(t as TenantId)?;
        self.serve(t, job);
        Some((t as TenantId, job))
    }
}
