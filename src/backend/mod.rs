//! Backends: where a run's queue lives and who runs its jobs.
//!
//! One trait, [`Backend`]: take a strategy's seeded arrival plan (the same
//! plan on every backend, so `validate` replays any run on the model) and
//! return the run's [`RunRecord`], every job's life on one clock, from which
//! the lab computes every figure.
//!
//! - [`InProcess`]: the engine's own event loop and schedulers (`sched`), in
//!   this process: on the virtual clock (the model) or on real timers. The
//!   reference every other backend is tested against.
//! - [`coordinator`]: a lab on a queue server, workers in separate
//!   processes, every instant from the server's clock; the server's side
//!   in one trait ([`wire::Wire`]), the run rebuilt from the server's
//!   stamps by [`rebuild`]; the wire implemented by
//! - [`redis`]: the disciplines as functions inside a Redis server, and
//! - [`postgres`]: the disciplines as SQL functions over a job table;
//! - [`clients`]: a run's clients as the coordinator plays them: arrivals,
//!   retries and give-ups;
//! - [`worker`]: the worker processes' loop, the same on every server;
//!   [`combine`]: their threads' calls sent together while others are on
//!   their way (PostgreSQL's workers);
//! - [`faults`]: a scenario's `[[fault]]` as timed actions on the worker
//!   processes and the server;
//! - [`process`]: starting servers and workers as child processes;
//! - [`yours`]: a team's own queue over HTTP: jobs posted to its enqueue
//!   endpoint, its workers' start and end reports collected; its
//!   discipline is its own;
//! - [`Given`]: a backend from outside this module, declared by what it
//!   carries: for instance one that only carries jobs, whose discipline is
//!   someone else's and whose workers report each job's start and end
//!   (`src/tests/conformance.rs` runs one).
//!
//! What each backend carries is declared once, in
//! [`crate::scenario::backends`].

pub mod clients;
pub mod combine;
pub mod coordinator;
pub mod faults;
pub mod peers;
pub mod postgres;
pub mod process;
pub mod rebuild;
pub mod redis;
pub mod relay;
pub mod wire;
pub mod worker;
pub mod yours;

use std::sync::atomic::AtomicBool;

use crate::engine::clock::{Drivers, RealClock, Timer, VirtualClock, runtime};
use crate::engine::lateness::Lateness;
use crate::engine::{self, JobRecord, Pool, RunStats};
use crate::results::{BackendFacts, CarrierFigures, FaultFigures};
use crate::scenario::backends::{self, Declared};
use crate::scenario::{Scenario, Strategy};
use crate::sched::AnyScheduler;

/// Where a lab's queue lives, as the command line asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum QueueBackend {
    /// The engine's own schedulers, in this process.
    #[default]
    InProcess,
    /// A queue server (Redis, PostgreSQL), workers in their own processes.
    Server(ServerPlan),
    /// A team's own queue, reached over HTTP (`--backend http://…`).
    Yours(yours::YoursPlan),
    /// A backend given by the library's user (a test's), declared by what
    /// it carries: for instance one that only carries jobs, whose
    /// discipline belongs to someone else.
    Other(Given),
}

/// A backend from outside this module: what it declares it carries, and
/// how a lab opens it.
#[derive(Clone, Copy)]
pub struct Given {
    pub declared: &'static Declared,
    pub open: fn(&Scenario) -> anyhow::Result<Box<dyn Backend>>,
}

impl PartialEq for Given {
    fn eq(&self, other: &Given) -> bool {
        self.declared == other.declared
    }
}

impl Eq for Given {}

impl std::fmt::Debug for Given {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Given({})", self.declared.name)
    }
}

/// Which queue server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    Redis,
    Postgres,
}

impl ServerKind {
    /// Every queue server, as the registry's declarations name them.
    pub const ALL: [ServerKind; 2] = [ServerKind::Redis, ServerKind::Postgres];

    /// What it is and carries, as declared once.
    pub fn declared(self) -> &'static Declared {
        match self {
            ServerKind::Redis => &backends::REDIS,
            ServerKind::Postgres => &backends::POSTGRES,
        }
    }

    /// The server a declaration names, if it names one.
    pub fn of(declared: &Declared) -> Option<ServerKind> {
        ServerKind::ALL
            .into_iter()
            .find(|k| k.declared() == declared)
    }

    /// As the command line and the results file name it.
    pub fn name(self) -> &'static str {
        self.declared().name
    }

    /// As a sentence names it.
    pub fn title(self) -> &'static str {
        self.declared().title
    }

    /// Start (or reach) the server for `plan`, and its worker processes.
    fn start(
        self,
        plan: &ServerPlan,
        workers: u32,
        slowed: &[u32],
    ) -> anyhow::Result<Box<dyn Backend>> {
        Ok(match self {
            ServerKind::Redis => Box::new(redis::start(plan, workers, slowed)?),
            ServerKind::Postgres => Box::new(postgres::start(plan, workers, slowed)?),
        })
    }

    /// Serve lab `run` on the server at `url` as `workers` worker threads,
    /// until its coordinator says quit (`noisylab worker`).
    pub fn serve(self, url: &str, run: &str, workers: u32) -> anyhow::Result<()> {
        match self {
            ServerKind::Redis => redis::worker::serve(url, &format!("noisylab:{run}:"), workers),
            ServerKind::Postgres => postgres::worker::serve(url, run, workers),
        }
    }

    /// The scheduling code the server runs, explained (`noisylab scripts`).
    pub fn scripts(self) -> &'static str {
        match self {
            ServerKind::Redis => redis::LIBRARY,
            ServerKind::Postgres => postgres::SCHEMA,
        }
    }
}

