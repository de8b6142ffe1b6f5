//! The AI product's limits and clients inside a run: the front door (each
//! tenant's token budget, then its rate limit), the model provider's shared
//! limits checked as a worker starts a call, and what a refused or timed-out
//! client does next. [`TrafficPlan`] is what a strategy's runs share;
//! [`Traffic`] is one run's state, its randomness drawn from the run's seed
//! so a virtual run stays byte-for-byte repeatable.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::Nanos;
use super::limiter::{Bucket, Limiter, Wait, longer};
use crate::scenario::{Clients, Jitter, OnTimeout, Retry};
use crate::sched::TenantId;

/// Where an attempt was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The queue's per-tenant limit.
    Limit = 0,
    /// The tenant's rate limit.
    Rate = 1,
    /// The tenant's token budget.
    Budget = 2,
    /// The model provider's limits.
    Provider = 3,
}

/// The provider's limits: requests, input and output tokens per minute.
#[derive(Debug, Clone)]
pub struct LimitSet {
    pub requests: Option<Limiter>,
    pub input: Option<Limiter>,
    pub output: Option<Limiter>,
}

impl LimitSet {
    /// Whether a call of `tin` input and `tout` output tokens (output
    /// checked only when reserved at the start) could start now.
    fn check(&mut self, now: Nanos, tin: f64, tout: Option<f64>) -> Result<(), Wait> {
        let mut refused: Option<Wait> = None;
        let mut ask = |l: &mut Option<Limiter>, n: f64| {
            if let Some(l) = l {
                join(&mut refused, l.check(now, n));
            }
        };
        ask(&mut self.requests, 1.0);
        ask(&mut self.input, tin);
        // Unreserved output is charged as it is produced: a new call waits
        // only while the bucket is overdrawn.
        ask(&mut self.output, tout.unwrap_or(0.0));
        refused.map_or(Ok(()), Err)
    }

    fn charge(&mut self, now: Nanos, tin: f64, tout: Option<f64>) {
        for (l, n) in [
            (&mut self.requests, 1.0),
            (&mut self.input, tin),
            (&mut self.output, tout.unwrap_or(0.0)),
        ] {
            if let Some(l) = l {
                l.charge(now, n);
            }
        }
    }
}

/// Add a check's answer to the refusal so far: the longest wait wins.
fn join(refused: &mut Option<Wait>, answer: Result<(), Wait>) {
    if let Err(w) = answer {
        *refused = Some(refused.map_or(w, |r| longer(r, w)));
    }
}

/// A tenant's clients, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientPlan {
    pub retry: Retry,
    pub max_attempts: u32,
    pub base_ns: Nanos,
    pub cap_ns: Nanos,
    pub jitter: Jitter,
    pub honour_retry_after: bool,
    pub timeout_ns: Option<Nanos>,
    pub waste: bool,
    pub retry_budget: Option<f64>,
}

impl ClientPlan {
    pub fn of(c: &Clients) -> ClientPlan {
        let ms = |v: f64| (v * 1e6).round() as Nanos;
        ClientPlan {
            retry: c.retry,
            max_attempts: c.max_attempts(),
            base_ns: ms(c.base_ms.unwrap_or(Clients::DEFAULT_BASE_MS)),
            cap_ns: ms(c.cap_ms.unwrap_or(Clients::DEFAULT_CAP_MS)),
            jitter: c.jitter,
            honour_retry_after: c.honour_retry_after.unwrap_or(true),
            timeout_ns: c.timeout_s.map(|s| (s * 1e9).round() as Nanos),
            waste: c.on_timeout == OnTimeout::Waste,
            retry_budget: c.retry_budget,
        }
    }
}

/// What a strategy's runs share: every limit's settings and each class's
/// clients, built by the lab from the scenario and the strategy.
#[derive(Debug, Clone)]
pub struct TrafficPlan {
    /// Each tenant's class.
    pub class_of: Vec<u16>,
    /// Each class's rate limit (capacity, per second), budget (tokens, per
    /// second), clients and workspace, where it has one.
    pub rate: Vec<Option<(f64, f64)>>,
    pub budget: Vec<Option<(f64, f64)>>,
    pub clients: Vec<ClientPlan>,
    pub workspace: Vec<Option<usize>>,
    /// The organisation's limits and each workspace's, as set at t = 0.
    pub org: Option<LimitSet>,
    pub workspaces: Vec<LimitSet>,
    pub reserve_output: bool,
    pub reject_ns: Nanos,
    /// A queue limit's fixed retry-after (`None`: the drain time).
    pub limit_retry_after_ns: Option<Nanos>,
    /// Each job's cost to a `vtc` counter: the strategy, read for its rule.
    pub strategy: crate::scenario::Strategy,
}

/// One run's limits and clients.
#[derive(Debug)]
pub struct Traffic<'a> {
    plan: &'a TrafficPlan,
    rate: Vec<Option<Bucket>>,
    budget: Vec<Option<Bucket>>,
    org: Option<LimitSet>,
    workspaces: Vec<LimitSet>,
    rng: ChaCha8Rng,
    /// Per class: first attempts and retries sent, for the retry budget.
    firsts: Vec<u64>,
    retries: Vec<u64>,
}

/// The stream of a run's seed that draws the clients' jitter.
const CLIENT_STREAM: u64 = 3;

impl TrafficPlan {
    /// Whether anything stands between a client and the queue, or between
    /// a worker and the provider: a rate limit, a budget, the provider's
    /// limits (else only the clients' own policy and the queue limit's
    /// retry-after are at work).
    pub fn has_front_door(&self) -> bool {
        self.rate.iter().any(Option::is_some)
            || self.budget.iter().any(Option::is_some)
            || self.org.is_some()
            || !self.workspaces.is_empty()
    }
}

