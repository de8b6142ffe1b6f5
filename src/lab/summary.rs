//! From a run's record to its figures: every figure a results file holds
//! for one run comes from here.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::backend::{RunRecord, ServerMeasures};
use crate::engine::load::secs_to_ns;
use crate::engine::{JobRecord, NEVER, Nanos, Pool, RunStats};
use crate::results::{
    ClassFaults, ClassFigures, Delivery, FaultFigures, Figures, OccupancyTrace, QueueFigures,
    RawHistograms, RawRun, RunResult, Slowdown, TenantFigures,
};
use crate::scenario::{Population, Scenario, Strategy};
use crate::stats::{encode_histogram, nearest_rank, new_histogram, percentiles, record};

/// Most (enqueue time, wait) points kept per run for the plots.
const MAX_TRACE_POINTS: usize = 4000;
/// Slowdowns are kept in histograms in thousandths.
const SLOWDOWN_SCALE: f64 = 1000.0;

/// One run's histograms, filled from its job records.
struct Measured {
    normal_wait: Histogram<u64>,
    burst_wait: Histogram<u64>,
    overshoot: Histogram<u64>,
    lag: Histogram<u64>,
    normal_lag: Histogram<u64>,
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
            normal_lag: new_histogram(),
            burst_last: None,
        };
        let links = pool
            .faults
            .as_ref()
            .map(|f| f.slow_links())
            .unwrap_or_default();
        for job in jobs.iter().filter(|j| j.enqueued != NEVER) {
            let lag = job.enqueued.saturating_sub(job.planned);
            record(&mut m.lag, lag);
            if job.tenant < pool.normal_tenants {
                record(&mut m.normal_lag, lag);
            }
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
                let over = (job.finished - job.started).saturating_sub(job.duration);
                // A job a slow link held (started while it was slow, and
                // held at least its delay over its duration) counts without
                // the delay: that is the fault's, which the model
                // simulates, not the harness's.
                let link = links
                    .iter()
                    .find(|&&(from, until, d)| (from..until).contains(&job.started) && over >= d);
                record(&mut m.overshoot, over - link.map_or(0, |l| l.2));
            }
        }
        m
    }
}

/// A job's slowdown: (wait + duration) ÷ duration; `None` for a job that
/// never started or holds its worker no time at all.
fn slowdown(job: &JobRecord) -> Option<f64> {
    (job.started != NEVER && job.duration > 0)
        .then(|| (job.started - job.enqueued + job.duration) as f64 / job.duration as f64)
}

/// Turn one run's records into its figures (and, with `keep_raw`, its
/// histograms and traces).
pub fn run(
    scenario: &Scenario,
    strategy: &Strategy,
    pool: &Pool,
    seed: u64,
    record: &RunRecord,
    keep_raw: bool,
) -> RunResult {
    let (jobs, stats) = (&record.jobs[..], &record.stats);
    let m = Measured::from_jobs(pool, jobs);
    let population = scenario.population();
    let unit = scenario.service.unwrap_or(crate::scenario::Cost::Time);
    let (service, fairness) = super::fairness::measure(&population, strategy, unit, jobs);
    let per_tenant = PerTenant::of(&population, jobs);
    let delivery = super::delivery::measure(scenario, strategy, &population, jobs, stats);
    let first_burst = scenario.burst.iter().map(|b| secs_to_ns(b.at_s)).min();
    let noisy_done_s = match (first_burst, m.burst_last) {
        (Some(first), Some(last)) => Some(ns_to_s(last.saturating_sub(first))),
        _ => None,
    };
    let figures = Figures {
        normal_wait_ms: percentiles(&m.normal_wait, 1e6),
        noisy_done_s,
        rejected: super::delivery::rejected(&delivery.total),
        normal_jobs: m.normal_wait.len(),
        job_overshoot_ms: percentiles(&m.overshoot, 1e6),
        dispatch_floor_us: percentiles(&stats.dispatch_floor, 1e3),
        arrival_lag_ms: percentiles(&m.lag, 1e6),
        normal_arrival_lag_ms: Some(percentiles(&m.normal_lag, 1e6)),
        idle_workers_while_waiting: mean_idle(stats.idle_worker_ns_while_waiting, stats.waiting_ns),
        idle_workers_while_waiting_in_traffic: mean_idle(
            stats.idle_worker_ns_while_waiting_in_traffic,
            stats.waiting_ns_in_traffic,
        ),
        waiting_s: ns_to_s(stats.waiting_ns),
        retry_after_s: stats.retry_after_s_max,
        lab_s: ns_to_s(stats.end),
        classes: classes(&population, jobs, &service, delivery.classes),
        tenants: per_tenant.figures(&population, scenario.alert_p95_ms),
        fairness,
        delivery: delivery.total,
        queue: record.server.as_ref().map(queue_figures),
        faults: record.faults.clone().map(|f| FaultFigures {
            by_class: by_class(&population, jobs, &record.redelivered, &record.ran_twice),
            recovery: super::recovery::across_faults(scenario, &population, jobs),
            ..f
        }),
        carrier: record.carried,
    };
    let raw = keep_raw.then(|| raw_run(&m, pool, jobs, stats, &per_tenant));
    RunResult {
        seed,
        figures,
        late: record.late.clone(),
        raw,
    }
}

