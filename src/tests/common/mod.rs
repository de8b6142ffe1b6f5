//! Checks shared by the integration tests.

use noisylab::engine::{JobRecord, NEVER};
use noisylab::scenario::{Scenario, Strategy};

/// Nothing lost or duplicated, a tenant's jobs start in its own order, no
/// tenant above its cap, never more jobs running than workers.
pub fn check_invariants(
    scenario: &Scenario,
    strategy: &Strategy,
    jobs: &[JobRecord],
    rejected: u64,
) {
    let job_ns = scenario.job_ms * 1_000_000;
    let mut done = 0u64;
    let mut refused = 0u64;
    for j in jobs {
        assert_ne!(j.enqueued, NEVER, "every planned job is submitted");
        if j.started == NEVER {
            assert_eq!(j.finished, NEVER);
            refused += 1;
        } else {
            assert!(j.started >= j.enqueued);
            assert_eq!(
                j.finished - j.started,
                job_ns,
                "a job holds its worker exactly job_ms"
            );
            done += 1;
        }
    }
    assert_eq!(refused, rejected);
    assert_eq!(
        done + refused,
        jobs.len() as u64,
        "submitted = completed + rejected"
    );
    if strategy.limit.is_none() {
        assert_eq!(rejected, 0);
    }
    let tenants = scenario.normal.tenants as usize + scenario.burst_tenants().len();
    let mut last_start = vec![0u64; tenants];
    let mut events: Vec<(u64, i32, usize)> = Vec::new();
    for j in jobs.iter().filter(|j| j.started != NEVER) {
        let t = j.tenant as usize;
        assert!(
            j.started >= last_start[t],
            "tenant {t}'s jobs start in their own order"
        );
        last_start[t] = j.started;
        events.push((j.started, 1, t));
        events.push((j.finished, -1, t));
    }
    // Finishes before starts at the same instant.
    events.sort();
    let mut running = vec![0i32; tenants];
    let mut busy = 0i32;
    let cap = strategy.cap.map_or(i32::MAX, |c| c as i32);
    for (_, delta, t) in events {
        running[t] += delta;
        busy += delta;
        assert!(running[t] <= cap, "tenant {t} above its cap");
        assert!(
            busy <= scenario.workers as i32,
            "more jobs running than workers"
        );
    }
}
