//! Results: the data model of a whole lab, one serializable type, every field
//! with its unit in its name. Computing the figures lives in `lab::summary`,
//! reading and writing files in `store`. A results file holds the histograms
//! too (see `stats`), so any percentile can be recomputed without rerunning.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::calibrate::Calibration;
use crate::engine::clock::Timer;
pub use crate::engine::lateness::Lateness;
use crate::machine::Machine;
use crate::output::warnings::Warning;
use crate::scenario::{Discipline, Scenario};
pub use crate::stats::{Percentiles, decode_histogram};

/// Bumped whenever a field changes meaning or is removed.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClockKind {
    Real,
    Virtual,
}

/// A whole lab: every strategy, every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabResults {
    pub schema: u32,
    /// `noisylab` version that made the file.
    pub tool: String,
    /// The scenario as run, in full (after `--runs`, `--seed`, `--strategy`).
    pub scenario: Scenario,
    pub clock: ClockKind,
    pub seed: u64,
    pub machine: Machine,
    /// What only a real-clock lab knows; its keys sit at the top level.
    #[serde(flatten)]
    pub real: Option<RealFacts>,
    /// Where the queue ran: absent for the in-process lab (every file from
    /// before there was another), else the server and the worker processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendFacts>,
    /// What a person should know about these figures, each with cause and
    /// fix; computed once when the lab ends (and on loading a file written
    /// by another version), read by every printer.
    #[serde(default)]
    pub warnings: Vec<Warning>,
    pub strategies: Vec<StrategyResults>,
}

/// A lab run on a real queue: which server, and how many worker processes
/// shared the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendFacts {
    /// `"redis"`.
    pub kind: String,
    /// The server's own version string.
    pub version: String,
    /// Worker processes the coordinator started (0: workers joined from
    /// elsewhere).
    pub processes: u32,
    /// What the server keeps on disk, where the lab set it (`None`: as the
    /// server was, or nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<String>,
}

/// What the queue server cost one run (or the median, min or max of
/// several): round trips as the clients timed them, the server's own time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueFigures {
    /// A worker's take (a finish and the next take, or a take after a
    /// wake), round trip in microseconds.
    pub take_rtt_us: Percentiles,
    /// How late a worker's own timer woke after a job's hold, microseconds
    /// (the rest of a job's overshoot on the server's stamps is the two
    /// round trips' halves).
    pub hold_overshoot_us: Percentiles,
    /// A submit's round trip in microseconds (a burst pipelined counts as
    /// one round trip for all its jobs).
    pub submit_rtt_us: Percentiles,
    /// The server's time per scheduling call (Redis: `FCALL`; PostgreSQL:
    /// a function's statement, from `pg_stat_statements`), microseconds;
    /// `None` where the server does not say.
    pub server_us_per_call: Option<f64>,
    /// The server's CPU time during the run, seconds (`None`: a server the
    /// lab did not start, on PostgreSQL).
    pub server_cpu_s: Option<f64>,
    /// Clients' calls (Redis: functions and blocking pops; PostgreSQL:
    /// statements) per job planned.
    pub calls_per_job: f64,
    /// Bytes in and out of the server per job planned (Redis).
    pub bytes_per_job: Option<f64>,
    /// Write-ahead log bytes per job planned (PostgreSQL).
    #[serde(default)]
    pub wal_bytes_per_job: Option<f64>,
    /// The CPU time of the worker processes the lab started, during the
    /// run, seconds (`None`: none started, or not Linux; a process killed
    /// during the run leaves its time out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_cpu_s: Option<f64>,
    /// What faults did, in files from before [`Figures::faults`] (later
    /// files keep them there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultFigures>,
}

/// A run's leases and faults: on a queue server, from the server's stamps;
/// in this process, simulated on the pool's workers (nothing is lost
/// there, and `restart_ms` is the time the server was taken to be away).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultFigures {
    /// A take's lease, milliseconds.
    pub lease_ms: f64,
    /// Faults injected during the run.
    pub injected: u64,
    /// Leases that ran out: jobs handed back to their tenant's queue and
    /// started again.
    pub redelivered: u64,
    /// Jobs whose work two workers did: a holder past its lease finished
    /// it too (and was refused).
    pub ran_twice: u64,
    /// Finishes refused because their lease had run out.
    pub late_finishes_refused: u64,
    /// Leases the workers renewed (a job held longer than half its lease
    /// renews it every third of the lease): the server's count, or the
    /// model's.
    #[serde(default)]
    pub renewals: u64,
    /// Workers' connections the server dropped (they connected again).
    #[serde(default)]
    pub dropped_connections: u64,
    /// Jobs the server had accepted and no longer held after a restart
    /// (checked after each; a run with any fails, naming the server's
    /// promise).
    #[serde(default)]
    pub lost: u64,
    /// The longest restart of the server: from the kill until it answered
    /// again (its append-only file loaded, its write-ahead log replayed),
    /// milliseconds (0: none).
    #[serde(default)]
    pub restart_ms: f64,
    /// Each class's share of `redelivered` and `ran_twice`, by class name
    /// (classes with none left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_class: BTreeMap<String, ClassFaults>,
    /// Each fault in time order: the neighbours' waits across it (files
    /// from before it was measured have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovery: Vec<FaultRecovery>,
}

