//! Scenario files: parse a TOML lab description and validate it.
//!
//! The keys are a contract other tools read and write (see `lab/article.toml`).
//! Every mistake is reported as one [`ScenarioError`] line that names the file,
//! the key, what was found and what is allowed.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod backends;
mod check;
pub mod dist;
pub mod faults;
pub mod limits;
pub mod population;
mod strategy;
pub mod trace;

pub use dist::Dist;
pub use faults::{Fault, FaultKind};
pub use limits::{
    Budget, Clients, Jitter, Layer, OnTimeout, Provider, RateLimit, Retry, RetryAfter, Workspace,
};
pub use population::{ClassKind, ClassRange, Population};
pub use strategy::{COST_IN, COST_OUT, Cost, Discipline, FairBy, Kind, Queue, Strategy};
pub use trace::{Trace, TraceData, TraceRow};

/// A whole lab: the pool, the traffic, and the strategies to compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// Runs per strategy; reports give the median of each figure.
    #[serde(default = "default_runs")]
    pub runs: u32,
    /// Run `k` (from 0) of every strategy uses `seed + k`.
    #[serde(default = "default_seed")]
    pub seed: u64,
    pub workers: u32,
    /// How long a job holds its worker, in milliseconds: a number, or a
    /// distribution ([`Dist`]); groups, bursts and traces may set their own.
    pub job_ms: Dist,
    /// Input and output tokens per job (default 0), likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<Dist>,
    /// Normal tenants send from t = 0 until this time, in seconds (groups
    /// until their `until_s`, which defaults to it).
    pub traffic_s: f64,
    /// Per strategy, name the tenants whose p95 wait exceeds this, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_p95_ms: Option<f64>,
    /// What the fairness figures count as service, for every strategy
    /// alike: worker time (default), jobs, or tokens at the VTC paper's
    /// prices (input 1, output 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Cost>,
    /// The post's well-behaved tenants: one group named `normal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<Normal>,
    /// Tenant groups: `[[tenants]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<Group>,
    /// Replayed traces: `[[trace]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<Trace>,
    #[serde(default)]
    pub burst: Vec<Burst>,
    /// The model provider's shared limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// How every tenant's clients retry and time out (a group's or burst's
    /// own `clients` replaces it for its tenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Clients>,
    /// Where the queue lives when the command line does not say:
    /// `[backend]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendSpec>,
    /// On a queue server, how long a take's lease lasts unless the worker
    /// renews it, seconds (default: three times the 99th-percentile job,
    /// at least 0.05 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_s: Option<f64>,
    /// Faults injected into every run on a queue server: `[[fault]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault: Vec<Fault>,
    pub strategy: Vec<Strategy>,
}

/// `[backend]`: the same as `run --backend URL --processes P`, which
/// override it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    /// `in-process`, `redis` or `postgres` (a server the lab starts),
    /// `redis://HOST:PORT[/DB]` or `postgres://USER@HOST:PORT/DB`.
    pub url: String,
    /// Worker processes (a queue server only; 0: they join from elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    /// A PostgreSQL cluster of the lab's own: its `fsync` (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsync: Option<bool>,
    /// A PostgreSQL cluster of the lab's own: its `synchronous_commit`
    /// (default true; off, a commit replies before its record is flushed,
    /// so a crash of the server may lose the last jobs it acknowledged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous_commit: Option<bool>,
    /// A Redis server of the lab's own: keep an append-only file
    /// (`appendfsync always`), to measure what it costs; on by itself
    /// where a fault restarts the server (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_only: Option<bool>,
}

/// The well-behaved tenants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normal {
    pub tenants: u32,
    /// Jobs per second, per tenant.
    pub rate_per_s: f64,
    #[serde(default)]
    pub arrivals: Arrivals,
    /// A token bucket in front of the queue, per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// A token budget, per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// How its tenants' clients retry and time out (replaces `[clients]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Clients>,
}

/// A group of alike tenants: a class in the results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// The class label in results; tenants are `name-1`, `name-2`, …
    pub name: String,
    pub count: u32,
    /// Jobs per second, per tenant.
    pub rate_per_s: f64,
    #[serde(default)]
    pub arrivals: Arrivals,
    /// The group sends from this time (default 0) …
    #[serde(default)]
    pub from_s: f64,
    /// … until this one (default `traffic_s`), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<Dist>,
    /// The group's share for weighted strategies (default 1).
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// API keys each tenant spreads its jobs over, in turn (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u32>,
    /// A token bucket in front of the queue, per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// A token budget, per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// How its tenants' clients retry and time out (replaces `[clients]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Clients>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Fixed interval, random phase per tenant.
    #[default]
    Periodic,
    /// Exponential gaps at the same mean rate.
    Poisson,
}

