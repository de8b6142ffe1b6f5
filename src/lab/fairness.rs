//! Fairness while tenants compete: service per tenant in windows, among the
//! tenants backlogged for the whole window, weight-normalised, as the VTC
//! paper measures it (its `plot_6.2_work_diff.py`): the largest and the mean
//! difference in service between two such tenants, and Jain's index over
//! their service ÷ weight, averaged over the windows.
//!
//! A tenant is backlogged while one of its jobs waits (a tenant at its cap
//! with work queued counts: it is asking for service). A job's service is
//! spread evenly over the time it runs; its amount is the scenario's
//! `service`: worker time in ms (default), one a job, or its tokens at the
//! VTC paper's prices, the same for every strategy so they compare.

use std::collections::BTreeMap;

use crate::engine::{JobRecord, NEVER, Nanos};
use crate::results::Fairness;
use crate::scenario::{COST_IN, COST_OUT, Cost, Population, Strategy};

/// The window: a second, or ten mean jobs where jobs are longer.
pub fn window_ns(jobs: &[JobRecord]) -> Nanos {
    let started: Vec<&JobRecord> = jobs.iter().filter(|j| j.started != NEVER).collect();
    let mean = started.iter().map(|j| j.duration as f64).sum::<f64>() / started.len().max(1) as f64;
    (mean * 10.0).max(1e9) as Nanos
}

/// The name of a service unit.
pub fn unit(service: Cost) -> &'static str {
    match service {
        Cost::Time => "worker-ms",
        Cost::Jobs => "jobs",
        Cost::Tokens => "token cost",
    }
}

/// Each tenant's service while contended (in the windows it was backlogged
/// throughout), and the figures.
pub fn measure(
    population: &Population,
    strategy: &Strategy,
    service: Cost,
    jobs: &[JobRecord],
) -> (Vec<f64>, Fairness) {
    let tenants = population.tenants();
    // Service is judged against the weights the strategy was given.
    let weights = population.weights_for(strategy);
    let window = window_ns(jobs);
    let covered = covered_windows(tenants, jobs, window);
    let mut total = vec![0.0; tenants];
    let mut in_window: BTreeMap<(u64, u32), f64> = BTreeMap::new();
    for j in jobs
        .iter()
        .filter(|j| j.started != NEVER && j.finished != NEVER)
    {
        let amount = match service {
            Cost::Time => j.duration as f64 / 1e6,
            Cost::Jobs => 1.0,
            Cost::Tokens => COST_IN * f64::from(j.tokens_in) + COST_OUT * f64::from(j.tokens_out),
        };
        let (start, end) = (j.started, j.finished.max(j.started + 1));
        let rate = amount / (end - start) as f64;
        for w in start / window..=(end - 1) / window {
            if !covered[j.tenant as usize].contains(&w) {
                continue;
            }
            let overlap = end.min((w + 1) * window) - start.max(w * window);
            *in_window.entry((w, j.tenant)).or_default() += rate * overlap as f64;
            total[j.tenant as usize] += rate * overlap as f64;
        }
    }
    // Per window, the normalised service of every tenant backlogged throughout.
    let mut by_window: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (t, windows) in covered.iter().enumerate() {
        for &w in windows {
            let s = in_window.get(&(w, t as u32)).copied().unwrap_or(0.0);
            by_window.entry(w).or_default().push(s / weights[t]);
        }
    }
    let mut diffs = Vec::new();
    let mut jains = Vec::new();
    for served in by_window.values().filter(|v| v.len() >= 2) {
        let max = served.iter().copied().fold(f64::MIN, f64::max);
        let min = served.iter().copied().fold(f64::MAX, f64::min);
        diffs.push(max - min);
        jains.push(crate::stats::jain(served));
    }
    let mean = |v: &[f64], empty: f64| {
        if v.is_empty() {
            empty
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let fairness = Fairness {
        jain: mean(&jains, 1.0),
        max_service_diff: diffs.iter().copied().fold(0.0, f64::max),
        mean_service_diff: mean(&diffs, 0.0),
        unit: unit(service).to_string(),
        window_s: window as f64 / 1e9,
    };
    (total, fairness)
}

/// For each tenant, the windows it was backlogged throughout, sorted.
fn covered_windows(tenants: usize, jobs: &[JobRecord], window: Nanos) -> Vec<Vec<u64>> {
    let mut waits: Vec<Vec<(Nanos, Nanos)>> = vec![Vec::new(); tenants];
    for j in jobs
        .iter()
        .filter(|j| j.enqueued != NEVER && j.started != NEVER)
    {
        if j.started > j.enqueued {
            waits[j.tenant as usize].push((j.enqueued, j.started));
        }
    }
    waits
        .into_iter()
        .map(|mut spans| {
            spans.sort_unstable();
            let mut out = Vec::new();
            let mut merged: Option<(Nanos, Nanos)> = None;
            let flush = |(s, e): (Nanos, Nanos), out: &mut Vec<u64>| {
                let first = s.div_ceil(window);
                let last = e / window; // windows [k W, (k+1) W) inside [s, e)
                out.extend(first..last);
            };
            for (s, e) in spans {
                merged = match merged {
                    Some((ms, me)) if s <= me => Some((ms, me.max(e))),
                    Some(done) => {
                        flush(done, &mut out);
                        Some((s, e))
                    }
                    None => Some((s, e)),
                };
            }
            if let Some(done) = merged {
                flush(done, &mut out);
            }
            out
        })
        .collect()
}
