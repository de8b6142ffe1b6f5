//! What the clients got, from a run's attempts: how many times each job was
//! sent, how each ended (an answer, given up, refused, timed out), refusals
//! by layer, wasted work, goodput, and how long the neighbours took to
//! recover after the last burst.

use crate::engine::traffic::Refusal;
use crate::engine::{Fate, JobRecord, NEVER, Nanos, RunStats};
use crate::results::{Delivery, Refused};
use crate::scenario::{ClassKind, Population, Retry, Scenario, Strategy};
use crate::stats::nearest_rank;

/// The run's figures, all tenants together, and each class's.
pub struct Measured {
    pub total: Delivery,
    pub classes: Vec<Delivery>,
}

/// How a job ended, from its last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Completed,
    GivenUp,
    Rejected,
    TimedOut,
}

pub fn measure(
    scenario: &Scenario,
    strategy: &Strategy,
    population: &Population,
    jobs: &[JobRecord],
    stats: &RunStats,
) -> Measured {
    let retrying: Vec<bool> = super::limits::class_clients(scenario, strategy)
        .iter()
        .map(|c| c.retry != Retry::None)
        .collect();
    let class_of = |j: &JobRecord| population.class_of[j.tenant as usize] as usize;
    let unique = jobs.iter().take_while(|j| j.attempt == 1).count();
    // A job's last attempt is its last record: retries are appended in order.
    let mut last: Vec<Fate> = jobs[..unique].iter().map(|j| j.fate).collect();
    for j in &jobs[unique..] {
        last[j.origin as usize] = j.fate;
    }
    let mut classes = vec![Delivery::default(); population.classes.len()];
    for j in jobs.iter().filter(|j| j.enqueued != NEVER) {
        let d = &mut classes[class_of(j)];
        d.attempts += 1;
        match j.fate {
            Fate::Refused(layer) => *refused_at(&mut d.refused, layer) += 1,
            Fate::Wasted if j.started != NEVER && j.finished != NEVER => {
                d.wasted_worker_s += (j.finished - j.started) as f64 / 1e9;
            }
            Fate::Ran => d.goodput_tokens_out_per_s += f64::from(j.tokens_out),
            _ => {}
        }
    }
    for (j, fate) in jobs[..unique].iter().zip(&last) {
        let k = class_of(j);
        let d = &mut classes[k];
        d.unique_jobs += 1;
        match outcome(*fate, retrying[k]) {
            Some(Outcome::Completed) => d.completed += 1,
            Some(Outcome::GivenUp) => d.given_up += 1,
            Some(Outcome::Rejected) => {}
            Some(Outcome::TimedOut) => d.timed_out += 1,
            None => d.unfinished += 1,
        }
    }
    let lab_s = (stats.end as f64 / 1e9).max(f64::MIN_POSITIVE);
    let recovery = Recovery::of(scenario);
    let mut total = Delivery::default();
    for (k, d) in classes.iter_mut().enumerate() {
        add(&mut total, d);
        d.provider_saturated_s = stats
            .provider_saturated_ns_by_class
            .get(k)
            .map_or(0.0, |&ns| ns as f64 / 1e9);
        finish(d, lab_s);
        d.recovery_s = recovery.as_ref().and_then(|r| {
            (population.classes[k].kind != ClassKind::Burst)
                .then(|| r.after_burst(jobs, |j| class_of(j) == k))
                .flatten()
        });
    }
    total.wasted_worker_s += stats.reject_hold_ns as f64 / 1e9;
    total.provider_saturated_s = stats.provider_saturated_ns as f64 / 1e9;
    finish(&mut total, lab_s);
    total.recovery_s =
        recovery.and_then(|r| r.after_burst(jobs, |j| j.tenant < population.non_burst));
    Measured { total, classes }
}

/// How a job whose last attempt met `fate` ended, for a client that retries
/// or not; `None` if it never ended (an interrupted run).
fn outcome(fate: Fate, retrying: bool) -> Option<Outcome> {
    match fate {
        Fate::Ran => Some(Outcome::Completed),
        Fate::Pending => None,
        _ if retrying => Some(Outcome::GivenUp),
        Fate::Refused(_) => Some(Outcome::Rejected),
        Fate::Wasted | Fate::Cancelled => Some(Outcome::TimedOut),
    }
}

/// Jobs refused and never answered: a non-retrying client's refusals.
pub fn rejected(d: &Delivery) -> u64 {
    d.unique_jobs - d.completed - d.given_up - d.timed_out - d.unfinished
}

fn refused_at(r: &mut Refused, layer: Refusal) -> &mut u64 {
    match layer {
        Refusal::Limit => &mut r.limit,
        Refusal::Rate => &mut r.rate,
        Refusal::Budget => &mut r.budget,
        Refusal::Provider => &mut r.provider,
    }
}

/// Add a class's counts (goodput still as its output tokens) to the total.
fn add(total: &mut Delivery, d: &Delivery) {
    total.attempts += d.attempts;
    total.unique_jobs += d.unique_jobs;
    total.completed += d.completed;
    total.given_up += d.given_up;
    total.timed_out += d.timed_out;
    total.unfinished += d.unfinished;
    total.refused.limit += d.refused.limit;
    total.refused.rate += d.refused.rate;
    total.refused.budget += d.refused.budget;
    total.refused.provider += d.refused.provider;
    total.wasted_worker_s += d.wasted_worker_s;
    total.goodput_tokens_out_per_s += d.goodput_tokens_out_per_s;
}

