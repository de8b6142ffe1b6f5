//! The article lab on the virtual clock: the model's own arithmetic gives
//! exact targets (2,000 jobs at cap 4 are 500 rounds of 100 ms = 50.0 s).

use std::path::Path;

mod common;

use common::check_invariants;
use noisylab::lab;
use noisylab::results::{LabResults, StrategyResults};
use noisylab::scenario::Scenario;

fn article() -> Scenario {
    Scenario::load(Path::new("lab/article.toml")).expect("lab/article.toml is valid")
}

fn strategy<'a>(r: &'a LabResults, name: &str) -> &'a StrategyResults {
    r.strategy(name).unwrap()
}

#[test]
fn shared_fifo_makes_everyone_wait_for_the_burst() {
    let r = lab::virtual_lab(article());
    let s = strategy(&r, "Shared FIFO");
    for run in &s.runs {
        let f = &run.figures;
        let done = f.noisy_done_s.unwrap();
        assert!((10.0..=10.1).contains(&done), "noisy done {done}");
        assert!(
            (9.9..=10.1).contains(&(f.normal_wait_ms.max / 1e3)),
            "max {}",
            f.normal_wait_ms.max
        );
        assert!(
            (9200.0..=9800.0).contains(&f.normal_wait_ms.p95),
            "p95 {}",
            f.normal_wait_ms.p95
        );
        assert_eq!(f.normal_jobs, 480);
        assert_eq!(
            f.idle_workers_while_waiting, 0.0,
            "fifo without a cap is work-conserving"
        );
    }
}

#[test]
fn a_cap_of_4_takes_500_rounds_and_leaves_12_workers_idle() {
    let r = lab::virtual_lab(article());
    for name in ["FIFO with cap of 4 per tenant", "Fair queue with cap of 4"] {
        for run in &strategy(&r, name).runs {
            let f = &run.figures;
            assert_eq!(
                f.noisy_done_s,
                Some(50.0),
                "{name}: 2,000 jobs / 4 × 100 ms"
            );
            assert_eq!(f.normal_wait_ms.max, 0.0, "{name}: normal jobs never wait");
            // While normal traffic runs: 20 workers − 4 noisy − about 4 normal.
            let idle = f.idle_workers_while_waiting_in_traffic;
            assert!((11.0..=13.0).contains(&idle), "{name}: {idle}");
            // After it (t = 12 s to 52 s) 16 sit idle: (10 s × ~12 + 40 s × 16) / 50 s.
            assert!(
                (15.0..=15.4).contains(&f.idle_workers_while_waiting),
                "{name}: {}",
                f.idle_workers_while_waiting
            );
        }
    }
}

#[test]
fn a_fair_queue_without_cap_is_work_conserving_and_cheap_for_neighbours() {
    let r = lab::virtual_lab(article());
    for run in &strategy(&r, "Fair queue, no cap").runs {
        let f = &run.figures;
        let done = f.noisy_done_s.unwrap();
        assert!((11.5..=12.6).contains(&done), "noisy done {done}");
        // A normal job waits at most for the next worker to free up.
        assert!(f.normal_wait_ms.max < 100.0, "max {}", f.normal_wait_ms.max);
        assert!(f.normal_wait_ms.p50 < 25.0, "p50 {}", f.normal_wait_ms.p50);
        assert_eq!(f.idle_workers_while_waiting, 0.0);
    }
}

#[test]
fn a_queue_limit_of_100_rejects_1896_and_finishes_in_2_6_s() {
    let r = lab::virtual_lab(article());
    for run in &strategy(&r, "Fair queue, queue limit 100").runs {
        let f = &run.figures;
        assert_eq!(f.rejected, 1896, "2,000 − 4 running − 100 waiting");
        assert_eq!(f.noisy_done_s, Some(2.6), "104 jobs / 4 × 100 ms");
        assert_eq!(
            f.retry_after_s, 3,
            "100 waiting / 4 at a time × 100 ms = 2.5 s, rounded up"
        );
        assert_eq!(f.normal_wait_ms.max, 0.0);
    }
}

/// Every strategy: nothing lost, a tenant's jobs in its own order, caps kept.
#[test]
fn invariants_hold_for_every_strategy_and_seed() {
    let scenario = article();
    for strategy in &scenario.strategy {
        for seed in 1..=3 {
            let jobs = lab::Model::new(&scenario, strategy, seed).run().jobs;
            check_invariants(&scenario, strategy, &jobs);
        }
    }
    // And what the lab reports of them is what their records say.
    let tallies = common::check_lab_outcomes(&scenario);
    assert_eq!(tallies[14].refused[0], 1_896, "the post's rejections");
}

#[test]
fn the_same_seed_gives_byte_identical_json() {
    let a = serde_json::to_vec(&lab::virtual_lab(article())).unwrap();
    let b = serde_json::to_vec(&lab::virtual_lab(article())).unwrap();
    assert_eq!(a, b);
    let mut other = article();
    other.seed = 99;
    assert_ne!(
        a,
        serde_json::to_vec(&lab::virtual_lab(other)).unwrap(),
        "the seed matters"
    );
}

#[test]
fn medians_and_spread_come_from_the_runs() {
    let r = lab::virtual_lab(article());
    let s = strategy(&r, "Shared FIFO");
    let mut p95: Vec<f64> = s
        .runs
        .iter()
        .map(|r| r.figures.normal_wait_ms.p95)
        .collect();
    p95.sort_by(f64::total_cmp);
    assert_eq!(s.runs.len(), 3);
    assert_eq!(s.median.normal_wait_ms.p95, p95[1]);
    assert_eq!(s.min.normal_wait_ms.p95, p95[0]);
    assert_eq!(s.max.normal_wait_ms.p95, p95[2]);
    assert_eq!(
        s.runs.iter().map(|r| r.seed).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

/// The virtual clock keeps every instant to the nanosecond: sub-millisecond
/// arrival phases are submitted exactly when planned, and a job holds its
/// worker exactly `job_ms` (checked in `check_invariants`).
#[test]
fn the_virtual_clock_keeps_sub_millisecond_instants() {
    let scenario = article();
    let jobs = lab::Model::new(&scenario, &scenario.strategy[3], 1)
        .run()
        .jobs;
    assert!(
        jobs.iter().all(|j| j.enqueued == j.planned),
        "no arrival moved"
    );
    let sub_ms = jobs.iter().filter(|j| j.planned % 1_000_000 != 0).count();
    assert!(
        sub_ms > 400,
        "random phases are not rounded to milliseconds: {sub_ms}"
    );
    assert!(jobs.iter().all(|j| j.finished - j.started == 100_000_000));
}
