//! Results: one serializable type for a whole lab, every field with its unit
//! in its name. A results file holds the histograms too (hdrhistogram V2 +
//! deflate, base64), so any percentile can be recomputed without rerunning.

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

use crate::engine::clock::Timer;
use crate::engine::load::secs_to_ns;
use crate::engine::{JobRecord, NEVER, Nanos, Pool, RunStats};
use crate::machine::Machine;
use crate::scenario::Scenario;

/// Bumped whenever a field changes meaning or is removed.
pub const SCHEMA_VERSION: u32 = 1;
/// Most (enqueue time, wait) points kept per run for the plots.
const MAX_TRACE_POINTS: usize = 4000;

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<Timer>,
    pub seed: u64,
    pub machine: Machine,
    /// When the lab started (UTC, RFC 3339); real clock only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// This machine's timer overshoot and dispatch floor, measured just
    /// before the lab; real clock only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::calibrate::Calibration>,
    /// Wall time of the whole lab, in seconds; real clock only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// Peak resident memory of the process during the lab, in MiB; real clock only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
    /// What a person should know about these figures, each with cause and fix.
    #[serde(default)]
    pub warnings: Vec<crate::output::warnings::Warning>,
    pub strategies: Vec<StrategyResults>,
}

/// One strategy's runs and their median, min and max per figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyResults {
    pub name: String,
    /// The discipline, such as `fair, cap 4, limit 100`.
    pub queue: String,
    pub median: Figures,
    pub min: Figures,
    pub max: Figures,
    pub runs: Vec<RunResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    pub seed: u64,
    #[serde(flatten)]
    pub figures: Figures,
    /// Histograms and traces; left out of `--format json` on stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawRun>,
}

/// The figures of one run (or the median, min or max of several).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    /// Normal tenants' enqueue-to-start wait.
    pub normal_wait_ms: Percentiles,
    /// From the first burst to the last bursting job's completion; null
    /// when the scenario has no burst.
    pub noisy_done_s: Option<f64>,
    /// Jobs refused by a queue limit, all tenants.
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
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistograms {
    pub normal_wait_ns: String,
    pub burst_wait_ns: String,
    pub job_overshoot_ns: String,
    pub dispatch_floor_ns: String,
    pub arrival_lag_ns: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccupancyTrace {
    pub step_ms: f64,
    pub busy_normal: Vec<u32>,
    pub busy_burst: Vec<u32>,
    pub queued: Vec<u32>,
}

/// Turn one run's records into its figures (and, with `keep_raw`, its
/// histograms and traces).
pub fn summarize_run(
    scenario: &Scenario,
    pool: &Pool,
    seed: u64,
    jobs: &[JobRecord],
    stats: &RunStats,
    keep_raw: bool,
) -> RunResult {
    let mut normal_wait = new_histogram();
    let mut burst_wait = new_histogram();
    let mut overshoot = new_histogram();
    let mut lag = new_histogram();
    let mut burst_last: Option<Nanos> = None;
    for job in jobs.iter().filter(|j| j.enqueued != NEVER) {
        lag.record(job.enqueued.saturating_sub(job.planned))
            .expect("an auto-resizing histogram takes any u64");
        if job.started == NEVER {
            continue;
        }
        let wait = job.started - job.enqueued;
        if job.tenant < pool.normal_tenants {
            normal_wait
                .record(wait)
                .expect("an auto-resizing histogram takes any u64");
        } else {
            burst_wait
                .record(wait)
                .expect("an auto-resizing histogram takes any u64");
            burst_last = burst_last.max(Some(job.finished));
        }
        if job.finished != NEVER {
            let held = job.finished - job.started;
            overshoot
                .record(held.saturating_sub(pool.job_ns))
                .expect("an auto-resizing histogram takes any u64");
        }
    }
    let first_burst = scenario.burst.iter().map(|b| secs_to_ns(b.at_s)).min();
    let noisy_done_s = match (first_burst, burst_last) {
        (Some(first), Some(last)) => Some(ns_to_s(last.saturating_sub(first))),
        _ => None,
    };
    let figures = Figures {
        normal_wait_ms: percentiles(&normal_wait, 1e6),
        noisy_done_s,
        rejected: stats.rejected,
        normal_jobs: normal_wait.len(),
        job_overshoot_ms: percentiles(&overshoot, 1e6),
        dispatch_floor_us: percentiles(&stats.dispatch_floor, 1e3),
        arrival_lag_ms: percentiles(&lag, 1e6),
        idle_workers_while_waiting: mean_idle(stats.idle_worker_ns_while_waiting, stats.waiting_ns),
        idle_workers_while_waiting_in_traffic: mean_idle(
            stats.idle_worker_ns_while_waiting_in_traffic,
            stats.waiting_ns_in_traffic,
        ),
        waiting_s: ns_to_s(stats.waiting_ns),
        retry_after_s: stats.retry_after_s_max,
        lab_s: ns_to_s(stats.end),
    };
    let raw = keep_raw.then(|| RawRun {
        histograms: RawHistograms {
            normal_wait_ns: encode_histogram(&normal_wait),
            burst_wait_ns: encode_histogram(&burst_wait),
            job_overshoot_ns: encode_histogram(&overshoot),
            dispatch_floor_ns: encode_histogram(&stats.dispatch_floor),
            arrival_lag_ns: encode_histogram(&lag),
        },
        normal_waits: normal_wait_trace(jobs, pool.normal_tenants),
        occupancy: OccupancyTrace {
            step_ms: pool.sample_ns as f64 / 1e6,
            busy_normal: stats.samples.iter().map(|s| s.busy_normal).collect(),
            busy_burst: stats.samples.iter().map(|s| s.busy_burst).collect(),
            queued: stats.samples.iter().map(|s| s.queued).collect(),
        },
    });
    RunResult { seed, figures, raw }
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

impl StrategyResults {
    pub fn new(name: String, queue: String, runs: Vec<RunResult>) -> StrategyResults {
        let figures: Vec<&Figures> = runs.iter().map(|r| &r.figures).collect();
        StrategyResults {
            median: Figures::combine(&figures, median),
            min: Figures::combine(&figures, |v| v[0]),
            max: Figures::combine(&figures, |v| v[v.len() - 1]),
            name,
            queue,
            runs,
        }
    }
}

impl Figures {
    /// Combine several runs field by field; `pick` gets each field's values sorted.
    fn combine(runs: &[&Figures], pick: fn(&[f64]) -> f64) -> Figures {
        let f = |get: &dyn Fn(&Figures) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(|r| get(r)).collect();
            v.sort_by(f64::total_cmp);
            if v.is_empty() { f64::NAN } else { pick(&v) }
        };
        let p = |get: &dyn Fn(&Figures) -> Percentiles| Percentiles {
            p50: f(&|r| get(r).p50),
            p95: f(&|r| get(r).p95),
            p99: f(&|r| get(r).p99),
            max: f(&|r| get(r).max),
        };
        let noisy: Vec<f64> = runs.iter().filter_map(|r| r.noisy_done_s).collect();
        Figures {
            normal_wait_ms: p(&|r| r.normal_wait_ms),
            noisy_done_s: (!noisy.is_empty()).then(|| {
                let mut v = noisy;
                v.sort_by(f64::total_cmp);
                pick(&v)
            }),
            rejected: f(&|r| r.rejected as f64).round() as u64,
            normal_jobs: f(&|r| r.normal_jobs as f64).round() as u64,
            job_overshoot_ms: p(&|r| r.job_overshoot_ms),
            dispatch_floor_us: p(&|r| r.dispatch_floor_us),
            arrival_lag_ms: p(&|r| r.arrival_lag_ms),
            idle_workers_while_waiting: f(&|r| r.idle_workers_while_waiting),
            idle_workers_while_waiting_in_traffic: f(&|r| r.idle_workers_while_waiting_in_traffic),
            waiting_s: f(&|r| r.waiting_s),
            retry_after_s: f(&|r| r.retry_after_s as f64).round() as u64,
            lab_s: f(&|r| r.lab_s),
        }
    }
}

/// The median of sorted values (the mean of the middle two for an even count).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
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

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant figures is valid")
}

