//! A worker thread's side of a lab on Redis ([`super::super::worker`] has
//! the loop): the lab's `runs` list hands out runs, `noisylab_take` and
//! `noisylab_finish` jobs, and an idle worker blocks on the run's `wake`
//! list.
//!
//! A connection the server drops (or a server restarted) is made again,
//! with backoff, and the call it was in is sent again (a server still
//! loading its file is asked again the same way): a blocking pop or a read
//! repeats as it was; a take repeated may leave the job the lost reply
//! carried leased to nobody (its lease runs out and it goes back to its
//! queue); a finish repeated after it went through is known by its lease
//! (see `noisylab.lua`).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use redis::{Client, Connection, cmd};

use crate::backend::worker::{Backoff, Job, Taker, serve_threads};

/// The token that ends a run for one worker, on the run's `wake` list.
pub const STOP: &str = "stop";
/// The token that ends a worker thread, on the lab's `runs` list.
pub const QUIT: &str = "quit";

/// Serve the lab `lab` (its key prefix) on `url` with `threads` workers,
/// until the coordinator says quit.
pub fn serve(url: &str, lab: &str, threads: u32) -> Result<()> {
    let client = Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    let lab = lab.to_string();
    serve_threads(threads, move || RedisTaker::join(&client, &lab))
}

struct RedisTaker {
    client: Client,
    con: Connection,
    lab: String,
    /// The run's key prefix.
    p: String,
}

impl RedisTaker {
    fn join(client: &Client, lab: &str) -> Result<RedisTaker> {
        let mut con = connect(client, lab)?;
        cmd("INCR")
            .arg(format!("{lab}joined"))
            .query::<i64>(&mut con)?;
        Ok(RedisTaker {
            client: client.clone(),
            con,
            lab: lab.to_string(),
            p: String::new(),
        })
    }

    /// `call` on the connection, and again on a new one while the server
    /// drops it (on a [`Backoff`]).
    fn call<T>(
        &mut self,
        mut call: impl FnMut(&mut Connection, &str) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut backoff = Backoff::start();
        loop {
            let err = match call(&mut self.con, &self.p) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            // Dropped, or a server started again still loading its file.
            let dropped = err.is_unrecoverable_error()
                || err.is_io_error()
                || matches!(err.retry_method(), redis::RetryMethod::WaitAndRetry);
            if !dropped || backoff.over() {
                return Err(err.into());
            }
            backoff.sleep();
            if let Ok(con) = connect(&self.client, &self.lab) {
                self.con = con;
            }
        }
    }
}

/// A connection for a worker of lab `lab`, its id on the lab's list of
/// worker clients (the ones a `drop_connections` fault drops).
fn connect(client: &Client, lab: &str) -> Result<Connection> {
    let mut con = client
        .get_connection()
        .context("cannot connect to the Redis server")?;
    let id: i64 = cmd("CLIENT").arg("ID").query(&mut con)?;
    cmd("RPUSH")
        .arg(format!("{lab}clients"))
        .arg(id)
        .query::<i64>(&mut con)?;
    Ok(con)
}

impl Taker for RedisTaker {
    fn next_run(&mut self) -> Result<bool> {
        let runs = format!("{}runs", self.lab);
        let (_, token): (String, String) =
            self.call(|con, _| cmd("BLPOP").arg(&runs).arg(0).query(con))?;
        self.p = token;
        Ok(self.p != QUIT)
    }

    fn durations(&mut self) -> Result<Vec<u64>> {
        let durations: String =
            self.call(|con, p| cmd("GET").arg(format!("{p}durations")).query(con))?;
        durations
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("the run's durations are not numbers")
    }

    fn lease(&mut self) -> Result<Option<Duration>> {
        let us: Option<u64> =
            self.call(|con, p| cmd("HGET").arg(format!("{p}cfg")).arg("lease").query(con))?;
        Ok(us.map(Duration::from_micros))
    }

    fn renew(&mut self, job: Job) -> Result<bool> {
        let changed: i64 = self.call(|con, p| {
            cmd("FCALL")
                .arg("noisylab_renew")
                .arg(0)
                .arg(p)
                .arg(job.id)
                .arg(job.queue)
                .arg(job.lease)
                .query(con)
        })?;
        Ok(changed == 1)
    }

    fn take(&mut self, woken: bool) -> Result<Option<Job>> {
        self.call(|con, p| take_call(p, woken).query::<Option<String>>(con))?
            .map(|p| parse(&p))
            .transpose()
    }

    fn finish(&mut self, job: Job) -> Result<Option<Job>> {
        self.call(|con, p| finish_call(p, job).query::<Option<String>>(con))?
            .map(|p| parse(&p))
            .transpose()
    }

    fn wait_wake(&mut self) -> Result<bool> {
        let (_, token): (String, String) =
            self.call(|con, p| cmd("BLPOP").arg(format!("{p}wake")).arg(0).query(con))?;
        Ok(token != STOP)
    }

    fn leave(&mut self, figures: &str) -> Result<()> {
        self.call(|con, p| {
            cmd("RPUSH")
                .arg(format!("{p}rtt"))
                .arg(figures)
                .query::<i64>(con)
        })?;
        Ok(())
    }
}

/// One take on the queue under `p`: its next job, "job tenant lease", or `None`
/// (the worker is counted idle and should block on `p` + `wake`).
pub fn take(con: &mut Connection, p: &str, woken: bool) -> Result<Option<String>> {
    Ok(take_call(p, woken).query(con)?)
}

fn take_call(p: &str, woken: bool) -> redis::Cmd {
    let mut c = cmd("FCALL");
    c.arg("noisylab_take").arg(0).arg(p).arg(u8::from(woken));
    c
}

/// Finish `job` (refused if its lease ran out) and take the worker's next
/// job, in one call.
pub fn finish(con: &mut Connection, p: &str, job: Job) -> Result<Option<String>> {
    Ok(finish_call(p, job).query(con)?)
}

fn finish_call(p: &str, job: Job) -> redis::Cmd {
    let mut c = cmd("FCALL");
    c.arg("noisylab_finish")
        .arg(0)
        .arg(p)
        .arg(job.id)
        .arg(job.queue)
        .arg(job.lease);
    c
}

/// A job as the functions hand it out: "job tenant lease".
pub fn parse(payload: &str) -> Result<Job> {
    let mut it = payload.split(' ');
    let mut num = || it.next().and_then(|x| x.parse::<u64>().ok());
    match (num(), num(), num()) {
        (Some(id), Some(queue), Some(lease))
            if id <= u32::MAX.into() && queue <= u32::MAX.into() =>
        {
            Ok(Job {
                id: id as u32,
                queue: queue as u32,
                lease,
            })
        }
        _ => bail!("a job from the server that is not \"job tenant lease\": {payload:?}"),
    }
}