/// Counts to ratios: amplification, and goodput per second of lab time.
fn finish(d: &mut Delivery, lab_s: f64) {
    d.amplification = if d.unique_jobs == 0 {
        0.0
    } else {
        d.attempts as f64 / d.unique_jobs as f64
    };
    d.goodput_jobs_per_s = d.completed as f64 / lab_s;
    d.goodput_tokens_out_per_s /= lab_s;
}

/// Rolling p95 waits before and after the bursts: windows that hold about
/// [`WINDOW_JOBS`] of the class's jobs (at least a second, at most the time
/// before the first burst), a quarter window apart.
struct Recovery {
    first_burst: Nanos,
    last_burst_end: Nanos,
    traffic_end: Nanos,
}

/// A rolling window holds at least this many of a class's jobs on average.
const WINDOW_JOBS: f64 = 100.0;
/// The shortest rolling window.
const MIN_WINDOW_NS: Nanos = 1_000_000_000;
/// Below this, a p95 wait counts as recovered whatever it was before.
pub(super) const FLOOR_NS: Nanos = 1_000_000;

impl Recovery {
    fn of(scenario: &Scenario) -> Option<Recovery> {
        let secs = crate::engine::load::secs_to_ns;
        let first_burst = scenario.burst.iter().map(|b| secs(b.at_s)).min()?;
        let last_burst_end = scenario
            .burst
            .iter()
            .map(|b| secs(b.at_s + b.over_s.unwrap_or(0.0)))
            .max()?;
        Some(Recovery {
            first_burst,
            last_burst_end,
            traffic_end: secs(scenario.traffic_s),
        })
    }

    /// Seconds from the last burst's end until the rolling p95 wait of the
    /// jobs `pick` chooses is back within twice its pre-burst value (the
    /// highest rolling p95 before the first burst, so the band holds the
    /// traffic's own fluctuation; at least 1 ms) and stays there until the
    /// traffic ends. A job whose client stopped waiting before it started
    /// counts with its wait until then.
    fn after_burst(&self, jobs: &[JobRecord], pick: impl Fn(&JobRecord) -> bool) -> Option<f64> {
        let mut waits: Vec<(Nanos, Nanos)> = jobs
            .iter()
            .filter(|j| pick(j) && j.enqueued != NEVER)
            .filter_map(|j| wait(j).map(|w| (j.enqueued, w)))
            .collect();
        waits.sort_unstable();
        if self.last_burst_end >= self.traffic_end {
            return None;
        }
        let rate = waits.len() as f64 / (self.traffic_end as f64 / 1e9);
        // Long enough for about 100 of the class's jobs, short enough that
        // the time before the first burst holds one.
        let window = (((WINDOW_JOBS / rate.max(1e-9)) * 1e9) as Nanos)
            .max(MIN_WINDOW_NS)
            .min(self.first_burst.max(1));
        let step = (window / 4).max(1);
        let rolling = Rolling {
            waits: &waits,
            window,
        };
        let before = (1..)
            .map(|k| k * step)
            .take_while(|&t| t <= self.first_burst)
            .filter_map(|t| rolling.p95_at(t))
            .max()?;
        let threshold = (2 * before).max(FLOOR_NS);
        rolling
            .back_within(self.last_burst_end, self.traffic_end, step, threshold)
            .1
    }
}

/// Rolling p95 waits: (instant, wait) pairs in the instants' order, a p95
/// over each window of `window` that ends at an instant asked for.
pub(super) struct Rolling<'a> {
    pub(super) waits: &'a [(Nanos, Nanos)],
    pub(super) window: Nanos,
}

impl Rolling<'_> {
    /// The p95 of the waits in the window that ends at `t`, if it holds
    /// any.
    pub(super) fn p95_at(&self, t: Nanos) -> Option<Nanos> {
        let lo = self
            .waits
            .partition_point(|&(at, _)| at < t.saturating_sub(self.window));
        let hi = self.waits.partition_point(|&(at, _)| at < t);
        (hi > lo).then(|| p95(self.waits[lo..hi].iter().map(|&(_, w)| w).collect()))
    }

    /// At steps of `step` from `from` until `until`: the highest p95, and
    /// the seconds from `from` until the p95 was within `threshold` and
    /// stayed there (0: it never left; `None`: still over at the end).
    pub(super) fn back_within(
        &self,
        from: Nanos,
        until: Nanos,
        step: Nanos,
        threshold: Nanos,
    ) -> (Option<Nanos>, Option<f64>) {
        let (mut peak, mut last_over) = (None, None);
        let mut t = from + step;
        while t <= until {
            if let Some(p) = self.p95_at(t) {
                peak = peak.max(Some(p));
                if p > threshold {
                    last_over = Some(t);
                }
            }
            t += step;
        }
        let back = match last_over {
            None => Some(0.0),
            Some(t) if t + step > until => None,
            Some(t) => Some((t + step - from) as f64 / 1e9),
        };
        (peak, back)
    }
}

/// An attempt's wait: to its start, or for one dropped when its client
/// stopped waiting, until then (the client's timeout: a lower bound).
pub(super) fn wait(j: &JobRecord) -> Option<Nanos> {
    match j.fate {
        Fate::Cancelled => Some(j.finished.saturating_sub(j.enqueued)),
        _ if j.started != NEVER => Some(j.started - j.enqueued),
        _ => None,
    }
}

pub(super) fn p95(mut v: Vec<Nanos>) -> Nanos {
    v.sort_unstable();
    v[nearest_rank(v.len(), 0.95)]
}
