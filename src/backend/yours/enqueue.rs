//! Posting jobs to a team's queue: threads that each keep one connection
//! alive and post the jobs handed to them, as the arrival plan makes them
//! due, the tenants' posts taking turns for a free connection.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::engine::{JobRecord, Nanos};

/// Threads posting jobs: enough that a burst due at one instant is not
/// held behind a few connections' round trips.
pub const SENDERS: usize = 32;
/// How long one post may take, connecting included.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// One job as it is posted (docs/your-queue.md): the run, the job's number
/// and attempt, who sends it, its size and how long a stand-in worker
/// holds it, and where and with what secret its worker reports. Borrowed
/// from the run's [`Template`]: serialised straight into the post's body.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Job<'a> {
    pub run: &'a str,
    pub job: u64,
    pub attempt: u32,
    pub tenant: u32,
    pub tenant_name: &'a str,
    pub key: u32,
    pub class: &'a str,
    pub tokens_in: u32,
    pub tokens_out: u32,
    pub hold_ms: f64,
    pub report: &'a str,
    pub secret: &'a str,
}

/// What every post of a run shares: the run, its secret, where reports
/// go, and each tenant's name and class.
pub struct Template {
    pub run: String,
    pub secret: String,
    pub report: String,
    pub tenant_names: Vec<String>,
    pub tenant_classes: Vec<String>,
}

impl Template {
    /// Attempt `index` as it is posted.
    fn job(&self, index: usize, j: &JobRecord) -> Job<'_> {
        let t = j.tenant as usize;
        Job {
            run: &self.run,
            job: index as u64,
            attempt: u32::from(j.attempt),
            tenant: j.tenant,
            tenant_name: &self.tenant_names[t],
            key: j.key,
            class: &self.tenant_classes[t],
            tokens_in: j.tokens_in,
            tokens_out: j.tokens_out,
            hold_ms: j.duration as f64 / 1e6,
            report: &self.report,
            secret: &self.secret,
        }
    }
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
    by_tenant: BTreeMap<u32, VecDeque<(usize, JobRecord)>>,
    /// Tenants with posts due, in turn.
    turn: VecDeque<u32>,
    closed: bool,
}

impl Due {
    fn push(&mut self, index: usize, job: JobRecord) {
        let tenant = job.tenant;
        let queue = self.by_tenant.entry(tenant).or_default();
        if queue.is_empty() {
            self.turn.push_back(tenant);
        }
        queue.push_back((index, job));
    }

    fn pop(&mut self) -> Option<(usize, JobRecord)> {
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
    threads: Vec<JoinHandle<()>>,
}

impl Senders {
    /// Start [`SENDERS`] threads posting to `url` from `template`,
    /// stamping lab time since `origin`, each answer sent to `answers`.
    pub fn start(
        url: &str,
        template: Arc<Template>,
        origin: Instant,
        answers: Sender<Posted>,
    ) -> Senders {
        let due: Shared = Arc::default();
        let threads = (0..SENDERS)
            .map(|_| {
                let (due, url) = (due.clone(), url.to_string());
                let (template, answers) = (template.clone(), answers.clone());
                std::thread::spawn(move || send(&url, &template, &due, origin, &answers))
            })
            .collect();
        Senders { due, threads }
    }

    /// Hand attempt `index` to the next free thread, in its tenant's turn.
    pub fn post(&self, index: usize, job: JobRecord) {
        let (lock, ready) = &*self.due;
        lock.lock().unwrap().push(index, job);
        ready.notify_one();
    }

    /// Stop the threads once every post handed so far is answered.
    pub fn finish(mut self) {
        let (lock, ready) = &*self.due;
        lock.lock().unwrap().closed = true;
        ready.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn send(url: &str, template: &Template, due: &Shared, origin: Instant, answers: &Sender<Posted>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(POST_TIMEOUT))
        .build()
        .into();
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
        let body = serde_json::to_vec(&template.job(index, &job)).expect("a job serializes");
        let sent = origin.elapsed().as_nanos() as Nanos;
        let answer = post(&agent, url, &body);
        let rtt = (origin.elapsed().as_nanos() as Nanos).saturating_sub(sent);
        let _ = answers.send(Posted {
            index,
            sent,
            rtt,
            answer,
        });
    }
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
