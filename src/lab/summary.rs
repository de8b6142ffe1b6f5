//! From a run's job records to its figures, and from a strategy's runs to
//! their median, min and max.

use hdrhistogram::Histogram;

use crate::engine::load::secs_to_ns;
use crate::engine::{JobRecord, NEVER, Nanos, Pool, RunStats};
use crate::results::{Figures, OccupancyTrace, RawHistograms, RawRun, RunResult, StrategyResults};
use crate::scenario::{Scenario, Strategy};
use crate::stats::{Percentiles, encode_histogram, median, new_histogram, percentiles, record};

/// Most (enqueue time, wait) points kept per run for the plots.
const MAX_TRACE_POINTS: usize = 4000;

/// One run's histograms, filled from its job records.
struct Measured {
    normal_wait: Histogram<u64>,
    burst_wait: Histogram<u64>,
    overshoot: Histogram<u64>,
    lag: Histogram<u64>,
    /// When the last bursting job finished.
    burst_last: Option<Nanos>,
}

impl Measured {
    fn from_jobs(pool: &Pool, jobs: &[JobRecord]) -> Measured {
        let mut m = Measured {
            normal_wait: new_histogram(),
            burst_wait: new_histogram(),
            overshoot: new_histogram(),
            lag: new_histogram(),
            burst_last: None,
        };
        for job in jobs.iter().filter(|j| j.enqueued != NEVER) {
            record(&mut m.lag, job.enqueued.saturating_sub(job.planned));
            if job.started == NEVER {
                continue;
            }
            let wait = job.started - job.enqueued;
            if job.tenant < pool.normal_tenants {
                record(&mut m.normal_wait, wait);
            } else {
                record(&mut m.burst_wait, wait);
                m.burst_last = m.burst_last.max(Some(job.finished));
            }
            if job.finished != NEVER {
                let held = job.finished - job.started;
                record(&mut m.overshoot, held.saturating_sub(pool.job_ns));
            }
        }
        m
    }
}

/// Turn one run's records into its figures (and, with `keep_raw`, its
/// histograms and traces).
pub fn run(
    scenario: &Scenario,
    pool: &Pool,
    seed: u64,
    jobs: &[JobRecord],
    stats: &RunStats,
    keep_raw: bool,
) -> RunResult {
    let m = Measured::from_jobs(pool, jobs);
    let first_burst = scenario.burst.iter().map(|b| secs_to_ns(b.at_s)).min();
    let noisy_done_s = match (first_burst, m.burst_last) {
        (Some(first), Some(last)) => Some(ns_to_s(last.saturating_sub(first))),
        _ => None,
    };
    let figures = Figures {
        normal_wait_ms: percentiles(&m.normal_wait, 1e6),
        noisy_done_s,
        rejected: stats.rejected,
        normal_jobs: m.normal_wait.len(),
        job_overshoot_ms: percentiles(&m.overshoot, 1e6),
        dispatch_floor_us: percentiles(&stats.dispatch_floor, 1e3),
        arrival_lag_ms: percentiles(&m.lag, 1e6),
        idle_workers_while_waiting: mean_idle(stats.idle_worker_ns_while_waiting, stats.waiting_ns),
        idle_workers_while_waiting_in_traffic: mean_idle(
            stats.idle_worker_ns_while_waiting_in_traffic,
            stats.waiting_ns_in_traffic,
        ),
        waiting_s: ns_to_s(stats.waiting_ns),
        retry_after_s: stats.retry_after_s_max,
        lab_s: ns_to_s(stats.end),
    };
    let raw = keep_raw.then(|| raw_run(&m, pool, jobs, stats));
    RunResult { seed, figures, raw }
}

fn raw_run(m: &Measured, pool: &Pool, jobs: &[JobRecord], stats: &RunStats) -> RawRun {
    RawRun {
        histograms: RawHistograms {
            normal_wait_ns: encode_histogram(&m.normal_wait),
            burst_wait_ns: encode_histogram(&m.burst_wait),
            job_overshoot_ns: encode_histogram(&m.overshoot),
            dispatch_floor_ns: encode_histogram(&stats.dispatch_floor),
            arrival_lag_ns: encode_histogram(&m.lag),
        },
        normal_waits: normal_wait_trace(jobs, pool.normal_tenants),
        occupancy: OccupancyTrace {
            step_ms: pool.sample_ns as f64 / 1e6,
            busy_normal: stats.samples.iter().map(|s| s.busy_normal).collect(),
            busy_burst: stats.samples.iter().map(|s| s.busy_burst).collect(),
            queued: stats.samples.iter().map(|s| s.queued).collect(),
        },
    }
}

fn normal_wait_trace(jobs: &[JobRecord], normal_tenants: u32) -> Vec<[f64; 2]> {
    let measured: Vec<&JobRecord> = jobs
        .iter()
        .filter(|j| j.tenant < normal_tenants && j.started != NEVER)
        .collect();
    let stride = measured.len().div_ceil(MAX_TRACE_POINTS).max(1);
    measured
        .iter()
        .step_by(stride)
        .map(|j| [ns_to_s(j.enqueued), (j.started - j.enqueued) as f64 / 1e6])
        .collect()
}

/// A strategy's runs with their median, min and max, figure by figure.
pub fn strategy(def: &Strategy, runs: Vec<RunResult>) -> StrategyResults {
    let figures: Vec<&Figures> = runs.iter().map(|r| &r.figures).collect();
    StrategyResults {
        median: combine(&figures, median),
        min: combine(&figures, |v| v[0]),
        max: combine(&figures, |v| v[v.len() - 1]),
        name: def.name.clone(),
        queue: def.discipline(),
        runs,
    }
}

/// Combine several runs field by field; `pick` gets each field's values sorted.
fn combine(runs: &[&Figures], pick: fn(&[f64]) -> f64) -> Figures {
    let f = |get: &dyn Fn(&Figures) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(|r| get(r)).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() { f64::NAN } else { pick(&v) }
    };
    let p = |get: &dyn Fn(&Figures) -> Percentiles| Percentiles {
        p50: f(&|r| get(r).p50),
        p95: f(&|r| get(r).p95),
        p99: f(&|r| get(r).p99),
        max: f(&|r| get(r).max),
    };
    let noisy: Vec<f64> = runs.iter().filter_map(|r| r.noisy_done_s).collect();
    Figures {
        normal_wait_ms: p(&|r| r.normal_wait_ms),
        noisy_done_s: (!noisy.is_empty()).then(|| {
            let mut v = noisy;
            v.sort_by(f64::total_cmp);
            pick(&v)
        }),
        rejected: f(&|r| r.rejected as f64).round() as u64,
        normal_jobs: f(&|r| r.normal_jobs as f64).round() as u64,
        job_overshoot_ms: p(&|r| r.job_overshoot_ms),
        dispatch_floor_us: p(&|r| r.dispatch_floor_us),
        arrival_lag_ms: p(&|r| r.arrival_lag_ms),
        idle_workers_while_waiting: f(&|r| r.idle_workers_while_waiting),
        idle_workers_while_waiting_in_traffic: f(&|r| r.idle_workers_while_waiting_in_traffic),
        waiting_s: f(&|r| r.waiting_s),
        retry_after_s: f(&|r| r.retry_after_s as f64).round() as u64,
        lab_s: f(&|r| r.lab_s),
    }
}

fn mean_idle(worker_ns: u128, ns: Nanos) -> f64 {
    if ns == 0 {
        0.0
    } else {
        worker_ns as f64 / ns as f64
    }
}

fn ns_to_s(ns: Nanos) -> f64 {
    ns as f64 / 1e9
}
