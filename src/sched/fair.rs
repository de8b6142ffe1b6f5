//! `fair`: one queue per tenant, tenants served in rotation, one job a turn.

use std::collections::VecDeque;

use super::{Back, JobId, Limits, Rejected, Scheduler, TenantId, Tenants};

/// Round robin over the tenants that are ready (work waiting, below cap), in
/// two rings as FQ-CoDel keeps its flows (RFC 8290, section 4.1):
///
/// - `fresh`: tenants that just got work after having none. They are served
///   first, in the order they arrived, one job each.
/// - `ring`: tenants that were served and still have work, or came back from
///   their cap. Each turn sends the tenant to the back.
///
/// So a tenant with one job waits for the next free worker, not for a turn
/// behind a tenant with 2,000 queued: the post's "the next turn goes to a
/// tenant with fewer jobs queued". Push, take and finish are O(1) however
/// many tenants there are. (Fresh tenants alone can hold the pool only if
/// they alone keep every worker busy.)
#[derive(Debug)]
pub struct Fair {
    tenants: Tenants,
    fresh: VecDeque<TenantId>,
    ring: VecDeque<TenantId>,
}

impl Fair {
    pub fn new(tenants: usize, limits: Limits) -> Fair {
        Fair {
            tenants: Tenants::new(tenants, limits),
            fresh: VecDeque::new(),
            ring: VecDeque::new(),
        }
    }
}

impl Fair {
    /// Let tenants at their cap borrow idle workers, oldest job first.
    pub fn lend(&mut self) {
        self.tenants.lend();
    }

    /// A running job handed back ([`super::AnyScheduler::requeue`]).
    pub fn requeue(&mut self, tenant: TenantId, job: JobId) {
        match self.tenants.requeue(tenant, job) {
            Back::New => self.fresh.push_back(tenant),
            Back::Ready => self.ring.push_back(tenant),
            Back::Head | Back::Capped => {}
        }
    }

    /// Two-level: within a tenant's turn, its API keys in rotation;
    /// `key_of` gives each job's key by job id.
    pub fn turn_keys(&mut self, key_of: Vec<u32>) {
        self.tenants.turn_keys(key_of);
    }
}

impl Scheduler for Fair {
    #[inline]
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        if self.tenants.admit(tenant, job)? {
            self.fresh.push_back(tenant);
        }
        Ok(())
    }

    #[inline]
    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let tenant = match self.fresh.pop_front() {
            Some(t) => t,
            None => self.ring.pop_front()?,
        };
        let (job, still_ready) = self.tenants.start_next(tenant);
        if still_ready {
            self.ring.push_back(tenant);
        }
        Some((tenant, job))
    }

    #[inline]
    fn finished(&mut self, tenant: TenantId) {
        if self.tenants.finish(tenant) {
            self.ring.push_back(tenant);
        }
    }

    fn queued(&self) -> usize {
        self.tenants.queued()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        self.tenants.take_over()
    }

    fn note(&mut self, job: JobId, _cost: f64, key: u32) {
        self.tenants.note_key(job, key);
    }
}
