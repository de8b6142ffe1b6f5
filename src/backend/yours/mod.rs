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
pub mod listen;
pub mod passed;
pub mod play;

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use rand::RngExt;

use self::collector::Collector;
use self::enqueue::{Senders, Template};
use self::play::Posts;
use super::clients::Clients;
use super::wire::ServerCost;
use super::{Backend, RunError, RunInput, RunRecord, ServerMeasures};
use crate::engine::{Fate, NEVER, stats_from_records};
use crate::results::BackendFacts;
use crate::stats::{self, new_histogram};

/// How long the run waits for reports once every job is posted: a job
/// still not reported ended when none has come for this long is lost.
pub const QUIET: Duration = Duration::from_secs(10);
/// Where the collector listens unless told otherwise: loopback, a port
/// the system picks.
pub const LISTEN: &str = "127.0.0.1:0";

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
        let (pool, planned) = (input.pool, input.plan.len());
        let collector = Collector::start(
            &self.plan.listen,
            run.clone(),
            secret.clone(),
            planned,
            origin,
        )
        .map_err(RunError::Failed)?;
        let population = input.scenario.population();
        let tenants = population.tenants() as u32;
        let template = Arc::new(Template {
            run,
            secret,
            report: collector.url.clone(),
            tenant_names: (0..tenants).map(|t| population.tenant_name(t)).collect(),
            tenant_classes: (0..tenants)
                .map(|t| population.class(t).name.clone())
                .collect(),
        });
        let mut clients = Clients::new(input.plan, pool, input.seed, input.strategy, false);
        let (answers_to, answers) = std::sync::mpsc::channel();
        let senders = Senders::start(&self.plan.url, template, origin, answers_to);
        let played = play::play(&mut clients, &senders, &answers, &collector, origin, stop);
        senders.finish();
        let posts = played?;
        if let Some(e) = &posts.first_error {
            if posts.carried.accepted + posts.carried.refused == 0 {
                return Err(RunError::Failed(anyhow!(
                    "your queue at {} took no job: {e}",
                    self.plan.url
                )));
            }
            eprintln!(
                "noisylab: {} of {} posts to {} failed (the first: {e}); they are left out of \
                 every figure",
                posts.carried.errors,
                clients.jobs.len(),
                self.plan.url
            );
        }
        wait_for_ends(
            &collector,
            posts.carried.accepted as usize,
            self.plan.quiet,
            stop,
        )?;
        Ok(run_record(pool, planned, clients.jobs, &collector, posts))
    }
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

/// The run's records from the posts and the reports: an accepted attempt
/// ran (or, its client gone, was wasted) where both its start and its end
/// were reported, and is lost otherwise.
fn run_record(
    pool: &crate::engine::Pool,
    planned: usize,
    mut jobs: Vec<crate::engine::JobRecord>,
    collector: &Collector,
    mut posts: Posts,
) -> RunRecord {
    let r = collector.reports.lock().unwrap();
    let mut hold_late = new_histogram();
    let mut end = posts.last_answer;
    for (i, j) in jobs.iter_mut().enumerate() {
        if !posts.accepted.get(i).copied().unwrap_or(false) {
            continue;
        }
        let (started, ended) = (r.started[i], r.ended[i]);
        if started == NEVER || ended == NEVER {
            posts.carried.lost += 1;
            continue;
        }
        j.started = started;
        j.finished = ended.max(started);
        j.fate = if posts.abandoned.get(i).copied().unwrap_or(false) {
            Fate::Wasted
        } else {
            Fate::Ran
        };
        end = end.max(j.finished);
        stats::record(
            &mut hold_late,
            (j.finished - j.started).saturating_sub(j.duration),
        );
    }
    posts.carried.duplicate_reports = r.duplicates;
    posts.carried.refused_reports = r.refused;
    let reports = (r.started.iter().chain(&r.ended))
        .filter(|&&t| t != NEVER)
        .count() as u64;
    drop(r);
    posts.carried.passed_over = Some(passed::passed_over(&jobs, pool.workers));
    let mut stats = stats_from_records(pool, &jobs, &vec![false; jobs.len()], end);
    stats.retry_after_s_max = posts.retry_after_s_max;
    let server = ServerMeasures {
        take_rtt: new_histogram(),
        hold_late,
        submit_rtt: posts.submit_rtt,
        cost: ServerCost {
            us_per_call: None,
            cpu_s: None,
            calls: jobs.len() as u64 + reports,
            bytes: None,
            wal_bytes: None,
        },
        workers_cpu_s: None,
        planned,
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
