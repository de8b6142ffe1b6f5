//! A team's own queue, reached over HTTP (`--backend http://HOST:PORT/PATH`).
//!
//! noisylab plays the scenario's arrivals (the same plan, seeds and classes
//! as on every backend) and posts each job to the queue's enqueue endpoint
//! when it is due ([`enqueue`]); the queue's own workers run it and report
//! its start and end to the run's [`collector`], which stamps them on this
//! process's clock. The discipline is the queue's: the lab computes every
//! figure from those stamps, as for its own queues. The protocol is
//! docs/your-queue.md.
//!
//! A post answered 2xx is accepted; 429 or 503 refused (counted as the
//! queue's limit); anything else, or no answer, an error, counted and
//! named. A job accepted and not reported ended when no report has come
//! for [`QUIET`] after the last post is lost.

pub mod collector;
pub mod enqueue;

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use rand::RngExt;

use self::collector::Collector;
use self::enqueue::{Answer, Job, Senders};
use super::wire::ServerCost;
use super::{Backend, RunError, RunInput, RunRecord, ServerMeasures};
use crate::engine::clock::sleep_until_blocking;
use crate::engine::traffic::Refusal;
use crate::engine::{Fate, NEVER, Nanos, stats_from_records};
use crate::results::{BackendFacts, CarrierFigures};
use crate::stats::{self, new_histogram};

/// How long the run waits for reports once every job is posted: a job
/// still not reported ended when none has come for this long is lost.
pub const QUIET: Duration = Duration::from_secs(10);
/// Where the collector listens unless told otherwise: loopback, a port
/// the system picks.
pub const LISTEN: &str = "127.0.0.1:0";
/// How early the poster's OS sleep ends, to spin to an arrival's instant.
const MARGIN: Duration = Duration::from_micros(500);

/// A lab on a team's queue, as the command line asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YoursPlan {
    /// The queue's enqueue endpoint.
    pub url: String,
    /// Where the collector listens (`host:port`).
    pub listen: String,
    /// How long to wait for reports once every job is posted (see
    /// [`QUIET`]).
    pub quiet: Duration,
}

impl YoursPlan {
    /// The queue at `url`, the collector on loopback, [`QUIET`].
    pub fn new(url: &str) -> YoursPlan {
        YoursPlan {
            url: url.to_string(),
            listen: LISTEN.to_string(),
            quiet: QUIET,
        }
    }
}

impl YoursPlan {
    /// Check that the queue answers on its address, in one line if not.
    pub fn open(&self) -> Result<Box<dyn Backend>> {
        let parsed = url::Url::parse(&self.url).map_err(|e| {
            anyhow!(
                "--backend {}: {e}; a queue's URL is http://HOST:PORT/PATH",
                self.url
            )
        })?;
        let host = parsed.host_str().unwrap_or_default().to_string();
        let port = parsed.port_or_known_default().unwrap_or(80);
        let reached = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(anyhow::Error::from)
            .and_then(|mut addrs| {
                let addr = addrs.next().ok_or_else(|| anyhow!("no address"))?;
                TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
                Ok(())
            });
        reached.map_err(|e| {
            anyhow!(
                "your queue at {} is unreachable ({e}): start its enqueue endpoint first \
                 (docs/your-queue.md)",
                self.url
            )
        })?;
        Ok(Box::new(Yours { plan: self.clone() }))
    }
}

/// The backend: posts jobs, collects their reports.
struct Yours {
    plan: YoursPlan,
}

/// What the posts of one run left.
#[derive(Default)]
struct Posts {
    accepted: Vec<bool>,
    carried: CarrierFigures,
    first_error: Option<String>,
    last_sent: Nanos,
}

impl Backend for Yours {
    fn facts(&self) -> Option<BackendFacts> {
        Some(BackendFacts {
            kind: crate::scenario::backends::HTTP.name.into(),
            version: format!("your queue at {}", self.plan.url),
            processes: 0,
            durability: None,
        })
    }