/// A queue server's costs, per planned job where they are counts.
fn queue_figures(m: &ServerMeasures) -> QueueFigures {
    let n = m.planned as f64;
    QueueFigures {
        take_rtt_us: percentiles(&m.take_rtt, 1e3),
        hold_overshoot_us: percentiles(&m.hold_late, 1e3),
        submit_rtt_us: percentiles(&m.submit_rtt, 1e3),
        server_us_per_call: m.cost.us_per_call,
        server_cpu_s: m.cost.cpu_s,
        workers_cpu_s: m.workers_cpu_s,
        calls_per_job: m.cost.calls as f64 / n,
        bytes_per_job: m.cost.bytes.map(|b| b as f64 / n),
        wal_bytes_per_job: m.cost.wal_bytes.map(|b| b as f64 / n),
        faults: None, // a run's own are `Figures::faults`
    }
}

/// Each class's share of the jobs `redelivered` and `ran_twice` (indices
/// into `jobs`, once for each time), by class name; classes with none left
/// out.
fn by_class(
    population: &Population,
    jobs: &[JobRecord],
    redelivered: &[u32],
    ran_twice: &[u32],
) -> BTreeMap<String, ClassFaults> {
    let mut out = BTreeMap::<String, ClassFaults>::new();
    let mut count = |i: u32, f: fn(&mut ClassFaults)| {
        let class = population.class_of[jobs[i as usize].tenant as usize] as usize;
        f(out
            .entry(population.classes[class].name.clone())
            .or_default());
    };
    for &i in redelivered {
        count(i, |c| c.redelivered += 1);
    }
    for &i in ran_twice {
        count(i, |c| c.ran_twice += 1);
    }
    out
}

/// Every class's figures, keyed by name.
fn classes(
    population: &Population,
    jobs: &[JobRecord],
    service: &[f64],
    delivery: Vec<Delivery>,
) -> BTreeMap<String, ClassFigures> {
    struct Acc {
        wait: Histogram<u64>,
        slowdown: Histogram<u64>,
        jobs: u64,
        tokens_in: u64,
        tokens_out: u64,
        first: Nanos,
        last: Option<Nanos>,
    }
    let mut acc: Vec<Acc> = population
        .classes
        .iter()
        .map(|_| Acc {
            wait: new_histogram(),
            slowdown: new_histogram(),
            jobs: 0,
            tokens_in: 0,
            tokens_out: 0,
            first: NEVER,
            last: None,
        })
        .collect();
    for job in jobs.iter().filter(|j| j.enqueued != NEVER) {
        let a = &mut acc[population.class_of[job.tenant as usize] as usize];
        a.jobs += 1;
        a.first = a.first.min(job.enqueued);
        if job.started == NEVER {
            continue;
        }
        record(&mut a.wait, job.started - job.enqueued);
        if let Some(s) = slowdown(job) {
            record(&mut a.slowdown, (s * SLOWDOWN_SCALE).round() as u64);
        }
        a.tokens_in += u64::from(job.tokens_in);
        a.tokens_out += u64::from(job.tokens_out);
        if job.finished != NEVER {
            a.last = a.last.max(Some(job.finished));
        }
    }
    population
        .classes
        .iter()
        .zip(acc)
        .zip(delivery)
        .map(|((c, a), delivery)| {
            let s = percentiles(&a.slowdown, SLOWDOWN_SCALE);
            let figures = ClassFigures {
                wait_ms: percentiles(&a.wait, 1e6),
                slowdown: Slowdown {
                    p50: s.p50,
                    p95: s.p95,
                },
                jobs: a.jobs,
                rejected: super::delivery::rejected(&delivery),
                tokens_in: a.tokens_in,
                tokens_out: a.tokens_out,
                done_s: a.last.map(|last| ns_to_s(last.saturating_sub(a.first))),
                service: service[c.first as usize..(c.first + c.count) as usize]
                    .iter()
                    .sum(),
                delivery,
            };
            (c.name.clone(), figures)
        })
        .collect()
}

/// Each tenant's p95 wait and slowdown, and its mean slowdown.
struct PerTenant {
    p95_wait_ns: Vec<Option<Nanos>>,
    p95_slowdown: Vec<Option<f64>>,
    mean_slowdown: Vec<Option<f64>>,
}

