//! Occupancy: busy workers by class and jobs waiting, integrated over a
//! run, from the event loop as it runs or from a run's records afterwards.

use super::traffic::Refusal;
use super::{Fate, JobRecord, NEVER, Nanos, Pool, RunStats, Sample};
use crate::stats;

/// A run's [`RunStats`] from its records alone, for a run whose events the
/// engine did not see (a queue on a server): occupancy samples and idle
/// capacity while work waits, exactly as [`run`](super::run) integrates them, and the
/// dispatch floor over the jobs that `found_idle` marks (their submit found
/// a worker idle). Every attempt counts (a retry is a new job); one its
/// client cancelled leaves the queue when its client left, since the
/// records keep no later instant (the engine counts it waiting until its
/// turn came and it was dropped: the one difference, and only in how long
/// work waited). `end` is when the run ended (at least its last event).
/// The records keep no retry-after: `retry_after_s_max` is 0.
pub fn stats_from_records(
    pool: &Pool,
    jobs: &[JobRecord],
    found_idle: &[bool],
    end: Nanos,
) -> RunStats {
    // (instant, queued delta, busy normal delta, busy burst delta)
    let mut events: Vec<(Nanos, i32, i32, i32)> = Vec::with_capacity(3 * jobs.len());
    let mut floor = stats::new_histogram();
    for (j, &idle) in jobs.iter().zip(found_idle) {
        if j.enqueued == NEVER {
            continue;
        }
        if let Fate::Refused(Refusal::Limit) = j.fate {
            continue; // refused at the door: never queued
        }
        events.push((j.enqueued, 1, 0, 0));
        if j.fate == Fate::Cancelled {
            events.push((j.finished, -1, 0, 0));
        } else if j.started != NEVER {
            let burst = j.tenant >= pool.normal_tenants;
            let (n, b) = if burst { (0, 1) } else { (1, 0) };
            events.push((j.started, -1, n, b));
            if j.finished != NEVER {
                events.push((j.finished, 0, -n, -b));
            }
            if idle {
                stats::record(&mut floor, j.started - j.enqueued);
            }
        }
    }
    events.sort_unstable_by_key(|e| e.0);
    let mut occupancy = Occupancy::new(pool.sample_ns, pool.traffic_ns);
    let (mut busy_normal, mut busy_burst, mut queued) = (0i64, 0i64, 0i64);
    let mut k = 0;
    while k < events.len() {
        let at = events[k].0;
        let idle = i64::from(pool.workers) - busy_normal - busy_burst;
        occupancy.advance(at, idle.max(0) as u32);
        while k < events.len() && events[k].0 == at {
            queued += i64::from(events[k].1);
            busy_normal += i64::from(events[k].2);
            busy_burst += i64::from(events[k].3);
            k += 1;
        }
        occupancy.busy_normal = busy_normal.max(0) as u32;
        occupancy.busy_burst = busy_burst.max(0) as u32;
        occupancy.queued = queued.max(0) as u32;
    }
    let idle = i64::from(pool.workers) - busy_normal - busy_burst;
    occupancy.advance(end, idle.max(0) as u32);
    RunStats {
        dispatch_floor: floor,
        provider_saturated_ns: 0,
        provider_saturated_ns_by_class: Vec::new(),
        reject_hold_ns: 0,
        retry_after_s_max: 0, // the records keep no hint: the caller's to set
        waiting_ns: occupancy.waiting_ns,
        idle_worker_ns_while_waiting: occupancy.idle_worker_ns,
        waiting_ns_in_traffic: occupancy.waiting_ns_in_traffic,
        idle_worker_ns_while_waiting_in_traffic: occupancy.idle_worker_ns_in_traffic,
        samples: occupancy.samples,
        end,
        faults: None,
        timing: super::jitter::ClockTiming::default(),
    }
}

/// Tracks busy workers and queued jobs through a run: exact integrals of idle
/// capacity while work waits, and samples on a fixed grid for the plots.
#[derive(Debug)]
pub(super) struct Occupancy {
    pub(super) step: Nanos,
    pub(super) next_sample: Nanos,
    pub(super) last: Nanos,
    pub(super) busy_normal: u32,
    pub(super) busy_burst: u32,
    pub(super) queued: u32,
    pub(super) traffic_end: Nanos,
    pub(super) waiting_ns: Nanos,
    pub(super) idle_worker_ns: u128,
    pub(super) waiting_ns_in_traffic: Nanos,
    pub(super) idle_worker_ns_in_traffic: u128,
    pub(super) samples: Vec<Sample>,
}

impl Occupancy {
    pub(super) fn new(step: Nanos, traffic_end: Nanos) -> Occupancy {
        Occupancy {
            traffic_end,
            waiting_ns_in_traffic: 0,
            idle_worker_ns_in_traffic: 0,
            step: step.max(1),
            next_sample: 0,
            last: 0,
            busy_normal: 0,
            busy_burst: 0,
            queued: 0,
            waiting_ns: 0,
            idle_worker_ns: 0,
            samples: Vec::new(),
        }
    }

    /// Account for the time from the last event to `now`, in the state that held.
    #[inline]
    pub(super) fn advance(&mut self, now: Nanos, idle: u32) {
        while self.next_sample <= now {
            self.sample_now();
            self.next_sample += self.step;
        }
        if self.queued > 0 {
            let dt = now.saturating_sub(self.last);
            self.waiting_ns += dt;
            self.idle_worker_ns += u128::from(idle) * u128::from(dt);
            let in_traffic = now.min(self.traffic_end).saturating_sub(self.last);
            self.waiting_ns_in_traffic += in_traffic;
            self.idle_worker_ns_in_traffic += u128::from(idle) * u128::from(in_traffic);
        }
        self.last = self.last.max(now);
    }

    pub(super) fn sample_now(&mut self) {
        self.samples.push(Sample {
            busy_normal: self.busy_normal,
            busy_burst: self.busy_burst,
            queued: self.queued,
        });
    }

    #[inline]
    pub(super) fn started(&mut self, burst: bool) {
        self.queued -= 1;
        if burst {
            self.busy_burst += 1;
        } else {
            self.busy_normal += 1;
        }
    }

    /// A queued job left without a worker (its client had gone).
    pub(super) fn dropped(&mut self) {
        self.queued -= 1;
    }

    #[inline]
    pub(super) fn finished(&mut self, burst: bool) {
        if burst {
            self.busy_burst -= 1;
        } else {
            self.busy_normal -= 1;
        }
    }
}
