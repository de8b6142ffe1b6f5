//! A worker thread's side of a lab on PostgreSQL ([`super::super::worker`]
//! has the loop): `noisylab_join` gives it a number and it `LISTEN`s on its
//! own channel, where the coordinator says `run`, `stop` and `quit` and a
//! submit says `wake`; `noisylab_take` and `noisylab_finish` hand out jobs.
//!
//! A connection the server drops is made again, with backoff, and the call
//! it was in is sent again, as on Redis: the worker registers its new
//! server process (`noisylab_rejoin`), which also says whether a wake was
//! sent to it meanwhile (a notification to a dropped connection is lost)
//! and takes it out of the idle line otherwise, so its next take counts it
//! again; a take repeated may leave the job the lost reply carried leased
//! to nobody (its lease runs out and it goes back to its queue); a finish
//! repeated after it went through is known by its lease.
//!
//! The threads of a process send their takes and finishes together
//! ([`Combiner`], [`LANES`]): one `noisylab_steps` call carries the calls
//! made while another of theirs was on its way, so under load the queue's
//! lock and a commit are paid once for many (a call made while none is on
//! its way goes at once).

use std::cell::RefCell;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};

use super::{connect, one_line, schema_of};
use crate::backend::combine::Combiner;
use crate::backend::worker::{Backoff, Job, Taker, serve_threads};

/// A run starts (the coordinator set it up).
pub const RUN: &str = "run";
/// The run is over for this worker.
pub const STOP: &str = "stop";
/// The lab is over: the thread ends.
pub const QUIT: &str = "quit";
/// A job waits for this idle worker.
pub const WAKE: &str = "wake";

/// Serve lab `id` on the database at `url` with `threads` workers, until
/// the coordinator says quit.
pub fn serve(url: &str, id: &str, threads: u32) -> Result<()> {
    let (url, schema) = (url.to_string(), schema_of(id));
    let steps = Arc::new(Steps::new(LANES));
    serve_threads(threads, move || PgTaker::join(&url, &schema, steps.clone()))
}

/// One worker's take (`finish` none; `woken` as [`Taker::take`] says) or
/// finish, as `noisylab_steps` carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub me: i32,
    pub woken: bool,
    pub finish: Option<Job>,
}

/// A process's workers' steps, sent together: each answered by the
/// worker's next job.
pub type Steps = Combiner<Step, Option<Job>>;

/// A process's calls on their way at once: one. The server runs the
/// queue's calls one at a time, so a second call on its way would only
/// wait on the lock, and the two would split the steps one would carry:
/// in the bench's drain (20 threads, no-op jobs, the lanes set
/// by an ad-hoc variant) one lane carried 10.4 steps a call where two
/// carried 6.9, and drained more jobs a second in each of eight same-run
/// pairs (docs/backends.md).
pub const LANES: usize = 1;

/// The call that sends steps together, each a worker's take or finish:
/// one row a step, in their order (the worker, then job, tenant, lease).
pub const STEPS: &str = "SELECT me, job, tenant, lease FROM noisylab_steps($1, $2, $3, $4, $5)";

/// Steps as `noisylab_steps`'s five arrays, one element a step.
pub struct StepArrays {
    me: Vec<i32>,
    woken: Vec<bool>,
    job: Vec<Option<i64>>,
    tenant: Vec<Option<i32>>,
    lease: Vec<Option<i64>>,
}

impl StepArrays {
    pub fn of(steps: &[Step]) -> StepArrays {
        let finished = || steps.iter().map(|s| s.finish);
        StepArrays {
            me: steps.iter().map(|s| s.me).collect(),
            woken: steps.iter().map(|s| s.woken).collect(),
            job: finished().map(|j| j.map(|j| i64::from(j.id))).collect(),
            tenant: finished().map(|j| j.map(|j| j.queue as i32)).collect(),
            lease: finished().map(|j| j.map(|j| j.lease as i64)).collect(),
        }
    }

    /// The parameters of [`STEPS`].
    pub fn params(&self) -> [&(dyn postgres::types::ToSql + Sync); 5] {
        [&self.me, &self.woken, &self.job, &self.tenant, &self.lease]
    }
}

