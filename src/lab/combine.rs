//! From a strategy's runs to their median, min and max, figure by figure.

use std::collections::BTreeMap;

use crate::results::{
    CarrierFigures, ClassFaults, ClassFigures, Delivery, Fairness, FaultFigures, FaultRecovery,
    Figures, PassedOver, QueueFigures, Refused, RunResult, Slowdown, StrategyResults,
    TenantFigures,
};
use crate::scenario::Strategy;
use crate::stats::{Percentiles, median};

/// Which of a strategy's runs a combined figure stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    Median,
    Min,
    Max,
}

impl Pick {
    /// The value of sorted values.
    fn value(self, sorted: &[f64]) -> f64 {
        match self {
            Pick::Median => median(sorted),
            Pick::Min => sorted[0],
            Pick::Max => sorted[sorted.len() - 1],
        }
    }

    /// The index of the run it stands for, of `n` sorted (upper median).
    fn index(self, n: usize) -> usize {
        match self {
            Pick::Median => n / 2,
            Pick::Min => 0,
            Pick::Max => n - 1,
        }
    }
}

/// A strategy's runs with their median, min and max, figure by figure.
pub fn strategy(def: &Strategy, runs: Vec<RunResult>) -> StrategyResults {
    let figures: Vec<&Figures> = runs.iter().map(|r| &r.figures).collect();
    StrategyResults {
        median: combine(&figures, Pick::Median),
        min: combine(&figures, Pick::Min),
        max: combine(&figures, Pick::Max),
        name: def.name.clone(),
        queue: def.discipline(),
        late: crate::results::Lateness::sum(runs.iter().filter_map(|r| r.late.as_ref())),
        runs,
    }
}

/// `pick` of each field's values across runs; `None` where no run has one.
fn pick_opt(values: impl Iterator<Item = Option<f64>>, pick: Pick) -> Option<f64> {
    let mut v: Vec<f64> = values.flatten().collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| pick.value(&v))
}

fn pick_all(values: impl Iterator<Item = f64>, pick: Pick) -> f64 {
    pick_opt(values.map(Some), pick).unwrap_or(f64::NAN)
}

fn pick_percentiles<'a>(
    ps: impl Iterator<Item = &'a Percentiles> + Clone,
    pick: Pick,
) -> Percentiles {
    Percentiles {
        p50: pick_all(ps.clone().map(|p| p.p50), pick),
        p95: pick_all(ps.clone().map(|p| p.p95), pick),
        p99: pick_all(ps.clone().map(|p| p.p99), pick),
        max: pick_all(ps.map(|p| p.max), pick),
    }
}

/// Combine several runs field by field.
fn combine(runs: &[&Figures], pick: Pick) -> Figures {
    let f = |get: &dyn Fn(&Figures) -> f64| pick_all(runs.iter().map(|r| get(r)), pick);
    let count = |get: &dyn Fn(&Figures) -> u64| f(&|r| get(r) as f64).round() as u64;
    Figures {
        normal_wait_ms: pick_percentiles(runs.iter().map(|r| &r.normal_wait_ms), pick),
        noisy_done_s: pick_opt(runs.iter().map(|r| r.noisy_done_s), pick),
        rejected: count(&|r| r.rejected),
        normal_jobs: count(&|r| r.normal_jobs),
        job_overshoot_ms: pick_percentiles(runs.iter().map(|r| &r.job_overshoot_ms), pick),
        dispatch_floor_us: pick_percentiles(runs.iter().map(|r| &r.dispatch_floor_us), pick),
        arrival_lag_ms: pick_percentiles(runs.iter().map(|r| &r.arrival_lag_ms), pick),
        normal_arrival_lag_ms: runs
            .iter()
            .map(|r| r.normal_arrival_lag_ms.as_ref())
            .collect::<Option<Vec<_>>>()
            .map(|ps| pick_percentiles(ps.into_iter(), pick)),
        idle_workers_while_waiting: f(&|r| r.idle_workers_while_waiting),
        idle_workers_while_waiting_in_traffic: f(&|r| r.idle_workers_while_waiting_in_traffic),
        waiting_s: f(&|r| r.waiting_s),
        retry_after_s: count(&|r| r.retry_after_s),
        lab_s: f(&|r| r.lab_s),
        classes: combine_classes(runs, pick),
        tenants: combine_tenants(runs, pick),
        fairness: Fairness {
            jain: f(&|r| r.fairness.jain),
            max_service_diff: f(&|r| r.fairness.max_service_diff),
            mean_service_diff: f(&|r| r.fairness.mean_service_diff),
            unit: runs
                .first()
                .map_or_else(String::new, |r| r.fairness.unit.clone()),
            window_s: f(&|r| r.fairness.window_s),
        },
        delivery: combine_delivery(runs.iter().map(|r| &r.delivery), pick),
        queue: combine_queue(runs, pick),
        faults: combine_faults(runs, pick),
        carrier: combine_carrier(runs, pick),
    }
}

