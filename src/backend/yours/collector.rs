//! The collector: the HTTP endpoint a team's workers report each job's
//! start and end to, stamped on this process's clock as they arrive.
//!
//! A report is `POST /start` or `POST /end` with the JSON body
//! `{"run": …, "job": …, "attempt": …, "secret": …}`, the values the job
//! was posted with. One with a wrong run or secret, or naming no job of the
//! run, is answered 403 or 404 and counted, never stamped; a body over
//! [`MAX_BODY`] bytes is answered 413. The first start and the first end of
//! a job count; a later one is counted as a duplicate.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Result, anyhow};
use serde::Deserialize;

use super::listen::{Answer, Asked, Listening, serve};
use crate::engine::{NEVER, Nanos};

/// The largest report body read; a report is about 100 bytes.
pub const MAX_BODY: usize = 4096;

/// What the reports said so far, by job.
#[derive(Debug)]
pub struct Reports {
    pub started: Vec<Nanos>,
    pub ended: Vec<Nanos>,
    /// Jobs with an end reported.
    pub ends: usize,
    pub duplicates: u64,
    pub refused: u64,
    /// When the last report was stamped.
    pub last: Instant,
}

/// A report's body.
#[derive(Deserialize)]
struct Report {
    run: String,
    job: u64,
    #[allow(dead_code)]
    attempt: u32,
    secret: String,
}

/// The collector of one run, listening until dropped.
pub struct Collector {
    _listening: Listening,
    pub reports: Arc<Mutex<Reports>>,
    /// The base URL reports go to (`http://ADDR`).
    pub url: String,
}

impl Collector {
    /// Listen on `listen` (a loopback address unless told otherwise) for
    /// the reports of run `run`'s first `jobs` attempts (more as
    /// [`Collector::allow`] says), stamped as lab time since `origin`.
    pub fn start(
        listen: &str,
        run: String,
        secret: String,
        jobs: usize,
        origin: Instant,
    ) -> Result<Collector> {
        let reports = Arc::new(Mutex::new(Reports {
            started: vec![NEVER; jobs],
            ended: vec![NEVER; jobs],
            ends: 0,
            duplicates: 0,
            refused: 0,
            last: Instant::now(),
        }));
        let key = (run, secret);
        let stamped = reports.clone();
        let listening = serve(listen, MAX_BODY, move |asked| {
            Answer::status(report(asked, &stamped, &key, origin))
        })
        .map_err(|e| anyhow!("the collector {e}"))?;
        Ok(Collector {
            url: format!("http://{}", listening.addr),
            _listening: listening,
            reports,
        })
    }
}

impl Collector {
    /// Reports may name the first `total` attempts of the run.
    pub fn allow(&self, total: usize) {
        let mut r = self.reports.lock().unwrap();
        if r.started.len() < total {
            r.started.resize(total, NEVER);
            r.ended.resize(total, NEVER);
        }
    }

    /// When attempt `i`'s start was reported ([`NEVER`]: not yet).
    pub fn started(&self, i: usize) -> Nanos {
        (self.reports.lock().unwrap().started.get(i).copied()).unwrap_or(NEVER)
    }
}

/// Stamp one report, or refuse it: the status to answer with.
fn report(asked: Asked, reports: &Mutex<Reports>, key: &(String, String), origin: Instant) -> u16 {
    let at = asked.at.saturating_duration_since(origin).as_nanos() as Nanos;
    let start = match (&asked.method, asked.path.as_str()) {
        (&hyper::Method::POST, "/start") => true,
        (&hyper::Method::POST, "/end") => false,
        _ => return 404,
    };
    match serde_json::from_slice::<Report>(&asked.body) {
        Err(_) => 400,
        Ok(r) => stamp(&mut reports.lock().unwrap(), &r, key, start, at),
    }
}

/// Stamp a parsed report: the status to answer with.
fn stamp(r: &mut Reports, report: &Report, key: &(String, String), start: bool, at: Nanos) -> u16 {
    if report.run != key.0 || report.secret != key.1 {
        r.refused += 1;
        return 403;
    }
    let Some(job) = usize::try_from(report.job)
        .ok()
        .filter(|&j| j < r.started.len())
    else {
        r.refused += 1;
        return 404;
    };
    r.last = Instant::now();
    let slot = if start {
        &mut r.started[job]
    } else {
        &mut r.ended[job]
    };
    if *slot != NEVER {
        r.duplicates += 1;
        return 204;
    }
    *slot = at;
    if !start {
        r.ends += 1;
    }
    204
}
