//! A worker thread's side of a lab on Redis ([`super::super::worker`] has
//! the loop): the lab's `runs` list hands out runs, `noisylab_take` and
//! `noisylab_finish` jobs, and an idle worker blocks on the run's `wake`
//! list.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use redis::{Client, Connection, cmd};

use crate::backend::worker::{Job, Taker, serve_threads};

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
    con: Connection,
    lab: String,
    /// The run's key prefix.
    p: String,
}

impl RedisTaker {
    fn join(client: &Client, lab: &str) -> Result<RedisTaker> {
        let mut con = client
            .get_connection()
            .context("cannot connect to the Redis server")?;
        cmd("INCR")
            .arg(format!("{lab}joined"))
            .query::<i64>(&mut con)?;
        Ok(RedisTaker {
            con,
            lab: lab.to_string(),
            p: String::new(),
        })
    }
}

impl Taker for RedisTaker {
    fn next_run(&mut self) -> Result<bool> {
        let (_, token): (String, String) = cmd("BLPOP")
            .arg(format!("{}runs", self.lab))
            .arg(0)
            .query(&mut self.con)?;
        self.p = token;
        Ok(self.p != QUIT)
    }

    fn durations(&mut self) -> Result<Vec<u64>> {
        let durations: String = cmd("GET")
            .arg(format!("{}durations", self.p))
            .query(&mut self.con)?;
        durations
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("the run's durations are not numbers")
    }

    fn lease(&mut self) -> Result<Option<Duration>> {
        let us: Option<u64> = cmd("HGET")
            .arg(format!("{}cfg", self.p))
            .arg("lease")
            .query(&mut self.con)?;
        Ok(us.map(Duration::from_micros))
    }

    fn renew(&mut self, job: Job) -> Result<bool> {
        let changed: i64 = cmd("FCALL")
            .arg("noisylab_renew")
            .arg(0)
            .arg(&self.p)
            .arg(job.id)
            .arg(job.queue)
            .arg(job.lease)
            .query(&mut self.con)?;
        Ok(changed == 1)
    }

    fn take(&mut self, woken: bool) -> Result<Option<Job>> {
        take(&mut self.con, &self.p, woken)?
            .map(|p| parse(&p))
            .transpose()
    }

    fn finish(&mut self, job: Job) -> Result<Option<Job>> {
        finish(&mut self.con, &self.p, job)?
            .map(|p| parse(&p))
            .transpose()
    }

    fn wait_wake(&mut self) -> Result<bool> {
        let (_, token): (String, String) = cmd("BLPOP")
            .arg(format!("{}wake", self.p))
            .arg(0)
            .query(&mut self.con)?;
        Ok(token != STOP)
    }

    fn leave(&mut self, figures: &str) -> Result<()> {
        cmd("RPUSH")
            .arg(format!("{}rtt", self.p))
            .arg(figures)
            .query::<i64>(&mut self.con)?;
        Ok(())
    }
}

/// One take on the queue under `p`: its next job, "job tenant lease", or `None`
/// (the worker is counted idle and should block on `p` + `wake`).
pub fn take(con: &mut Connection, p: &str, woken: bool) -> Result<Option<String>> {
    Ok(cmd("FCALL")
        .arg("noisylab_take")
        .arg(0)
        .arg(p)
        .arg(u8::from(woken))
        .query(con)?)
}

/// Finish `job` (refused if its lease ran out) and take the worker's next
/// job, in one call.
pub fn finish(con: &mut Connection, p: &str, job: Job) -> Result<Option<String>> {
    Ok(cmd("FCALL")
        .arg("noisylab_finish")
        .arg(0)
        .arg(p)
        .arg(job.id)
        .arg(job.queue)
        .arg(job.lease)
        .query(con)?)
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
