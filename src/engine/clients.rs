//! A run's clients, written once: the retries they will send and the
//! instants they stop waiting, by the scenario's client policy
//! ([`Traffic::retry_delay`]: backoff, seeded jitter, retry budget,
//! retry-after). The event loop plays them against its own schedulers; the
//! coordinator of a lab on a queue server plays them against the server.
//! Both ask the same questions in the same order, so a seed gives the
//! same retries on either.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::traffic::Traffic;
use super::{JobRecord, Nanos};
use crate::sched::TenantId;

/// Attempts by an instant, earliest first; on a tie, the earliest made.
type Due = BinaryHeap<Reverse<(Nanos, usize)>>;

/// The clients of one run: every attempt is an index into the run's
/// records (the plan's, then every retry in the order made).
pub struct Clients<'a> {
    /// The run's front door and client policy.
    pub traffic: Traffic<'a>,
    /// Retries by the instant they are sent.
    retries: Due,
    /// Queued attempts by the instant their client stops waiting.
    timeouts: Due,
    /// The delay that led to each attempt (0 for a first attempt).
    delay: Vec<Nanos>,
}

impl<'a> Clients<'a> {
    pub fn new(traffic: Traffic<'a>) -> Clients<'a> {
        Clients {
            traffic,
            retries: BinaryHeap::new(),
            timeouts: BinaryHeap::new(),
            delay: Vec::new(),
        }
    }

    /// Attempt `i` of `tenant` was queued at `at`: its client, if it has a
    /// timeout, stops waiting that long after.
    pub fn watch(&mut self, tenant: TenantId, i: usize, at: Nanos) {
        if let Some(patience) = self.traffic.client(tenant).timeout_ns {
            self.timeouts
                .push(Reverse((at.saturating_add(patience), i)));
        }
    }

    /// The client of attempt `i` (refused at `now`, told to wait `hint`, or
    /// tired of waiting) sends its job again later, as a new attempt pushed
    /// onto `jobs`, or gives up: the new attempt's index, if any.
    pub fn follow_up(
        &mut self,
        jobs: &mut Vec<JobRecord>,
        i: usize,
        now: Nanos,
        hint: Option<Nanos>,
    ) -> Option<usize> {
        let job = jobs[i];
        let prev = self.delay.get(i).copied().unwrap_or(0);
        let delay = self
            .traffic
            .retry_delay(job.tenant, u32::from(job.attempt), hint, prev)?;
        let at = now.saturating_add(delay);
        let new = jobs.len();
        jobs.push(job.retry(at));
        if self.delay.len() <= new {
            self.delay.resize(new + 1, 0);
        }
        self.delay[new] = delay;
        self.retries.push(Reverse((at, new)));
        Some(new)
    }

    /// When the next retry is due.
    pub fn next_retry(&self) -> Option<Nanos> {
        self.retries.peek().map(|Reverse((at, _))| *at)
    }

    /// The next client to stop waiting: when, and for which attempt.
    pub fn next_timeout(&self) -> Option<(Nanos, usize)> {
        self.timeouts.peek().map(|Reverse(next)| *next)
    }

    /// The next retry, taken.
    pub fn pop_retry(&mut self) -> Option<usize> {
        self.retries.pop().map(|Reverse((_, i))| i)
    }

    /// The next client to stop waiting, taken.
    pub fn pop_timeout(&mut self) -> Option<usize> {
        self.timeouts.pop().map(|Reverse((_, i))| i)
    }
}
