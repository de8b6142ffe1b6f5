//! Jobs a team's queue passed over: left waiting while a worker sat idle
//! and none of the job's tenant's jobs ran, for at least [`PASSED_OVER`]
//! at a stretch. No strategy of the post's does that (a cap of one or
//! more lets a tenant with nothing running start a job on an idle worker),
//! so on a queue that does, a worker missed a wake-up: a job arrived and
//! no idle worker heard of it, as a worker that polls between blocking
//! waits, or that missed the signal of a job's arrival, does.
//!
//! Found from the records alone: who ran what and when, by the reports'
//! stamps. The pool counted idle is the smaller of the scenario's workers
//! and the most jobs the records show running at once, so a queue run
//! with fewer workers than the scenario says is not taken for one whose
//! workers sit idle.

use std::collections::HashMap;

use crate::engine::{JobRecord, NEVER, Nanos};
use crate::results::PassedOver;

/// The shortest stretch of idling that counts: far longer than a queue's
/// own hand-off from one job to the next on one machine (milliseconds),
/// and a job of the post's (100 ms) could have run in it.
pub const PASSED_OVER: Nanos = 100_000_000;

/// A change in what runs: at `at`, `delta` jobs of `tenant` start (+1),
/// end (-1); or job `waiting` is queued (`delta` 0).
#[derive(Clone, Copy)]
struct Change {
    at: Nanos,
    delta: i32,
    tenant: u32,
    job: usize,
}

/// The jobs of `jobs` passed over, on a pool of at most `workers`.
pub fn passed_over(jobs: &[JobRecord], workers: u32) -> PassedOver {
    let ran = |j: &JobRecord| j.started != NEVER && j.enqueued != NEVER;
    let mut changes: Vec<Change> = Vec::new();
    for (i, j) in jobs.iter().enumerate().filter(|(_, j)| ran(j)) {
        let change = |at, delta| Change {
            at,
            delta,
            tenant: j.tenant,
            job: i,
        };
        changes.extend([
            change(j.enqueued, 0),
            change(j.started, 1),
            change(j.finished, -1),
        ]);
    }
    // Ends before starts at one instant (a worker free at once is not
    // idle), and a job is queued before it starts.
    changes.sort_by_key(|c| (c.at, c.delta));
    let most = most_running(&changes);
    let pool = workers.min(most) as i32;
    let mut running_all = 0;
    let mut tenants: HashMap<u32, Tenant> = HashMap::new();
    let mut worst: HashMap<usize, (Nanos, u32)> = HashMap::new();
    for (k, c) in changes.iter().enumerate() {
        // Close every open stretch where this instant changes what runs.
        if c.delta != 0 {
            let idle_after = pool - (running_all + c.delta);
            for (&t, tenant) in tenants.iter_mut() {
                let eligible =
                    idle_after > 0 && tenant.running + c.delta * (t == c.tenant) as i32 == 0;
                tenant.close_unless(eligible, c.at, &mut worst);
            }
            running_all += c.delta;
        }
        let tenant = tenants.entry(c.tenant).or_default();
        match c.delta {
            0 => {
                tenant.waiting.insert(c.job, c.at);
            }
            1 => {
                tenant.waiting.remove(&c.job);
                tenant.running += 1;
            }
            _ => tenant.running -= 1,
        }
        // Idling is read once an instant's changes are all made.
        if changes.get(k + 1).is_some_and(|next| next.at == c.at) {
            continue;
        }
        let idle = (pool - running_all).max(0) as u32;
        for tenant in tenants.values_mut() {
            tenant.open_if(idle, c.at);
        }
    }
    let found: Vec<_> = worst
        .into_iter()
        .filter(|(_, (s, _))| *s >= PASSED_OVER)
        .collect();
    PassedOver {
        jobs: found.len() as u64,
        wait_s_max: (found.iter())
            .map(|(i, _)| (jobs[*i].started - jobs[*i].enqueued) as f64 / 1e9)
            .fold(0.0, f64::max),
        idle_max: found.iter().map(|(_, (_, idle))| *idle).max().unwrap_or(0),
    }
}

/// The most jobs running at once, by the changes in time order.
fn most_running(changes: &[Change]) -> u32 {
    let (mut now, mut most) = (0i32, 0i32);
    for c in changes {
        now += c.delta;
        most = most.max(now);
    }
    most as u32
}

