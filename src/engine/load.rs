//! The load generator: a scenario and a seed become the run's arrival plan.
//!
//! Arrivals are open loop: every instant, duration and token count is fixed
//! before the run starts, so a slow scheduler cannot delay the traffic that
//! measures it. Three independent ChaCha streams of the run's seed draw the
//! arrival instants, the job sizes and the trace rows' tenants, so adding a
//! duration distribution leaves the arrivals of a seed as they were.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Zipf};

use super::{JobRecord, Nanos};
use crate::scenario::{Arrivals, Dist, Group, Scenario, Trace};
use crate::sched::TenantId;

/// Seconds to lab nanoseconds, to the nearest nanosecond.
pub fn secs_to_ns(s: f64) -> Nanos {
    (s * 1e9).round() as Nanos
}

/// Milliseconds to nanoseconds, to the nearest nanosecond.
pub fn ms_to_ns(ms: f64) -> Nanos {
    (ms * 1e6).round() as Nanos
}

/// What a job's size is drawn from.
#[derive(Debug, Clone, Copy)]
struct Sizes<'a> {
    job_ms: &'a Dist,
    tokens_in: Option<&'a Dist>,
    tokens_out: Option<&'a Dist>,
}

impl<'a> Sizes<'a> {
    /// A source's sizes, the scenario's where the source sets none.
    fn or_scenario(
        scenario: &'a Scenario,
        job_ms: Option<&'a Dist>,
        tokens_in: Option<&'a Dist>,
        tokens_out: Option<&'a Dist>,
    ) -> Sizes<'a> {
        Sizes {
            job_ms: job_ms.unwrap_or(&scenario.job_ms),
            tokens_in: tokens_in.or(scenario.tokens_in.as_ref()),
            tokens_out: tokens_out.or(scenario.tokens_out.as_ref()),
        }
    }

    /// Tokens, then the duration (which may depend on the output tokens).
    fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> (Nanos, u32, u32) {
        let tokens = |d: Option<&Dist>, rng: &mut R| {
            d.map_or(0, |d| {
                d.sample(rng, 0).round().min(f64::from(u32::MAX)) as u32
            })
        };
        let tokens_in = tokens(self.tokens_in, rng);
        let tokens_out = tokens(self.tokens_out, rng);
        (
            ms_to_ns(self.job_ms.sample(rng, tokens_out)),
            tokens_in,
            tokens_out,
        )
    }
}

/// The run's three random streams.
struct Streams {
    arrivals: ChaCha8Rng,
    sizes: ChaCha8Rng,
    spread: ChaCha8Rng,
}

/// Every job of one run, sorted by planned instant; tenant ids as
/// [`crate::scenario::Population`] lays them out. Jobs with the same instant
/// keep the order they were generated in: groups by tenant, then traces,
/// then bursts in file order.
pub fn plan(scenario: &Scenario, seed: u64) -> Vec<JobRecord> {
    let mut rng = Streams {
        arrivals: ChaCha8Rng::seed_from_u64(seed),
        sizes: ChaCha8Rng::seed_from_u64(seed),
        spread: ChaCha8Rng::seed_from_u64(seed),
    };
    rng.sizes.set_stream(1);
    rng.spread.set_stream(2);
    let mut jobs = Vec::with_capacity(scenario.jobs_per_run() as usize);
    let mut first: TenantId = 0;
    for g in scenario.groups() {
        let sizes = Sizes::or_scenario(
            scenario,
            g.job_ms.as_ref(),
            g.tokens_in.as_ref(),
            g.tokens_out.as_ref(),
        );
        group_jobs(&g, first, scenario.traffic_s, sizes, &mut rng, &mut jobs);
        first += g.count;
    }
    for t in &scenario.trace {
        let sizes = Sizes {
            job_ms: t.job_ms.as_ref().unwrap_or(&scenario.job_ms),
            tokens_in: None,
            tokens_out: None,
        };
        first += trace_jobs(t, first, sizes, &mut rng, &mut jobs);
    }
    let names = scenario.burst_tenants();
    for burst in &scenario.burst {
        let index = names.iter().position(|n| *n == burst.tenant).unwrap_or(0);
        let tenant = first + index as TenantId;
        let at = secs_to_ns(burst.at_s);
        let sizes = Sizes::or_scenario(
            scenario,
            burst.job_ms.as_ref(),
            burst.tokens_in.as_ref(),
            burst.tokens_out.as_ref(),
        );
        for _ in 0..burst.jobs {
            let (duration, tokens_in, tokens_out) = sizes.draw(&mut rng.sizes);
            jobs.push(JobRecord::planned(tenant, at, duration).with_tokens(tokens_in, tokens_out));
        }
    }
    spread_over_keys(scenario, &mut jobs);
    jobs.sort_by_key(|j| j.planned);
    jobs
}

