//! What a queue server is to a lab's coordinator: [`Wire`], in four parts
//! (the queue's calls, the crew of workers, the server's life, its cost)
//! that each server's module implements in its own words (functions and
//! keys, or SQL), and what crosses it: a run's setup, the jobs submitted,
//! the stamps the server keeps, and what the server cost.

use std::time::Duration;

use anyhow::Result;

use super::ServerKind;
use crate::engine::Nanos;
use crate::scenario::{Queue, Strategy};

/// The discipline's name on every server.
pub fn queue_name(queue: Queue) -> &'static str {
    match queue {
        Queue::Fifo => "fifo",
        Queue::Fair => "fair",
        Queue::Vtc => "vtc",
    }
}

/// One run's queue, as the server is told it.
pub struct Setup<'a> {
    pub strategy: &'a Strategy,
    /// vtc's weight by queue (tenant or key); empty for the others.
    pub weights: Vec<f64>,
    /// Each job's hold, for the workers to read once.
    pub durations: Vec<Nanos>,
    /// How long a take's lease lasts, microseconds (`None`: the server
    /// gives no lease).
    pub lease_us: Option<u64>,
    /// Clients may stop waiting for a job that has not started
    /// ([`Calls::abandon`]).
    pub watch: bool,
    /// Two-level fairness: the discipline picks a tenant, its API keys
    /// take turns within its turn ([`Submit::key`]).
    pub keys: bool,
}

/// One job to submit: its number, its queue (tenant or key), with vtc its
/// cost in Rust's shortest round-trip digits, and with key turns its API
/// key.
pub struct Submit<'a> {
    pub job: u32,
    pub queue: u32,
    pub cost: Option<&'a str>,
    pub key: Option<u32>,
}

/// One instant in a job's life, on the server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// Queued (and whether an idle worker was woken for it).
    Enqueued {
        job: u32,
        us: u64,
        woke: bool,
    },
    Started {
        job: u32,
        us: u64,
    },
    Finished {
        job: u32,
        us: u64,
    },
    /// Refused by the queue limit.
    Refused {
        job: u32,
        us: u64,
    },
    /// Its lease ran out: back in its queue, to start again.
    Redelivered {
        job: u32,
        us: u64,
    },
    /// A finish refused: its lease had run out.
    LateFinish {
        job: u32,
        us: u64,
    },
    /// Its client stopped waiting before it started.
    Abandoned {
        job: u32,
        us: u64,
    },
}

impl Stamp {
    /// Which job, and when.
    pub fn job_us(&self) -> (u32, u64) {
        let (Stamp::Enqueued { job, us, .. }
        | Stamp::Started { job, us }
        | Stamp::Finished { job, us }
        | Stamp::Refused { job, us }
        | Stamp::Redelivered { job, us }
        | Stamp::LateFinish { job, us }
        | Stamp::Abandoned { job, us }) = *self;
        (job, us)
    }
}

/// What the server cost over one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerCost {
    pub us_per_call: Option<f64>,
    pub cpu_s: Option<f64>,
    pub calls: u64,
    pub bytes: Option<u64>,
    pub wal_bytes: Option<u64>,
}

/// A queue server, as one lab's coordinator speaks to it, in four parts:
/// the queue's calls, the crew of workers, the server's life, and what it
/// costs. Every part is required: what a server does not carry is declared
/// in [`crate::scenario::backends`] and refused before a lab starts, so no
/// call fails at run time for want of it.
pub trait Wire: Calls + Crew + Lifecycle + Meter {}

impl<T: Calls + Crew + Lifecycle + Meter> Wire for T {}

/// The queue's calls. Every call acts on the run set up last.
pub trait Calls {
    /// A new run's queue (the last one's gone).
    fn setup(&mut self, run: u32, setup: &Setup<'_>) -> Result<()>;
    /// The server's clock, microseconds since the epoch.
    fn now_us(&mut self) -> Result<u64>;
    /// Jobs due at one instant, in one round trip: each accepted (and
    /// whether a worker was woken) or refused (and its tenant's waiting).
    fn submit(&mut self, batch: &[Submit<'_>]) -> Result<Vec<(bool, i64)>>;
    /// `n` jobs were accepted in all.
    fn expect(&mut self, n: u64) -> Result<()>;
    /// Whether all expected jobs finished, waiting at most `wait`.
    fn wait_end(&mut self, wait: Duration) -> Result<bool>;
    /// Every stamp of the run.
    fn stamps(&mut self) -> Result<Vec<Stamp>>;
    /// No more jobs for anyone; running ones finish.
    fn halt(&mut self) -> Result<()>;
    /// Clients stop waiting for these jobs (each with whether it cancels
    /// it, else it still runs): for each, whether it had not started yet.
    /// Called only where the server declares [`Capability::Clients`].
    ///
    /// [`Capability::Clients`]: crate::scenario::backends::Capability::Clients
    fn abandon(&mut self, jobs: &[(u32, bool)]) -> Result<Vec<bool>>;
    /// Hand jobs whose lease ran out back to their queues now (the server
    /// does it on every call too; this is for a queue nobody calls).
    fn reap(&mut self) -> Result<()>;
    /// The run's data gone.
    fn end_run(&mut self) -> Result<()>;
}

/// The crew: the worker processes that join the lab and run its jobs.
pub trait Crew {
    /// What a worker is given to join: `--backend URL --run ID`.
    fn url(&self) -> &str;
    fn lab_id(&self) -> &str;
    /// Workers that have joined the lab.
    fn joined(&mut self) -> Result<u32>;
    /// Hand the run to `workers` workers.
    fn start_run(&mut self, workers: u32) -> Result<()>;
    /// Workers idle on the run.
    fn idle(&mut self) -> Result<u32>;
    /// Tell `workers` workers the run is over.
    fn stop_workers(&mut self, workers: u32) -> Result<()>;
    /// Workers that have left the run.
    fn left(&mut self) -> Result<u32>;
    /// What each worker that left the run measured: "RTT LATE" histograms.
    fn figures(&mut self) -> Result<Vec<String>>;
    /// Tell `workers` workers to leave the lab, and drop the lab's data.
    fn quit(&mut self, workers: u32);
}

/// The server's life: what it is, what it keeps, and the faults that
/// strike it.
pub trait Lifecycle {
    /// Which server, and its version, as the results file says.
    fn kind(&self) -> ServerKind;
    fn version(&self) -> &str;
    /// Drop every worker's connection to the server (they connect again):
    /// how many were dropped.
    fn drop_workers(&mut self) -> Result<u64>;
    /// Kill the server the lab started and start it again after `down`,
    /// from what it persisted; this wire connects again.
    fn restart(&mut self, down: Duration) -> Result<()>;
    /// Jobs of the run the server has accepted, by its own record.
    fn enqueued(&mut self) -> Result<u64>;
    /// What the server keeps on disk, where the lab set it.
    fn durability(&self) -> Option<String>;
    /// What the server promises to keep across a restart.
    fn promise(&self) -> &'static str;
}

/// What the server costs a run.
pub trait Meter {
    /// Counters read before a run, to take from those after it.
    type Mark;
    fn mark(&mut self) -> Result<Self::Mark>;
    fn cost_since(&mut self, mark: Self::Mark) -> Result<ServerCost>;
    /// Leases the workers renewed this run, by the server's count.
    fn renewals(&mut self) -> Result<u64>;
}