/// `pick` of each of a team's queue's counts across the runs that have them.
fn combine_carrier(runs: &[&Figures], pick: Pick) -> Option<CarrierFigures> {
    let cs: Vec<&CarrierFigures> = runs.iter().filter_map(|r| r.carrier.as_ref()).collect();
    if cs.is_empty() {
        return None;
    }
    let count = |get: &dyn Fn(&CarrierFigures) -> u64| {
        pick_all(cs.iter().map(|c| get(c) as f64), pick).round() as u64
    };
    Some(CarrierFigures {
        accepted: count(&|c| c.accepted),
        refused: count(&|c| c.refused),
        errors: count(&|c| c.errors),
        lost: count(&|c| c.lost),
        duplicate_reports: count(&|c| c.duplicate_reports),
        refused_reports: count(&|c| c.refused_reports),
        passed_over: combine_passed_over(&cs, pick),
    })
}

/// `pick` of the jobs passed over, their longest wait and the most workers
/// idle, across the runs that counted them.
fn combine_passed_over(cs: &[&CarrierFigures], pick: Pick) -> Option<PassedOver> {
    let ps: Vec<PassedOver> = cs.iter().filter_map(|c| c.passed_over).collect();
    if ps.is_empty() {
        return None;
    }
    let f = |get: &dyn Fn(&PassedOver) -> f64| pick_all(ps.iter().map(get), pick);
    Some(PassedOver {
        jobs: f(&|p| p.jobs as f64).round() as u64,
        wait_s_max: f(&|p| p.wait_s_max),
        idle_max: f(&|p| p.idle_max as f64).round() as u32,
    })
}

/// `pick` of each queue figure across the runs that have them.
fn combine_queue(runs: &[&Figures], pick: Pick) -> Option<QueueFigures> {
    let qs: Vec<&QueueFigures> = runs.iter().filter_map(|r| r.queue.as_ref()).collect();
    if qs.is_empty() {
        return None;
    }
    let f = |get: &dyn Fn(&QueueFigures) -> f64| pick_all(qs.iter().map(|q| get(q)), pick);
    // A figure the server gave in every run, else none.
    let opt = |get: &dyn Fn(&QueueFigures) -> Option<f64>| {
        let all: Option<Vec<f64>> = qs.iter().map(|q| get(q)).collect();
        all.map(|v| pick_all(v.into_iter(), pick))
    };
    Some(QueueFigures {
        take_rtt_us: pick_percentiles(qs.iter().map(|q| &q.take_rtt_us), pick),
        hold_overshoot_us: pick_percentiles(qs.iter().map(|q| &q.hold_overshoot_us), pick),
        submit_rtt_us: pick_percentiles(qs.iter().map(|q| &q.submit_rtt_us), pick),
        server_us_per_call: opt(&|q| q.server_us_per_call),
        server_cpu_s: opt(&|q| q.server_cpu_s),
        workers_cpu_s: opt(&|q| q.workers_cpu_s),
        calls_per_job: f(&|q| q.calls_per_job),
        bytes_per_job: opt(&|q| q.bytes_per_job),
        wal_bytes_per_job: opt(&|q| q.wal_bytes_per_job),
        faults: None, // see combine_faults
    })
}

/// `pick` of each fault figure across the runs that have them.
fn combine_faults(runs: &[&Figures], pick: Pick) -> Option<FaultFigures> {
    let fs: Vec<&FaultFigures> = runs.iter().filter_map(|r| r.fault_figures()).collect();
    if fs.is_empty() {
        return None;
    }
    let f = |get: &dyn Fn(&FaultFigures) -> f64| pick_all(fs.iter().map(|x| get(x)), pick);
    let count = |get: &dyn Fn(&FaultFigures) -> u64| f(&|x| get(x) as f64).round() as u64;
    Some(FaultFigures {
        lease_ms: f(&|x| x.lease_ms),
        injected: count(&|x| x.injected),
        redelivered: count(&|x| x.redelivered),
        ran_twice: count(&|x| x.ran_twice),
        late_finishes_refused: count(&|x| x.late_finishes_refused),
        renewals: count(&|x| x.renewals),
        dropped_connections: count(&|x| x.dropped_connections),
        lost: count(&|x| x.lost),
        restart_ms: f(&|x| x.restart_ms),
        by_class: combine_class_faults(&fs, pick),
        recovery: combine_recovery(&fs, pick),
    })
}

