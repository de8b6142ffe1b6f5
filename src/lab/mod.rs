//! The lab: every strategy of a scenario, `runs` times each, on one clock.
//!
//! - [`run`] drives the strategies and their runs; each run is one
//!   `run_once` on the virtual clock or, inside a [`RealContext`], on the
//!   real one. The context gathers what only a real-clock lab records (the
//!   calibration before it, its start time, wall time and peak memory).
//! - [`summary`] turns a run's record into its figures, every one of them;
//!   [`combine`] a strategy's runs into their median, min and max.
//! - [`recovery`] measures the neighbours' waits across each fault.
//! - [`warnings`] decides, once, what a person should be told about the figures.

pub mod combine;
pub mod delivery;
pub mod fairness;
pub mod limits;
pub mod recovery;
pub mod summary;
pub mod warnings;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Result;

use crate::backend::{Backend, InProcess, QueueBackend, RunError, RunInput, RunRecord, Target};
use crate::calibrate::{self, CalibratePlan};
use crate::engine::faults::FaultPlan;
use crate::engine::{JobRecord, Nanos, Pool, Timer, load};
use crate::machine::Machine;
use crate::output::progress::Progress;
use crate::results::{ClockKind, LabResults, RealFacts, RunResult, SCHEMA_VERSION};
use crate::scenario::backends::{self, Capability};
use crate::scenario::{FaultKind, Scenario, Strategy};

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
    /// Where the queue lives: in this process (the default) or on a server.
    pub backend: QueueBackend,
}

/// A finished (or interrupted) lab.
#[derive(Debug)]
pub struct LabOutcome {
    pub results: LabResults,
    /// Ctrl-C stopped the lab; `results` holds only the runs that completed.
    pub interrupted: bool,
    /// The backend failed mid-lab (one line); `results` holds only the runs
    /// that completed.
    pub failed: Option<String>,
}

pub fn pool_for(scenario: &Scenario, strategy: &Strategy) -> Pool {
    let population = scenario.population();
    Pool {
        workers: scenario.workers,
        mean_job_ns: population.mean_job_ns(),
        normal_tenants: population.non_burst,
        cap: strategy.cap,
        sample_ns: SAMPLE_NS,
        traffic_ns: load::secs_to_ns(scenario.traffic_s),
        model_overshoot_ns: 0,
        jitter: None,
        reserve: strategy.reserve,
        by_key: population.by_key(strategy),
        traffic: limits::traffic_plan(scenario, strategy),
        faults: fault_plan(scenario, 0),
    }
}

/// The scenario's `[[fault]]` as the engine simulates them (`None`: it has
/// none), the server's restarts each `restart_ns` longer than their
/// `duration_s` (0 for the model). The pool is split into the worker
/// processes a lab on a server would start.
pub fn fault_plan(scenario: &Scenario, restart_ns: Nanos) -> Option<Arc<FaultPlan>> {
    if scenario.fault.is_empty() {
        return None;
    }
    let processes = scenario
        .backend
        .as_ref()
        .and_then(|b| b.processes)
        .filter(|&p| p > 0);
    Some(Arc::new(FaultPlan {
        processes: crate::scenario::faults::processes_for(scenario.workers, processes),
        lease_ns: scenario.lease_s.map(load::secs_to_ns),
        restart_ns,
        faults: scenario.fault.clone(),
    }))
}

/// One run on the model: the in-process backend on the virtual clock,
/// deterministic for a seed. The one way into the model for one run:
/// `validate` replays real runs with it, the progress bar sizes a real run
/// by it, the benches and the tests measure it (a whole lab on the model is
/// [`virtual_lab`], through the same backend).
pub struct Model<'a> {
    scenario: &'a Scenario,
    strategy: &'a Strategy,
    seed: u64,
    pool: Option<Pool>,
    plan: Option<Vec<JobRecord>>,
}