/// The neighbours (every non-bursting tenant together) across one fault:
/// their rolling p95 wait (a wait counted when it ended, at the job's
/// last start) over windows of `window_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRecovery {
    /// The fault's kind and instant, as the scenario gives them.
    pub kind: String,
    pub at_s: f64,
    pub window_ms: f64,
    /// The p95 of the window that ends at the fault, milliseconds (`None`:
    /// no neighbour's wait ended in it, as behind FIFO's burst).
    pub before_ms: Option<f64>,
    /// The highest p95 from the fault until the next one (or the traffic's
    /// end), milliseconds (`None`: no wait ended meanwhile).
    pub peak_ms: Option<f64>,
    /// Seconds from the fault until the p95 was back within twice its value
    /// before (at least 1 ms) and stayed there until the next fault, or
    /// the traffic's end; `None`: it was not.
    pub recovered_s: Option<f64>,
}

/// One class's jobs struck by faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassFaults {
    pub redelivered: u64,
    pub ran_twice: u64,
}

/// The facts of a real-clock lab that a virtual one has no use for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RealFacts {
    pub timer: Timer,
    /// When the lab started (UTC, RFC 3339, to the second).
    pub created: jiff::Timestamp,
    /// This machine's timer overshoot and dispatch floor, measured just
    /// before the lab.
    pub calibration: Calibration,
    /// Wall time of the whole lab, in seconds.
    pub wall_s: f64,
    /// Peak resident memory of the process during the lab, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
    /// How early the precise timer's coarse sleep ended, to spin the rest, in
    /// ms: 3, or more where calibration found tokio's timer later than that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_margin_ms: Option<f64>,
    /// What else used the CPUs during the lab (files from before it was
    /// measured have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causes: Option<crate::machine::Causes>,
}

/// One strategy's runs and their median, min and max per figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyResults {
    pub name: String,
    /// The discipline, written as `fair, cap 4, limit 100`.
    pub queue: Discipline,
    pub median: Figures,
    pub min: Figures,
    pub max: Figures,
    /// The runs' late jobs and arrivals, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<Lateness>,
    pub runs: Vec<RunResult>,
}

/// One run (not `deny_unknown_fields`, for its flattened [`Figures`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub seed: u64,
    #[serde(flatten)]
    pub figures: Figures,
    /// In this process on real timers: the jobs and arrivals late by more
    /// than 0.2 ms, by cause (files from before it was measured, virtual
    /// runs and runs on a queue have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<Lateness>,
    /// Histograms and traces; left out of `--format json` on stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawRun>,
}

/// The figures of one run (or the median, min or max of several). (Not
/// `deny_unknown_fields`: serde cannot deny them beside a flattened
/// [`Delivery`]; a file's schema version guards its keys.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Normal tenants' enqueue-to-start wait.
    pub normal_wait_ms: Percentiles,
    /// From the first burst to the last bursting job's completion; null
    /// when the scenario has no burst.
    pub noisy_done_s: Option<f64>,
    /// Jobs refused and never retried into an answer: by a queue limit, or
    /// with limits and clients, any refusal of a client that does not retry.
    pub rejected: u64,
    /// Normal jobs whose wait was measured.
    pub normal_jobs: u64,
    /// How much longer than `job_ms` a job actually held its worker.
    pub job_overshoot_ms: Percentiles,
    /// Enqueue-to-start wait of jobs that found a worker idle: the harness's
    /// own dispatch cost.
    pub dispatch_floor_us: Percentiles,
    /// How late jobs were submitted against their planned instant.
    pub arrival_lag_ms: Percentiles,
    /// The same for the normal tenants' jobs alone (a burst's jobs are
    /// submitted one after another, so its last ones are late by the whole
    /// burst's submission; files from before it was measured have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal_arrival_lag_ms: Option<Percentiles>,
    /// Mean idle workers over the time any job waited (0: work-conserving).
    pub idle_workers_while_waiting: f64,
    /// The same, inside the normal tenants' traffic window only.
    pub idle_workers_while_waiting_in_traffic: f64,
    /// Seconds of lab time during which any job waited.
    pub waiting_s: f64,
    /// Largest retry-after hint given with a rejection, in seconds.
    pub retry_after_s: u64,
    /// Lab time from t = 0 to the last completion.
    pub lab_s: f64,
    /// Per class (a tenant group, a trace, a bursting tenant), by name.
    #[serde(default)]
    pub classes: BTreeMap<String, ClassFigures>,
    /// Per tenant, among the non-bursting tenants.
    #[serde(default)]
    pub tenants: TenantFigures,
    /// How evenly backlogged tenants were served (files from before it was
    /// measured have the default).
    #[serde(default)]
    pub fairness: Fairness,
    /// What the clients got: attempts, outcomes, refusals by layer.
    #[serde(flatten)]
    pub delivery: Delivery,
    /// On a real queue: what the server cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueFigures>,
    /// Where takes hold leases: what faults did, on a server or simulated
    /// in this process (files from before the simulation keep a server's
    /// under `queue`: read them with [`Figures::fault_figures`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultFigures>,
    /// On a team's own queue: what crossed the protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<CarrierFigures>,
}

