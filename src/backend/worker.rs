//! `noisylab worker`: a process of worker threads that joins a lab on a
//! queue server, from this machine or another. Each thread holds one
//! connection and, run after run ([`serve_runs`], the same on every server):
//!
//! 1. waits for the next run;
//! 2. asks for a job (a take); with none to start it is counted idle by the
//!    server and waits to be woken (a blocking pop on Redis, a `LISTEN` on
//!    PostgreSQL), never polling;
//! 3. holds the job for its duration (from the run's plan, read once; a
//!    retry holds its first attempt's) on a precise timer, renewing its
//!    lease (where the server leases jobs) when the hold is longer than
//!    half of it, then finishes it and gets its next job in the same call;
//! 4. when the run is over, leaves its round-trip times and how late its
//!    own timer woke for each hold, for the coordinator.
//!
//! What a thread says to its server is a [`Taker`].

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use hdrhistogram::Histogram;

use crate::engine::clock::{sleep_until_blocking, tighten_timer_slack};
use crate::stats::{encode_histogram, new_histogram, record};

/// How early a worker's OS sleep ends, to spin the rest of a job's hold:
/// not at all. A thread sleep on Linux with 1 ns of timer slack wakes about
/// 0.1 ms late on a 2-core VM, and a spin would take that off, but twenty
/// worker threads that finish together (a burst's jobs, started together)
/// spin together on two cores and take the server's CPU. Measured on the
/// article lab on Redis (docs/backends.md, "The timer, measured and chosen"): spinning the last
/// 0.3 ms, one thread a process at a time, took the capped runs' lateness
/// p50 from 0.14 ms to 0.1 µs, but the shared FIFO's take round trip p50
/// from 317 µs to 576 µs, and 6 of the 210 figures fell outside the model
/// (none without it).
pub const HOLD_MARGIN: Duration = Duration::ZERO;

/// How long a worker tries to connect again after the server dropped it.
pub const RECONNECT_FOR: Duration = Duration::from_secs(10);

/// A worker's pauses between tries to reach a server that dropped it: the
/// model's steps ([`FIRST_BACKOFF`](crate::engine::faults::FIRST_BACKOFF),
/// doubling to [`MAX_BACKOFF`](crate::engine::faults::MAX_BACKOFF)), for
/// [`RECONNECT_FOR`].
pub struct Backoff {
    until: Instant,
    pause: Duration,
}

impl Backoff {
    /// The first try failed now.
    pub fn start() -> Backoff {
        Backoff {
            until: Instant::now() + RECONNECT_FOR,
            pause: Duration::from_nanos(crate::engine::faults::FIRST_BACKOFF),
        }
    }

    /// [`RECONNECT_FOR`] has passed: give up.
    pub fn over(&self) -> bool {
        Instant::now() > self.until
    }

    /// Sleep the next pause.
    pub fn sleep(&mut self) {
        std::thread::sleep(self.pause);
        let max = Duration::from_nanos(crate::engine::faults::MAX_BACKOFF);
        self.pause = (self.pause * 2).min(max);
    }
}

/// A job as a server hands it out: its number, its queue (tenant or key)
/// and the lease it was handed with (0 where the server gives none), which
/// fences its finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub id: u32,
    pub queue: u32,
    pub lease: u64,
}

/// One worker thread's side of a queue server.
pub trait Taker {
    /// Wait for the next run: `false` when the lab is over.
    fn next_run(&mut self) -> Result<bool>;
    /// Each job's hold in the run's plan, nanoseconds.
    fn durations(&mut self) -> Result<Vec<u64>>;
    /// How long a take's lease lasts unless renewed (`None`: no leases).
    fn lease(&mut self) -> Result<Option<Duration>> {
        Ok(None)
    }
    /// The worker still holds `job`: its lease runs on. `false`: the lease
    /// had run out (the job is another worker's now).
    fn renew(&mut self, _job: Job) -> Result<bool> {
        Ok(true)
    }
    /// Ask for a job, at the run's start or woken (`woken`); `None`: the
    /// server counts this worker idle.
    fn take(&mut self, woken: bool) -> Result<Option<Job>>;
    /// Finish a job and take the next one, in one call.
    fn finish(&mut self, job: Job) -> Result<Option<Job>>;
    /// Wait, idle, to be woken (`true`) or told the run is over (`false`).
    fn wait_wake(&mut self) -> Result<bool>;
    /// Leave this worker's figures for the coordinator.
    fn leave(&mut self, figures: &str) -> Result<()>;
}

/// Run after run until the lab is over.
pub fn serve_runs(w: &mut impl Taker) -> Result<()> {
    tighten_timer_slack();
    while w.next_run()? {
        serve_run(w)?;
    }
    Ok(())
}

/// `threads` worker threads, each with its own connection (`connect`),
/// until the lab is over.
pub fn serve_threads<T: Taker>(
    threads: u32,
    connect: impl Fn() -> Result<T> + Send + Sync + 'static,
) -> Result<()> {
    let connect = std::sync::Arc::new(connect);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let connect = connect.clone();
            std::thread::spawn(move || serve_runs(&mut connect()?))
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow!("a worker thread panicked"))??;
    }
    Ok(())
}

