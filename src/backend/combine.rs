//! The calls of one process's worker threads, sent together: while
//! `lanes` of its threads' calls are on their way to the server, the calls
//! the others make wait, and the next of them to look sends them all at
//! once, on its own connection, when one of those is back (flat combining).
//! A call made while fewer are on their way goes at once; under load, a
//! server that runs its calls one at a time (PostgreSQL's queue lock, held
//! through each commit) pays one lock, one round trip and one commit for
//! many. More lanes let a call go while another is on its way, which
//! serves a server that runs calls side by side; to one that runs them one
//! at a time, a second lane sends calls that only wait on its lock, and
//! smaller batches.
//!
//! A batch's calls go in the order they came, and the server answers each
//! as if it had come alone, in that order: what each thread gets is what it
//! would have got had it sent its call when the batch went. Batches on
//! their way at once reach the server in either order, as calls of
//! separate threads do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use anyhow::{Result, anyhow};

/// The calls waiting to go and the answers not yet picked up.
struct Board<Q, R> {
    /// Batches on their way (each on its sender's connection).
    sending: usize,
    /// The calls not sent yet, each with its ticket, in the order they came.
    waiting: Vec<(u64, Q)>,
    /// Each sent call's answer (an error as text: one failed send fails
    /// every call it carried), until its thread picks it up.
    answers: HashMap<u64, Result<R, String>>,
    next_ticket: u64,
}

/// Calls of type `Q`, answered by `R`, shared by the threads of a process.
pub struct Combiner<Q, R> {
    /// At most this many batches on their way at once.
    lanes: usize,
    board: Mutex<Board<Q, R>>,
    /// Told when a batch's answers are in (or the sender is gone).
    answered: Condvar,
    calls: AtomicU64,
    sends: AtomicU64,
}

/// Fails every call of a batch whose sender unwound before answering.
struct Sending<'a, Q, R> {
    combiner: &'a Combiner<Q, R>,
    tickets: Vec<u64>,
}

impl<Q, R> Drop for Sending<'_, Q, R> {
    fn drop(&mut self) {
        let mut board = self.combiner.lock();
        board.sending -= 1;
        for t in self.tickets.drain(..) {
            board
                .answers
                .insert(t, Err("the thread sending this call stopped".into()));
        }
        self.combiner.answered.notify_all();
    }
}

