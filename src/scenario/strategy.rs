//! A strategy: the queue discipline measured (`fifo`, `fair`, `vtc`), its
//! cap, limit, lending and costs, and the text that names it in results
//! files (`fair, cap 4, limit 100`).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::limits::{Clients, Layer, RetryAfter};

/// What a queue's turns, caps and limits count: API keys or tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FairBy {
    /// Each API key is a queue of its own (what a gateway sees).
    #[default]
    Key,
    /// Two-level: tenants take turns (and are capped) as one; within a
    /// tenant's turn its keys take turns (`fifo`: arrival order).
    Tenant,
}

/// One queue discipline to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// What a `vtc` queue counts (default `jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// With `cost = "tokens"`: the price of an input and of an output token
    /// (the VTC paper's 1 and 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_in: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_out: Option<f64>,
    /// With a cap: a tenant at its cap may still start a job while more than
    /// this many workers are idle (the cap lends idle workers, keeping
    /// `reserve` ready for the neighbours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<u32>,
    /// What turns, caps and limits count where tenants split themselves
    /// over several keys (default `key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_by: Option<FairBy>,
    /// `false`: a `vtc` queue that ignores the groups' weights (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighted: Option<bool>,
    /// The retry-after a queue limit's refusal gives: `"drain"` (default)
    /// or `{ fixed_s = N }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<RetryAfter>,
    /// The front-door layers in force (`budget`, `rate_limit`, `workspace`);
    /// every one the scenario defines by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<Layer>>,
    /// Clients for this strategy's runs: replaces `[clients]` (a group's
    /// or burst's own `clients` still wins), to compare client behaviours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Clients>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Queue {
    /// Arrival order across all tenants.
    Fifo,
    /// One queue per tenant, served in rotation.
    Fair,
    /// Virtual Token Counter: the backlogged tenant with the least weighted
    /// service so far.
    Vtc,
}

/// What a `vtc` counter counts for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cost {
    /// One a job: with equal weights, a round robin.
    #[default]
    Jobs,
    /// The job's duration in milliseconds: worker time.
    Time,
    /// `cost_in` × input tokens + `cost_out` × output tokens.
    Tokens,
}

/// The VTC paper's token prices: input 1, output 2.
pub const COST_IN: f64 = 1.0;
pub const COST_OUT: f64 = 2.0;

impl Strategy {
    /// What a job costs this strategy's `vtc` counter.
    pub fn job_cost(&self, duration_ns: u64, tokens_in: u32, tokens_out: u32) -> f64 {
        match self.cost.unwrap_or_default() {
            Cost::Jobs => 1.0,
            Cost::Time => duration_ns as f64 / 1e6,
            Cost::Tokens => {
                self.cost_in.unwrap_or(COST_IN) * f64::from(tokens_in)
                    + self.cost_out.unwrap_or(COST_OUT) * f64::from(tokens_out)
            }
        }
    }

    /// Whether the groups' weights count (for `vtc`; the others ignore them).
    pub fn uses_weights(&self) -> bool {
        self.queue == Queue::Vtc && self.weighted != Some(false)
    }
}

impl Strategy {
    /// Whether it is the post's shared FIFO: arrival order across tenants,
    /// no cap, no limit.
    pub fn arrival_order(&self) -> bool {
        self.queue == Queue::Fifo
            && self.cap.is_none()
            && self.limit.is_none()
            && self.reserve.is_none()
    }

    /// What the strategy is, without its name.
    pub fn discipline(&self) -> Discipline {
        Discipline {
            queue: self.queue,
            cap: self.cap,
            limit: self.limit,
            cost: self.cost,
            reserve: self.reserve,
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
    pub cost: Option<Cost>,
    pub reserve: Option<u32>,
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
            (Queue::Fair | Queue::Vtc, None, None) => Kind::Fair,
            (Queue::Fifo, None, None) => Kind::SharedFifo,
        }
    }
}

impl fmt::Display for Discipline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.queue.key())?;
        if let Some(cost) = self.cost {
            write!(f, ", cost {}", cost.key())?;
        }
        if let Some(cap) = self.cap {
            write!(f, ", cap {cap}")?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit {limit}")?;
        }
        if let Some(reserve) = self.reserve {
            write!(f, ", reserve {reserve}")?;
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
            Some("vtc") => Queue::Vtc,
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
            cost: None,
            reserve: None,
        };
        for part in parts {
            let bad =
                || format!("queue {text:?}: cannot read {part:?}; expected `cap N` or `limit N`");
            let (key, n) = part.split_once(' ').ok_or_else(bad)?;
            if key == "cost" && d.cost.is_none() {
                d.cost = Some(match n {
                    "jobs" => Cost::Jobs,
                    "time" => Cost::Time,
                    "tokens" => Cost::Tokens,
                    _ => return Err(bad()),
                });
                continue;
            }
            let n: u32 = n.parse().map_err(|_| bad())?;
            match key {
                "cap" if d.cap.is_none() => d.cap = Some(n),
                "limit" if d.limit.is_none() => d.limit = Some(n),
                "reserve" if d.reserve.is_none() => d.reserve = Some(n),
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
            Queue::Vtc => "vtc",
        }
    }
}

impl Cost {
    pub fn key(self) -> &'static str {
        match self {
            Cost::Jobs => "jobs",
            Cost::Time => "time",
            Cost::Tokens => "tokens",
        }
    }
}
