//! `fifo`: jobs in arrival order across all tenants; with a cap, the earliest
//! job whose tenant runs fewer than `cap` jobs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Back, JobId, Limits, Rejected, Scheduler, TenantId, Tenants};

/// A min-heap of ready tenants keyed by their oldest waiting job. Job ids grow
/// with arrival, so the heap's top is the earliest job any tenant below its cap
/// may start: O(log ready tenants) per operation, never a scan of the queue.
/// Without a cap this is plain arrival order.
#[derive(Debug)]
pub struct Fifo {
    tenants: Tenants,
    ready: BinaryHeap<Reverse<(JobId, TenantId)>>,
}

impl Fifo {
    pub fn new(tenants: usize, limits: Limits) -> Fifo {
        Fifo {
            tenants: Tenants::new(tenants, limits),
            ready: BinaryHeap::new(),
        }
    }
}

impl Fifo {
    /// Let tenants at their cap borrow idle workers, oldest job first.
    pub fn lend(&mut self) {
        self.tenants.lend();
    }

    /// A running job handed back ([`super::AnyScheduler::requeue`]).
    pub fn requeue(&mut self, tenant: TenantId, job: JobId) {
        let back = self.tenants.requeue(tenant, job);
        // In line by its next job: this one, or an older one handed back.
        let head = self.tenants.head(tenant);
        match back {
            Back::New | Back::Ready => self.ready.push(Reverse((head, tenant))),
            // Its entry may name a later job: replaced, by a scan of the
            // ready tenants (a hand-back is rare; take stays as it was).
            Back::Head => {
                self.ready.retain(|&Reverse((_, t))| t != tenant);
                self.ready.push(Reverse((head, tenant)));
            }
            Back::Capped => {}
        }
    }
}

impl Scheduler for Fifo {
    #[inline]
    fn push(&mut self, tenant: TenantId, job: JobId) -> Result<(), Rejected> {
        if self.tenants.admit(tenant, job)? {
            self.ready.push(Reverse((job, tenant)));
        }
        Ok(())
    }

    #[inline]
    fn take(&mut self) -> Option<(TenantId, JobId)> {
        let Reverse((_, tenant)) = self.ready.pop()?;
        let (job, still_ready) = self.tenants.start_next(tenant);
        if still_ready {
            self.ready
                .push(Reverse((self.tenants.head(tenant), tenant)));
        }
        Some((tenant, job))
    }

    #[inline]
    fn finished(&mut self, tenant: TenantId) {
        if self.tenants.finish(tenant) {
            self.ready
                .push(Reverse((self.tenants.head(tenant), tenant)));
        }
    }

    fn queued(&self) -> usize {
        self.tenants.queued()
    }

    fn take_over_cap(&mut self) -> Option<(TenantId, JobId)> {
        self.tenants.take_over()
    }
}