impl<Q, R> Combiner<Q, R> {
    /// At most `lanes` batches on their way at once (at least one).
    pub fn new(lanes: usize) -> Self {
        Combiner {
            lanes: lanes.max(1),
            board: Mutex::new(Board {
                sending: 0,
                waiting: Vec::new(),
                answers: HashMap::new(),
                next_ticket: 0,
            }),
            answered: Condvar::new(),
            calls: AtomicU64::new(0),
            sends: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Board<Q, R>> {
        // A thread that panicked holding the lock left the board whole
        // (every change to it is one statement).
        self.board.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `call`'s answer: sent with the calls waiting, through `send` (this
    /// thread's connection) when fewer than `lanes` batches are on their
    /// way, else in a batch after one of them is back. `send` gets the
    /// calls in the order they came and answers each, in that order.
    pub fn call(&self, call: Q, send: impl FnOnce(Vec<Q>) -> Result<Vec<R>>) -> Result<R> {
        let mut board = self.lock();
        let ticket = board.next_ticket;
        board.next_ticket += 1;
        board.waiting.push((ticket, call));
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut send = Some(send);
        loop {
            if let Some(answer) = board.answers.remove(&ticket) {
                return answer.map_err(|e| anyhow!(e));
            }
            // On its way in another thread's batch, or no lane free: wait.
            let waiting = board.waiting.iter().any(|(t, _)| *t == ticket);
            if !waiting || board.sending >= self.lanes {
                board = self.answered.wait(board).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // This call is waiting and a lane is free: this thread sends
            // the batch (at most once: its own call is in it).
            let send = send.take().expect("a thread sends one batch a call");
            board.sending += 1;
            let (tickets, calls): (Vec<u64>, Vec<Q>) =
                std::mem::take(&mut board.waiting).into_iter().unzip();
            drop(board);
            self.sends.fetch_add(1, Ordering::Relaxed);
            let mut sending = Sending {
                combiner: self,
                tickets,
            };
            let n = calls.len();
            let sent = send(calls);
            board = self.lock();
            let tickets = std::mem::take(&mut sending.tickets);
            let answers: Vec<Result<R, String>> = match sent {
                Ok(answers) if answers.len() == n => answers.into_iter().map(Ok).collect(),
                Ok(answers) => {
                    let e = format!("{n} calls sent together got {} answers", answers.len());
                    (0..n).map(|_| Err(e.clone())).collect()
                }
                Err(e) => (0..n).map(|_| Err(format!("{e:#}"))).collect(),
            };
            board.answers.extend(tickets.into_iter().zip(answers));
            drop(board);
            // This batch is back; its calls' answers are in.
            drop(sending);
            board = self.lock();
        }
    }

    /// (calls made, batches sent) so far: their ratio is the batches'
    /// mean size.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.sends.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_call_alone_goes_at_once_and_gets_its_own_answer() {
        let c = Combiner::new(1);
        let got = c.call(7, |calls| Ok(calls.iter().map(|q| q * 10).collect()));
        assert_eq!(got.unwrap(), 70);
        assert_eq!(c.counts(), (1, 1));
    }

    /// Threads that call while one batch is on its way go together in the
    /// next, in the order they came, each answered its own.
    #[test]
    fn calls_made_while_one_is_on_its_way_go_in_one_batch_each_answered_its_own() {
        let c = Arc::new(Combiner::<u32, u32>::new(1));
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        // The first call's send waits until the other threads have queued.
        let (queued, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let first = {
            let (c, batches, queued, release) =
                (c.clone(), batches.clone(), queued.clone(), release.clone());
            std::thread::spawn(move || {
                c.call(0, |calls| {
                    queued.wait();
                    release.wait();
                    batches.lock().unwrap().push(calls.clone());
                    Ok(calls.iter().map(|q| q + 100).collect())
                })
            })
        };
        queued.wait();
        let others: Vec<_> = (1..=5u32)
            .map(|q| {
                let (c2, batches) = (c.clone(), batches.clone());
                let h = std::thread::spawn(move || {
                    c2.call(q, |calls| {
                        batches.lock().unwrap().push(calls.clone());
                        Ok(calls.iter().map(|q| q + 100).collect())
                    })
                });
                // Each waits on the board before the next comes.
                while c.counts().0 < u64::from(q) + 1 {
                    std::thread::yield_now();
                }
                h
            })
            .collect();
        release.wait();
        assert_eq!(first.join().unwrap().unwrap(), 100);
        for (q, h) in (1..=5u32).zip(others) {
            assert_eq!(h.join().unwrap().unwrap(), q + 100);
        }
        assert_eq!(*batches.lock().unwrap(), vec![vec![0], vec![1, 2, 3, 4, 5]]);
        assert_eq!(c.counts(), (6, 2));
    }

    /// With two lanes, two calls go at once, each alone; a third waits
    /// for one of them and goes with the calls made meanwhile.
    #[test]
    fn with_two_lanes_two_calls_go_at_once_and_the_rest_wait_for_one() {
        let c = Arc::new(Combiner::<u32, u32>::new(2));
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let both_sent = Arc::new(Barrier::new(3));
        let release = Arc::new(Barrier::new(3));
        let blocked: Vec<_> = (0..2u32)
            .map(|q| {
                let (c, batches) = (c.clone(), batches.clone());
                let (both_sent, release) = (both_sent.clone(), release.clone());
                std::thread::spawn(move || {
                    c.call(q, |calls| {
                        batches.lock().unwrap().push(calls.clone());
                        both_sent.wait();
                        release.wait();
                        Ok(calls)
                    })
                })
            })
            .collect();
        // Both are sending at once: neither waited for the other.
        both_sent.wait();
        let later: Vec<_> = (2..4u32)
            .map(|q| {
                let (c2, batches) = (c.clone(), batches.clone());
                let h = std::thread::spawn(move || {
                    c2.call(q, |calls| {
                        batches.lock().unwrap().push(calls.clone());
                        Ok(calls)
                    })
                });
                while c.counts().0 < u64::from(q) + 1 {
                    std::thread::yield_now();
                }
                h
            })
            .collect();
        release.wait();
        for (q, h) in (0..4u32).zip(blocked.into_iter().chain(later)) {
            assert_eq!(h.join().unwrap().unwrap(), q);
        }
        let mut got = batches.lock().unwrap().clone();
        got[..2].sort();
        assert_eq!(got, vec![vec![0], vec![1], vec![2, 3]]);
        assert_eq!(c.counts(), (4, 3));
    }

    /// A thread whose call went in another's batch waits for that batch
    /// even when a lane frees first.
    #[test]
    fn a_call_on_its_way_in_another_s_batch_is_not_sent_again_when_a_lane_frees() {
        let c = Arc::new(Combiner::<u32, u32>::new(2));
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let gate = |n| Arc::new(Barrier::new(n));
        let (both_sent, release_a, release_b) = (gate(3), gate(2), gate(2));
        let (pair_sent, release_pair) = (gate(2), gate(2));
        let spawn = |q: u32, hold: Option<(Arc<Barrier>, Arc<Barrier>)>| {
            let (c, batches) = (c.clone(), batches.clone());
            std::thread::spawn(move || {
                c.call(q, |calls| {
                    batches.lock().unwrap().push(calls.clone());
                    if let Some((sent, release)) = hold.filter(|_| !calls.is_empty()) {
                        sent.wait();
                        release.wait();
                    }
                    Ok(calls)
                })
            })
        };
        let a = spawn(0, Some((both_sent.clone(), release_a.clone())));
        let b = spawn(1, Some((both_sent.clone(), release_b.clone())));
        both_sent.wait();
        // The two lanes are taken; 2 and 3 wait, then go as one batch
        // (whichever sends it holds it on its way).
        let pair = Some((pair_sent.clone(), release_pair.clone()));
        let later: Vec<_> = (2..4u32)
            .map(|q| {
                let h = spawn(q, pair.clone());
                while c.counts().0 < u64::from(q) + 1 {
                    std::thread::yield_now();
                }
                h
            })
            .collect();
        release_a.wait();
        assert_eq!(a.join().unwrap().unwrap(), 0);
        pair_sent.wait();
        // A lane frees while the pair is on its way: the other of the pair
        // wakes, and must wait for its answer rather than send.
        release_b.wait();
        assert_eq!(b.join().unwrap().unwrap(), 1);
        std::thread::sleep(std::time::Duration::from_millis(50));
        release_pair.wait();
        for (q, h) in (2..4u32).zip(later) {
            assert_eq!(h.join().unwrap().unwrap(), q);
        }
        let mut got = batches.lock().unwrap().clone();
        got[..2].sort();
        assert_eq!(got, vec![vec![0], vec![1], vec![2, 3]]);
    }

    #[test]
    fn a_failed_send_fails_every_call_it_carried_and_the_next_call_goes() {
        let c = Combiner::<u32, u32>::new(1);
        let e = c
            .call(1, |_| Err(anyhow!("connection refused")))
            .unwrap_err();
        assert_eq!(e.to_string(), "connection refused");
        let short = c.call(2, |_| Ok(vec![])).unwrap_err();
        assert_eq!(short.to_string(), "1 calls sent together got 0 answers");
        assert_eq!(c.call(3, Ok).unwrap(), 3);
    }

    #[test]
    fn a_sender_that_panics_fails_its_batch_and_leaves_the_board_free() {
        let c = Arc::new(Combiner::<u32, u32>::new(1));
        let c2 = c.clone();
        let panicked = std::thread::spawn(move || c2.call(1, |_| panic!("boom"))).join();
        assert!(panicked.is_err());
        assert_eq!(c.call(2, Ok).unwrap(), 2);
        // Only the failed call's answer is left, for a thread that is gone.
        let left: Vec<u64> = c.lock().answers.keys().copied().collect();
        assert_eq!(left, vec![0]);
    }
}
