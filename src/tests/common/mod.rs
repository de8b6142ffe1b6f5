//! Checks shared by the integration tests.

use noisylab::engine::{JobRecord, NEVER};
use noisylab::results::Figures;
use noisylab::scenario::{Scenario, Strategy};

/// Nothing lost or duplicated, a tenant's jobs start in its own order, no
/// tenant above its cap, never more jobs running than workers.
pub fn check_invariants(
    scenario: &Scenario,
    strategy: &Strategy,
    jobs: &[JobRecord],
    rejected: u64,
) {
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
                j.duration,
                "a job holds its worker exactly its duration"
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
    let tenants = scenario.population().tenants();
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

/// Per class: submitted = completed + rejected; the classes add up to the
/// run's totals; and each class's counts are those of its tenants' jobs.
#[allow(dead_code)] // each test binary compiles this module; not all use it
pub fn check_classes(scenario: &Scenario, jobs: &[JobRecord], figures: &Figures) {
    let population = scenario.population();
    assert_eq!(
        figures.classes.len(),
        population.classes.len(),
        "a figure per class"
    );
    let mut total_jobs = 0;
    let mut total_rejected = 0;
    for c in &population.classes {
        let f = &figures.classes[&c.name];
        let mine: Vec<&JobRecord> = jobs
            .iter()
            .filter(|j| j.tenant >= c.first && j.tenant < c.first + c.count)
            .collect();
        let completed = mine.iter().filter(|j| j.finished != NEVER).count() as u64;
        let rejected = mine.iter().filter(|j| j.started == NEVER).count() as u64;
        assert_eq!(f.jobs, mine.len() as u64, "{}: jobs", c.name);
        assert_eq!(
            f.jobs,
            completed + rejected,
            "{}: submitted = completed + rejected",
            c.name
        );
        assert_eq!(f.rejected, rejected, "{}: rejected", c.name);
        let out: u64 = mine
            .iter()
            .filter(|j| j.started != NEVER)
            .map(|j| u64::from(j.tokens_out))
            .sum();
        assert_eq!(f.tokens_out, out, "{}: tokens out", c.name);
        total_jobs += f.jobs;
        total_rejected += f.rejected;
    }
    assert_eq!(
        total_jobs,
        jobs.len() as u64,
        "the classes add up to the whole"
    );
    assert_eq!(total_rejected, figures.rejected, "rejections add up");
}
