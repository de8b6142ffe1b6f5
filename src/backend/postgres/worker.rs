//! A worker thread's side of a lab on PostgreSQL ([`super::super::worker`]
//! has the loop): `noisylab_join` gives it a number and it `LISTEN`s on its
//! own channel, where the coordinator says `run`, `stop` and `quit` and a
//! submit says `wake`; `noisylab_take` and `noisylab_finish` hand out jobs.

use anyhow::{Result, anyhow, bail};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};

use super::{connect, one_line, schema_of};
use crate::backend::worker::{Job, Taker, serve_threads};

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
    client: Client,
    me: i32,
    take: Statement,
    finish: Statement,
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
                "LISTEN \"{schema}_{me}\"; SELECT nextval('worker_ready')"
            ))
            .map_err(db)?;
        let take = client
            .prepare("SELECT job, tenant FROM noisylab_take($1, $2)")
            .map_err(db)?;
        let finish = client
            .prepare("SELECT job, tenant FROM noisylab_finish($1, $2, $3)")
            .map_err(db)?;
        Ok(PgTaker {
            client,
            me,
            take,
            finish,
        })
    }

    /// The next message on this worker's channel.
    fn hear(&mut self) -> Result<String> {
        let mut notes = self.client.notifications();
        let mut it = notes.blocking_iter();
        match it.next().map_err(db)? {
            Some(n) => Ok(n.payload().to_string()),
            None => bail!("the server closed the connection"),
        }
    }

    fn job(row: &postgres::Row) -> Option<Job> {
        let job: Option<i64> = row.get(0);
        let tenant: Option<i32> = row.get(1);
        Some(Job {
            id: job? as u32,
            queue: tenant? as u32,
            lease: 0,
        })
    }
}

impl Taker for PgTaker {
    fn next_run(&mut self) -> Result<bool> {
        match self.hear()?.as_str() {
            RUN => Ok(true),
            QUIT => Ok(false),
            other => bail!("worker {}: {other:?} between runs", self.me),
        }
    }

    fn durations(&mut self) -> Result<Vec<u64>> {
        let d: Vec<i64> = self
            .client
            .query_one("SELECT durations FROM plan", &[])
            .map_err(db)?
            .get(0);
        Ok(d.into_iter().map(|d| d as u64).collect())
    }

    fn take(&mut self, woken: bool) -> Result<Option<Job>> {
        let row = self
            .client
            .query_one(&self.take, &[&self.me, &woken])
            .map_err(db)?;
        Ok(Self::job(&row))
    }

    fn finish(&mut self, job: Job) -> Result<Option<Job>> {
        let (id, tenant) = (i64::from(job.id), job.queue as i32);
        let row = self
            .client
            .query_one(&self.finish, &[&self.me, &id, &tenant])
            .map_err(db)?;
        Ok(Self::job(&row))
    }

    fn wait_wake(&mut self) -> Result<bool> {
        match self.hear()?.as_str() {
            WAKE => Ok(true),
            STOP => Ok(false),
            other => bail!("worker {}: {other:?} while idle", self.me),
        }
    }

    fn leave(&mut self, figures: &str) -> Result<()> {
        self.client
            .execute(
                "INSERT INTO figures (worker, text) VALUES ($1, $2)",
                &[&self.me, &figures],
            )
            .map_err(db)?;
        Ok(())
    }
}