/// Which server of that kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Start one of the lab's own (`--backend redis`, `--backend postgres`).
    Own,
    /// Use this one (`--backend redis://HOST:PORT[/DB]`, `postgres://…`).
    Url(String),
}

/// A lab on a queue server, as the command line asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPlan {
    pub server: ServerKind,
    pub target: Target,
    /// Worker processes to start (`None`: enough that none runs more than
    /// [`crate::scenario::faults::WORKERS_PER_PROCESS`] workers, at least 2; 0: workers
    /// join from elsewhere).
    pub processes: Option<u32>,
    /// The `noisylab` binary the worker processes run (`None`: this one;
    /// tests give the binary Cargo built).
    pub worker_exe: Option<std::path::PathBuf>,
    /// PostgreSQL of the lab's own: what a commit waits for (`fsync` and
    /// `synchronous_commit`, both on by default).
    pub durability: postgres::server::Durability,
    /// Redis of the lab's own: an append-only file, to be restarted from
    /// (a scenario with a `restart_server` fault).
    pub persist: bool,
    /// PostgreSQL: the job table unlogged, so that a crash of the server
    /// empties it. No command line sets it: tests use it to break the
    /// promise a restart is checked against.
    pub unlogged: bool,
}

impl ServerPlan {
    /// Start (or reach) the server, start the worker processes for
    /// `scenario`'s pool (those its `slow_link` faults strike behind a
    /// relay of their own), and wait until they have joined.
    pub fn open(&self, scenario: &Scenario) -> anyhow::Result<Box<dyn Backend>> {
        let mut slowed: Vec<u32> = scenario
            .fault
            .iter()
            .filter(|f| f.kind == crate::scenario::FaultKind::SlowLink)
            .map(|f| f.process())
            .collect();
        slowed.sort_unstable();
        slowed.dedup();
        self.server.start(self, scenario.workers, &slowed)
    }
}

/// What one run is given: the scenario and strategy, the pool and the
/// seeded arrival plan (a backend that runs the discipline in this process
/// builds its [`scheduler`]; a server keeps its own).
pub struct RunInput<'a> {
    pub scenario: &'a Scenario,
    pub strategy: &'a Strategy,
    pub pool: &'a Pool,
    pub plan: Vec<JobRecord>,
    pub seed: u64,
}

/// What one run leaves: every attempt's record and what was measured beside
/// them; on a real queue, what the server cost.
pub struct RunRecord {
    pub jobs: Vec<JobRecord>,
    pub stats: RunStats,
    /// On a queue server: what was measured beside the records.
    pub server: Option<ServerMeasures>,
    /// In this process on real timers: the late jobs and arrivals by cause
    /// (on a queue the worker processes time the jobs: not attributed).
    pub late: Option<Lateness>,
    /// On a queue with leases: the jobs whose lease ran out, once for each
    /// time (their records keep the start that finished them).
    pub redelivered: Vec<u32>,
    /// On a queue with leases: the jobs two workers ran to their end (the
    /// first's finish refused).
    pub ran_twice: Vec<u32>,
    /// With leases: what the faults did (on a server, from its stamps; in
    /// this process, simulated).
    pub faults: Option<FaultFigures>,
    /// On a team's own queue: what crossed the protocol.
    pub carried: Option<CarrierFigures>,
}

/// What a run on a queue server measured beside its records: the workers'
/// take round trips and their timers' lateness after each hold, the
/// coordinator's submit round trips (histograms in nanoseconds), the
/// server's cost over the run, and the worker processes' CPU.
pub struct ServerMeasures {
    pub take_rtt: hdrhistogram::Histogram<u64>,
    pub hold_late: hdrhistogram::Histogram<u64>,
    pub submit_rtt: hdrhistogram::Histogram<u64>,
    pub cost: wire::ServerCost,
    pub workers_cpu_s: Option<f64>,
    /// The run's planned jobs (the costs are given per planned job).
    pub planned: usize,
}

/// Why a run has no record.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Ctrl-C.
    #[error("run interrupted")]
    Interrupted,
    /// The backend failed (a server died, a worker process exited): one line.
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

impl From<engine::Interrupted> for RunError {
    fn from(_: engine::Interrupted) -> RunError {
        RunError::Interrupted
    }
}