/// Each step's next job, from `noisylab_steps`'s rows: one a step, of the
/// same worker, in the same order.
pub fn step_answers(steps: &[Step], rows: &[postgres::Row]) -> Result<Vec<Option<Job>>> {
    if rows.len() != steps.len() {
        bail!(
            "noisylab_steps answered {} of {} steps",
            rows.len(),
            steps.len()
        );
    }
    steps
        .iter()
        .zip(rows)
        .map(|(s, r)| {
            let me: i32 = r.get(0);
            if me != s.me {
                bail!(
                    "noisylab_steps answered worker {me} where worker {} was due",
                    s.me
                );
            }
            Ok(job_of(r, 1))
        })
        .collect()
}

/// The job in `row`'s columns from `at` (job, tenant, lease), if any.
pub fn job_of(row: &postgres::Row, at: usize) -> Option<Job> {
    let job: Option<i64> = row.get(at);
    let tenant: Option<i32> = row.get(at + 1);
    let lease: Option<i64> = row.get(at + 2);
    Some(Job {
        id: job? as u32,
        queue: tenant? as u32,
        lease: lease.unwrap_or(0) as u64,
    })
}

struct PgTaker {
    url: String,
    schema: String,
    client: Client,
    me: i32,
    steps: Statement,
    /// This process's workers' steps, sent together.
    together: Arc<Steps>,
    /// After connecting again while idle: whether a wake had been sent to
    /// it (its next take is a woken one).
    rejoined: Option<bool>,
}

/// Whether `e` is the server dropping the connection (or not taking one
/// yet), not an error of the call.
fn dropped(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code),
        // No server error: the connection itself failed.
        None => e.as_db_error().is_none(),
    }
}

fn db(e: postgres::Error) -> anyhow::Error {
    anyhow!("{}", one_line(&e))
}

impl PgTaker {
    fn join(url: &str, schema: &str, together: Arc<Steps>) -> Result<PgTaker> {
        let mut client = connect(url)?;
        client
            .batch_execute(&format!("SET search_path TO {schema}"))
            .map_err(db)?;
        let me: i32 = client
            .query_one("SELECT noisylab_join()", &[])
            .map_err(|e| anyhow!("cannot join the lab in schema {schema}: {}", one_line(&e)))?
            .get(0);
        // Listening before it counts as joined: the coordinator's first
        // word, once all have joined, is heard.
        client
            .batch_execute(&format!(
                "LISTEN \"{schema}_{me}\"; SELECT noisylab_ready({me})"
            ))
            .map_err(db)?;
        let steps = client.prepare(STEPS).map_err(db)?;
        Ok(PgTaker {
            url: url.to_string(),
            schema: schema.to_string(),
            client,
            me,
            steps,
            together,
            rejoined: None,
        })
    }

    /// A new connection, listening again and registered: whether a wake
    /// had been sent to this worker.
    fn reconnect(&mut self) -> Result<bool> {
        let mut client = connect(&self.url)?;
        let (schema, me) = (&self.schema, self.me);
        client
            .batch_execute(&format!(
                "SET search_path TO {schema}; LISTEN \"{schema}_{me}\""
            ))
            .map_err(db)?;
        let woken: bool = client
            .query_one("SELECT noisylab_rejoin($1)", &[&me])
            .map_err(db)?
            .get(0);
        self.steps = client.prepare(STEPS).map_err(db)?;
        self.client = client;
        Ok(woken)
    }

    /// A new connection, on a [`Backoff`]: whether a wake had been sent
    /// to this worker.
    fn reconnect_soon(&mut self) -> Result<bool> {
        let mut backoff = Backoff::start();
        loop {
            backoff.sleep();
            match self.reconnect() {
                Ok(woken) => return Ok(woken),
                Err(e) if backoff.over() => return Err(e),
                Err(_) => {}
            }
        }
    }

    /// `call`, and again on a new connection while the server drops it (on
    /// a [`Backoff`]); `on_new` is told whether a wake was sent meanwhile.
    fn call<T>(
        &mut self,
        mut call: impl FnMut(&mut PgTaker) -> Result<T, postgres::Error>,
        mut on_new: impl FnMut(&mut PgTaker, bool),
    ) -> Result<T> {
        let mut backoff = Backoff::start();
        loop {
            let err = match call(self) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !dropped(&err) || backoff.over() {
                return Err(db(err));
            }
            backoff.sleep();
            if let Ok(woken) = self.reconnect() {
                on_new(self, woken);
            }
        }
    }

