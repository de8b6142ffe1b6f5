//! Late on the real clock, and why: every job that finished, and every
//! arrival that was submitted, more than [`LATE_NS`] after its instant is
//! given a cause from the loop thread's own kernel counters around the
//! wake that handled it.
//!
//! A wake of the event loop is an OS sleep to shortly before the instant,
//! then a spin to it, then the events due (see the `clock` module). The thread's
//! counters ([`ThreadSample`]) are read before the sleep and when it ends,
//! both in time the loop would spend waiting anyway, and once more after the
//! events, only when one of them was late, so nothing is read between an
//! event's instant and its handling. Over a window in which the thread
//! wanted the CPU, the wall clock is its run time, plus its wait on this
//! kernel's run queue, plus time this kernel never had:
//!
//! - **stolen**: wall time neither run nor waited on a run queue (on a VM,
//!   the hypervisor running other guests on this CPU; interrupts where the
//!   kernel accounts them apart), or an OS sleep that ended late while the
//!   CPU's steal counter moved;
//! - **preempted**: the run-queue wait (another process of this machine had
//!   the CPU, or the kernel took it: an involuntary switch);
//! - **timer**: the OS sleep itself returned after the instant, with no wait
//!   for the CPU nor steal to explain it;
//! - **busy**: the loop was handling events due before it (the harness's
//!   own work, e.g. a burst of 2,000 submits);
//! - **unexplained**: none of those covers half of the lateness.
//!
//! A late event gets the cause that took the most of its lateness. The
//! model's tolerance for a run can then be widened by the time a cause took
//! ([`Lateness`]), which tells a machine that cannot time from a lab that is
//! wrong.

use serde::{Deserialize, Serialize};

use super::Nanos;
use crate::machine::ThreadSample;

/// A job or arrival counts as late past this many nanoseconds (0.2 ms).
pub const LATE_NS: Nanos = 200_000;

/// Why an event was late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    Stolen,
    Preempted,
    Timer,
    Busy,
    Unexplained,
}

impl Cause {
    /// The external causes, the machine's rather than the lab's.
    pub const EXTERNAL: [Cause; 3] = [Cause::Stolen, Cause::Preempted, Cause::Timer];

    pub fn name(self) -> &'static str {
        match self {
            Cause::Stolen => "stolen",
            Cause::Preempted => "preempted",
            Cause::Timer => "timer",
            Cause::Busy => "busy",
            Cause::Unexplained => "unexplained",
        }
    }
}

/// One value per cause.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByCause<T> {
    pub stolen: T,
    pub preempted: T,
    pub timer: T,
    pub busy: T,
    pub unexplained: T,
}

impl<T: Copy + std::ops::AddAssign + Default> ByCause<T> {
    pub fn get(&self, cause: Cause) -> T {
        match cause {
            Cause::Stolen => self.stolen,
            Cause::Preempted => self.preempted,
            Cause::Timer => self.timer,
            Cause::Busy => self.busy,
            Cause::Unexplained => self.unexplained,
        }
    }

    pub fn get_mut(&mut self, cause: Cause) -> &mut T {
        match cause {
            Cause::Stolen => &mut self.stolen,
            Cause::Preempted => &mut self.preempted,
            Cause::Timer => &mut self.timer,
            Cause::Busy => &mut self.busy,
            Cause::Unexplained => &mut self.unexplained,
        }
    }

    pub fn total(&self) -> T {
        let mut t = T::default();
        for c in ALL {
            t += self.get(c);
        }
        t
    }

    fn add(&mut self, other: &ByCause<T>) {
        for c in ALL {
            *self.get_mut(c) += other.get(c);
        }
    }
}

/// Every cause, in the order tables list them.
pub const ALL: [Cause; 5] = [
    Cause::Stolen,
    Cause::Preempted,
    Cause::Timer,
    Cause::Busy,
    Cause::Unexplained,
];

/// A run's late jobs and arrivals, by cause, and the time each cause took.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lateness {
    /// Past this a job or an arrival counts as late, ms.
    pub threshold_ms: f64,
    /// Jobs whose completion was handled late (their overshoot), by cause.
    pub jobs: ByCause<u64>,
    /// Arrivals submitted late (their lag), by cause.
    pub arrivals: ByCause<u64>,
    /// Time each cause took in the late wakes, ms, each wake counted once
    /// (for `unexplained`: the lateness nothing covered).
    pub time_ms: ByCause<f64>,
    /// The longest single wake's time of each cause, ms.
    pub longest_ms: ByCause<f64>,
}

