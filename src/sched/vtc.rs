//! `vtc`: the Virtual Token Counter (Sheng et al., "Fairness in Serving Large
//! Language Models", OSDI 2024), on whole jobs.
//!
//! Each tenant has a counter of the service it has received, in cost units
//! divided by its weight. A free worker takes the oldest job of the ready
//! tenant (work waiting, below its cap) with the lowest counter; the counter
//! grows by the job's cost ÷ the tenant's weight when the job starts. When a
//! tenant with nothing waiting gets a job, its counter is lifted to the
//! lowest counter among the other tenants with work waiting, so an idle
//! tenant banks no credit, and when nobody has work waiting, to the counter
//! of the tenant whose start left the backlog empty. The artifact's
//! `vtc_req_queue.py` lifts only when others wait; then a tenant that
//! arrives into an empty backlog keeps a counter far below a heavy tenant
//! that returns later, and two backlogged counters drift apart by far more
//! than one job's cost. With the second rule, and no cap, any two
//! backlogged counters stay within the largest job cost ÷ weight of each
//! other (a property test checks it at every start). Equal counters go to
//! the lower tenant id, as the VTC artifact's `min` over its dict of tenants
//! goes to the first to have appeared. (An oldest-job tie-break was tried and measured worse: a lifted
//! newcomer ties with the backlogged tenant and loses to its older head job,
//! p50 33 ms against 13 ms on the article lab.) Push, take and finish are
//! O(log tenants): two ordered sets keyed by counter.

use std::collections::BTreeSet;

use super::{Back, JobId, Limits, Rejected, Scheduler, TenantId, Tenants};

/// A tenant's place: its counter ([`place`]), then its id.
type Key = (u64, TenantId);