impl<'a> Model<'a> {
    /// The strategy's run with `seed`: its planned arrivals, on its pool.
    pub fn new(scenario: &'a Scenario, strategy: &'a Strategy, seed: u64) -> Model<'a> {
        Model {
            scenario,
            strategy,
            seed,
            pool: None,
            plan: None,
        }
    }

    /// On a given pool (for instance one that models a machine's measured
    /// overshoot).
    pub fn on(self, pool: Pool) -> Model<'a> {
        Model {
            pool: Some(pool),
            ..self
        }
    }

    /// With a given arrival plan (for instance one whose durations carry a
    /// machine's sampled overshoot); the seed still draws the clients'
    /// jitter.
    pub fn with_plan(self, plan: Vec<JobRecord>) -> Model<'a> {
        Model {
            plan: Some(plan),
            ..self
        }
    }

    /// The run's record.
    pub fn run(self) -> RunRecord {
        let Model {
            scenario,
            strategy,
            seed,
            pool,
            plan,
        } = self;
        let pool = pool.unwrap_or_else(|| pool_for(scenario, strategy));
        let plan = plan.unwrap_or_else(|| load::plan(scenario, seed));
        let input = RunInput {
            scenario,
            strategy,
            pool: &pool,
            plan,
            seed,
        };
        match InProcess::Virtual.run(input, &AtomicBool::new(false)) {
            Ok(record) => record,
            Err(e) => unreachable!("a virtual run is never interrupted and never fails: {e}"),
        }
    }
}

/// What a real-clock lab measures around its runs, and the runtime they use.
pub struct RealContext {
    timer: Timer,
    created: jiff::Timestamp,
    calibration: calibrate::Calibration,
    load_start: Option<[f64; 3]>,
    cpu_start: crate::machine::CpuSample,
    wall: Instant,
}

impl RealContext {
    /// Note the load and the time, calibrate (about 1.5 s), start the clock.
    pub fn begin(timer: Timer) -> Result<RealContext> {
        let load_start = Machine::load_now();
        let now = jiff::Timestamp::now();
        let created = now.round(jiff::Unit::Second).unwrap_or(now);
        let calibration = calibrate::run(CalibratePlan::QUICK)?;
        Ok(RealContext {
            timer,
            created,
            calibration,
            load_start,
            cpu_start: crate::machine::CpuSample::now(),
            wall: Instant::now(),
        })
    }

    /// The precise timer's margin, from this machine's calibration.
    fn margin(&self) -> std::time::Duration {
        let late_ms = self.calibration.tokio_overshoot_ms.max.max(0.0);
        crate::engine::clock::margin_for(std::time::Duration::from_secs_f64(late_ms / 1e3))
    }

    /// The facts to save, with the load average at both ends in `machine`.
    fn end(self, machine: &mut Machine) -> RealFacts {
        let margin_ms = self.margin().as_secs_f64() * 1e3;
        machine.load_start = self.load_start;
        machine.load_end = Machine::load_now();
        RealFacts {
            timer: self.timer,
            created: self.created,
            calibration: self.calibration,
            wall_s: self.wall.elapsed().as_secs_f64(),
            timer_margin_ms: Some(margin_ms),
            peak_rss_mib: crate::machine::peak_rss_mib(),
            causes: Some(crate::machine::CpuSample::causes_since(&self.cpu_start)),
        }
    }
}

