//! Posting jobs to a team's queue: threads that each keep one connection
//! alive and post the jobs handed to them, as the arrival plan makes them
//! due, the tenants' posts taking turns for a free connection.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::engine::Nanos;

/// Threads posting jobs: enough that a burst due at one instant is not
/// held behind a few connections' round trips.
pub const SENDERS: usize = 32;
/// How long one post may take, connecting included.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// One job as it is posted (docs/your-queue.md): the run, the job's number
/// and attempt, who sends it, its size and how long a stand-in worker
/// holds it, and where and with what secret its worker reports.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub run: String,
    pub job: u64,
    pub attempt: u32,
    pub tenant: u32,
    pub tenant_name: String,
    pub key: u32,
    pub class: String,
    pub tokens_in: u32,
    pub tokens_out: u32,
    pub hold_ms: f64,
    pub report: String,
    pub secret: String,
}

/// What a post got.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 2xx.
    Accepted,
    /// 429 or 503, with its Retry-After header if any.
    Refused(Option<String>),
    /// Any other status, or no answer: what happened, in words.
    Error(String),
}

/// One post: the job's index, when it was sent and how long its answer
/// took, and the answer.
#[derive(Debug, Clone)]
pub struct Posted {
    pub index: usize,
    pub sent: Nanos,
    pub rtt: Nanos,
    pub answer: Answer,
}

/// Posts due and not yet sent, by tenant: each tenant is a client of its
/// own, so a free connection takes the next tenant's oldest post in turn,
/// and a burst's thousands of posts do not hold a neighbour's behind them.
#[derive(Default)]
struct Due {
    by_tenant: BTreeMap<u32, VecDeque<(usize, Job)>>,
    /// Tenants with posts due, in turn.
    turn: VecDeque<u32>,
    closed: bool,
}

impl Due {
    fn push(&mut self, index: usize, job: Job) {
        let tenant = job.tenant;
        let queue = self.by_tenant.entry(tenant).or_default();
        if queue.is_empty() {
            self.turn.push_back(tenant);
        }
        queue.push_back((index, job));
    }

    fn pop(&mut self) -> Option<(usize, Job)> {
        let tenant = self.turn.pop_front()?;
        let queue = self.by_tenant.get_mut(&tenant)?;
        let next = queue.pop_front();
        if !queue.is_empty() {
            self.turn.push_back(tenant);
        }
        next
    }
}

type Shared = Arc<(Mutex<Due>, Condvar)>;

/// The sending threads of one run.
pub struct Senders {
    due: Shared,
    threads: Vec<JoinHandle<Vec<Posted>>>,
}

impl Senders {
    /// Start [`SENDERS`] threads posting to `url`, stamping lab time since
    /// `origin`.
    pub fn start(url: &str, origin: Instant) -> Senders {
        let due: Shared = Arc::default();
        let threads = (0..SENDERS)
            .map(|_| {
                let (due, url) = (due.clone(), url.to_string());
                std::thread::spawn(move || send(&url, &due, origin))
            })
            .collect();
        Senders { due, threads }
    }

    /// Hand job `index` to the next free thread, in its tenant's turn.
    pub fn post(&self, index: usize, job: Job) {
        let (lock, ready) = &*self.due;
        lock.lock().unwrap().push(index, job);
        ready.notify_one();
    }

    /// Wait for every post handed so far to be answered.
    pub fn finish(mut self) -> Vec<Posted> {
        let (lock, ready) = &*self.due;
        lock.lock().unwrap().closed = true;
        ready.notify_all();
        self.threads
            .drain(..)
            .flat_map(|t| t.join().unwrap_or_default())
            .collect()
    }
}

fn send(url: &str, due: &Shared, origin: Instant) -> Vec<Posted> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(POST_TIMEOUT))
        .build()
        .into();
    let mut out = Vec::new();
    loop {
        let next = {
            let (lock, ready) = &**due;
            let mut d = lock.lock().unwrap();
            loop {
                if let Some(next) = d.pop() {
                    break Some(next);
                }
                if d.closed {
                    break None;
                }
                d = ready.wait(d).unwrap();
            }
        };
        let Some((index, job)) = next else { break };
        let body = serde_json::to_vec(&job).expect("a job serializes");
        let sent = origin.elapsed().as_nanos() as Nanos;
        let answer = post(&agent, url, &body);
        let rtt = (origin.elapsed().as_nanos() as Nanos).saturating_sub(sent);
        out.push(Posted {
            index,
            sent,
            rtt,
            answer,
        });
    }
    out
}

fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> Answer {
    let response = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body);
    let mut response = match response {
        Ok(r) => r,
        Err(e) => return Answer::Error(e.to_string()),
    };
    // Read the answer whole, so that the connection is kept for the next.
    let mut sink = Vec::new();
    let _ = response
        .body_mut()
        .as_reader()
        .take(64 * 1024)
        .read_to_end(&mut sink);
    let status = response.status().as_u16();
    match status {
        200..=299 => Answer::Accepted,
        429 | 503 => Answer::Refused(
            response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        ),
        _ => Answer::Error(format!("answered {status}")),
    }
}