fn serve_run(w: &mut impl Taker) -> Result<()> {
    let durations = w.durations()?;
    let lease = w.lease()?;
    let (mut rtt, mut late) = (new_histogram(), new_histogram());
    let mut next = timed(&mut rtt, || w.take(false))?;
    loop {
        let Some(job) = next else {
            if !w.wait_wake()? {
                break;
            }
            next = timed(&mut rtt, || w.take(true))?;
            continue;
        };
        let hold = hold_of(&durations, job.id)?;
        let until = Instant::now() + Duration::from_nanos(hold);
        hold_until(w, job, until, lease)?;
        let sent = Instant::now();
        record(&mut late, (sent - until).as_nanos() as u64);
        next = timed(&mut rtt, || w.finish(job))?;
    }
    w.leave(&format!(
        "{} {}",
        encode_histogram(&rtt),
        encode_histogram(&late)
    ))
}

/// A job's hold: the plan's `durations[id % n]` (a retry is numbered past
/// the plan, see [`crate::backend::clients::wire_id`]).
fn hold_of(durations: &[u64], id: u32) -> Result<u64> {
    if durations.is_empty() {
        return Err(anyhow!("job {id} in a run with no jobs planned"));
    }
    Ok(durations[id as usize % durations.len()])
}

/// Hold `job` until `until`; with a lease shorter than twice the hold,
/// renew it every third of the lease on the way.
fn hold_until(w: &mut impl Taker, job: Job, until: Instant, lease: Option<Duration>) -> Result<()> {
    hold_on(
        until,
        lease,
        Instant::now,
        |at| sleep_until_blocking(at, HOLD_MARGIN),
        || w.renew(job).map(drop),
    )
}

/// The hold's loop on a clock (`now`, `sleep_until`): while more than half
/// of the lease is left of the hold, wait for the next third of the lease
/// from the hold's start and `renew`; then wait out the hold. The renewals
/// keep to those instants, so a slow round trip delays one renewal, not
/// every one after it. The model counts the same renewals
/// ([`crate::engine::faults::renewals`]; the tests hold the two together).
fn hold_on(
    until: Instant,
    lease: Option<Duration>,
    now: impl Fn() -> Instant,
    mut sleep_until: impl FnMut(Instant),
    mut renew: impl FnMut() -> Result<()>,
) -> Result<()> {
    if let Some(lease) = lease {
        let every = lease / 3;
        let mut next = now() + every;
        while until.saturating_duration_since(now()) > lease / 2 {
            sleep_until(next);
            renew()?;
            next += every;
        }
    }
    sleep_until(until);
    Ok(())
}

fn timed<T>(rtt: &mut Histogram<u64>, call: impl FnOnce() -> Result<T>) -> Result<T> {
    let sent = Instant::now();
    let out = call()?;
    record(rtt, sent.elapsed().as_nanos() as u64);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::engine::faults::renewals;

    /// The loop's renewals for a hold, on a clock that wakes exactly when
    /// asked (and `late` after each renewal, as a round trip takes).
    fn renewed(hold: u64, lease: u64, late: u64) -> u64 {
        let origin = Instant::now();
        let t = Cell::new(origin);
        let n = Cell::new(0);
        hold_on(
            origin + Duration::from_nanos(hold),
            Some(Duration::from_nanos(lease)),
            || t.get(),
            |at| t.set(at.max(t.get())),
            || {
                n.set(n.get() + 1);
                t.set(t.get() + Duration::from_nanos(late));
                Ok(())
            },
        )
        .unwrap();
        n.get()
    }

    #[test]
    fn the_worker_renews_as_often_as_the_model_counts() {
        const MS: u64 = 1_000_000;
        for lease in [60 * MS, 150 * MS, 300 * MS, 100 * MS + 1] {
            let (half, step) = (lease / 2, lease / 3);
            // Every hold from none to seven leases, the boundaries of the
            // count (half the lease plus k steps) and a nanosecond either
            // side included.
            let mut holds: Vec<u64> = (0..=70).map(|i| i * lease / 10).collect();
            for k in 0..=20 {
                let b = half + k * step;
                holds.extend([b - 1, b, b + 1]);
            }
            for hold in holds {
                assert_eq!(
                    renewed(hold, lease, 0),
                    renewals(hold, lease),
                    "hold {hold} ns, lease {lease} ns"
                );
            }
        }
        // Exact values: a 350 ms job under a 150 ms lease renews six
        // times, a 75 ms one (half the lease) never, 75 ms + 1 ns once.
        assert_eq!(renewals(350 * MS, 150 * MS), 6);
        assert_eq!(renewals(75 * MS, 150 * MS), 0);
        assert_eq!(renewals(75 * MS + 1, 150 * MS), 1);
        // A round trip delays the check after its renewal: 1 ms loses the
        // last renewal of a hold 1 ns past a boundary, and no other (the
        // renewals keep to their instants: the delays do not add up).
        let edge = 75 * MS + 2 * 50 * MS + 1;
        assert_eq!(renewals(edge, 150 * MS), 3);
        assert_eq!(renewed(edge, 150 * MS, MS), 2);
        assert_eq!(renewed(350 * MS, 150 * MS, 20 * MS), 6);
    }
}