/// Run the whole lab. Between and during runs `stop` is watched: once set,
/// the lab returns what completed so far with `interrupted` set. A backend
/// that fails mid-lab ends it the same way, with `failed` saying why.
pub fn run(plan: &LabPlan, stop: &AtomicBool, progress: &Progress) -> Result<LabOutcome> {
    let scenario = &plan.scenario;
    check_backend(plan)?;
    let mut machine = Machine::this();
    let real = match plan.clock {
        ClockKind::Real => Some(RealContext::begin(plan.timer)?),
        ClockKind::Virtual => None,
    };
    let mut backend = open_backend(plan, real.as_ref())?;
    let total = scenario.strategy.len() * scenario.runs as usize;
    let mut strategies = Vec::new();
    let (mut interrupted, mut failed) = (false, None);
    'strategies: for strategy in &scenario.strategy {
        let mut runs: Vec<RunResult> = Vec::new();
        for k in 0..scenario.runs {
            let at = Position {
                run: k,
                index: strategies.len() * scenario.runs as usize + k as usize,
                total,
            };
            match run_once(
                plan,
                strategy,
                at,
                backend.as_mut(),
                real.is_some(),
                stop,
                progress,
            ) {
                Ok(run) => runs.push(run),
                Err(RunError::Interrupted) => interrupted = true,
                Err(RunError::Failed(e)) => failed = Some(format!("{e:#}")),
            }
            interrupted |= stop.load(Ordering::Relaxed) || failed.is_some();
            if interrupted {
                break;
            }
        }
        if !runs.is_empty() {
            strategies.push(combine::strategy(strategy, runs));
        }
        if interrupted {
            break 'strategies;
        }
    }
    let facts = backend.facts();
    drop(backend); // stop a server and its workers before the wall time is taken
    let mut results = LabResults {
        schema: SCHEMA_VERSION,
        tool: env!("CARGO_PKG_VERSION").to_string(),
        scenario: scenario.clone(),
        clock: plan.clock,
        seed: scenario.seed,
        real: real.map(|r| r.end(&mut machine)),
        machine,
        backend: facts,
        warnings: Vec::new(),
        strategies,
    };
    results.warnings = warnings::check(&results);
    Ok(LabOutcome {
        results,
        interrupted: interrupted && failed.is_none(),
        failed,
    })
}

/// What the scenario asks of its backend beyond the core, each with where
/// it asks it.
fn needs(s: &Scenario) -> Vec<(String, Capability)> {
    let mut out: Vec<(String, Capability)> = (s.fault.iter().enumerate())
        .map(|(i, f)| (format!("fault[{i}]"), Capability::Fault(f.kind)))
        .collect();
    let population = s.population();
    for (i, strategy) in s.strategy.iter().enumerate() {
        let at = format!("strategy[{i}] ({:?})", strategy.name);
        // Arrival order is what a queue that only carries jobs can be
        // asked for; anything else is noisylab's discipline.
        if !strategy.arrival_order() {
            out.push((at.clone(), Capability::Discipline));
        }
        if population.turns_keys(strategy) {
            out.push((at.clone(), Capability::KeyTurns));
        }
        if let Some(traffic) = limits::traffic_plan(s, strategy) {
            let need = if traffic.has_front_door() {
                Capability::FrontDoor
            } else {
                Capability::Clients
            };
            out.push((at.clone(), need));
            let cancels = limits::class_clients(s, strategy).iter().any(|c| {
                c.timeout_s.is_some() && c.on_timeout == crate::scenario::OnTimeout::Cancel
            });
            if cancels {
                out.push((at, Capability::Cancel));
            }
        }
    }
    out
}

/// One line, before anything starts, for a lab its backend cannot run: what
/// the scenario needs that the backend does not declare it carries, and
/// what faults need of a server.
fn check_backend(plan: &LabPlan) -> Result<()> {
    let s = &plan.scenario;
    let on_model = plan.clock == ClockKind::Virtual;
    let declared = match &plan.backend {
        QueueBackend::InProcess => &backends::IN_PROCESS,
        QueueBackend::Server(server) => server.server.declared(),
        QueueBackend::Yours(_) => &backends::HTTP,
        QueueBackend::Other(given) => given.declared,
    };
    if on_model && !declared.models() {
        anyhow::bail!(
            "--backend {} runs on real timers only: drop --clock virtual (the virtual clock is the model)",
            declared.name
        );
    }
    if let QueueBackend::Server(server) = &plan.backend {
        check_server_faults(s, server)?;
    }
    for (at, need) in needs(s) {
        if !declared.carries(need, on_model) {
            let clock = match (declared.models(), on_model) {
                (false, _) => "",
                (true, false) => " on real timers",
                (true, true) => " on the virtual clock",
            };
            anyhow::bail!(
                "{at}: {}: not carried by the {} backend{clock} (carried by: {})",
                need.describe(),
                declared.title,
                backends::carried_by(need)
            );
        }
    }
    if !s.fault.is_empty() && s.provider.is_some() && on_model {
        anyhow::bail!(
            "[[fault]] beside [provider] is not simulated: a provider's refusal holds a \
             worker but is no job to hand back; drop one of them"
        );
    }
    Ok(())
}