/// On a team's own queue (`--backend http://…`): what crossed the
/// protocol (docs/your-queue.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CarrierFigures {
    /// Jobs the queue accepted (answered 2xx).
    pub accepted: u64,
    /// Jobs the queue refused (429 or 503): counted as refused by its
    /// limit in the delivery figures too.
    pub refused: u64,
    /// Posts answered with any other status, or not at all: left out of
    /// every other figure.
    pub errors: u64,
    /// Jobs accepted whose start or end no worker reported before the run
    /// ended: the queue's promise broken.
    pub lost: u64,
    /// Reports of a start or an end already reported (a job run twice, or
    /// a worker reporting again).
    pub duplicate_reports: u64,
    /// Reports refused: without the run's secret, or naming no job of it.
    pub refused_reports: u64,
    /// Jobs left waiting while a worker sat idle and nothing of their
    /// tenant's ran (missed wake-ups); `None` in files from before it was
    /// counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_over: Option<PassedOver>,
}

/// Jobs a team's queue left waiting, for at least 100 ms at a stretch,
/// while a worker sat idle and none of their tenant's jobs ran: no
/// strategy of the post's does that, so a worker missed a wake-up
/// (docs/your-queue.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassedOver {
    /// How many.
    pub jobs: u64,
    /// The longest wait, queued to started, of one of them.
    pub wait_s_max: f64,
    /// The most workers idle at once while one of them waited.
    pub idle_max: u32,
}

impl Figures {
    /// What faults did, wherever the file keeps it.
    pub fn fault_figures(&self) -> Option<&FaultFigures> {
        self.faults
            .as_ref()
            .or_else(|| self.queue.as_ref()?.faults.as_ref())
    }
}

/// Every job's fate from its clients' side, with retries (files from
/// before clients could retry have the defaults). A job is one request of a
/// tenant; each time its client sends it is an attempt. The outcomes part
/// the jobs: `unique_jobs` = `completed` + `given_up` + `rejected` +
/// `timed_out` + `unfinished`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Delivery {
    /// Every time a client sent a job, retries included.
    pub attempts: u64,
    /// Jobs, each counted once.
    pub unique_jobs: u64,
    /// Jobs that ran and whose client read the answer.
    pub completed: u64,
    /// Jobs whose retrying client stopped (at `max_attempts` or its retry
    /// budget) without an answer.
    pub given_up: u64,
    /// Jobs whose client, not retrying, stopped waiting.
    pub timed_out: u64,
    /// Attempts refused, by where.
    pub refused: Refused,
    /// Lab time during which the provider had told some caller (of the
    /// class) to wait: the union of its retry-afters.
    pub provider_saturated_s: f64,
    /// Attempts ÷ jobs.
    pub amplification: f64,
    /// Worker time spent on jobs nobody read (their client had timed out),
    /// and, for the whole run, on calls the provider refused.
    pub wasted_worker_s: f64,
    /// After the last burst ends, how long until the class's rolling p95
    /// wait is back within twice its value before the first burst (at
    /// least 1 ms) and stays there until the traffic ends; null when it
    /// never is within the run, or there is no burst.
    pub recovery_s: Option<f64>,
    /// Jobs completed, and their output tokens, per second of lab time.
    pub goodput_jobs_per_s: f64,
    pub goodput_tokens_out_per_s: f64,
    /// Jobs that never ended: on a team's own queue, posts that failed and
    /// jobs accepted that no worker reported ended (an interrupted run's
    /// unfinished jobs too); 0 elsewhere, and left out of the file.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfinished: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Attempts refused at each layer.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refused {
    /// The queue's per-tenant limit.
    pub limit: u64,
    /// The tenant's rate limit.
    pub rate: u64,
    /// The tenant's token budget.
    pub budget: u64,
    /// The model provider's limits.
    pub provider: u64,
}

