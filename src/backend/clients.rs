//! A run's clients on a queue server, as the coordinator plays them: every
//! planned job sent at its instant and, where the scenario's clients retry
//! or stop waiting, their retries and give-ups, by the policy the
//! in-process engine follows: the engine's own client model
//! ([`engine::clients::Clients`]), so the same seed gives the same retries.
//!
//! A retry is a new submit: a new job on the server. Its number must grow
//! with the order jobs are sent (fifo serves by it, and so do a tenant's
//! turns), and a worker should find its hold without asking: an attempt of
//! planned job j sent when k retries have been sent (this one too) is
//! numbered k·n + j, n jobs planned ([`wire_id`]), and holds
//! `durations[id % n]`. Without retries the numbers are the plan's own.

use std::collections::HashMap;

use anyhow::{Result, anyhow};

use super::wire::Submit;
use crate::engine::traffic::Traffic;
use crate::engine::{self, JobRecord, Nanos, Pool};
use crate::scenario::{Queue, Strategy};

/// The number a server knows an attempt of planned job `origin` (of `n`)
/// by, sent when `k` retries have been sent (itself too, if a retry);
/// `None` past `u32`. Numbers grow with every send: a retry's `k` is one
/// more than the last send's, and a first attempt sent after it is of a
/// later planned job than the retry's (sent before it).
pub fn wire_id(k: u32, origin: u32, n: u32) -> Option<u32> {
    k.checked_mul(n)?.checked_add(origin)
}

/// What is due next: clients whose patience ran out (with no start yet
/// heard of, they give up on the job), or attempts to send in one round
/// trip (retries due at that instant, then planned arrivals), as indices
/// into [`Clients::jobs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    Timeouts(Vec<usize>),
    Send(Vec<usize>),
}

/// One run's attempts: the plan's, then every retry, in the order made.
pub struct Clients<'a> {
    /// The scenario's clients, where they retry or stop waiting (the
    /// engine's own model of them).
    clients: Option<engine::clients::Clients<'a>>,
    /// Every attempt: `jobs[..n]` the plan, then retries as they are made.
    pub jobs: Vec<JobRecord>,
    n: usize,
    /// The next planned arrival.
    next: usize,
    /// Each attempt's server number, once sent.
    wire: Vec<u32>,
    /// The attempt each server number names.
    by_wire: HashMap<u32, usize>,
    /// Retries sent so far.
    retries_sent: u32,
    /// vtc's cost of each planned job, in Rust's shortest round-trip digits
    /// (the server reads back the cost the in-process scheduler charges).
    costs: Option<Vec<String>>,
    /// Jobs are sent with their API key (two-level fairness).
    keys: bool,
    /// The scheduler's queues are API keys rather than tenants.
    by_key: bool,
}

