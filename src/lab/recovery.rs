//! The neighbours across each fault: their rolling p95 wait just before it,
//! its highest until the next fault, and how long after the fault it was
//! back within twice its value before (and stayed there until the next
//! fault, or the traffic's end).
//!
//! A wait counts at the instant it ended (the job's last start, or its
//! client giving up), not at its enqueue: a job a fault struck (its worker
//! stopped, its lease run out, started again) was enqueued before the
//! fault, but its wait is the fault's, and ends after it.
//!
//! The neighbours are every non-bursting tenant together, not each tenant
//! alone: a tenant of the post's lab sends 2 jobs a second, so a window
//! short enough to see one fault from the next (they are 1.5–3 s apart in
//! `lab/faults.toml`) holds one or two of its jobs, and a p95 of two waits
//! is their maximum. Together they send 40 a second; a window holds about
//! `WINDOW_JOBS` of them (a quarter second at least, a second at most).

use super::delivery::{FLOOR_NS, Rolling};
use crate::engine::load::secs_to_ns as secs;
use crate::engine::{JobRecord, NEVER, Nanos};
use crate::results::FaultRecovery;
use crate::scenario::{Population, Scenario};

/// A rolling window holds about this many of the neighbours' jobs.
const WINDOW_JOBS: f64 = 20.0;
const MIN_WINDOW_NS: Nanos = 250_000_000;
const MAX_WINDOW_NS: Nanos = 1_000_000_000;

/// Each fault of the scenario, in time order: the neighbours' waits across
/// it. Empty without faults or neighbours.
pub fn across_faults(
    scenario: &Scenario,
    population: &Population,
    jobs: &[JobRecord],
) -> Vec<FaultRecovery> {
    let mut faults: Vec<_> = scenario.fault.iter().collect();
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut waits: Vec<(Nanos, Nanos)> = jobs
        .iter()
        .filter(|j| j.tenant < population.non_burst && j.enqueued != NEVER)
        .filter_map(|j| super::delivery::wait(j).map(|w| (j.enqueued + w, w)))
        .collect();
    waits.sort_unstable();
    let end = secs(scenario.traffic_s);
    if waits.is_empty() || end == 0 {
        return Vec::new();
    }
    let rate = waits.len() as f64 / scenario.traffic_s;
    let window = ((WINDOW_JOBS / rate * 1e9) as Nanos).clamp(MIN_WINDOW_NS, MAX_WINDOW_NS);
    let rolling = Rolling {
        waits: &waits,
        window,
    };
    faults
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let at = secs(f.at_s);
            // Until the next fault that starts later, or the traffic's end.
            let until = faults[i + 1..]
                .iter()
                .map(|g| secs(g.at_s))
                .find(|&t| t > at)
                .unwrap_or(end)
                .min(end);
            across(&rolling, f.kind.name(), f.at_s, at, until)
        })
        .collect()
}

/// Fault `kind` at `at` (`at_s`), the next one (or the traffic's end) at
/// `until`: the p95 before, its peak after, and when it was back.
fn across(r: &Rolling, kind: &str, at_s: f64, at: Nanos, until: Nanos) -> FaultRecovery {
    let before = r.p95_at(at);
    let threshold = before.map_or(Nanos::MAX, |b| (2 * b).max(FLOOR_NS));
    let (peak, back) = r.back_within(at, until, (r.window / 10).max(1), threshold);
    let ms = |ns: Nanos| ns as f64 / 1e6;
    FaultRecovery {
        kind: kind.to_string(),
        at_s,
        window_ms: ms(r.window),
        before_ms: before.map(ms),
        peak_ms: peak.map(ms),
        // Nothing before it: nothing to be back to.
        recovered_s: back.filter(|_| before.is_some()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn back_when_the_window_no_longer_holds_a_long_wait() {
        // A job every 10 ms waiting 1 ms, but those enqueued in [1.0, 1.1) s
        // wait 300 ms (a lease); the window is 0.25 s.
        let waits: Vec<(Nanos, Nanos)> = (0..300)
            .map(|k| {
                let at = k * 10 * MS;
                let slow = (1000 * MS..1100 * MS).contains(&at);
                (at, if slow { 300 * MS } else { MS })
            })
            .collect();
        let r = Rolling {
            waits: &waits,
            window: 250 * MS,
        };
        let f = across(&r, "kill_worker", 1.0, 1000 * MS, 3000 * MS);
        assert_eq!((f.before_ms, f.peak_ms), (Some(1.0), Some(300.0)));
        // Steps of 25 ms: the last window holding a slow job ends at
        // 1.325 s (from 1.075 s); the next, at 1.35 s, is clean: back
        // 0.35 s after the fault.
        assert_eq!(f.recovered_s, Some(0.35));
        // Still over when the next fault strikes: not recovered.
        assert_eq!(
            across(&r, "kill_worker", 1.0, 1000 * MS, 1200 * MS).recovered_s,
            None
        );
        // Never over: back at once.
        assert_eq!(
            across(&r, "drop_connections", 2.0, 2000 * MS, 3000 * MS).recovered_s,
            Some(0.0)
        );
        // No wait ended before it: nothing to be back to.
        let none = across(&r, "restart_server", 9.0, 9000 * MS, 9500 * MS);
        assert_eq!(
            (none.before_ms, none.peak_ms, none.recovered_s),
            (None, None, None)
        );
    }
}
