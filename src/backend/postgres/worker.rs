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

use anyhow::{Result, anyhow, bail};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};

use super::{connect, one_line, schema_of};
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
    serve_threads(threads, move || PgTaker::join(&url, &schema))
}

struct PgTaker {
    url: String,
    schema: String,
    client: Client,
    me: i32,
    take: Statement,
    finish: Statement,
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
    fn join(url: &str, schema: &str) -> Result<PgTaker> {
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
        let (take, finish) = prepare(&mut client)?;
        Ok(PgTaker {
            url: url.to_string(),
            schema: schema.to_string(),
            client,
            me,
            take,
            finish,
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
        (self.take, self.finish) = prepare(&mut client)?;
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

    fn job(row: &postgres::Row) -> Option<Job> {
        let job: Option<i64> = row.get(0);
        let tenant: Option<i32> = row.get(1);
        let lease: Option<i64> = row.get(2);
        Some(Job {
            id: job? as u32,
            queue: tenant? as u32,
            lease: lease.unwrap_or(0) as u64,
        })
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
        let woken = std::cell::Cell::new(self.rejoined.take().unwrap_or(woken));
        let row = self.call(
            |w| w.client.query_one(&w.take, &[&w.me, &woken.get()]),
            |_, was_woken| woken.set(was_woken),
        )?;
        Ok(Self::job(&row))
    }

    fn finish(&mut self, job: Job) -> Result<Option<Job>> {
        let (id, tenant, lease) = (i64::from(job.id), job.queue as i32, job.lease as i64);
        let row = self.call(
            |w| {
                w.client
                    .query_one(&w.finish, &[&w.me, &id, &tenant, &lease])
            },
            |_, _| {},
        )?;
        Ok(Self::job(&row))
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

/// The take and the finish, prepared on `client`.
fn prepare(client: &mut Client) -> Result<(Statement, Statement)> {
    let take = client
        .prepare("SELECT job, tenant, lease FROM noisylab_take($1, $2)")
        .map_err(db)?;
    let finish = client
        .prepare("SELECT job, tenant, lease FROM noisylab_finish($1, $2, $3, $4)")
        .map_err(db)?;
    Ok((take, finish))
}