    /// The next message on this worker's channel.
    fn hear(&mut self) -> Result<String, postgres::Error> {
        let next = {
            let mut notes = self.client.notifications();
            let mut it = notes.blocking_iter();
            it.next()?.map(|n| n.payload().to_string())
        };
        match next {
            Some(payload) => Ok(payload),
            // The server disconnected: a call says how (and is retried).
            None => self.client.simple_query("").map(|_| String::new()),
        }
    }

    /// `step`'s next job, sent with the steps this process's other
    /// workers made meanwhile (through this worker's connection if none
    /// is on its way).
    fn step(&mut self, step: Step) -> Result<Option<Job>> {
        let together = self.together.clone();
        together.call(step, |steps| self.send(steps))
    }

    /// Send `steps` in one call, again on a new connection while the
    /// server drops it; this worker's own take counts a wake the server
    /// says was sent to it meanwhile.
    fn send(&mut self, steps: Vec<Step>) -> Result<Vec<Option<Job>>> {
        let steps = RefCell::new(steps);
        let rows = self.call(
            |w| {
                let arrays = StepArrays::of(&steps.borrow());
                w.client.query(&w.steps, &arrays.params())
            },
            |w, was_woken| {
                for s in steps.borrow_mut().iter_mut() {
                    if s.me == w.me && s.finish.is_none() {
                        s.woken = was_woken;
                    }
                }
            },
        )?;
        step_answers(&steps.borrow(), &rows)
    }
}

impl Taker for PgTaker {
    fn next_run(&mut self) -> Result<bool> {
        match self.call(Self::hear, |_, _| {})?.as_str() {
            RUN => Ok(true),
            QUIT => Ok(false),
            other => bail!("worker {}: {other:?} between runs", self.me),
        }
    }

    fn durations(&mut self) -> Result<Vec<u64>> {
        let d: Vec<i64> = self
            .call(
                |w| w.client.query_one("SELECT durations FROM plan", &[]),
                |_, _| {},
            )?
            .get(0);
        Ok(d.into_iter().map(|d| d as u64).collect())
    }

    fn lease(&mut self) -> Result<Option<std::time::Duration>> {
        let us: Option<i64> = self
            .call(
                |w| w.client.query_one("SELECT lease FROM cfg", &[]),
                |_, _| {},
            )?
            .get(0);
        Ok(us.map(|us| std::time::Duration::from_micros(us as u64)))
    }

    fn renew(&mut self, job: Job) -> Result<bool> {
        let (id, lease) = (i64::from(job.id), job.lease as i64);
        let row = self.call(
            |w| {
                w.client
                    .query_one("SELECT noisylab_renew($1, $2)", &[&id, &lease])
            },
            |_, _| {},
        )?;
        Ok(row.get(0))
    }

    fn take(&mut self, woken: bool) -> Result<Option<Job>> {
        // After connecting again while idle, a wake sent meanwhile counts.
        let woken = self.rejoined.take().unwrap_or(woken);
        self.step(Step {
            me: self.me,
            woken,
            finish: None,
        })
    }

    fn finish(&mut self, job: Job) -> Result<Option<Job>> {
        self.step(Step {
            me: self.me,
            woken: false,
            finish: Some(job),
        })
    }

    fn wait_wake(&mut self) -> Result<bool> {
        // A dropped connection while idle: the worker asks again at once
        // (woken or not, as the server says); a wake sent meanwhile is lost
        // with the connection, but not forgotten.
        let heard = match self.hear() {
            Ok(heard) => heard,
            Err(e) if dropped(&e) => {
                self.rejoined = Some(self.reconnect_soon()?);
                return Ok(true);
            }
            Err(e) => return Err(db(e)),
        };
        match heard.as_str() {
            WAKE => Ok(true),
            STOP => Ok(false),
            other => bail!("worker {}: {other:?} while idle", self.me),
        }
    }

    fn leave(&mut self, figures: &str) -> Result<()> {
        self.call(
            |w| {
                w.client.execute(
                    "INSERT INTO figures (worker, text) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&w.me, &figures],
                )
            },
            |_, _| {},
        )?;
        Ok(())
    }
}
