//! Clocks: the one part of the engine that differs between a real-clock run
//! and a virtual one.

use std::future::Future;
use std::time::{Duration, Instant};

use super::Nanos;
use super::jitter::{ClockTiming, Jitter, Jittered};
use super::lateness::{Late, LateLog, Lateness, Wake};
use crate::machine::ThreadProbe;

/// Where the engine reads the time and waits for the next event.
pub trait Clock {
    /// Lab time now.
    fn now(&self) -> Nanos;
    /// Return at lab time `t` or as soon after it as this clock can.
    fn sleep_until(&mut self, t: Nanos) -> impl Future<Output = ()>;
    /// What this clock adds to a job's hold beyond its duration: the pool's
    /// modelled overshoot on the virtual clock, nothing on the real one
    /// (where the timers add their own).
    fn model_overshoot(&self, pool: &super::Pool) -> Nanos;
    /// An event due at `due` was handled at `now` (the real clock keeps the
    /// late ones, to explain them).
    #[inline]
    fn handled(&mut self, _due: Nanos, _now: Nanos, _kind: Late) {}
    /// Every event due at the wake has been handled.
    #[inline]
    fn settle(&mut self) {}
    /// What the clock measured of its own wakes and events (empty where it
    /// measures nothing: the plain virtual clock).
    fn timing(&mut self) -> ClockTiming {
        ClockTiming::default()
    }
}

/// A clock that jumps straight to the next event: runs are deterministic for
/// a seed and keep every instant to the nanosecond (tokio's paused clock would
/// round timers up to whole milliseconds). A jittered one (see the
/// [`jitter`](super::jitter) module) lets each wake go a drawn time after its
/// instant and each event take a drawn time, as a machine's loop does.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: Nanos,
    jitter: Option<Jittered>,
}

impl VirtualClock {
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    /// A clock whose wakes and events take times drawn from `jitter`.
    pub fn jittered(jitter: &Jitter) -> VirtualClock {
        VirtualClock {
            now: 0,
            jitter: Some(Jittered::new(jitter)),
        }
    }
}

impl Clock for VirtualClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.now
    }

    #[inline]
    fn sleep_until(&mut self, t: Nanos) -> impl Future<Output = ()> {
        // A wake for an instant already past does not sleep: no lateness.
        let late = match &mut self.jitter {
            Some(j) if t > self.now => j.wake(),
            _ => 0,
        };
        self.now = self.now.max(t) + late;
        std::future::ready(())
    }

    #[inline]
    fn model_overshoot(&self, pool: &super::Pool) -> Nanos {
        pool.model_overshoot_ns
    }

    #[inline]
    fn handled(&mut self, _due: Nanos, _now: Nanos, _kind: Late) {
        if let Some(j) = &mut self.jitter {
            self.now += j.event();
        }
    }

    fn timing(&mut self) -> ClockTiming {
        self.jitter
            .as_mut()
            .map(|j| std::mem::take(&mut j.timing))
            .unwrap_or_default()
    }
}

/// How the real clock waits.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Timer {
    /// tokio's timer to within 3 ms of the instant (more where calibration
    /// measured tokio later), then spin to it.
    #[default]
    Precise,
    /// tokio's timer alone: whole milliseconds, rounded up.
    Tokio,
}

/// How early the precise timer's tokio sleep ends, to spin the rest. tokio
/// rounds a deadline up to its next millisecond tick and epoll waits in whole
/// milliseconds, so that sleep may end up to about 2 ms after the instant it
/// is asked for, and a little more on a busy machine; 3 ms early keeps it
/// ahead. Spinning, unlike a second, finer sleep, keeps the CPU: on a loaded
/// machine a thread that sleeps may wait hundreds of microseconds to run again.
pub const PRECISE_MARGIN: Duration = Duration::from_millis(3);
/// The widest margin [`margin_for`] picks: past it the spinning costs more
/// than the lateness it saves.
pub const MAX_MARGIN: Duration = Duration::from_millis(20);

/// The precise timer's margin for a machine whose tokio timer was measured
/// to wake up to `tokio_late` after the instant: [`PRECISE_MARGIN`], or that
/// lateness plus a millisecond where it is more, so the coarse sleep still
/// ends before the instant.
pub fn margin_for(tokio_late: Duration) -> Duration {
    (tokio_late + Duration::from_millis(1)).clamp(PRECISE_MARGIN, MAX_MARGIN)
}

/// Wall-clock time from the moment the clock is made. Needs a tokio runtime
/// with the time driver enabled.
#[derive(Debug)]
pub struct RealClock {
    origin: Instant,
    timer: Timer,
    margin: Duration,
    /// The loop thread's kernel counters (`None` off Linux: nothing is
    /// attributed).
    probe: Option<ThreadProbe>,
    /// The wake being handled, and the late events so far.
    wake: Wake,
    late: LateLog,
    /// Its wakes' lateness and its events' handling times, and when the
    /// last event of this wake was handled.
    timing: ClockTiming,
    last_handled: Option<Nanos>,
}

/// The counters are read after an OS sleep only with at least this much
/// spin left, so the read never delays the instant.
const SAMPLE_SLACK: Nanos = 50_000;

impl RealClock {
    /// A clock whose precise timer spins the last [`PRECISE_MARGIN`].
    pub fn start(timer: Timer) -> RealClock {
        RealClock::with_margin(timer, PRECISE_MARGIN)
    }