/// Service among the tenants backlogged throughout each window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fairness {
    /// Jain's index over service ÷ weight, averaged over the windows.
    pub jain: f64,
    /// The largest difference in service ÷ weight between two backlogged
    /// tenants in any window, and its mean over the windows, in `unit`.
    pub max_service_diff: f64,
    pub mean_service_diff: f64,
    /// `worker-ms`, or the `vtc` cost (`token cost`, `jobs`).
    pub unit: String,
    /// The window's length, in seconds.
    pub window_s: f64,
}

/// One class's figures (its [`Delivery`] flattened in, as in [`Figures`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassFigures {
    /// Enqueue-to-start wait of its jobs that started.
    pub wait_ms: Percentiles,
    /// (wait + duration) ÷ duration: 1 when a job never waits.
    pub slowdown: Slowdown,
    /// Attempts the class sent (started or not): its jobs, and with
    /// retrying clients their retries too (`unique_jobs` counts each once).
    pub jobs: u64,
    pub rejected: u64,
    /// Tokens of the jobs that ran.
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// From its first arrival to its last completion, in seconds.
    pub done_s: Option<f64>,
    /// Service its tenants received while contended (in the windows each was
    /// backlogged throughout), in the strategy's fairness unit.
    #[serde(default)]
    pub service: f64,
    /// Its clients' side: attempts, outcomes, refusals.
    #[serde(flatten)]
    pub delivery: Delivery,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    pub p50: f64,
    pub p95: f64,
}

/// The tenants at a glance: the worst p95 wait and who had it, who went over
/// the scenario's `alert_p95_ms`, and how evenly they were slowed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantFigures {
    pub worst_p95_ms: f64,
    /// The tenant with the worst p95 wait.
    pub worst: String,
    /// Tenants whose p95 wait exceeded `alert_p95_ms` (empty without it).
    pub over_alert: Vec<String>,
    /// Jain's index over each tenant's mean slowdown: 1 when all are slowed alike.
    pub jain_slowdown: f64,
}

/// What a run's figures were computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRun {
    /// Serialized histograms, values in nanoseconds.
    pub histograms: RawHistograms,
    /// Normal jobs as `[enqueued_s, wait_ms]`, evenly thinned to at most 4,000.
    pub normal_waits: Vec<[f64; 2]>,
    /// Occupancy on a grid of `step_ms` from t = 0.
    pub occupancy: OccupancyTrace,
    /// Every tenant's p95 wait in ms and p95 slowdown, by tenant id, to four
    /// significant figures (null: the tenant ran no job).
    #[serde(default)]
    pub tenant_p95_wait_ms: Vec<Option<f32>>,
    #[serde(default)]
    pub tenant_p95_slowdown: Vec<Option<f32>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistograms {
    pub normal_wait_ns: String,
    pub burst_wait_ns: String,
    pub job_overshoot_ns: String,
    pub dispatch_floor_ns: String,
    pub arrival_lag_ns: String,
    /// The loop's wakes' lateness and the time between two events of one
    /// wake, as its clock measured them (absent where nothing measured
    /// them: the virtual clock, a queue server, a file written before).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub wake_late_ns: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_gap_ns: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccupancyTrace {
    pub step_ms: f64,
    pub busy_normal: Vec<u32>,
    pub busy_burst: Vec<u32>,
    pub queued: Vec<u32>,
}

impl LabResults {
    /// Lab time of every run, added up, in seconds.
    pub fn lab_s_total(&self) -> f64 {
        self.strategies
            .iter()
            .flat_map(|s| &s.runs)
            .map(|r| r.figures.lab_s)
            .sum()
    }

    /// When a real-clock lab started; `None` on the virtual clock.
    pub fn created(&self) -> Option<jiff::Timestamp> {
        self.real.as_ref().map(|r| r.created)
    }

    /// The UTC date the lab started (`2026-12-02`); `None` on the virtual clock.
    pub fn date(&self) -> Option<String> {
        self.created().map(|t| t.strftime("%Y-%m-%d").to_string())
    }

    pub fn timer(&self) -> Option<Timer> {
        self.real.as_ref().map(|r| r.timer)
    }

    /// A copy without histograms and traces, for stdout.
    pub fn without_raw(&self) -> LabResults {
        let mut out = self.clone();
        for s in &mut out.strategies {
            for r in &mut s.runs {
                r.raw = None;
            }
        }
        out
    }

    /// The strategy of that name.
    pub fn strategy(&self, name: &str) -> Option<&StrategyResults> {
        self.strategies.iter().find(|s| s.name == name)
    }

    /// Whether any run kept its histograms and traces.
    pub fn has_raw(&self) -> bool {
        self.strategies
            .iter()
            .any(|s| s.runs.iter().any(|r| r.raw.is_some()))
    }
}