impl<'a> Traffic<'a> {
    pub fn new(plan: &'a TrafficPlan, seed: u64) -> Traffic<'a> {
        let per_tenant = |c: &[Option<(f64, f64)>]| -> Vec<Option<Bucket>> {
            plan.class_of
                .iter()
                .map(|&k| c[k as usize].map(|(cap, per_s)| Bucket::new(cap, per_s)))
                .collect()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(CLIENT_STREAM);
        Traffic {
            plan,
            rate: per_tenant(&plan.rate),
            budget: per_tenant(&plan.budget),
            org: plan.org.clone(),
            workspaces: plan.workspaces.clone(),
            rng,
            firsts: vec![0; plan.clients.len()],
            retries: vec![0; plan.clients.len()],
        }
    }

    pub fn plan(&self) -> &TrafficPlan {
        self.plan
    }

    /// The tenant's class index.
    pub fn class_of(&self, tenant: TenantId) -> usize {
        self.plan.class_of[tenant as usize] as usize
    }

    pub fn client(&self, tenant: TenantId) -> &ClientPlan {
        &self.plan.clients[self.class_of(tenant)]
    }

    /// The front door: the tenant's budget (the job's tokens must be left),
    /// then its rate limit (a token must be there). Both are charged only
    /// when both pass; the budget is spent when the job starts.
    pub fn admit(
        &mut self,
        now: Nanos,
        tenant: TenantId,
        tokens: f64,
    ) -> Result<(), (Refusal, Wait)> {
        let t = tenant as usize;
        if let Some(b) = &mut self.budget[t] {
            b.check(now, tokens).map_err(|w| (Refusal::Budget, w))?;
        }
        if let Some(r) = &mut self.rate[t] {
            r.check(now, 1.0).map_err(|w| (Refusal::Rate, w))?;
            r.take(now, 1.0);
        }
        Ok(())
    }

    /// A worker is about to call the provider for this job: `Ok` if every
    /// limit over it lets the call through (and charges them), else how
    /// long until they would. Spends the tenant's budget on success.
    pub fn start(
        &mut self,
        now: Nanos,
        tenant: TenantId,
        tokens_in: u32,
        tokens_out: u32,
    ) -> Result<(), Wait> {
        let (tin, tout) = (f64::from(tokens_in), f64::from(tokens_out));
        let reserved = self.plan.reserve_output.then_some(tout);
        let mut refused: Option<Wait> = None;
        for set in self.limit_sets(tenant) {
            join(&mut refused, set.check(now, tin, reserved));
        }
        if let Some(w) = refused {
            return Err(w);
        }
        for set in self.limit_sets(tenant) {
            set.charge(now, tin, reserved);
        }
        if let Some(b) = &mut self.budget[tenant as usize] {
            b.take(now, tin + tout);
        }
        Ok(())
    }

    /// A call finished: unreserved output tokens count now.
    pub fn finished(&mut self, now: Nanos, tenant: TenantId, tokens_out: u32) {
        if self.plan.reserve_output {
            return;
        }
        for set in self.limit_sets(tenant) {
            if let Some(l) = &mut set.output {
                l.charge(now, f64::from(tokens_out));
            }
        }
    }

    /// The provider's limits over the tenant's calls: the organisation's,
    /// then its workspace's.
    fn limit_sets(&mut self, tenant: TenantId) -> impl Iterator<Item = &mut LimitSet> {
        let ws = self.plan.workspace[self.class_of(tenant)];
        let Traffic {
            org, workspaces, ..
        } = self;
        org.as_mut()
            .into_iter()
            .chain(ws.map(|w| &mut workspaces[w]))
    }

    /// A first attempt reached the front door (for the retry budget).
    pub fn sent_first(&mut self, tenant: TenantId) {
        let class = self.class_of(tenant);
        self.firsts[class] += 1;
    }

    /// After attempt number `attempt` of a job was refused (with the
    /// retry-after `hint`) or timed out: the delay before the client sends it
    /// again, or `None` when it gives up. `prev` is the delay that led to
    /// this attempt (0 for a first attempt).
    pub fn retry_delay(
        &mut self,
        tenant: TenantId,
        attempt: u32,
        hint: Wait,
        prev: Nanos,
    ) -> Option<Nanos> {
        let class = self.class_of(tenant);
        let c = self.plan.clients[class];
        if c.retry == Retry::None || attempt >= c.max_attempts {
            return None;
        }
        if let Some(share) = c.retry_budget
            && (self.retries[class] + 1) as f64 > share * self.firsts[class] as f64
        {
            return None;
        }
        let delay = match c.retry {
            Retry::None => return None,
            Retry::After => hint.unwrap_or(c.base_ns),
            Retry::Backoff => {
                let exp = c
                    .base_ns
                    .saturating_mul(1u64 << (attempt - 1).min(40))
                    .min(c.cap_ns);
                let d = match c.jitter {
                    Jitter::None => exp,
                    Jitter::Full => self.rng.random_range(0..=exp),
                    Jitter::Equal => exp / 2 + self.rng.random_range(0..=exp / 2),
                    Jitter::Decorrelated => {
                        let hi = prev.max(c.base_ns).saturating_mul(3);
                        self.rng.random_range(c.base_ns..=hi).min(c.cap_ns)
                    }
                };
                match hint {
                    Some(h) if c.honour_retry_after => d.max(h),
                    _ => d,
                }
            }
        };
        self.retries[class] += 1;
        Some(delay)
    }
}