/// `pick` of each fault's figures across the runs (a run that never
/// recovered counts as the slowest).
fn combine_recovery(fs: &[&FaultFigures], pick: Pick) -> Vec<FaultRecovery> {
    let n = fs.iter().map(|x| x.recovery.len()).max().unwrap_or(0);
    (0..n)
        .filter_map(|k| {
            let of: Vec<&FaultRecovery> = fs.iter().filter_map(|x| x.recovery.get(k)).collect();
            let first = of.first()?;
            // Of the runs that have the figure.
            let f = |get: &dyn Fn(&FaultRecovery) -> Option<f64>| {
                let v: Vec<f64> = of.iter().filter_map(|x| get(x)).collect();
                (!v.is_empty()).then(|| pick_all(v.into_iter(), pick))
            };
            let recovered: Vec<Option<f64>> = of.iter().map(|x| x.recovered_s).collect();
            Some(FaultRecovery {
                kind: first.kind.clone(),
                at_s: first.at_s,
                window_ms: first.window_ms,
                before_ms: f(&|x| x.before_ms),
                peak_ms: f(&|x| x.peak_ms),
                recovered_s: pick_recovery(&recovered, pick),
            })
        })
        .collect()
}

/// `pick` of each class's struck jobs across runs (a run without a class
/// counts 0 for it); classes left with none left out.
fn combine_class_faults(fs: &[&FaultFigures], pick: Pick) -> BTreeMap<String, ClassFaults> {
    let count = |get: &dyn Fn(&FaultFigures) -> u64| {
        pick_all(fs.iter().map(|x| get(x) as f64), pick).round() as u64
    };
    let names: std::collections::BTreeSet<&String> =
        fs.iter().flat_map(|x| x.by_class.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let of = |x: &FaultFigures| x.by_class.get(name).copied().unwrap_or_default();
            let c = ClassFaults {
                redelivered: count(&|x| of(x).redelivered),
                ran_twice: count(&|x| of(x).ran_twice),
            };
            (name.clone(), c)
        })
        .filter(|(_, c)| *c != ClassFaults::default())
        .collect()
}

/// `pick` of each delivery figure across runs.
fn combine_delivery<'a>(ds: impl Iterator<Item = &'a Delivery> + Clone, pick: Pick) -> Delivery {
    let f = |get: &dyn Fn(&Delivery) -> f64| pick_all(ds.clone().map(get), pick);
    let count = |get: &dyn Fn(&Delivery) -> u64| f(&|d| get(d) as f64).round() as u64;
    Delivery {
        attempts: count(&|d| d.attempts),
        unique_jobs: count(&|d| d.unique_jobs),
        completed: count(&|d| d.completed),
        given_up: count(&|d| d.given_up),
        timed_out: count(&|d| d.timed_out),
        unfinished: count(&|d| d.unfinished),
        refused: Refused {
            limit: count(&|d| d.refused.limit),
            rate: count(&|d| d.refused.rate),
            budget: count(&|d| d.refused.budget),
            provider: count(&|d| d.refused.provider),
        },
        amplification: f(&|d| d.amplification),
        provider_saturated_s: f(&|d| d.provider_saturated_s),
        wasted_worker_s: f(&|d| d.wasted_worker_s),
        // A run that never recovered counts as the slowest.
        recovery_s: {
            let v: Vec<Option<f64>> = ds.clone().map(|d| d.recovery_s).collect();
            pick_recovery(&v, pick)
        },
        goodput_jobs_per_s: f(&|d| d.goodput_jobs_per_s),
        goodput_tokens_out_per_s: f(&|d| d.goodput_tokens_out_per_s),
    }
}