/// A tenant that submits `jobs` jobs at once at `at_s`, and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    pub tenant: String,
    pub at_s: f64,
    pub jobs: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<Dist>,
    /// API keys the tenant spreads its jobs over, in turn (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u32>,
    /// Spread the jobs evenly over this many seconds from `at_s` (default
    /// 0: all at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_s: Option<f64>,
    /// A token bucket in front of the queue, per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// A token budget, per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// How its tenants' clients retry and time out (replaces `[clients]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Clients>,
}

fn default_runs() -> u32 {
    3
}
fn default_seed() -> u64 {
    1
}
fn default_weight() -> f64 {
    1.0
}

/// Where `noisylab run` looks for the post's lab before falling back to the
/// copy built into the binary.
pub const DEFAULT_PATH: &str = "lab/article.toml";

/// Scenarios compiled into the binary, so it runs with no files beside it;
/// `noisylab scenario NAME` prints one as a start for your own.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("article", include_str!("../../lab/article.toml")),
    ("smoke", include_str!("../../lab/smoke.toml")),
    ("scale", include_str!("../../lab/scale.toml")),
    ("ai-product", include_str!("../../lab/ai-product.toml")),
];

/// The text of a built-in scenario.
pub fn built_in_text(name: &str) -> Option<&'static str> {
    BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Most jobs one lab run may plan: past this the per-job records alone
/// ([`JOB_RECORD_BYTES`] each) would take more than 5 GiB.
pub const MAX_JOBS_PER_RUN: u64 = 100_000_000;
/// The size of the engine's record of one job (a test checks it).
pub const JOB_RECORD_BYTES: u64 = 64;