    fn run(&mut self, input: RunInput<'_>, stop: &AtomicBool) -> Result<RunRecord, RunError> {
        let origin = Instant::now();
        let mut rng = rand::rng();
        let run = format!("{:016x}", rng.random::<u64>());
        let secret = format!("{:032x}", rng.random::<u128>());
        let (n, pool) = (input.plan.len(), input.pool);
        let collector = Collector::start(&self.plan.listen, run.clone(), secret.clone(), n, origin)
            .map_err(RunError::Failed)?;
        let population = input.scenario.population();
        let senders = Senders::start(&self.plan.url, origin);
        let mut jobs = input.plan;
        for (i, j) in jobs.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                senders.finish();
                return Err(RunError::Interrupted);
            }
            sleep_until_blocking(origin + Duration::from_nanos(j.planned), MARGIN);
            let class = population.class(j.tenant);
            senders.post(
                i,
                Job {
                    run: run.clone(),
                    job: i as u64,
                    attempt: u32::from(j.attempt),
                    tenant: j.tenant,
                    tenant_name: population.tenant_name(j.tenant),
                    key: j.key,
                    class: class.name.clone(),
                    tokens_in: j.tokens_in,
                    tokens_out: j.tokens_out,
                    hold_ms: j.duration as f64 / 1e6,
                    report: collector.url.clone(),
                    secret: secret.clone(),
                },
            );
        }
        let (posts, submit_rtt) = tally(&mut jobs, senders.finish());
        if let Some(e) = &posts.first_error {
            if posts.carried.accepted + posts.carried.refused == 0 {
                return Err(RunError::Failed(anyhow!(
                    "your queue at {} took no job: {e}",
                    self.plan.url
                )));
            }
            eprintln!(
                "noisylab: {} of {n} posts to {} failed (the first: {e}); they are left out of \
                 every figure",
                posts.carried.errors, self.plan.url
            );
        }
        wait_for_ends(
            &collector,
            posts.carried.accepted as usize,
            self.plan.quiet,
            stop,
        )?;
        Ok(run_record(pool, jobs, &collector, posts, submit_rtt))
    }
}

/// What the posts' answers make of the jobs: when each was sent, which
/// the queue accepted, refused or failed; and the posts' round trips.
fn tally(
    jobs: &mut [crate::engine::JobRecord],
    posted: Vec<enqueue::Posted>,
) -> (Posts, hdrhistogram::Histogram<u64>) {
    let mut submit_rtt = new_histogram();
    let mut posts = Posts {
        accepted: vec![false; jobs.len()],
        ..Posts::default()
    };
    for p in posted {
        let j = &mut jobs[p.index];
        j.enqueued = p.sent;
        posts.last_sent = posts.last_sent.max(p.sent + p.rtt);
        stats::record(&mut submit_rtt, p.rtt);
        match p.answer {
            Answer::Accepted => {
                posts.accepted[p.index] = true;
                posts.carried.accepted += 1;
            }
            Answer::Refused(_) => {
                j.fate = Fate::Refused(Refusal::Limit);
                posts.carried.refused += 1;
            }
            Answer::Error(e) => {
                // It never entered the queue.
                j.enqueued = NEVER;
                posts.carried.errors += 1;
                posts.first_error.get_or_insert(e);
            }
        }
    }
    (posts, submit_rtt)
}

/// Wait until every accepted job has reported its end, the run is
/// stopped, or no report has come for `quiet`.
fn wait_for_ends(
    collector: &Collector,
    accepted: usize,
    quiet: Duration,
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let posted = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(RunError::Interrupted);
        }
        {
            let r = collector.reports.lock().unwrap();
            if r.ends >= accepted || r.last.max(posted).elapsed() >= quiet {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The run's records from the posts and the reports.
fn run_record(
    pool: &crate::engine::Pool,
    mut jobs: Vec<crate::engine::JobRecord>,
    collector: &Collector,
    mut posts: Posts,
    submit_rtt: hdrhistogram::Histogram<u64>,
) -> RunRecord {
    let r = collector.reports.lock().unwrap();
    let mut hold_late = new_histogram();
    let mut end = posts.last_sent;
    for (i, j) in jobs.iter_mut().enumerate() {
        let (started, ended) = (r.started[i], r.ended[i]);
        if !posts.accepted[i] {
            continue;
        }
        if started == NEVER || ended == NEVER {
            posts.carried.lost += 1;
            continue;
        }
        j.started = started;
        j.finished = ended.max(started);
        j.fate = Fate::Ran;
        end = end.max(j.finished);
        stats::record(
            &mut hold_late,
            (j.finished - j.started).saturating_sub(j.duration),
        );
    }
    posts.carried.duplicate_reports = r.duplicates;
    posts.carried.refused_reports = r.refused;
    let reports = r
        .started
        .iter()
        .chain(&r.ended)
        .filter(|&&t| t != NEVER)
        .count() as u64;
    drop(r);
    let stats = stats_from_records(pool, &jobs, &vec![false; jobs.len()], end);
    let server = ServerMeasures {
        take_rtt: new_histogram(),
        hold_late,
        submit_rtt,
        cost: ServerCost {
            us_per_call: None,
            cpu_s: None,
            calls: jobs.len() as u64 + reports,
            bytes: None,
            wal_bytes: None,
        },
        workers_cpu_s: None,
        planned: jobs.len(),
    };
    RunRecord {
        jobs,
        stats,
        server: Some(server),
        late: None,
        redelivered: Vec::new(),
        ran_twice: Vec::new(),
        faults: None,
        carried: Some(posts.carried),
    }
}
