//! Rate limiters on lab time: a token bucket refilled continuously, and a
//! sliding window that never lets more than its allowance through in any
//! window of its length. Both answer a refusal with how long until the
//! amount asked would pass (`None`: it never will).

use std::collections::VecDeque;

use super::Nanos;

/// Refused: wait this long before asking again (`None`: never).
pub type Wait = Option<Nanos>;

/// A token bucket: `capacity` at most, `rate` a nanosecond refilled
/// continuously, full at t = 0. It may go below zero when charged after
/// the fact ([`Limiter::charge`]); nothing passes until it is back above.
#[derive(Debug, Clone)]
pub struct Bucket {
    capacity: f64,
    per_ns: f64,
    level: f64,
    at: Nanos,
}

impl Bucket {
    pub fn new(capacity: f64, per_s: f64) -> Bucket {
        Bucket {
            capacity,
            per_ns: per_s / 1e9,
            level: capacity,
            at: 0,
        }
    }

    fn refill(&mut self, now: Nanos) {
        if now > self.at {
            self.level = (self.level + (now - self.at) as f64 * self.per_ns).min(self.capacity);
            self.at = now;
        }
    }

    /// Whether `n` could be taken now, else how long until it could.
    pub fn check(&mut self, now: Nanos, n: f64) -> Result<(), Wait> {
        self.refill(now);
        if self.level >= n {
            return Ok(());
        }
        if n > self.capacity || self.per_ns <= 0.0 {
            return Err(None);
        }
        Err(Some(((n - self.level) / self.per_ns).ceil() as Nanos))
    }

    /// Take `n`, or charge it after the fact (the level may go below 0).
    pub fn take(&mut self, now: Nanos, n: f64) {
        self.refill(now);
        self.level -= n;
    }
}

/// At most `allow` in any window of `window` nanoseconds: a log of what
/// passed inside the last window.
#[derive(Debug, Clone)]
pub struct Window {
    window: Nanos,
    allow: f64,
    log: VecDeque<(Nanos, f64)>,
    sum: f64,
}

impl Window {
    pub fn new(window: Nanos, allow: f64) -> Window {
        Window {
            window,
            allow,
            log: VecDeque::new(),
            sum: 0.0,
        }
    }

    /// Forget what passed at or before `now - window`.
    fn expire(&mut self, now: Nanos) {
        while let Some(&(at, n)) = self.log.front() {
            if at + self.window > now {
                break;
            }
            self.sum -= n;
            self.log.pop_front();
        }
        if self.log.is_empty() {
            self.sum = 0.0;
        }
    }

    fn check(&mut self, now: Nanos, n: f64) -> Result<(), Wait> {
        self.expire(now);
        if self.sum + n <= self.allow {
            return Ok(());
        }
        if n > self.allow {
            return Err(None);
        }
        // The first instant enough of the log has expired.
        let mut left = self.sum;
        for &(at, m) in &self.log {
            left -= m;
            if left + n <= self.allow {
                return Err(Some(at + self.window - now));
            }
        }
        Err(None)
    }

    fn take(&mut self, now: Nanos, n: f64) {
        self.expire(now);
        if n > 0.0 {
            self.log.push_back((now, n));
            self.sum += n;
        }
    }
}

/// One limit: a bucket or a window.
#[derive(Debug, Clone)]
pub enum Limiter {
    Bucket(Bucket),
    Window(Window),
}

impl Limiter {
    /// A per-minute limit: a bucket holding `capacity`, or with `window_s` a
    /// sliding window allowing the minute's rate over that window.
    pub fn per_minute(per_min: f64, capacity: f64, window_s: Option<f64>) -> Limiter {
        match window_s {
            Some(w) => Limiter::Window(Window::new((w * 1e9).round() as Nanos, per_min * w / 60.0)),
            None => Limiter::Bucket(Bucket::new(capacity, per_min / 60.0)),
        }
    }

    /// Whether `n` could pass now, else how long until it could.
    pub fn check(&mut self, now: Nanos, n: f64) -> Result<(), Wait> {
        match self {
            Limiter::Bucket(b) => b.check(now, n),
            Limiter::Window(w) => w.check(now, n),
        }
    }

    /// Let `n` through (checked or not: a charge after the fact may
    /// overdraw).
    pub fn charge(&mut self, now: Nanos, n: f64) {
        match self {
            Limiter::Bucket(b) => b.take(now, n),
            Limiter::Window(w) => w.take(now, n),
        }
    }
}

/// The longer of two waits, where `None` (never) is longest.
pub fn longer(a: Wait, b: Wait) -> Wait {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_says_when_the_next_token_comes() {
        let mut b = Bucket::new(2.0, 1.0);
        assert_eq!(b.check(0, 1.0), Ok(()));
        b.take(0, 1.0);
        b.take(0, 1.0);
        assert_eq!(b.check(0, 1.0), Err(Some(1_000_000_000)));
        assert_eq!(b.check(500_000_000, 1.0), Err(Some(500_000_000)));
        assert_eq!(b.check(1_000_000_000, 1.0), Ok(()));
        assert_eq!(b.check(0, 3.0), Err(None), "more than it holds: never");
    }

    #[test]
    fn a_window_says_when_enough_has_expired() {
        let mut w = Window::new(1_000, 2.0);
        w.take(0, 1.0);
        w.take(400, 1.0);
        assert_eq!(w.check(500, 1.0), Err(Some(500)));
        assert_eq!(w.check(1_000, 1.0), Ok(()));
        assert_eq!(w.check(1_000, 3.0), Err(None));
    }
}