/// `pick` of recovery times where "never" (`None`) is longer than any.
fn pick_recovery(v: &[Option<f64>], pick: Pick) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut sorted: Vec<f64> = v.iter().map(|r| r.unwrap_or(f64::INFINITY)).collect();
    sorted.sort_by(f64::total_cmp);
    let at = sorted[pick.index(sorted.len())];
    at.is_finite().then_some(at)
}

fn combine_classes(runs: &[&Figures], pick: Pick) -> BTreeMap<String, ClassFigures> {
    let Some(first) = runs.first() else {
        return BTreeMap::new();
    };
    first
        .classes
        .keys()
        .map(|name| {
            let cs: Vec<&ClassFigures> = runs.iter().filter_map(|r| r.classes.get(name)).collect();
            let f = |get: &dyn Fn(&ClassFigures) -> f64| pick_all(cs.iter().map(|c| get(c)), pick);
            let count = |get: &dyn Fn(&ClassFigures) -> u64| f(&|c| get(c) as f64).round() as u64;
            let figures = ClassFigures {
                wait_ms: pick_percentiles(cs.iter().map(|c| &c.wait_ms), pick),
                slowdown: Slowdown {
                    p50: f(&|c| c.slowdown.p50),
                    p95: f(&|c| c.slowdown.p95),
                },
                jobs: count(&|c| c.jobs),
                rejected: count(&|c| c.rejected),
                tokens_in: count(&|c| c.tokens_in),
                tokens_out: count(&|c| c.tokens_out),
                done_s: pick_opt(cs.iter().map(|c| c.done_s), pick),
                service: f(&|c| c.service),
                delivery: combine_delivery(cs.iter().map(|c| &c.delivery), pick),
            };
            (name.clone(), figures)
        })
        .collect()
}

/// The worst tenant of the run the pick stands for; over the alert in a
/// majority of runs (median), in every run (min) or in any (max).
fn combine_tenants(runs: &[&Figures], pick: Pick) -> TenantFigures {
    if runs.is_empty() {
        return TenantFigures::default();
    }
    let mut by_worst: Vec<&TenantFigures> = runs.iter().map(|r| &r.tenants).collect();
    by_worst.sort_by(|a, b| a.worst_p95_ms.total_cmp(&b.worst_p95_ms));
    let needed = match pick {
        Pick::Median => runs.len() / 2 + 1,
        Pick::Min => runs.len(),
        Pick::Max => 1,
    };
    // In the order the runs name them (tenant id order).
    let mut names: Vec<&String> = Vec::new();
    for name in runs.iter().flat_map(|r| &r.tenants.over_alert) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let over_alert = names
        .into_iter()
        .filter(|n| {
            runs.iter()
                .filter(|r| r.tenants.over_alert.contains(n))
                .count()
                >= needed
        })
        .cloned()
        .collect();
    TenantFigures {
        worst_p95_ms: pick_all(runs.iter().map(|r| r.tenants.worst_p95_ms), pick),
        worst: by_worst[pick.index(runs.len())].worst.clone(),
        over_alert,
        jain_slowdown: pick_all(runs.iter().map(|r| r.tenants.jain_slowdown), pick),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn struck(classes: &[(&str, u64, u64)]) -> FaultFigures {
        FaultFigures {
            by_class: classes
                .iter()
                .map(|&(name, redelivered, ran_twice)| {
                    let c = ClassFaults {
                        redelivered,
                        ran_twice,
                    };
                    (name.to_string(), c)
                })
                .collect(),
            ..FaultFigures::default()
        }
    }

    #[test]
    fn a_class_struck_in_some_runs_counts_zero_in_the_others() {
        let runs = [
            struck(&[("noisy", 8, 4), ("normal", 2, 1)]),
            struck(&[("noisy", 6, 2)]),
            struck(&[("noisy", 9, 5), ("normal", 4, 0)]),
        ];
        let fs: Vec<&FaultFigures> = runs.iter().collect();
        let median = combine_class_faults(&fs, Pick::Median);
        assert_eq!(
            median["noisy"],
            ClassFaults {
                redelivered: 8,
                ran_twice: 4
            }
        );
        assert_eq!(
            median["normal"],
            ClassFaults {
                redelivered: 2,
                ran_twice: 0
            }
        );
        // The least struck run of each class: normal's is the run without it.
        let min = combine_class_faults(&fs, Pick::Min);
        assert_eq!(
            min["noisy"],
            ClassFaults {
                redelivered: 6,
                ran_twice: 2
            }
        );
        assert!(!min.contains_key("normal"), "{min:?}");
    }
}
