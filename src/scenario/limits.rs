//! The AI product's limits and its clients, as a scenario states them: the
//! model provider's shared limits (`[provider]`), each tenant's rate limit
//! and token budget in front of the queue (on a group or a burst), and how
//! clients retry and time out (`[clients]`, or `clients` on a group or burst).
//!
//! All of it is optional; a scenario without it runs as before: every job
//! is sent once, and a refused job is gone.

use serde::{Deserialize, Serialize};

/// The model provider's limits, shared by every tenant of the organisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// Requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<f64>,
    /// Input tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tpm: Option<f64>,
    /// Output tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tpm: Option<f64>,
    /// Token buckets hold a minute's worth unless this says how many
    /// requests the request bucket holds (the token buckets then hold the
    /// same share of their minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    /// Check each limit over a sliding window of this many seconds, at the
    /// minute's rate (Azure checks over 1 s or 10 s), instead of a bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// Charge a job's output tokens when it starts (providers count
    /// `max_tokens`) rather than when it finishes.
    #[serde(default)]
    pub reserve_output: bool,
    /// How long a refused call holds its worker, in milliseconds (default 0).
    #[serde(default)]
    pub reject_ms: f64,
    /// Workspaces: groups whose calls also count against limits of their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace: Vec<Workspace>,
}

/// A workspace's limits, inside the organisation's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workspace {
    pub name: String,
    /// The classes (group names, bursting tenants) whose calls it carries.
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tpm: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tpm: Option<f64>,
}

/// A token bucket in front of the queue, per tenant: `per_s` requests a
/// second, `burst` at once (default: one second's worth, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub per_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
}

/// A tenant's token budget: `tokens` (input + output) to spend, refilled at
/// `per_s` tokens a second (default 0: a fixed budget). Checked when a job
/// reaches the front door, spent when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub tokens: f64,
    #[serde(default)]
    pub per_s: f64,
}

/// When a refused or timed-out client sends its job again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retry {
    /// Never: a refused job is gone.
    #[default]
    None,
    /// After the retry-after the refusal gave (or `base_ms` without one).
    After,
    /// Exponential backoff: `base_ms` × 2ⁿ up to `cap_ms`, with `jitter`.
    Backoff,
}

/// The AWS Architecture Blog's "Exponential Backoff And Jitter" formulas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// min(cap, base × 2ⁿ).
    #[default]
    None,
    /// U(0, min(cap, base × 2ⁿ)).
    Full,
    /// Half of min(cap, base × 2ⁿ) fixed, half drawn.
    Equal,
    /// min(cap, U(base, 3 × the previous delay)).
    Decorrelated,
}

/// What a client does with a job whose start it stopped waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// The job is dropped when its turn comes, without a worker.
    #[default]
    Cancel,
    /// The job still runs when its turn comes, and nobody reads it.
    Waste,
}

/// How a group's clients behave (`[clients]` for everyone, `clients` on a
/// group or burst for its tenants).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clients {
    #[serde(default)]
    pub retry: Retry,
    /// Most attempts of one job, the first included (default 3 when retrying).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Backoff's first delay (and `after`'s delay without a retry-after), ms
    /// (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ms: Option<f64>,
    /// Backoff's longest delay, ms (default 20,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_ms: Option<f64>,
    #[serde(default)]
    pub jitter: Jitter,
    /// Never retry before the retry-after a refusal gave (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub honour_retry_after: Option<bool>,
    /// Stop waiting for a job that has not started after this long, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    #[serde(default)]
    pub on_timeout: OnTimeout,
    /// A retry budget: the group's clients retry only while their retries
    /// stay below this share of their first attempts (gRPC's and Envoy's
    /// retry budgets; default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<f64>,
}

impl Clients {
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
    pub const DEFAULT_BASE_MS: f64 = 100.0;
    pub const DEFAULT_CAP_MS: f64 = 20_000.0;

    /// Most attempts of one job, the first included.
    pub fn max_attempts(&self) -> u32 {
        match self.retry {
            Retry::None => 1,
            _ => self.max_attempts.unwrap_or(Self::DEFAULT_MAX_ATTEMPTS),
        }
    }

    /// Whether these clients change anything from the post's (send once,
    /// wait forever).
    pub fn is_plain(&self) -> bool {
        self.retry == Retry::None && self.timeout_s.is_none()
    }
}

/// A queue limit's retry-after: the tenant's drain time, or a fixed one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RetryAfter {
    /// `"drain"`: the seconds the tenant's queue takes to drain (the default).
    Named(RetryAfterName),
    /// `{ fixed_s = 1 }`: always this many seconds (Kubernetes API Priority
    /// and Fairness returns 1).
    Fixed { fixed_s: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryAfterName {
    Drain,
}

/// The front-door layers a strategy may switch off (`layers = [...]` on a
/// strategy; all apply by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The groups' `budget`.
    Budget,
    /// The groups' `rate_limit`.
    RateLimit,
    /// The provider's `[[provider.workspace]]` limits.
    Workspace,
}
