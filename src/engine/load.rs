//! The load generator: a scenario and a seed become the run's arrival plan.
//!
//! Arrivals are open loop: every instant is fixed before the run starts, so a
//! slow scheduler cannot delay the traffic that measures it.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

use super::{JobRecord, Nanos};
use crate::scenario::{Arrivals, Scenario};
use crate::sched::TenantId;

/// Seconds to lab nanoseconds, to the nearest nanosecond.
pub fn secs_to_ns(s: f64) -> Nanos {
    (s * 1e9).round() as Nanos
}

/// Every job of one run, sorted by planned instant. Normal tenants are
/// `0..normal.tenants`; bursting tenants follow in order of first appearance.
/// Jobs with the same instant keep the order they were generated in: normal
/// tenants by index, then bursts in file order.
pub fn plan(scenario: &Scenario, seed: u64) -> Vec<JobRecord> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let traffic_ns = secs_to_ns(scenario.traffic_s);
    let normal = &scenario.normal;
    let mut jobs = Vec::with_capacity(scenario.jobs_per_run() as usize);
    if normal.rate_per_s > 0.0 {
        let interval = 1e9 / normal.rate_per_s;
        for tenant in 0..normal.tenants {
            match normal.arrivals {
                Arrivals::Periodic => {
                    let phase = rng.random::<f64>() * interval;
                    let mut k = 0u64;
                    loop {
                        let at = (phase + k as f64 * interval).round() as Nanos;
                        if at >= traffic_ns {
                            break;
                        }
                        jobs.push(JobRecord::planned(tenant, at));
                        k += 1;
                    }
                }
                Arrivals::Poisson => {
                    let gap = Exp::new(normal.rate_per_s).expect("validated: rate > 0");
                    let mut t = 0.0f64;
                    loop {
                        t += gap.sample(&mut rng);
                        let at = secs_to_ns(t);
                        if at >= traffic_ns {
                            break;
                        }
                        jobs.push(JobRecord::planned(tenant, at));
                    }
                }
            }
        }
    }
    let names = scenario.burst_tenants();
    for burst in &scenario.burst {
        let index = names.iter().position(|n| *n == burst.tenant).unwrap_or(0);
        let tenant = normal.tenants + index as TenantId;
        let at = secs_to_ns(burst.at_s);
        jobs.extend((0..burst.jobs).map(|_| JobRecord::planned(tenant, at)));
    }
    jobs.sort_by_key(|j| j.planned);
    jobs
}