/// p50, p95, p99 and max of a histogram of nanoseconds, divided by `per_unit`.
pub fn percentiles(h: &Histogram<u64>, per_unit: f64) -> Percentiles {
    if h.is_empty() {
        return Percentiles {
            p50: 0.0,
            p95: 0.0,
            p99: 0.0,
            max: 0.0,
        };
    }
    let at = |q: f64| h.value_at_quantile(q) as f64 / per_unit;
    Percentiles {
        p50: at(0.50),
        p95: at(0.95),
        p99: at(0.99),
        max: h.max() as f64 / per_unit,
    }
}

pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serializing into memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn decode_histogram(text: &str) -> Result<Histogram<u64>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .context("histogram is not base64")?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| anyhow::anyhow!("histogram is not hdrhistogram V2: {e:?}"))
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

    /// Read a results file; errors name the file and what is wrong with it.
    pub fn load(path: &Path) -> Result<LabResults> {
        let text = crate::store::read_text(path, "results file")?;
        LabResults::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<LabResults> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            let what = if e.is_eof() {
                "truncated results file (the JSON ends early)"
            } else {
                "not a results file (invalid JSON)"
            };
            anyhow::anyhow!(
                "{}:{}:{}: {what}: {e}",
                path.display(),
                e.line(),
                e.column()
            )
        })?;
        match value.get("schema").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(SCHEMA_VERSION) => {}
            Some(v) => bail!(
                "{}: results schema version {v}, this noisylab reads version {SCHEMA_VERSION}; \
                 rerun the lab with this version or use the noisylab that wrote it",
                path.display()
            ),
            None => bail!(
                "{}: not a noisylab results file (no \"schema\" field)",
                path.display()
            ),
        }
        serde_path_to_error::deserialize(value)
            .map_err(|e| anyhow::anyhow!("{}: {}: {}", path.display(), e.path(), e.inner()))
    }
}