/// One tenant as the sweep sees it: its jobs running, those waiting
/// (since when), and the stretch of idling open for it.
#[derive(Default)]
struct Tenant {
    running: i32,
    waiting: HashMap<usize, Nanos>,
    /// Since when a worker has been idle with nothing of this tenant's
    /// running and a job of it waiting, and the most workers idle in it.
    open: Option<(Nanos, u32)>,
}

impl Tenant {
    /// Where a worker is idle, nothing of it runs and a job of it waits,
    /// open a stretch (or raise the open one's idle count).
    fn open_if(&mut self, idle: u32, at: Nanos) {
        if idle == 0 || self.running > 0 || self.waiting.is_empty() {
            return;
        }
        let open = self.open.get_or_insert((at, idle));
        open.1 = open.1.max(idle);
    }

    /// End the open stretch at `at` unless it goes on (`eligible`), and
    /// note for each job waiting in it its longest stretch so far.
    fn close_unless(
        &mut self,
        eligible: bool,
        at: Nanos,
        worst: &mut HashMap<usize, (Nanos, u32)>,
    ) {
        if eligible {
            return;
        }
        let Some((since, idle)) = self.open.take() else {
            return;
        };
        for (&job, &queued) in &self.waiting {
            let stretch = at - since.max(queued);
            let w = worst.entry(job).or_insert((0, 0));
            if stretch > w.0 {
                *w = (stretch, idle.max(w.1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Fate;

    const MS: Nanos = 1_000_000;

    /// A job of `tenant` queued at `queued`, run from `started` to `ended`
    /// (milliseconds).
    fn job(tenant: u32, queued: u64, started: u64, ended: u64) -> JobRecord {
        let mut j = JobRecord::planned(tenant, queued * MS, (ended - started) * MS);
        (j.enqueued, j.started, j.finished, j.fate) =
            (queued * MS, started * MS, ended * MS, Fate::Ran);
        j
    }

    #[test]
    fn a_job_left_waiting_beside_an_idle_worker_is_passed_over() {
        // Two workers; tenant 1's job waits 100–500 ms while one idles.
        let jobs = [job(0, 0, 0, 1000), job(1, 100, 500, 600)];
        let found = passed_over(&jobs, 2);
        assert_eq!(
            found,
            PassedOver {
                jobs: 1,
                wait_s_max: 0.4,
                idle_max: 1
            }
        );
    }

    #[test]
    fn a_hand_off_shorter_than_the_stretch_is_not() {
        // 99 ms beside an idle worker: under PASSED_OVER.
        let jobs = [job(0, 0, 0, 1000), job(1, 100, 199, 300)];
        assert_eq!(passed_over(&jobs, 2).jobs, 0);
        let jobs = [job(0, 0, 0, 1000), job(1, 100, 200, 300)];
        assert_eq!(passed_over(&jobs, 2).jobs, 1);
    }

    #[test]
    fn a_job_held_at_its_tenant_s_cap_is_not() {
        // Tenant 0's second job waits while its first runs and a worker
        // idles: what a cap of one does.
        let jobs = [job(0, 0, 0, 1000), job(0, 100, 1000, 1100)];
        assert_eq!(passed_over(&jobs, 2).jobs, 0);
    }

    #[test]
    fn a_job_waiting_on_a_busy_pool_is_not() {
        // Both workers busy for the whole wait; the scenario's 4 workers
        // are more than the queue ever ran at once, so none counts idle.
        let jobs = [
            job(0, 0, 0, 1000),
            job(2, 0, 0, 1000),
            job(1, 100, 1000, 1100),
        ];
        assert_eq!(passed_over(&jobs, 2).jobs, 0);
        assert_eq!(passed_over(&jobs, 4).jobs, 0);
    }

    #[test]
    fn the_most_idle_and_the_longest_wait_are_of_the_jobs_passed_over() {
        // Three workers: tenant 1 waits 0–300 ms with two idle, then
        // tenant 2 waits 400–1000 ms with one idle (tenant 3 runs).
        let jobs = [
            job(0, 0, 0, 2000),
            job(1, 0, 300, 350),
            job(3, 400, 400, 2000),
            job(2, 400, 1000, 1050),
        ];
        assert_eq!(
            passed_over(&jobs, 3),
            PassedOver {
                jobs: 2,
                wait_s_max: 0.6,
                idle_max: 2
            }
        );
    }
}