/// A counter as a `u64` that orders as the numbers do. A refund can leave a
/// counter a rounding error below zero (charged 3.9397… ÷ 3 and 1 ÷ 3, both
/// refunded: -5.55e-17); the servers order it below zero as a number, so
/// here too (the sign bit flipped for the non-negative, every bit for the
/// negative; `+ 0.0` makes -0 equal to 0, as it is on the servers).
fn place(x: f64) -> u64 {
    let bits = (x + 0.0).to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

#[derive(Debug)]
pub struct Vtc {
    tenants: Tenants,
    counter: Vec<f64>,
    weight: Vec<f64>,
    /// Each job's cost, by job id.
    cost: Vec<f64>,
    /// Tenants with work waiting and below their cap.
    ready: BTreeSet<Key>,
    /// Tenants with work waiting (ready or at their cap): the lift's floor.
    backlogged: BTreeSet<Key>,
    /// The counter of the tenant whose start last left nobody backlogged:
    /// the lift's floor while nobody is.
    last_left: f64,
}

impl Vtc {
    /// `weight` per tenant, `cost` per job id (both positive).
    pub fn new(tenants: usize, limits: Limits, weight: Vec<f64>, cost: Vec<f64>) -> Vtc {
        assert_eq!(weight.len(), tenants, "a weight per tenant");
        Vtc {
            tenants: Tenants::new(tenants, limits),
            counter: vec![0.0; tenants],
            weight,
            cost,
            ready: BTreeSet::new(),
            backlogged: BTreeSet::new(),
            last_left: 0.0,
        }
    }

    /// Let tenants at their cap borrow idle workers, oldest job first.
    pub fn lend(&mut self) {
        self.tenants.lend();
    }

    /// A running job handed back ([`super::AnyScheduler::requeue`]).
    pub fn requeue(&mut self, tenant: TenantId, job: JobId) {
        // The start's charge refunded, the tenant's places re-keyed.
        let (was_ready, was_back) = (
            self.ready.remove(&self.key(tenant)),
            self.backlogged.remove(&self.key(tenant)),
        );
        let t = tenant as usize;
        self.counter[t] -= self.cost[job as usize] / self.weight[t];
        if was_ready {
            self.ready.insert(self.key(tenant));
        }
        if was_back {
            self.backlogged.insert(self.key(tenant));
        }
        let had_work = self.tenants.waiting(tenant) > 0;
        let back = self.tenants.requeue(tenant, job);
        // Back with work, unlifted: the counter it was chosen at stands,
        // so it is chosen again first, as it was.
        if !had_work {
            self.backlogged.insert(self.key(tenant));
        }
        if matches!(back, Back::New | Back::Ready) {
            self.ready.insert(self.key(tenant));
        }
    }

    /// Two-level: the tenant with the lowest counter, then its API keys in
    /// rotation; `key_of` gives each job's key by job id.
    pub fn turn_keys(&mut self, key_of: Vec<u32>) {
        self.tenants.turn_keys(key_of);
    }

    /// After `tenant` was served: back into the backlog if it has work
    /// left, or, the last to leave it, the level the next newcomer is
    /// lifted to.
    fn served(&mut self, tenant: TenantId, job: JobId) {
        let t = tenant as usize;
        self.counter[t] += self.cost[job as usize] / self.weight[t];
        if self.tenants.waiting(tenant) > 0 {
            self.backlogged.insert(self.key(tenant));
        } else if self.backlogged.is_empty() {
            self.last_left = self.counter[t];
        }
    }

    /// The tenant's counter: its service so far ÷ its weight, lifts included.
    pub fn counter(&self, tenant: TenantId) -> f64 {
        self.counter[tenant as usize]
    }

    /// A tenant with nothing waiting got a job: its counter lifted to the
    /// lowest among the tenants with work, or with none to the last one's
    /// to leave; it joins the tenants with work.
    fn lift(&mut self, tenant: TenantId) {
        let floor = match self.backlogged.first() {
            Some(&(_, low)) => self.counter[low as usize],
            None => self.last_left,
        };
        let t = tenant as usize;
        self.counter[t] = self.counter[t].max(floor);
        self.backlogged.insert(self.key(tenant));
    }

    fn key(&self, tenant: TenantId) -> Key {
        (place(self.counter[tenant as usize]), tenant)
    }
}

impl Scheduler for Vtc {
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        let was_idle = self.tenants.waiting(tenant) == 0;
        let now_ready = self.tenants.admit(tenant, job)?;
        if was_idle {
            self.lift(tenant);
        }
        if now_ready {
            self.ready.insert(self.key(tenant));
        }
        Ok(())
    }

    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let (_, tenant) = self.ready.pop_first()?;
        self.backlogged.remove(&self.key(tenant));
        let (job, still_ready) = self.tenants.start_next(tenant);
        self.served(tenant, job);
        if still_ready {
            self.ready.insert(self.key(tenant));
        }
        Some((tenant, job))
    }

    fn finished(&mut self, tenant: TenantId) {
        if self.tenants.finish(tenant) {
            self.ready.insert(self.key(tenant));
        }
    }

    fn queued(&self) -> usize {
        self.tenants.queued()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        let capped_tenant = self.tenants.oldest_capped()?;
        self.backlogged.remove(&self.key(capped_tenant));
        let (tenant, job) = self.tenants.take_over()?;
        self.served(tenant, job);
        Some((tenant, job))
    }

    fn note(&mut self, job: JobId, cost: f64, key: u32) {
        super::set_grown(&mut self.cost, job, cost);
        self.tenants.note_key(job, key);
    }
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn places_order_as_the_counters() {
        let counters = [
            -1.5,
            -5.551115123125783e-17,
            -0.0,
            0.0,
            f64::from_bits(1),
            1.0 / 3.0,
            1.0,
            1e300,
        ];
        for pair in counters.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert_eq!(
                place(a).cmp(&place(b)),
                a.partial_cmp(&b).unwrap(),
                "{a} and {b}"
            );
        }
        assert_eq!(place(-0.0), place(0.0), "-0 is 0");
    }
}