/// Faults strike the worker processes the lab starts, and restart only a
/// server it started.
fn check_server_faults(s: &Scenario, server: &crate::backend::ServerPlan) -> Result<()> {
    if s.fault.is_empty() {
        return Ok(());
    }
    let kind = server.server.name();
    if server.processes == Some(0) {
        anyhow::bail!("[[fault]] strikes worker processes the lab starts: drop --processes 0");
    }
    let processes = crate::scenario::faults::processes_for(s.workers, server.processes);
    for (i, f) in s.fault.iter().enumerate() {
        if f.kind == FaultKind::RestartServer {
            if server.target != Target::Own {
                anyhow::bail!(
                    "fault[{i}]: restart_server restarts the server the lab starts \
                     (--backend {kind}), not one given by URL"
                );
            }
            continue;
        }
        if f.process() >= processes {
            anyhow::bail!(
                "fault[{i}]: target {} names a worker process, but the lab starts {processes} \
                 (from 1 to {processes})",
                f.process() + 1
            );
        }
    }
    Ok(())
}

/// The plan's backend, ready to run.
fn open_backend(plan: &LabPlan, real: Option<&RealContext>) -> Result<Box<dyn Backend>> {
    Ok(match (&plan.backend, real) {
        (_, None) => Box::new(InProcess::Virtual),
        (QueueBackend::InProcess, Some(r)) => Box::new(InProcess::real(plan.timer, r.margin())?),
        (QueueBackend::Server(server), Some(_)) => server.open(&plan.scenario)?,
        (QueueBackend::Yours(yours), Some(_)) => yours.open()?,
        (QueueBackend::Other(given), Some(_)) => (given.open)(&plan.scenario)?,
    })
}

/// Where a run stands in the lab, for its progress bar.
#[derive(Debug, Clone, Copy)]
struct Position {
    /// Run of its strategy, from 0.
    run: u32,
    /// Run of the whole lab, from 0, of `total`.
    index: usize,
    total: usize,
}

/// One run of one strategy on `backend`, summarised; on real timers (`real`)
/// with a progress bar.
fn run_once(
    plan: &LabPlan,
    strategy: &Strategy,
    at: Position,
    backend: &mut dyn Backend,
    real: bool,
    stop: &AtomicBool,
    progress: &Progress,
) -> Result<RunResult, RunError> {
    let scenario = &plan.scenario;
    let seed = scenario.seed + u64::from(at.run);
    let pool = pool_for(scenario, strategy);
    let bar = real.then(|| {
        // The virtual clock predicts the run's length for the progress bar.
        let expected_s = Model::new(scenario, strategy, seed).run().stats.end as f64 / 1e9;
        progress.run_bar(
            &strategy.name,
            at.run + 1,
            scenario.runs,
            at.index,
            at.total,
            expected_s,
        )
    });
    let arrivals = load::plan(scenario, seed);
    let input = RunInput {
        scenario,
        strategy,
        pool: &pool,
        plan: arrivals,
        seed,
    };
    let record = backend.run(input, stop);
    if let Some(bar) = bar {
        bar.finish();
    }
    let record = record?;
    Ok(summary::run(
        scenario,
        strategy,
        &pool,
        seed,
        &record,
        plan.keep_raw,
    ))
}

/// A whole lab on the virtual clock, without histograms: deterministic for
/// the scenario's seed, and milliseconds of computing.
pub fn virtual_lab(scenario: Scenario) -> LabResults {
    let plan = LabPlan {
        scenario,
        clock: ClockKind::Virtual,
        timer: Timer::default(),
        keep_raw: false,
        backend: QueueBackend::InProcess,
    };
    run(&plan, &AtomicBool::new(false), &Progress::hidden())
        .expect("a virtual lab needs no calibration and is never interrupted")
        .results
}

/// Where a real-clock lab saves its results by default.
pub fn default_out() -> PathBuf {
    PathBuf::from("reports")
}
