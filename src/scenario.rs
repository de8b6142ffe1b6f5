//! Scenario files: parse a TOML lab description and validate it.
//!
//! The keys are a contract other tools read and write (see `lab/article.toml`).
//! Every mistake is reported as one [`ScenarioError`] line that names the file,
//! the key, what was found and what is allowed.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    /// Every job holds a worker this long, in milliseconds.
    pub job_ms: u64,
    /// Normal tenants send from t = 0 until this time, in seconds.
    pub traffic_s: f64,
    pub normal: Normal,
    #[serde(default)]
    pub burst: Vec<Burst>,
    pub strategy: Vec<Strategy>,
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
}

/// One queue discipline to measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Strategy {
    pub name: String,
    pub queue: Queue,
    /// Most jobs one tenant may run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<u32>,
    /// Most jobs one tenant may have waiting; a push beyond it is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Queue {
    /// Arrival order across all tenants.
    Fifo,
    /// One queue per tenant, served in rotation.
    Fair,
}

fn default_runs() -> u32 {
    3
}
fn default_seed() -> u64 {
    1
}

/// Where `noisylab run` looks for the post's lab before falling back to the
/// copy built into the binary.
pub const DEFAULT_PATH: &str = "lab/article.toml";

/// Scenarios compiled into the binary, so it runs with no files beside it;
/// `noisylab scenario NAME` prints one as a start for your own.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("article", include_str!("../lab/article.toml")),
    ("smoke", include_str!("../lab/smoke.toml")),
    ("scale", include_str!("../lab/scale.toml")),
];

/// The text of a built-in scenario.
pub fn built_in_text(name: &str) -> Option<&'static str> {
    BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Most jobs one lab run may plan: past this the per-job records alone
/// (40 bytes each) would take more than 4 GiB.
pub const MAX_JOBS_PER_RUN: u64 = 100_000_000;

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
        let scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
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
        scenario
            .check()
            .map_err(|(key, message)| err(None, key, message))?;
        Ok(scenario)
    }

    /// Rules serde cannot express. Returns the offending key and why.
    fn check(&self) -> Result<(), (String, String)> {
        let fail = |key: &str, msg: String| Err((key.to_owned(), msg));
        if self.name.trim().is_empty() {
            return fail("name", "must not be empty".into());
        }
        if self.runs == 0 {
            return fail("runs", "must be at least 1, found 0".into());
        }
        if self.workers == 0 {
            return fail("workers", "must be at least 1, found 0".into());
        }
        if self.job_ms == 0 {
            return fail("job_ms", "must be at least 1 ms, found 0".into());
        }
        positive_seconds("traffic_s", self.traffic_s)?;
        if !(self.normal.rate_per_s.is_finite() && self.normal.rate_per_s >= 0.0) {
            return fail(
                "normal.rate_per_s",
                format!(
                    "must be a rate of 0 or more jobs per second, found {}",
                    self.normal.rate_per_s
                ),
            );
        }
        if self.normal.tenants > 0 && self.normal.rate_per_s > 0.0 {
            let interval_ns = 1e9 / self.normal.rate_per_s;
            if interval_ns < 1.0 {
                return fail(
                    "normal.rate_per_s",
                    format!(
                        "at most 1e9 jobs per second per tenant, found {}",
                        self.normal.rate_per_s
                    ),
                );
            }
        }
        self.check_bursts()?;
        if self.normal_jobs_per_run() == 0 {
            return fail(
                "normal",
                "no normal jobs would be sent before traffic_s, so there is no wait to measure; \
                 raise normal.tenants, normal.rate_per_s or traffic_s"
                    .into(),
            );
        }
        self.check_strategies()?;
        let jobs = self.jobs_per_run();
        if jobs > MAX_JOBS_PER_RUN {
            return fail(
                "",
                format!(
                    "one run would plan {jobs} jobs (about {} MiB of job records); at most {MAX_JOBS_PER_RUN} are allowed",
                    jobs * 40 / (1 << 20)
                ),
            );
        }
        Ok(())
    }

    fn check_bursts(&self) -> Result<(), (String, String)> {
        let fail = |key: &str, msg: String| Err((key.to_owned(), msg));
        for (i, b) in self.burst.iter().enumerate() {
            if b.tenant.trim().is_empty() {
                return fail(&format!("burst[{i}].tenant"), "must not be empty".into());
            }
            if !(b.at_s.is_finite() && b.at_s >= 0.0) {
                return fail(
                    &format!("burst[{i}].at_s"),
                    format!("must be 0 or more seconds, found {}", b.at_s),
                );
            }
            if b.at_s >= self.traffic_s {
                return fail(
                    &format!("burst[{i}].at_s"),
                    format!(
                        "{} s is not before traffic_s = {} s, so no normal job would run beside the burst; \
                         move the burst earlier or raise traffic_s",
                        b.at_s, self.traffic_s
                    ),
                );
            }
            if b.jobs == 0 {
                return fail(
                    &format!("burst[{i}].jobs"),
                    "must be at least 1, found 0".into(),
                );
            }
        }
        Ok(())
    }

    fn check_strategies(&self) -> Result<(), (String, String)> {
        let fail = |key: &str, msg: String| Err((key.to_owned(), msg));
        if self.strategy.is_empty() {
            return fail(
                "strategy",
                "at least one [[strategy]] is needed (queue = \"fifo\" or \"fair\")".into(),
            );
        }
        for (i, s) in self.strategy.iter().enumerate() {
            if s.name.trim().is_empty() {
                return fail(&format!("strategy[{i}].name"), "must not be empty".into());
            }
            if let Some(j) = self.strategy[..i].iter().position(|o| o.name == s.name) {
                return fail(
                    &format!("strategy[{i}].name"),
                    format!(
                        "duplicate strategy name {:?} (also strategy[{j}]); names must be unique",
                        s.name
                    ),
                );
            }
            if s.cap == Some(0) {
                return fail(
                    &format!("strategy[{i}].cap"),
                    "must be at least 1 (leave it out for no cap), found 0".into(),
                );
            }
            if s.limit == Some(0) {
                return fail(
                    &format!("strategy[{i}].limit"),
                    "must be at least 1 (leave it out for no limit), found 0".into(),
                );
            }
        }
        Ok(())
    }

    /// Normal jobs one run sends (exact for periodic arrivals, the mean for Poisson).
    pub fn normal_jobs_per_run(&self) -> u64 {
        let per_tenant = (self.traffic_s * self.normal.rate_per_s).ceil();
        (per_tenant.max(0.0) as u64).saturating_mul(u64::from(self.normal.tenants))
    }

    /// Jobs one run plans, bursts included.
    pub fn jobs_per_run(&self) -> u64 {
        let burst: u64 = self.burst.iter().map(|b| u64::from(b.jobs)).sum();
        self.normal_jobs_per_run().saturating_add(burst)
    }

    /// Distinct bursting tenants, in order of first appearance.
    pub fn burst_tenants(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for b in &self.burst {
            if !names.contains(&b.tenant.as_str()) {
                names.push(&b.tenant);
            }
        }
        names
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

impl Strategy {
    /// What the strategy is, without its name.
    pub fn discipline(&self) -> Discipline {
        Discipline {
            queue: self.queue,
            cap: self.cap,
            limit: self.limit,
        }
    }

    /// A short description of the discipline, such as `fair, cap 4, limit 100`.
    pub fn describe(&self) -> String {
        self.discipline().to_string()
    }
}

/// A strategy's queue discipline and limits, written as `fair, cap 4, limit
/// 100` in results files (the `queue` key) and parsed back from that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discipline {
    pub queue: Queue,
    pub cap: Option<u32>,
    pub limit: Option<u32>,
}