/// Where a lab's runs execute.
pub trait Backend {
    /// Run one strategy's plan; `stop` ends it early.
    fn run(&mut self, input: RunInput<'_>, stop: &AtomicBool) -> Result<RunRecord, RunError>;
    /// What the results file says of the backend (`None`: in-process).
    fn facts(&self) -> Option<BackendFacts> {
        None
    }
}

/// The engine in this process, on the virtual clock or on real timers.
pub enum InProcess {
    Virtual,
    Real {
        runtime: tokio::runtime::Runtime,
        timer: Timer,
        /// The precise timer's spin margin (from calibration).
        margin: std::time::Duration,
    },
}

impl InProcess {
    /// Real timers, on a single-threaded runtime of their own.
    pub fn real(timer: Timer, margin: std::time::Duration) -> anyhow::Result<InProcess> {
        Ok(InProcess::Real {
            runtime: runtime(Drivers::Timers)?,
            timer,
            margin,
        })
    }
}

impl Backend for InProcess {
    fn run(&mut self, input: RunInput<'_>, stop: &AtomicBool) -> Result<RunRecord, RunError> {
        let RunInput {
            scenario,
            strategy,
            pool,
            plan,
            seed,
        } = input;
        let mut sched = scheduler(scenario, strategy, &plan);
        let (jobs, stats, late) = match self {
            InProcess::Virtual => {
                let mut clock = pool
                    .jitter
                    .as_ref()
                    .map_or_else(VirtualClock::new, VirtualClock::jittered);
                let (jobs, stats) =
                    block_on_ready(engine::run(&mut clock, pool, &mut sched, plan, seed, stop))?;
                (jobs, stats, None)
            }
            InProcess::Real {
                runtime,
                timer,
                margin,
            } => {
                let mut clock = RealClock::with_margin(*timer, *margin);
                let (jobs, stats) = runtime
                    .block_on(engine::run(&mut clock, pool, &mut sched, plan, seed, stop))?;
                (jobs, stats, clock.lateness())
            }
        };
        let (redelivered, ran_twice, faults) = match &stats.faults {
            Some(tally) => simulated_faults(&jobs, tally),
            None => (Vec::new(), Vec::new(), None),
        };
        Ok(RunRecord {
            jobs,
            stats,
            server: None,
            late,
            redelivered,
            ran_twice,
            faults,
            carried: None,
        })
    }
}

/// The strategy's scheduler for the scenario's tenants (their weights) and
/// this run's jobs (their costs, by id).
pub fn scheduler(scenario: &Scenario, strategy: &Strategy, plan: &[JobRecord]) -> AnyScheduler {
    let population = scenario.population();
    let weights = population.queue_weights(strategy);
    let mut sched = AnyScheduler::new(strategy, weights, || {
        plan.iter()
            .map(|j| strategy.job_cost(j.duration, j.tokens_in, j.tokens_out))
            .collect()
    });
    if population.turns_keys(strategy) {
        sched.turn_keys(plan.iter().map(|j| j.key).collect());
    }
    sched
}

/// What simulated faults did, as a server's stamps would say it: the jobs
/// redelivered, those run twice (a finish refused, and the job finished
/// again), and the figures.
fn simulated_faults(
    jobs: &[JobRecord],
    tally: &engine::faults::FaultTally,
) -> (Vec<u32>, Vec<u32>, Option<FaultFigures>) {
    let mut ran_twice: Vec<u32> = tally
        .refused
        .iter()
        .copied()
        .filter(|&i| {
            matches!(
                jobs[i as usize].fate,
                engine::Fate::Ran | engine::Fate::Wasted
            )
        })
        .collect();
    ran_twice.sort_unstable();
    ran_twice.dedup();
    let figures = FaultFigures {
        lease_ms: tally.lease_ns as f64 / 1e6,
        injected: tally.injected,
        redelivered: tally.redelivered.len() as u64,
        ran_twice: ran_twice.len() as u64,
        late_finishes_refused: tally.refused.len() as u64,
        renewals: tally.renewed,
        dropped_connections: tally.dropped,
        lost: 0,
        restart_ms: tally.restart_ns as f64 / 1e6,
        by_class: Default::default(), // the lab's, from the records
        recovery: Vec::new(),         // likewise
    };
    (tally.redelivered.clone(), ran_twice, Some(figures))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every server is declared in the registry, by its own name, and its
    /// declaration names it back; every declared server has code here.
    #[test]
    fn every_server_is_declared_once_and_every_declared_server_runs() {
        for kind in ServerKind::ALL {
            let declared = kind.declared();
            assert!(backends::BACKENDS.contains(&declared), "{kind:?}");
            assert_eq!(ServerKind::of(declared), Some(kind));
            assert_eq!(backends::parse(kind.name()), Ok((declared, None)));
            assert!(!kind.scripts().is_empty());
        }
        let servers = backends::BACKENDS.iter().filter(|b| b.is_server()).count();
        assert_eq!(servers, ServerKind::ALL.len());
        assert_eq!(ServerKind::of(&backends::IN_PROCESS), None);
    }
}