    /// A clock for the calling thread (its counters explain late wakes).
    pub fn with_margin(timer: Timer, margin: Duration) -> RealClock {
        tighten_timer_slack();
        RealClock {
            origin: Instant::now(),
            timer,
            margin,
            probe: ThreadProbe::open(),
            wake: Wake::default(),
            late: LateLog::new(),
            timing: ClockTiming::default(),
            last_handled: None,
        }
    }

    /// The run's late jobs and arrivals by cause (`None` where the OS gives
    /// no per-thread counters).
    pub fn lateness(self) -> Option<Lateness> {
        self.probe.is_some().then(|| self.late.finish())
    }

    fn sample(&mut self) -> Option<crate::machine::ThreadSample> {
        let now = self.now();
        self.probe.as_mut().map(|p| p.sample(now))
    }
}

impl Clock for RealClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    async fn sleep_until(&mut self, t: Nanos) {
        let target = self.origin + Duration::from_nanos(t);
        let sleeps = t > self.now();
        self.last_handled = None;
        self.wake = Wake {
            target: t,
            before: if sleeps { self.sample() } else { None },
            ..Wake::default()
        };
        let coarse = match self.timer {
            Timer::Tokio => Some(target),
            Timer::Precise => target
                .checked_sub(self.margin)
                .filter(|c| *c > Instant::now()),
        };
        if let Some(coarse) = coarse {
            tokio::time::sleep_until(coarse.into()).await;
            let slept = self.now();
            self.wake.slept_until = Some(slept);
            if slept + SAMPLE_SLACK < t {
                self.wake.after_sleep = self.sample();
            }
        }
        while Instant::now() < target {
            std::hint::spin_loop();
        }
        self.wake.woke = self.now();
        if sleeps {
            crate::stats::record(&mut self.timing.wake_late, self.wake.woke.saturating_sub(t));
        }
    }

    #[inline]
    fn model_overshoot(&self, _pool: &super::Pool) -> Nanos {
        0
    }

    #[inline]
    fn handled(&mut self, due: Nanos, now: Nanos, kind: Late) {
        self.late.handled(due, now, kind);
        if let Some(last) = self.last_handled.replace(now) {
            crate::stats::record(&mut self.timing.event_gap, now.saturating_sub(last));
        }
    }

    fn timing(&mut self) -> ClockTiming {
        std::mem::take(&mut self.timing)
    }

    fn settle(&mut self) {
        // The wake's last event: its handling ends here.
        if let Some(last) = self.last_handled.take() {
            let gap = self.now().saturating_sub(last);
            crate::stats::record(&mut self.timing.event_gap, gap);
        }
        if self.late.any_late()
            && let Some(end) = self.sample()
        {
            self.late.settle(&self.wake, &end);
        }
    }
}

/// The precise timer for a thread of its own (a worker process's): sleep on
/// the OS until `margin` before `target`, then spin to it. Never early.
pub fn sleep_until_blocking(target: Instant, margin: Duration) {
    if let Some(coarse) = target.checked_sub(margin) {
        let now = Instant::now();
        if coarse > now {
            std::thread::sleep(coarse - now);
        }
    }
    while Instant::now() < target {
        std::hint::spin_loop();
    }
}

/// Sleep on tokio until shortly before `target`, then spin to it: the wake
/// is never early and late only by the spin loop's read of the clock.
pub async fn precise_sleep_until(target: Instant, margin: Duration) {
    if let Some(coarse) = target.checked_sub(margin)
        && coarse > Instant::now()
    {
        tokio::time::sleep_until(coarse.into()).await;
    }
    while Instant::now() < target {
        std::hint::spin_loop();
    }
}

/// What a runtime from [`runtime`] drives besides timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drivers {
    /// Timers alone: the lab and calibration. Without an I/O driver tokio
    /// parks its thread on a futex rather than in epoll.
    Timers,
    /// Timers and signals (the Ctrl-C watcher).
    TimersAndSignals,
}

/// The single-threaded tokio runtime every real-clock part of the tool uses.
pub fn runtime(drivers: Drivers) -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    let mut builder = tokio::runtime::Builder::new_current_thread();
    match drivers {
        Drivers::Timers => builder.enable_time(),
        Drivers::TimersAndSignals => builder.enable_all(),
    };
    builder.build().context("cannot start the tokio runtime")
}

/// Ask Linux to fire this thread's timers without the default 50 µs slack.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The precise timer as the engine uses it, judged from outside: after
    /// each `sleep_until`, the caller reads the clock itself against the
    /// instant it asked for. Targets fall at odd nanoseconds, one in the past,
    /// 60 sleeps of 3 to 4 ms (about a quarter of a second of real time).
    #[test]
    fn a_real_clock_never_wakes_before_the_instant_asked_for() {
        let rt = runtime(Drivers::Timers).unwrap();
        let mut clock = RealClock::start(Timer::Precise);
        rt.block_on(async {
            let mut early = Vec::new();
            for k in 0..60u64 {
                let target = clock.now() + 3_000_000 + k * 17_389;
                clock.sleep_until(target).await;
                let woke = clock.now();
                if woke < target {
                    early.push((target, woke));
                }
            }
            let past = clock.now() - 1;
            clock.sleep_until(past).await;
            assert!(early.is_empty(), "woke early (target, woke): {early:?}");
        });
    }
}
