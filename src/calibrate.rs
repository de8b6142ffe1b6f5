//! The harness's own noise floor on this machine: how late each timer wakes,
//! and what dispatching a job to an idle worker costs.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::engine::{self, JobRecord, Pool, RealClock, Timer};
use crate::sched::{Fifo, Limits};
use crate::stats::{Percentiles, new_histogram, percentiles, record};

/// Targets from the project's precision issue, shown beside the measurements.
pub const TARGET_OVERSHOOT_P50_MS: f64 = 0.05;
pub const TARGET_OVERSHOOT_P99_MS: f64 = 0.2;
pub const TARGET_DISPATCH_P50_US: f64 = 1.0;
pub const TARGET_DISPATCH_P99_US: f64 = 10.0;

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct CalibratePlan {
    /// Sleeps per timer.
    pub sleeps: u32,
    pub sleep: Duration,
    /// Jobs dispatched to an idle worker, 1 ms apart.
    pub dispatches: u32,
}

impl CalibratePlan {
    /// `noisylab calibrate`: a few hundred job-length sleeps per timer (about 45 s).
    pub const FULL: CalibratePlan = CalibratePlan {
        sleeps: 200,
        sleep: Duration::from_millis(100),
        dispatches: 2000,
    };
    /// Saved with every real-clock lab: about 1.5 s.
    pub const QUICK: CalibratePlan = CalibratePlan {
        sleeps: 50,
        sleep: Duration::from_millis(10),
        dispatches: 500,
    };
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub sleeps: u32,
    pub sleep_ms: f64,
    /// How late the precise timer (`--timer precise`) woke.
    pub precise_overshoot_ms: Percentiles,
    /// How late tokio's own timer (`--timer tokio`) woke.
    pub tokio_overshoot_ms: Percentiles,
    /// Precise timer wakes before the instant asked for (must be 0).
    pub precise_early: u32,
    pub dispatches: u32,
    /// Enqueue-to-start wait of a job that finds a worker idle.
    pub dispatch_floor_us: Percentiles,
}

pub fn run(plan: CalibratePlan) -> Result<Calibration> {
    let runtime = engine::clock::runtime(engine::clock::Drivers::Timers)?;
    let (precise, early) = runtime.block_on(measure_timer(Timer::Precise, plan));
    let (tokio, _) = runtime.block_on(measure_timer(Timer::Tokio, plan));
    let floor = runtime.block_on(measure_dispatch(plan.dispatches));
    Ok(Calibration {
        sleeps: plan.sleeps,
        sleep_ms: plan.sleep.as_secs_f64() * 1e3,
        precise_overshoot_ms: percentiles(&precise, 1e6),
        tokio_overshoot_ms: percentiles(&tokio, 1e6),
        precise_early: early,
        dispatches: plan.dispatches,
        dispatch_floor_us: floor,
    })
}

/// Overshoot (ns) of `plan.sleeps` back-to-back sleeps, and how many woke early.
pub async fn measure_timer(
    timer: Timer,
    plan: CalibratePlan,
) -> (hdrhistogram::Histogram<u64>, u32) {
    let mut h = new_histogram();
    let mut early = 0;
    for _ in 0..plan.sleeps {
        let target = Instant::now() + plan.sleep;
        match timer {
            Timer::Precise => {
                engine::clock::precise_sleep_until(target, engine::clock::PRECISE_MARGIN).await
            }
            Timer::Tokio => tokio::time::sleep_until(target.into()).await,
        }
        let woke = Instant::now();
        match woke.checked_duration_since(target) {
            Some(late) => record(&mut h, late.as_nanos() as u64),
            None => early += 1,
        }
    }
    (h, early)
}

/// Jobs 1 ms apart into an idle single-worker pool on the real clock, through
/// the engine itself: the dispatch floor as the lab sees it.
async fn measure_dispatch(jobs: u32) -> Percentiles {
    let pool = Pool {
        workers: 1,
        mean_job_ns: vec![100_000],
        normal_tenants: 1,
        cap: None,
        sample_ns: 1_000_000_000,
        traffic_ns: u64::from(jobs) * 1_000_000,
        model_overshoot_ns: 0,
        jitter: None,
        reserve: None,
        by_key: false,
        faults: None,
        traffic: None,
    };
    let plan: Vec<JobRecord> = (0..u64::from(jobs))
        .map(|i| JobRecord::planned(0, (i + 1) * 1_000_000, 100_000))
        .collect();
    let mut sched = Fifo::new(
        1,
        Limits {
            cap: u32::MAX,
            limit: u32::MAX,
        },
    );
    let mut clock = RealClock::start(Timer::Precise);
    let never = AtomicBool::new(false);
    let (_, stats) = engine::run(&mut clock, &pool, &mut sched, plan, 0, &never)
        .await
        .expect("calibration is never interrupted");
    percentiles(&stats.dispatch_floor, 1e3)
}
