//! The lab: every strategy of a scenario, `runs` times each, on one clock.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::engine::{self, JobRecord, Pool, RealClock, RunStats, Timer, VirtualClock, load};
use crate::machine::Machine;
use crate::output::progress::Progress;
use crate::results::{
    ClockKind, LabResults, RunResult, SCHEMA_VERSION, StrategyResults, summarize_run,
};
use crate::scenario::{Scenario, Strategy};
use crate::sched::AnyScheduler;

/// Occupancy is sampled every 50 ms of lab time for the plots.
pub const SAMPLE_NS: u64 = 50_000_000;

/// What to run, already checked.
#[derive(Debug, Clone)]
pub struct LabPlan {
    pub scenario: Scenario,
    pub clock: ClockKind,
    pub timer: Timer,
    /// Keep histograms and traces in the results (needed to save them).
    pub keep_raw: bool,
}

/// A finished (or interrupted) lab.
#[derive(Debug)]
pub struct LabOutcome {
    pub results: LabResults,
    /// Ctrl-C stopped the lab; `results` holds only the runs that completed.
    pub interrupted: bool,
}

pub fn pool_for(scenario: &Scenario, strategy: &Strategy) -> Pool {
    Pool {
        workers: scenario.workers,
        job_ns: scenario.job_ms * 1_000_000,
        normal_tenants: scenario.normal.tenants,
        cap: strategy.cap,
        sample_ns: SAMPLE_NS,
        traffic_ns: load::secs_to_ns(scenario.traffic_s),
    }
}

/// Run one strategy once on the virtual clock. Deterministic for a seed.
pub fn run_virtual(
    scenario: &Scenario,
    strategy: &Strategy,
    seed: u64,
) -> (Vec<JobRecord>, RunStats) {
    let pool = pool_for(scenario, strategy);
    let plan = load::plan(scenario, seed);
    let mut sched = AnyScheduler::new(strategy, tenant_count(scenario));
    let never = AtomicBool::new(false);
    let mut clock = VirtualClock::new();
    let fut = engine::run(&mut clock, &pool, &mut sched, plan, &never);
    block_on_ready(fut).expect("a virtual run is never interrupted")
}

fn tenant_count(scenario: &Scenario) -> usize {
    scenario.normal.tenants as usize + scenario.burst_tenants().len()
}

/// Run the whole lab. Between and during runs `stop` is watched: once set,
/// the lab returns what completed so far with `interrupted` set.
pub fn run(plan: &LabPlan, stop: &AtomicBool, progress: &Progress) -> Result<LabOutcome> {
    let scenario = &plan.scenario;
    let real = plan.clock == ClockKind::Real;
    let mut machine = Machine::this();
    if real {
        machine.load_start = Machine::load_now();
    }
    let created = real.then(|| {
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default()
    });
    let calibration = if real {
        Some(crate::calibrate::run(
            crate::calibrate::CalibratePlan::QUICK,
        )?)
    } else {
        None
    };
    let wall = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("cannot start the tokio runtime")?;
    let total_runs = scenario.strategy.len() * scenario.runs as usize;
    let mut strategies = Vec::new();
    let mut interrupted = false;
    for strategy in &scenario.strategy {
        let pool = pool_for(scenario, strategy);
        let mut runs: Vec<RunResult> = Vec::new();
        for k in 0..scenario.runs {
            let seed = scenario.seed + u64::from(k);
            let out = if real {
                // The virtual clock predicts the run's length for the progress bar.
                let expected_s = run_virtual(scenario, strategy, seed).1.end as f64 / 1e9;
                let index = strategies.len() * scenario.runs as usize + k as usize;
                let bar = progress.run_bar(
                    &strategy.name,
                    k + 1,
                    scenario.runs,
                    index,
                    total_runs,
                    expected_s,
                );
                let mut sched = AnyScheduler::new(strategy, tenant_count(scenario));
                let mut clock = RealClock::start(plan.timer);
                let jobs = load::plan(scenario, seed);
                let out = runtime.block_on(engine::run(&mut clock, &pool, &mut sched, jobs, stop));
                bar.finish();
                out
            } else {
                Ok(run_virtual(scenario, strategy, seed))
            };
            let Ok((jobs, stats)) = out else {
                interrupted = true;
                break;
            };
            runs.push(summarize_run(
                scenario,
                &pool,
                seed,
                &jobs,
                &stats,
                plan.keep_raw,
            ));
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                interrupted = true;
                break;
            }
        }
        if !runs.is_empty() {
            strategies.push(StrategyResults::new(
                strategy.name.clone(),
                strategy.describe(),
                runs,
            ));
        }
        if interrupted {
            break;
        }
    }
    if real {
        machine.load_end = Machine::load_now();
    }
    let mut results = LabResults {
        schema: SCHEMA_VERSION,
        tool: env!("CARGO_PKG_VERSION").to_string(),
        scenario: scenario.clone(),
        clock: plan.clock,
        timer: real.then_some(plan.timer),
        seed: scenario.seed,
        machine,
        created,
        calibration,
        wall_s: real.then(|| wall.elapsed().as_secs_f64()),
        peak_rss_mib: if real {
            crate::machine::peak_rss_mib()
        } else {
            None
        },
        warnings: Vec::new(),
        strategies,
    };
    results.warnings = crate::output::warnings::check(&results);
    Ok(LabOutcome {
        results,
        interrupted,
    })
}

/// Drive a future that never waits on I/O or timers (a virtual-clock run)
/// to completion on this thread.
pub fn block_on_ready<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a virtual-clock run never waits"),
    }
}

/// Where a real-clock lab saves its results by default.
pub fn default_out() -> PathBuf {
    PathBuf::from("reports")
}