/// What a discipline is for, as the post sorts its strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `fifo` with neither cap nor limit: the baseline every fix is judged against.
    SharedFifo,
    /// A cap and no limit.
    Capped,
    /// `fair` with neither cap nor limit: work-conserving.
    Fair,
    /// A queue limit (with or without a cap).
    Limited,
}

impl Discipline {
    pub fn kind(&self) -> Kind {
        match (self.queue, self.cap, self.limit) {
            (_, _, Some(_)) => Kind::Limited,
            (_, Some(_), None) => Kind::Capped,
            (Queue::Fair, None, None) => Kind::Fair,
            (Queue::Fifo, None, None) => Kind::SharedFifo,
        }
    }
}

impl fmt::Display for Discipline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.queue.key())?;
        if let Some(cap) = self.cap {
            write!(f, ", cap {cap}")?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit {limit}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Discipline {
    type Err = String;

    fn from_str(text: &str) -> Result<Discipline, String> {
        let mut parts = text.split(", ");
        let queue = match parts.next() {
            Some("fifo") => Queue::Fifo,
            Some("fair") => Queue::Fair,
            _ => {
                return Err(format!(
                    "queue {text:?}: expected `fifo` or `fair`, then `, cap N` and `, limit N`"
                ));
            }
        };
        let mut d = Discipline {
            queue,
            cap: None,
            limit: None,
        };
        for part in parts {
            let bad =
                || format!("queue {text:?}: cannot read {part:?}; expected `cap N` or `limit N`");
            let (key, n) = part.split_once(' ').ok_or_else(bad)?;
            let n: u32 = n.parse().map_err(|_| bad())?;
            match key {
                "cap" if d.cap.is_none() => d.cap = Some(n),
                "limit" if d.limit.is_none() => d.limit = Some(n),
                _ => return Err(bad()),
            }
        }
        Ok(d)
    }
}

impl Serialize for Discipline {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Discipline {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Discipline, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Queue {
    /// The scenario file's word for it.
    pub fn key(self) -> &'static str {
        match self {
            Queue::Fifo => "fifo",
            Queue::Fair => "fair",
        }
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

fn positive_seconds(key: &str, v: f64) -> Result<(), (String, String)> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err((
            key.to_owned(),
            format!("must be more than 0 seconds, found {v}"),
        ))
    }
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