impl<'a> Clients<'a> {
    /// The clients of a run of `plan` on `pool` under `strategy`, seeded
    /// as the engine's run with `seed` is; with `keys`, each job is sent
    /// with its API key.
    pub fn new(
        mut plan: Vec<JobRecord>,
        pool: &'a Pool,
        seed: u64,
        strategy: &Strategy,
        keys: bool,
    ) -> Clients<'a> {
        for (i, j) in plan.iter_mut().enumerate() {
            j.origin = i as u32;
        }
        let plan_len = plan.len();
        let costs = (strategy.queue == Queue::Vtc).then(|| {
            let cost = |j: &JobRecord| strategy.job_cost(j.duration, j.tokens_in, j.tokens_out);
            plan.iter().map(|j| cost(j).to_string()).collect()
        });
        Clients {
            costs,
            keys,
            by_key: pool.by_key,
            clients: (pool.traffic.as_deref())
                .map(|p| engine::clients::Clients::new(Traffic::new(p, seed))),
            n: plan.len(),
            jobs: plan,
            next: 0,
            wire: vec![0; plan_len],
            by_wire: HashMap::new(),
            retries_sent: 0,
        }
    }

    /// Whether jobs are sent with their API key.
    pub fn keys(&self) -> bool {
        self.keys
    }

    /// Whether any client stops waiting for a job that has not started.
    pub fn watch(&self) -> bool {
        self.clients.as_ref().is_some_and(|c| {
            (c.traffic.plan().clients.iter()).any(|client| client.timeout_ns.is_some())
        })
    }

    /// The queue limit's fixed retry-after, where the strategy sets one.
    pub fn fixed_retry_after(&self) -> Option<Nanos> {
        (self.clients.as_ref()).and_then(|c| c.traffic.plan().limit_retry_after_ns)
    }

    /// When the next thing is due, lab time.
    pub fn next_at(&self) -> Option<Nanos> {
        let c = self.clients.as_ref();
        [
            c.and_then(|c| c.next_timeout()).map(|(at, _)| at),
            c.and_then(|c| c.next_retry()),
            self.jobs[..self.n].get(self.next).map(|j| j.planned),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// What is due at [`Clients::next_at`]: on a tie, clients giving up
    /// first, then retries, then planned arrivals (the engine's order).
    pub fn due(&mut self) -> Option<(Nanos, Due)> {
        let at = self.next_at()?;
        let (mut timeouts, mut send) = (Vec::new(), Vec::new());
        if let Some(c) = &mut self.clients {
            while c.next_timeout().is_some_and(|(t, _)| t == at) {
                timeouts.extend(c.pop_timeout());
            }
            if !timeouts.is_empty() {
                return Some((at, Due::Timeouts(timeouts)));
            }
            while c.next_retry() == Some(at) {
                send.extend(c.pop_retry());
            }
        }
        while self.next < self.n && self.jobs[self.next].planned == at {
            send.push(self.next);
            self.next += 1;
        }
        Some((at, Due::Send(send)))
    }

    /// The number attempt `i` is sent under ([`wire_id`]), given now:
    /// attempts must be sent in the order this is asked.
    pub fn send(&mut self, i: usize) -> Result<u32> {
        let job = self.jobs[i];
        if job.attempt == 1 {
            if let Some(c) = &mut self.clients {
                c.traffic.sent_first(job.tenant);
            }
        } else {
            self.retries_sent += 1;
        }
        let id = wire_id(self.retries_sent, job.origin, self.n as u32).ok_or_else(|| {
            anyhow!(
                "{} retries of {} planned jobs are past a server's job numbers (u32)",
                self.retries_sent,
                self.n
            )
        })?;
        self.wire[i] = id;
        self.by_wire.insert(id, i);
        Ok(id)
    }

    /// Attempt `i` as the server is sent it, once [`Clients::send`] gave
    /// its number.
    pub fn submit(&self, i: usize) -> Submit<'_> {
        let j = &self.jobs[i];
        Submit {
            job: self.wire[i],
            queue: j.queue(self.by_key),
            cost: self.costs.as_ref().map(|c| c[j.origin as usize].as_str()),
            key: self.keys.then_some(j.key),
        }
    }

    /// Attempt `i`'s server number, once sent.
    pub fn wire_of(&self, i: usize) -> u32 {
        self.wire[i]
    }

    /// The attempt a server number names.
    pub fn index(&self, id: u32) -> Option<usize> {
        self.by_wire.get(&id).copied()
    }

    /// Whether attempt `i`'s client cancels the job when it stops waiting
    /// (else the job still runs, unread).
    pub fn cancels(&self, i: usize) -> bool {
        (self.clients.as_ref()).is_some_and(|c| !c.traffic.client(self.jobs[i].tenant).waste)
    }

    /// Attempt `i` was queued at `now`: its client starts counting.
    pub fn accepted(&mut self, i: usize, now: Nanos) {
        if let Some(c) = &mut self.clients {
            c.watch(self.jobs[i].tenant, i, now);
        }
    }

    /// Attempt `i` was refused at `now`, told to wait `hint`: its client
    /// sends it again later, or gives up.
    pub fn refused(&mut self, i: usize, now: Nanos, hint: Option<Nanos>) {
        self.follow_up(i, now, hint);
    }

    /// Attempt `i`'s client stopped waiting at `now`, its job not started.
    pub fn abandoned(&mut self, i: usize, now: Nanos) {
        self.follow_up(i, now, None);
    }

    fn follow_up(&mut self, i: usize, now: Nanos, hint: Option<Nanos>) {
        let Some(c) = &mut self.clients else { return };
        if c.follow_up(&mut self.jobs, i, now, hint).is_some() {
            self.wire.push(0);
        }
    }
}