impl Lateness {
    /// Late jobs and arrivals together.
    pub fn events(&self) -> ByCause<u64> {
        let mut all = self.jobs;
        all.add(&self.arrivals);
        all
    }

    /// The sum of several runs' (for a strategy's total).
    pub fn sum<'a>(runs: impl IntoIterator<Item = &'a Lateness>) -> Option<Lateness> {
        let mut out: Option<Lateness> = None;
        for r in runs {
            let o = out.get_or_insert_with(|| Lateness {
                threshold_ms: r.threshold_ms,
                ..Lateness::default()
            });
            o.jobs.add(&r.jobs);
            o.arrivals.add(&r.arrivals);
            o.time_ms.add(&r.time_ms);
            for c in ALL {
                let l = o.longest_ms.get_mut(c);
                *l = l.max(r.longest_ms.get(c));
            }
        }
        out
    }

    /// The external cause behind most late events, with its count.
    pub fn main_external(&self) -> Option<(Cause, u64)> {
        let all = self.events();
        Cause::EXTERNAL
            .into_iter()
            .map(|c| (c, all.get(c)))
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(_, n)| *n)
    }
}

/// What one wake of the loop went through.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Wake {
    /// The instant it was for.
    pub target: Nanos,
    /// When the OS sleep returned (`None`: there was none, spin only).
    pub slept_until: Option<Nanos>,
    /// When the spin let go: the loop starts handling events.
    pub woke: Nanos,
    /// The thread's counters before the sleep, and when the sleep returned
    /// in time (after the instant it is not read: it would make every event
    /// later).
    pub before: Option<ThreadSample>,
    pub after_sleep: Option<ThreadSample>,
}

/// The time the machine took from one wake, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Taken {
    pub stolen: Nanos,
    pub preempted: Nanos,
    pub timer: Nanos,
}

/// What took the time of a wake, from its counters and `end`, read after
/// the events it handled.
pub fn taken(wake: &Wake, end: &ThreadSample) -> Taken {
    let Some(before) = wake.before else {
        return Taken::default();
    };
    let delta = |a: &ThreadSample| {
        (
            end.exec_ns.saturating_sub(a.exec_ns),
            end.run_delay_ns.saturating_sub(a.run_delay_ns),
        )
    };
    match (wake.slept_until, wake.after_sleep) {
        // The sleep ended in time: from there the thread wanted the CPU.
        (Some(_), Some(mid)) | (None, Some(mid)) => {
            let (run, wait) = delta(&mid);
            let wall = end.at_ns.saturating_sub(mid.at_ns);
            Taken {
                stolen: wall.saturating_sub(run + wait),
                preempted: wait,
                timer: 0,
            }
        }
        // The sleep ended late. A wait for the CPU without an involuntary
        // switch was the wake-up's; with one, the run's.
        (Some(slept), None) => {
            let (run, wait) = delta(&before);
            let switched = end.involuntary_switches > before.involuntary_switches;
            let late_sleep = slept.saturating_sub(wake.target);
            let woke_wait = if switched { 0 } else { wait };
            let steal_moved = matches!(
                (before.cpu_steal_ticks, end.cpu_steal_ticks, before.cpu == end.cpu),
                (Some(a), Some(b), true) if b > a
            );
            let sleep_rest = late_sleep.saturating_sub(woke_wait);
            let running = end.at_ns.saturating_sub(slept);
            let run_stolen = running.saturating_sub(run + if switched { wait } else { 0 });
            Taken {
                stolen: run_stolen + if steal_moved { sleep_rest } else { 0 },
                preempted: wait,
                timer: if steal_moved { 0 } else { sleep_rest },
            }
        }
        // Spin only: the thread wanted the CPU from `before` on.
        (None, None) => {
            let (run, wait) = delta(&before);
            let wall = end.at_ns.saturating_sub(before.at_ns);
            Taken {
                stolen: wall.saturating_sub(run + wait),
                preempted: wait,
                timer: 0,
            }
        }
    }
}

/// The cause of an event due at `due` and handled at `now` in a wake that
/// let go at `woke` and lost `taken` to the machine: the largest share of
/// its lateness, if the shares cover half of it.
pub fn cause_of(due: Nanos, now: Nanos, woke: Nanos, taken: &Taken) -> Cause {
    let late = now.saturating_sub(due);
    let busy = now.saturating_sub(woke.max(due));
    let shares = [
        (Cause::Stolen, taken.stolen.min(late)),
        (Cause::Preempted, taken.preempted.min(late)),
        (Cause::Timer, taken.timer.min(late)),
        (Cause::Busy, busy),
    ];
    let covered: Nanos = shares.iter().map(|s| s.1).sum();
    if covered * 2 < late {
        return Cause::Unexplained;
    }
    shares
        .into_iter()
        .max_by_key(|s| s.1)
        .map_or(Cause::Unexplained, |s| s.0)
}