impl PerTenant {
    fn of(population: &Population, jobs: &[JobRecord]) -> PerTenant {
        let tenants = population.tenants();
        // Group the started jobs by tenant (counting sort: ids are dense).
        let mut start = vec![0usize; tenants + 1];
        let started = || jobs.iter().filter(|j| j.started != NEVER);
        for j in started() {
            start[j.tenant as usize + 1] += 1;
        }
        for t in 0..tenants {
            start[t + 1] += start[t];
        }
        let mut fill = start.clone();
        let mut waits = vec![0u64; start[tenants]];
        let mut slow = vec![0f64; start[tenants]];
        for j in started() {
            let at = &mut fill[j.tenant as usize];
            waits[*at] = j.started - j.enqueued;
            slow[*at] = slowdown(j).unwrap_or(1.0);
            *at += 1;
        }
        let mut out = PerTenant {
            p95_wait_ns: Vec::with_capacity(tenants),
            p95_slowdown: Vec::with_capacity(tenants),
            mean_slowdown: Vec::with_capacity(tenants),
        };
        for t in 0..tenants {
            let (w, s) = (
                &mut waits[start[t]..start[t + 1]],
                &mut slow[start[t]..start[t + 1]],
            );
            if w.is_empty() {
                out.p95_wait_ns.push(None);
                out.p95_slowdown.push(None);
                out.mean_slowdown.push(None);
                continue;
            }
            w.sort_unstable();
            s.sort_by(f64::total_cmp);
            out.p95_wait_ns.push(Some(w[nearest_rank(w.len(), 0.95)]));
            out.p95_slowdown.push(Some(s[nearest_rank(s.len(), 0.95)]));
            out.mean_slowdown
                .push(Some(s.iter().sum::<f64>() / s.len() as f64));
        }
        out
    }

    /// The worst p95, who had it, who went over the alert, and Jain's index,
    /// over the non-bursting tenants.
    fn figures(&self, population: &Population, alert_ms: Option<f64>) -> TenantFigures {
        let normal = 0..population.non_burst as usize;
        let mut worst: Option<(Nanos, usize)> = None;
        let mut over_alert = Vec::new();
        for t in normal.clone() {
            let Some(p95) = self.p95_wait_ns[t] else {
                continue;
            };
            // No tenant is "worst" while every p95 is 0.
            if p95 > 0 && worst.is_none_or(|(w, _)| p95 > w) {
                worst = Some((p95, t));
            }
            if alert_ms.is_some_and(|a| p95 as f64 / 1e6 > a) {
                over_alert.push(population.tenant_name(t as u32));
            }
        }
        let means: Vec<f64> = self.mean_slowdown[normal]
            .iter()
            .flatten()
            .copied()
            .collect();
        TenantFigures {
            worst_p95_ms: worst.map_or(0.0, |(w, _)| w as f64 / 1e6),
            worst: worst.map_or_else(String::new, |(_, t)| population.tenant_name(t as u32)),
            over_alert,
            jain_slowdown: crate::stats::jain(&means),
        }
    }
}

/// Four significant figures, as an `f32`, for the per-tenant arrays.
fn sig4(v: f64) -> f32 {
    if v == 0.0 || !v.is_finite() {
        return v as f32;
    }
    let scale = 10f64.powi(3 - v.abs().log10().floor() as i32);
    ((v * scale).round() / scale) as f32
}

/// A histogram the clock filled, encoded; empty where it measured nothing.
fn encode_measured(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        String::new()
    } else {
        encode_histogram(h)
    }
}

fn raw_run(
    m: &Measured,
    pool: &Pool,
    jobs: &[JobRecord],
    stats: &RunStats,
    per_tenant: &PerTenant,
) -> RawRun {
    RawRun {
        histograms: RawHistograms {
            normal_wait_ns: encode_histogram(&m.normal_wait),
            burst_wait_ns: encode_histogram(&m.burst_wait),
            job_overshoot_ns: encode_histogram(&m.overshoot),
            dispatch_floor_ns: encode_histogram(&stats.dispatch_floor),
            arrival_lag_ns: encode_histogram(&m.lag),
            wake_late_ns: encode_measured(&stats.timing.wake_late),
            event_gap_ns: encode_measured(&stats.timing.event_gap),
        },
        normal_waits: normal_wait_trace(jobs, pool.normal_tenants),
        occupancy: OccupancyTrace {
            step_ms: pool.sample_ns as f64 / 1e6,
            busy_normal: stats.samples.iter().map(|s| s.busy_normal).collect(),
            busy_burst: stats.samples.iter().map(|s| s.busy_burst).collect(),
            queued: stats.samples.iter().map(|s| s.queued).collect(),
        },
        tenant_p95_wait_ms: per_tenant
            .p95_wait_ns
            .iter()
            .map(|w| w.map(|w| sig4(w as f64 / 1e6)))
            .collect(),
        tenant_p95_slowdown: per_tenant
            .p95_slowdown
            .iter()
            .map(|s| s.map(sig4))
            .collect(),
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
