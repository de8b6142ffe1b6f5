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

/// `fair` by scanning every tenant for the ready one whose turn comes first.
/// A tenant's turn is stamped when it becomes ready and again after each job
/// it is served; a tenant that got work after having none goes before every
/// tenant already served. That is the order of [`super::Fair`]'s two rings.
/// O(tenants) per take.
#[derive(Debug)]
pub struct NaiveFair {
    queue: Vec<VecDeque<JobId>>,
    running: Vec<u32>,
    /// (0 for a fresh tenant, 1 for one already served, stamp).
    turn: Vec<(u8, u64)>,
    next_turn: u64,
    limits: Limits,
}

impl NaiveFair {
    pub fn new(tenants: usize, limits: Limits) -> NaiveFair {
        NaiveFair {
            queue: vec![VecDeque::new(); tenants],
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
            s.queue[t].push_back((tenants + t) as JobId);
            s.running[t] = 1;
            s.stamp(t, true);
        }
        s
    }

    fn ready(&self, t: usize) -> bool {
        !self.queue[t].is_empty() && self.running[t] < self.limits.cap
    }

    fn stamp(&mut self, t: usize, served: bool) {
        self.turn[t] = (u8::from(served), self.next_turn);
        self.next_turn += 1;
    }
}

impl Scheduler for NaiveFair {
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        let t = tenant as usize;
        let waiting = self.queue[t].len() as u32;
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        let was_empty = self.queue[t].is_empty();
        self.queue[t].push_back(job);
        if was_empty && self.ready(t) {
            self.stamp(t, false);
        }
        Ok(())
    }

    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let t = (0..self.queue.len())
            .filter(|&t| self.ready(t))
            .min_by_key(|&t| self.turn[t])?;
        let job = self.queue[t].pop_front()?;
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
        self.queue.iter().map(VecDeque::len).sum()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        let t = oldest_capped(&self.queue, &self.running, self.limits.cap)?;
        let job = self.queue[t].pop_front()?;
        self.running[t] += 1;
        Some((t as TenantId, job))
    }
}

/// The tenant at its cap whose oldest waiting job is oldest.
fn oldest_capped(queue: &[VecDeque<JobId>], running: &[u32], cap: u32) -> Option<usize> {
    (0..queue.len())
        .filter(|&t| running[t] >= cap && !queue[t].is_empty())
        .min_by_key(|&t| queue[t][0])
}

/// `vtc` by scanning every tenant for the ready one with the lowest counter
/// (ties to the lower id), and every tenant again for the lift's floor.
#[derive(Debug)]
pub struct NaiveVtc {
    queue: Vec<VecDeque<JobId>>,
    running: Vec<u32>,
    counter: Vec<f64>,
    weight: Vec<f64>,
    cost: Vec<f64>,
    limits: Limits,
}

impl NaiveVtc {
    pub fn new(tenants: usize, limits: Limits, weight: Vec<f64>, cost: Vec<f64>) -> NaiveVtc {
        NaiveVtc {
            queue: (0..tenants).map(|_| VecDeque::new()).collect(),
            running: vec![0; tenants],
            counter: vec![0.0; tenants],
            weight,
            cost,
            limits,
        }
    }
}

impl NaiveVtc {
    /// Every tenant with one job running (counter 1) and one waiting, as the
    /// benchmark's loading leaves them, built directly (loading by pushes and
    /// takes would cost tenants² scans).
    pub fn one_running_one_waiting(tenants: usize, limits: Limits, cost: Vec<f64>) -> NaiveVtc {
        let mut s = NaiveVtc::new(tenants, limits, vec![1.0; tenants], cost);
        for t in 0..tenants {
            s.queue[t].push_back((tenants + t) as JobId);
            s.running[t] = 1;
            s.counter[t] = 1.0;
        }
        s
    }
}

impl Scheduler for NaiveVtc {
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        let t = tenant as usize;
        let waiting = self.queue[t].len() as u32;
        if waiting >= self.limits.limit {
            return Err(Rejected { waiting });
        }
        if waiting == 0 {
            let floor = (0..self.queue.len())
                .filter(|&o| o != t && !self.queue[o].is_empty())
                .map(|o| self.counter[o])
                .fold(f64::INFINITY, f64::min);
            if floor.is_finite() {
                self.counter[t] = self.counter[t].max(floor);
            }
        }
        self.queue[t].push_back(job);
        Ok(())
    }

    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let t = (0..self.queue.len())
            .filter(|&t| !self.queue[t].is_empty() && self.running[t] < self.limits.cap)
            .min_by(|&a, &b| self.counter[a].total_cmp(&self.counter[b]).then(a.cmp(&b)))?;
        let job = self.queue[t].pop_front()?;
        self.running[t] += 1;
        self.counter[t] += self.cost[job as usize] / self.weight[t];
        Some((t as TenantId, job))
    }

    fn finished(&mut self, tenant: TenantId) {
        self.running[tenant as usize] -= 1;
    }

    fn queued(&self) -> usize {
        self.queue.iter().map(VecDeque::len).sum()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        let t = oldest_capped(&self.queue, &self.running, self.limits.cap)?;
        let job = self.queue[t].pop_front()?;
        self.running[t] += 1;
        self.counter[t] += self.cost[job as usize] / self.weight[t];
        Some((t as TenantId, job))
    }
}