/// Which kind of event was late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    Job,
    Arrival,
}

/// A run's late events as they come, wake by wake.
#[derive(Debug, Clone, Default)]
pub struct LateLog {
    /// The late events of the wake being handled: (due, handled, kind).
    pending: Vec<(Nanos, Nanos, Late)>,
    out: Lateness,
}

impl LateLog {
    pub fn new() -> LateLog {
        LateLog {
            pending: Vec::new(),
            out: Lateness {
                threshold_ms: LATE_NS as f64 / 1e6,
                ..Lateness::default()
            },
        }
    }

    /// An event due at `due` was handled at `now`: kept if late.
    #[inline]
    pub fn handled(&mut self, due: Nanos, now: Nanos, kind: Late) {
        if now > due + LATE_NS {
            self.pending.push((due, now, kind));
        }
    }

    /// Whether the wake being handled had a late event.
    pub fn any_late(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The wake is over: give its late events their causes, `end` read
    /// after them.
    pub fn settle(&mut self, wake: &Wake, end: &ThreadSample) {
        if self.pending.is_empty() {
            return;
        }
        let t = taken(wake, end);
        let mut busy: Nanos = 0;
        let mut unexplained: Nanos = 0;
        for &(due, now, kind) in &self.pending {
            let cause = cause_of(due, now, wake.woke, &t);
            let counts = match kind {
                Late::Job => &mut self.out.jobs,
                Late::Arrival => &mut self.out.arrivals,
            };
            *counts.get_mut(cause) += 1;
            busy = busy.max(now.saturating_sub(wake.woke.max(due)));
            if cause == Cause::Unexplained {
                unexplained = unexplained.max(now - due);
            }
        }
        self.pending.clear();
        let ms = |ns: Nanos| ns as f64 / 1e6;
        for (cause, ns) in [
            (Cause::Stolen, t.stolen),
            (Cause::Preempted, t.preempted),
            (Cause::Timer, t.timer),
            (Cause::Busy, busy),
            (Cause::Unexplained, unexplained),
        ] {
            *self.out.time_ms.get_mut(cause) += ms(ns);
            let l = self.out.longest_ms.get_mut(cause);
            *l = l.max(ms(ns));
        }
    }

    pub fn finish(self) -> Lateness {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{parse_cpu_steal, parse_schedstat};

    const MS: Nanos = 1_000_000;
    const US: Nanos = 1_000;

    /// A `/proc/stat` as a 2-CPU VM writes it, with `steal` ticks on cpu1.
    fn proc_stat(steal: u64) -> String {
        format!(
            "cpu  796565 0 99149 1391637 7852 0 14746 {} 0 0\n\
             cpu0 372720 0 45991 747195 1704 0 6509 5700 0 0\n\
             cpu1 424006 0 53230 681802 6151 0 8238 {steal} 0 0\n\
             intr 1 2 3\n",
            5700 + steal
        )
    }

    /// The loop thread's counters at `at`, read from made-up `/proc` texts:
    /// its schedstat (run time, run-queue wait), its switches, cpu1's steal.
    fn sample(at: Nanos, schedstat: &str, switches: u64, steal: u64) -> ThreadSample {
        let (exec_ns, run_delay_ns) = parse_schedstat(schedstat).unwrap();
        ThreadSample {
            at_ns: at,
            exec_ns,
            run_delay_ns,
            involuntary_switches: switches,
            cpu: Some(1),
            cpu_steal_ticks: parse_cpu_steal(&proc_stat(steal), 1),
        }
    }

    #[test]
    fn the_proc_texts_parse() {
        assert_eq!(parse_schedstat("119905 133887 2\n"), Some((119905, 133887)));
        assert_eq!(parse_schedstat("garbage"), None);
        assert_eq!(parse_cpu_steal(&proc_stat(42), 1), Some(42));
        assert_eq!(parse_cpu_steal(&proc_stat(42), 0), Some(5700));
        assert_eq!(parse_cpu_steal(&proc_stat(42), 7), None);
    }

    /// A wake for t = 100 ms whose OS sleep returned in time at 97 ms; the
    /// spin let go at `woke`; `end` read at 101 ms.
    fn in_time(woke: Nanos, end: ThreadSample) -> (Wake, ThreadSample) {
        let wake = Wake {
            target: 100 * MS,
            slept_until: Some(97 * MS),
            woke,
            before: Some(sample(90 * MS, "5000000 1000000 10", 3, 10)),
            after_sleep: Some(sample(97 * MS, "5010000 1010000 11", 3, 10)),
        };
        (wake, end)
    }

    #[test]
    fn a_spin_the_hypervisor_interrupted_is_stolen() {
        // From 97 to 101 ms the thread ran 2.5 ms and waited for no CPU:
        // 1.5 ms of wall time this kernel never had. The spin let go 1.2 ms
        // late; steal ticks moved on its CPU.
        let end = sample(101 * MS, "7510000 1010000 12", 3, 11);
        let (wake, end) = in_time(101 * MS + 200 * US, end);
        let t = taken(&wake, &end);
        assert_eq!(t.stolen, 1_500_000);
        assert_eq!((t.preempted, t.timer), (0, 0));
        assert_eq!(
            cause_of(100 * MS, 101 * MS + 300 * US, wake.woke, &t),
            Cause::Stolen
        );
    }

    #[test]
    fn a_burst_of_involuntary_switches_is_preempted() {
        // Three switches, and 1.4 ms waited on the run queue while other
        // processes had the CPU.
        let end = sample(101 * MS, "7610000 2410000 15", 6, 10);
        let (wake, end) = in_time(101 * MS, end);
        let t = taken(&wake, &end);
        assert_eq!(t.preempted, 1_400_000);
        assert_eq!(t.stolen, 0);
        assert_eq!(
            cause_of(100 * MS, 101 * MS, wake.woke, &t),
            Cause::Preempted
        );
    }

    #[test]
    fn a_late_sleep_with_no_counter_moving_is_the_timer() {
        // The OS sleep (to 97 ms) returned at 100.8 ms; nothing waited,
        // nothing was stolen, the thread ran from then on.
        let wake = Wake {
            target: 100 * MS,
            slept_until: Some(100 * MS + 800 * US),
            woke: 100 * MS + 800 * US,
            before: Some(sample(90 * MS, "5000000 1000000 10", 3, 10)),
            after_sleep: None,
        };
        let end = sample(101 * MS, "5210000 1000000 11", 3, 10);
        let t = taken(&wake, &end);
        assert_eq!(
            t,
            Taken {
                stolen: 0,
                preempted: 0,
                timer: 800_000
            }
        );
        assert_eq!(
            cause_of(100 * MS, 100 * MS + 850 * US, wake.woke, &t),
            Cause::Timer
        );
        // The same sleep with the CPU's steal counter moving: stolen.
        let end = sample(101 * MS, "5210000 1000000 11", 3, 11);
        let t = taken(&wake, &end);
        assert_eq!(
            t,
            Taken {
                stolen: 800_000,
                preempted: 0,
                timer: 0
            }
        );
    }

    #[test]
    fn the_loop_handling_a_burst_is_busy_and_nothing_at_all_is_unexplained() {
        // The wake was on time; the event due at 100 ms was handled 0.5 ms
        // after the spin let go, behind the events due before it.
        let end = sample(101 * MS, "9010000 1010000 12", 3, 10);
        let (wake, end) = in_time(100 * MS, end);
        let t = taken(&wake, &end);
        assert_eq!(t, Taken::default());
        assert_eq!(
            cause_of(100 * MS, 100 * MS + 500 * US, wake.woke, &t),
            Cause::Busy
        );
        // Late by 0.9 ms with the spin letting go late and no counter moved.
        assert_eq!(
            cause_of(100 * MS, 100 * MS + 900 * US, 100 * MS + 850 * US, &t),
            Cause::Unexplained
        );
    }

    #[test]
    fn a_log_counts_each_late_event_once_and_each_wake_s_time_once() {
        let mut log = LateLog::new();
        let end = sample(101 * MS, "7510000 1010000 12", 3, 11);
        let (wake, end) = in_time(101 * MS, end);
        log.handled(100 * MS, 101 * MS, Late::Job);
        log.handled(100 * MS, 101 * MS, Late::Arrival);
        log.handled(100 * MS, 100 * MS + 100 * US, Late::Job); // not late
        assert!(log.any_late());
        log.settle(&wake, &end);
        assert!(!log.any_late());
        let out = log.finish();
        assert_eq!(out.jobs.stolen, 1);
        assert_eq!(out.arrivals.stolen, 1);
        assert_eq!(out.events().total(), 2);
        assert!((out.time_ms.stolen - 1.5).abs() < 1e-9);
        assert_eq!(out.main_external(), Some((Cause::Stolen, 2)));
    }
}