/// A tenant of several API keys sends its jobs with each key in turn, in
/// the order it generates them (arrival order).
fn spread_over_keys(scenario: &Scenario, jobs: &mut [JobRecord]) {
    let population = scenario.population();
    if population.keys() == population.tenants() {
        return;
    }
    let mut sent = vec![0u32; population.tenants()];
    for j in jobs.iter_mut() {
        let t = j.tenant as usize;
        let (first, keys) = (
            population.key_first[t],
            population.key_first[t + 1] - population.key_first[t],
        );
        j.key = first + sent[t] % keys;
        sent[t] += 1;
    }
}

/// A group's jobs: per tenant, periodic (random phase) or Poisson arrivals
/// between its `from_s` and `until_s`.
fn group_jobs(
    g: &Group,
    first: TenantId,
    traffic_s: f64,
    sizes: Sizes<'_>,
    rng: &mut Streams,
    jobs: &mut Vec<JobRecord>,
) {
    if g.rate_per_s <= 0.0 {
        return;
    }
    let from = g.from_s * 1e9;
    let until_ns = secs_to_ns(g.until_s.unwrap_or(traffic_s));
    let interval = 1e9 / g.rate_per_s;
    for tenant in first..first + g.count {
        let mut push = |at: Nanos, rng: &mut Streams| {
            let (duration, tokens_in, tokens_out) = sizes.draw(&mut rng.sizes);
            jobs.push(JobRecord::planned(tenant, at, duration).with_tokens(tokens_in, tokens_out));
        };
        match g.arrivals {
            Arrivals::Periodic => {
                let phase = rng.arrivals.random::<f64>() * interval;
                let mut k = 0u64;
                loop {
                    let at = (from + phase + k as f64 * interval).round() as Nanos;
                    if at >= until_ns {
                        break;
                    }
                    push(at, rng);
                    k += 1;
                }
            }
            Arrivals::Poisson => {
                let gap = Exp::new(g.rate_per_s).expect("validated: rate > 0");
                let mut t = g.from_s;
                loop {
                    t += gap.sample(&mut rng.arrivals);
                    let at = secs_to_ns(t);
                    if at >= until_ns {
                        break;
                    }
                    push(at, rng);
                }
            }
        }
    }
}

/// A trace's rows as jobs; returns how many tenants it used. A trace
/// without a tenant column spreads its rows over Zipf-weighted tenants.
fn trace_jobs(
    t: &Trace,
    first: TenantId,
    sizes: Sizes<'_>,
    rng: &mut Streams,
    jobs: &mut Vec<JobRecord>,
) -> u32 {
    let tenants = crate::scenario::population::trace_tenants(t);
    let zipf = Zipf::new(f64::from(tenants), t.zipf).expect("validated: tenants >= 1, zipf >= 0");
    for row in t.rows() {
        let k = match row.tenant {
            Some(k) => k,
            None => (zipf.sample(&mut rng.spread) as u32).clamp(1, tenants) - 1,
        };
        let duration = match row.job_ms {
            Some(ms) => ms_to_ns(ms),
            None => ms_to_ns(sizes.job_ms.sample(&mut rng.sizes, row.tokens_out)),
        };
        let at = secs_to_ns(t.from_s + row.at_s / t.speed);
        jobs.push(
            JobRecord::planned(first + k, at, duration).with_tokens(row.tokens_in, row.tokens_out),
        );
    }
    tenants
}
