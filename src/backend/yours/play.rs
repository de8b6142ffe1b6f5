//! A run's clients against a team's queue: every planned job posted at its
//! instant and, where the scenario's clients retry or stop waiting, their
//! retries and give-ups by the engine's own client model (as on every
//! queue server), a refusal's Retry-After handed to it. The posts' answers
//! come back as they arrive, so a refusal's retry is sent when it is due.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::collector::Collector;
use super::enqueue::{Answer, Posted, Senders};
use crate::backend::RunError;
use crate::backend::clients::{Clients, Due};
use crate::engine::clock::sleep_until_blocking;
use crate::engine::traffic::Refusal;
use crate::engine::{Fate, NEVER, Nanos};
use crate::results::CarrierFigures;
use crate::stats::{self, new_histogram};

/// How early the poster's OS sleep ends, to spin to an arrival's instant.
const MARGIN: Duration = Duration::from_micros(500);
/// The longest the poster waits for an answer before it looks again.
const LOOK: Duration = Duration::from_millis(50);

/// What the posts of one run left, by attempt.
pub struct Posts {
    pub accepted: Vec<bool>,
    /// Attempts whose client stopped waiting before their start (the job
    /// still runs, unread).
    pub abandoned: Vec<bool>,
    pub carried: CarrierFigures,
    pub first_error: Option<String>,
    /// When the last answer came.
    pub last_answer: Nanos,
    pub submit_rtt: hdrhistogram::Histogram<u64>,
    /// The longest Retry-After a refusal gave, seconds.
    pub retry_after_s_max: u64,
}

impl Posts {
    fn new() -> Posts {
        Posts {
            accepted: Vec::new(),
            abandoned: Vec::new(),
            carried: CarrierFigures::default(),
            first_error: None,
            last_answer: 0,
            submit_rtt: new_histogram(),
            retry_after_s_max: 0,
        }
    }

    /// One post's answer: the attempt's record, the clients told.
    fn answer(&mut self, p: Posted, clients: &mut Clients<'_>) {
        let at = p.sent + p.rtt;
        self.last_answer = self.last_answer.max(at);
        stats::record(&mut self.submit_rtt, p.rtt);
        clients.jobs[p.index].enqueued = p.sent;
        match p.answer {
            Answer::Accepted => {
                self.accepted[p.index] = true;
                self.carried.accepted += 1;
                clients.accepted(p.index, p.sent);
            }
            Answer::Refused(hint) => {
                clients.jobs[p.index].fate = Fate::Refused(Refusal::Limit);
                self.carried.refused += 1;
                let hint = hint.as_deref().and_then(retry_after_ns);
                if let Some(ns) = hint {
                    self.retry_after_s_max = self.retry_after_s_max.max(ns.div_ceil(1_000_000_000));
                }
                clients.refused(p.index, at, hint);
            }
            Answer::Error(e) => {
                // It never entered the queue.
                clients.jobs[p.index].enqueued = NEVER;
                self.carried.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// A Retry-After header's delay: seconds, whole or not (an HTTP date is
/// not read: the client's own backoff applies).
pub fn retry_after_ns(header: &str) -> Option<Nanos> {
    let s: f64 = header.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then_some((s * 1e9) as Nanos)
}

/// Play the run's clients: post each attempt when due, hand each answer
/// to its client, give up where a client's patience ran out before its
/// job started. Returns when every attempt is sent and answered.
pub fn play(
    clients: &mut Clients<'_>,
    senders: &Senders,
    answers: &Receiver<Posted>,
    collector: &Collector,
    origin: Instant,
    stop: &AtomicBool,
) -> Result<Posts, RunError> {
    let since = || origin.elapsed().as_nanos() as Nanos;
    let mut posts = Posts::new();
    let mut in_flight = 0usize;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(RunError::Interrupted);
        }
        let next = clients.next_at();
        let wait = match next {
            None if in_flight == 0 => return Ok(posts),
            None => LOOK,
            Some(at) => Duration::from_nanos(at.saturating_sub(since())).saturating_sub(MARGIN),
        };
        if !wait.is_zero() {
            match answers.recv_timeout(wait.min(LOOK)) {
                Ok(p) => {
                    in_flight -= 1;
                    posts.answer(p, clients);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RunError::Failed(anyhow!("the posting threads stopped")));
                }
            }
            continue;
        }
        while let Ok(p) = answers.try_recv() {
            in_flight -= 1;
            posts.answer(p, clients);
        }
        let Some(at) = next else { continue };
        sleep_until_blocking(origin + Duration::from_nanos(at), MARGIN);
        match clients.due() {
            Some((at, Due::Timeouts(tired))) => {
                for i in tired {
                    if collector.started(i) == NEVER {
                        posts.abandoned[i] = true;
                        clients.abandoned(i, at);
                    }
                }
            }
            Some((_, Due::Send(due))) => {
                let total = clients.jobs.len();
                posts.accepted.resize(total, false);
                posts.abandoned.resize(total, false);
                collector.allow(total);
                for i in due {
                    clients.send(i).map_err(RunError::Failed)?;
                    senders.post(i, clients.jobs[i]);
                    in_flight += 1;
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_after_is_read_in_seconds_and_nothing_else() {
        assert_eq!(retry_after_ns("2"), Some(2_000_000_000));
        assert_eq!(retry_after_ns(" 0.25 "), Some(250_000_000));
        assert_eq!(retry_after_ns("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after_ns("-1"), None);
    }
}
