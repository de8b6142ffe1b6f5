//! `noisylab worker`: a process of worker threads that joins a lab on a
//! Redis server, from this machine or another. Each thread holds one
//! connection and, run after run:
//!
//! 1. waits for the next run (a blocking pop on the lab's `runs` list);
//! 2. asks for a job (`noisylab_take`); with none to start it is counted
//!    idle by the server and blocks on the run's `wake` list, never polling;
//! 3. holds the job for its duration (from the run's plan, read once) on a
//!    precise timer, then finishes it
//!    and gets its next job in the same call (`noisylab_finish`);
//! 4. on `stop`, leaves its round-trip times and how late its own timer
//!    woke for each hold, for the coordinator.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use redis::{Client, Connection, cmd};

use crate::engine::clock::{sleep_until_blocking, tighten_timer_slack};
use crate::stats::{encode_histogram, new_histogram, record};

/// The token that ends a run for one worker, on the run's `wake` list.
pub const STOP: &str = "stop";
/// The token that ends a worker thread, on the lab's `runs` list.
pub const QUIT: &str = "quit";
/// How early a worker's OS sleep ends, to spin the rest of a job's hold:
/// not at all. A thread sleep on Linux with 1 ns of timer slack wakes about
/// 0.1 ms late on a 2-core VM, and a spin would take that off, but twenty
/// worker threads that finish together (a burst's jobs, started together)
/// spin together on two cores and take the server's CPU. Measured on the
/// article lab (README, "On a real queue"): spinning the last 0.3 ms, one
/// thread a process at a time, took the capped runs' lateness p50 from
/// 0.14 ms to 0.1 µs, but the shared FIFO's take round trip p50 from 317 µs
/// to 576 µs, and 6 of the 210 figures fell outside the model (none
/// without it).
pub const HOLD_MARGIN: Duration = Duration::ZERO;

/// Serve the lab `lab` (its key prefix) on `url` with `threads` workers,
/// until the coordinator says quit.
pub fn serve(url: &str, lab: &str, threads: u32) -> Result<()> {
    let client = Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (client, lab) = (client.clone(), lab.to_string());
            std::thread::spawn(move || worker(&client, &lab))
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow!("a worker thread panicked"))??;
    }
    Ok(())
}

fn worker(client: &Client, lab: &str) -> Result<()> {
    tighten_timer_slack();
    let mut con = client
        .get_connection()
        .context("cannot connect to the Redis server")?;
    cmd("INCR")
        .arg(format!("{lab}joined"))
        .query::<i64>(&mut con)?;
    loop {
        let (_, token): (String, String) = cmd("BLPOP")
            .arg(format!("{lab}runs"))
            .arg(0)
            .query(&mut con)?;
        if token == QUIT {
            return Ok(());
        }
        serve_run(&mut con, &token)?;
    }
}

/// One run, under its key prefix `p`.
fn serve_run(con: &mut Connection, p: &str) -> Result<()> {
    let durations: String = cmd("GET").arg(format!("{p}durations")).query(con)?;
    let durations: Vec<u64> = durations
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("the run's durations are not numbers")?;
    let (mut rtt, mut late) = (new_histogram(), new_histogram());
    let wake = format!("{p}wake");
    let mut next = take_timed(con, p, false, &mut rtt)?;
    loop {
        let Some(payload) = next else {
            let (_, token): (String, String) = cmd("BLPOP").arg(&wake).arg(0).query(con)?;
            if token == STOP {
                break;
            }
            next = take_timed(con, p, true, &mut rtt)?;
            continue;
        };
        let (job, tenant) = parse(&payload)?;
        let hold = durations
            .get(job as usize)
            .ok_or_else(|| anyhow!("job {job} is not in the run's plan"))?;
        let until = Instant::now() + Duration::from_nanos(*hold);
        sleep_until_blocking(until, HOLD_MARGIN);
        let sent = Instant::now();
        record(&mut late, (sent - until).as_nanos() as u64);
        next = finish(con, p, job, tenant)?;
        record(&mut rtt, sent.elapsed().as_nanos() as u64);
    }
    cmd("RPUSH")
        .arg(format!("{p}rtt"))
        .arg(format!(
            "{} {}",
            encode_histogram(&rtt),
            encode_histogram(&late)
        ))
        .query::<i64>(con)?;
    Ok(())
}

/// A take at the run's start, or after a wake token (`woken`), timed.
fn take_timed(
    con: &mut Connection,
    p: &str,
    woken: bool,
    rtt: &mut Histogram<u64>,
) -> Result<Option<String>> {
    let sent = Instant::now();
    let next = take(con, p, woken)?;
    record(rtt, sent.elapsed().as_nanos() as u64);
    Ok(next)
}

/// One take on the queue under `p`: its next job, "job tenant", or `None`
/// (the worker is counted idle and should block on `p` + `wake`).
pub fn take(con: &mut Connection, p: &str, woken: bool) -> Result<Option<String>> {
    Ok(cmd("FCALL")
        .arg("noisylab_take")
        .arg(0)
        .arg(p)
        .arg(u8::from(woken))
        .query(con)?)
}

/// Finish `job` of `tenant` and take the worker's next job, in one call.
pub fn finish(con: &mut Connection, p: &str, job: u32, tenant: u32) -> Result<Option<String>> {
    Ok(cmd("FCALL")
        .arg("noisylab_finish")
        .arg(0)
        .arg(p)
        .arg(job)
        .arg(tenant)
        .query(con)?)
}

/// A job as the functions hand it out: "job tenant".
pub fn parse(payload: &str) -> Result<(u32, u32)> {
    let mut it = payload.split(' ').map(str::parse::<u32>);
    match (it.next(), it.next()) {
        (Some(Ok(job)), Some(Ok(tenant))) => Ok((job, tenant)),
        _ => bail!("a job from the server that is not \"job tenant\": {payload:?}"),
    }
}