/// What is wrong with a scenario, as one line: `file[:line:col]: key: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    pub file: PathBuf,
    /// Line and column (1-based), where the TOML parser knows them.
    pub at: Option<(usize, usize)>,
    /// The key path, such as `strategy[2].cap`; empty for the whole file.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.at {
            write!(f, ":{line}:{col}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl Scenario {
    /// Read, parse and validate a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.to_owned(),
            at: None,
            key: String::new(),
            message: format!("cannot read scenario file: {}", crate::fsio::io_reason(&e)),
        })?;
        Scenario::parse(path, &text)
    }

    /// A scenario built into the binary (see [`BUILT_IN`]); errors call it
    /// `built-in NAME`.
    pub fn built_in(name: &str) -> Result<Scenario, ScenarioError> {
        let label = PathBuf::from(format!("built-in {name}"));
        match built_in_text(name) {
            Some(text) => Scenario::parse(&label, text),
            None => Err(ScenarioError {
                file: label,
                at: None,
                key: String::new(),
                message: format!("no such built-in scenario; built in: {}", built_in_names()),
            }),
        }
    }

    /// Parse and validate scenario text; `path` is only used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let err = |at, key: String, message: String| ScenarioError {
            file: path.to_owned(),
            at,
            key,
            message,
        };
        let de = toml::Deserializer::parse(text).map_err(|e| {
            let message = format!("invalid TOML: {}", first_line(e.message()));
            err(
                e.span().map(|s| line_col(text, s.start)),
                String::new(),
                message,
            )
        })?;
        let mut scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            // A missing key has no place of its own (its span is the whole table).
            let at = if inner.message().starts_with("missing field") {
                None
            } else {
                inner.span().map(|s| line_col(text, s.start))
            };
            let key = if key == "." { String::new() } else { key };
            err(at, key, describe_serde(inner.message()))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for t in &mut scenario.trace {
            t.load(dir).map_err(|(file, e)| ScenarioError {
                file,
                at: e.at,
                key: e.column,
                message: e.message,
            })?;
        }
        scenario
            .check()
            .map_err(|(key, message)| err(None, key, message))?;
        Ok(scenario)
    }

    /// Jobs one run of the non-bursting tenants sends (exact for periodic
    /// arrivals, the mean for Poisson; every row of the traces).
    pub fn normal_jobs_per_run(&self) -> u64 {
        let groups: u64 = self
            .groups()
            .iter()
            .map(|g| {
                let span = (g.until_s.unwrap_or(self.traffic_s) - g.from_s).max(0.0);
                let per_tenant = (span * g.rate_per_s).ceil();
                (per_tenant.max(0.0) as u64).saturating_mul(u64::from(g.count))
            })
            .fold(0, u64::saturating_add);
        let traces: u64 = self.trace.iter().map(|t| t.rows_replayed() as u64).sum();
        groups.saturating_add(traces)
    }

    /// Jobs one run plans, bursts included.
    pub fn jobs_per_run(&self) -> u64 {
        let burst: u64 = self.burst.iter().map(|b| u64::from(b.jobs)).sum();
        self.normal_jobs_per_run().saturating_add(burst)
    }

    /// Distinct bursting tenants, in order of first appearance.
    pub fn burst_tenants(&self) -> Vec<&str> {
        self.first_bursts()
            .iter()
            .map(|b| b.tenant.as_str())
            .collect()
    }

    /// Each bursting tenant's first burst, in order of first appearance: its
    /// keys, and its sizes for the retry-after hint, are the tenant's.
    pub fn first_bursts(&self) -> Vec<&Burst> {
        let mut out: Vec<&Burst> = Vec::new();
        for b in &self.burst {
            if !out.iter().any(|o| o.tenant == b.tenant) {
                out.push(b);
            }
        }
        out
    }

    /// Whether any limit in front of or beyond the queue, or any client
    /// that retries or times out, is in the scenario (else every job is
    /// sent once, as in the post).
    pub fn has_limits(&self) -> bool {
        let front = |r: &Option<RateLimit>, b: &Option<Budget>, c: &Option<Clients>| {
            r.is_some() || b.is_some() || c.is_some_and(|c| !c.is_plain())
        };
        self.provider.is_some()
            || self.clients.is_some_and(|c| !c.is_plain())
            || self
                .groups()
                .iter()
                .any(|g| front(&g.rate_limit, &g.budget, &g.clients))
            || self
                .burst
                .iter()
                .any(|b| front(&b.rate_limit, &b.budget, &b.clients))
            || self
                .strategy
                .iter()
                .any(|s| s.retry_after.is_some() || s.clients.is_some_and(|c| !c.is_plain()))
    }

    /// Every tenant group, `[normal]` first (as the group `normal`).
    pub fn groups(&self) -> Vec<Group> {
        let normal = self.normal.iter().map(|n| Group {
            name: "normal".into(),
            count: n.tenants,
            rate_per_s: n.rate_per_s,
            arrivals: n.arrivals,
            from_s: 0.0,
            until_s: None,
            job_ms: None,
            tokens_in: None,
            tokens_out: None,
            weight: 1.0,
            keys: None,
            rate_limit: n.rate_limit,
            budget: n.budget,
            clients: n.clients,
        });
        normal.chain(self.tenants.iter().cloned()).collect()
    }

    /// The tenants and their classes.
    pub fn population(&self) -> Population {
        Population::of(self)
    }

    /// Keep only the named strategies, in the scenario's order.
    pub fn select(&mut self, names: &[String]) -> Result<(), String> {
        if names.is_empty() {
            return Ok(());
        }
        if let Some(missing) = names
            .iter()
            .find(|n| !self.strategy.iter().any(|s| &s.name == *n))
        {
            let known: Vec<String> = self
                .strategy
                .iter()
                .map(|s| format!("{:?}", s.name))
                .collect();
            return Err(format!(
                "--strategy {missing:?}: no such strategy in scenario {:?}; known: {}",
                self.name,
                known.join(", ")
            ));
        }
        self.strategy.retain(|s| names.contains(&s.name));
        Ok(())
    }
}

/// `article, smoke, scale`.
pub fn built_in_names() -> String {
    BUILT_IN
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// serde's messages name fields; scenario files have keys.
fn describe_serde(msg: &str) -> String {
    let msg = first_line(msg);
    if let Some(rest) = msg.strip_prefix("unknown field ") {
        return format!(
            "unknown key {}",
            rest.replace(", expected one of", "; allowed keys:")
                .replace(", expected", "; allowed keys:")
        );
    }
    if let Some(rest) = msg.strip_prefix("missing field ") {
        return format!("missing key {rest}");
    }
    if let Some(rest) = msg.strip_prefix("unknown variant ") {
        let rest = rest.replace(", expected one of ", "; allowed: ");
        return format!(
            "unknown value {}",
            rest.replace(", expected ", "; allowed: ")
        );
    }
    if let Some(rest) = msg.strip_prefix("invalid type: ") {
        let rest = rest
            .replace("expected f64", "expected a number")
            .replace("expected u64", "expected a whole number of 0 or more")
            .replace("expected u32", "expected a whole number of 0 or more");
        return format!("wrong type: found {rest}");
    }
    if let Some(rest) = msg.strip_prefix("invalid value: ") {
        return format!(
            "invalid value: found {}",
            rest.replace(
                "expected u32",
                "expected a whole number from 0 to 4294967295"
            )
            .replace("expected u64", "expected a whole number of 0 or more")
        );
    }
    msg.to_string()
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim()
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}
