//! The clock's own timing: what a real loop measures of its wakes, and a
//! virtual clock that reproduces it.
//!
//! A real wake lets go a little after its instant, and each event it handles
//! takes a little time before the next is read. Both move a run's figures:
//! events due within a wake's lateness are handled together, and a worker
//! restarted later in a burst of completions finishes later. The real clock
//! records both ([`ClockTiming`]); a [`Jitter`] built from them makes the
//! virtual clock draw every wake's lateness and every event's handling time
//! from those distributions, so the model runs as that machine's loop would,
//! wake by wake rather than job by job.

use std::sync::Arc;

use hdrhistogram::Histogram;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::Nanos;
use crate::stats;

/// What a loop measured of its own timing, nanoseconds.
#[derive(Debug, Clone)]
pub struct ClockTiming {
    /// How late each wake that slept let go after the instant it slept to.
    pub wake_late: Histogram<u64>,
    /// Each event's handling: from when the loop read the clock for it to
    /// when it read the clock for the next event of its wake, or ended the
    /// wake.
    pub event_gap: Histogram<u64>,
}

impl Default for ClockTiming {
    fn default() -> ClockTiming {
        ClockTiming {
            wake_late: stats::new_histogram(),
            event_gap: stats::new_histogram(),
        }
    }
}

/// A measured distribution to draw from: `(value ns, cumulative count)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draws(Vec<(Nanos, u64)>);

impl Draws {
    /// The histogram's values with their counts; `None` when it is empty.
    pub fn of(h: &Histogram<u64>) -> Option<Draws> {
        let mut total = 0;
        let cdf: Vec<(Nanos, u64)> = h
            .iter_recorded()
            .map(|v| {
                total += v.count_at_value();
                (v.value_iterated_to(), total)
            })
            .collect();
        (!cdf.is_empty()).then_some(Draws(cdf))
    }

    /// One value, as likely as the histogram recorded it.
    pub fn draw(&self, rng: &mut ChaCha8Rng) -> Nanos {
        let total = self.0.last().map_or(1, |c| c.1);
        let at = rng.random_range(0..total);
        let i = self.0.partition_point(|c| c.1 <= at);
        self.0[i.min(self.0.len() - 1)].0
    }
}

/// What a virtual clock draws its wakes and events from, and the stream.
#[derive(Debug, Clone)]
pub struct Jitter {
    pub wake_late: Arc<Draws>,
    pub event_gap: Arc<Draws>,
    /// The ChaCha seed and stream of the draws: one replica of a run.
    pub seed: u64,
    pub stream: u64,
}

/// A jittered virtual clock's state: its draws and what it drew.
#[derive(Debug)]
pub struct Jittered {
    jitter: Jitter,
    rng: ChaCha8Rng,
    pub timing: ClockTiming,
}

impl Jittered {
    pub fn new(jitter: &Jitter) -> Jittered {
        let mut rng = ChaCha8Rng::seed_from_u64(jitter.seed);
        rng.set_stream(jitter.stream);
        Jittered {
            jitter: jitter.clone(),
            rng,
            timing: ClockTiming::default(),
        }
    }

    /// A wake's lateness, recorded.
    pub fn wake(&mut self) -> Nanos {
        let late = self.jitter.wake_late.draw(&mut self.rng);
        stats::record(&mut self.timing.wake_late, late);
        late
    }

    /// An event's handling time, recorded.
    pub fn event(&mut self) -> Nanos {
        let gap = self.jitter.event_gap.draw(&mut self.rng);
        stats::record(&mut self.timing.event_gap, gap);
        gap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_come_from_the_recorded_values_as_often_as_recorded() {
        let mut h = stats::new_histogram();
        for _ in 0..3 {
            stats::record(&mut h, 1_000);
        }
        stats::record(&mut h, 50_000);
        let draws = Draws::of(&h).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let got: Vec<Nanos> = (0..4_000).map(|_| draws.draw(&mut rng)).collect();
        let high = got
            .iter()
            .filter(|&&v| v == h.highest_equivalent(50_000))
            .count();
        let low = got
            .iter()
            .filter(|&&v| v == h.highest_equivalent(1_000))
            .count();
        assert_eq!(high + low, 4_000, "only recorded values are drawn");
        assert!((900..1_100).contains(&high), "a quarter drawn high: {high}");
        assert!(Draws::of(&stats::new_histogram()).is_none());
    }
}
