//! `make bench`, the queue on Redis: what the function library costs on a
//! server of the bench's own (a free loopback port, persistence off).
//!
//! - Throughput with `job_ms = 0`: 20 client threads submit 100,000 jobs of
//!   21 tenants (one round trip a job), then 20 worker threads take and
//!   finish them (a finish and the next take in one round trip), for fifo,
//!   fair and vtc; beside `redis-benchmark`'s plain LPUSH and RPOP with 20
//!   clients on the same server, in the same run. A job here is one of each
//!   of our two calls; a pair there one of each of its two.
//! - Pickup on an idle pool; then BullMQ beside the fair and fifo queues
//!   in three rounds, our submits and drain and its `addBulk` and drain
//!   back to back in each, taking turns to go first (a shared VM's speed
//!   drifts over a bench: a round's two sides see about the same machine),
//!   the medians and each round's ratio reported.
//! - Scale: 100,000 tenants holding 1,000,000 queued jobs, and for scale
//!   100 tenants holding 1,000: the server's own time per finish-and-take
//!   call (its percentiles from the server's own latency tracking, `INFO
//!   latencystats`, Redis 7), and the memory each queued job takes (the
//!   lab's stamp log left out).
//!
//! - For scale, a bare PING's round trip, back to back and after a job's
//!   hold asleep: the floor under a worker's call.
//!
//! Without `redis-server` on PATH it prints one line and exits 0.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use noisylab::backend::peers;
use noisylab::backend::redis::server::{self, OwnedServer};
use noisylab::backend::redis::{self as rb, worker};
use noisylab::stats::{JOB_HOLD, time_calls};
use noisylab::units;
use redis::{Client, Connection, cmd};

const THREADS: u32 = 20;
const TENANTS: u32 = 21;
const QUEUES: [&str; 3] = ["fifo", "fair", "vtc"];

/// How much to measure: `cargo bench` passes `--bench`; `cargo test
/// --all-targets` (in `make test`) runs this file without it, as a check
/// that the bench still works, on a thousandth of the work.
struct Size {
    /// Jobs through the throughput test.
    jobs: u32,
    /// (tenants, jobs each) of the scale states.
    scale: [(u32, u32); 2],
    /// Finish-and-take calls timed in each scale state.
    timed: u32,
    /// Jobs timed from submit to start on an idle pool.
    pickups: u32,
    /// Calls timed after a job's hold asleep.
    idle_calls: u32,
    /// Rounds of the drains beside BullMQ's ([`peers::Rounds`]).
    rounds: usize,
    /// Whether to write the table beside the peer (reports/bench/).
    report: bool,
}

const FULL: Size = Size {
    jobs: 100_000,
    scale: [(100, 10), (100_000, 10)],
    timed: 10_000,
    pickups: 200,
    idle_calls: 100,
    rounds: 3,
    report: true,
};
const CHECK: Size = Size {
    jobs: 1_000,
    scale: [(10, 10), (100, 10)],
    timed: 100,
    pickups: 20,
    idle_calls: 2,
    rounds: 1,
    report: false,
};

fn main() {
    if noisylab::backend::process::on_path("redis-server").is_none() {
        println!("bench queue: skipped: {}", server::NOT_INSTALLED);
        return;
    }
    let size = if std::env::args().any(|a| a == "--bench") {
        &FULL
    } else {
        &CHECK
    };
    if let Err(e) = run(size) {
        eprintln!("bench queue: {e:#}");
        std::process::exit(1);
    }
}

fn run(size: &Size) -> Result<()> {
    let server = OwnedServer::start(false)?;
    let mut con = rb::connect(&server.url)?;
    cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(rb::LIBRARY)
        .query::<String>(&mut con)?;
    let info: String = cmd("INFO").arg("server").query(&mut con)?;
    let version = rb::info_field(&info, "redis_version").unwrap_or("?");
    println!(
        "bench queue: Redis {version} on {}",
        noisylab::machine::Machine::this().describe()
    );
    let floor = floor(&mut con, size)?;
    let client = Client::open(server.url.as_str())?;
    println!(
        "\nThroughput, job_ms = 0, {THREADS} submitters then {THREADS} workers, {} jobs of {TENANTS} tenants:",
        size.jobs
    );
    for queue in QUEUES {
        let (submit_s, take_s) = through(&client, &mut con, queue, size.jobs)?;
        let n = f64::from(size.jobs);
        println!(
            "  {queue:<4}  submit {:>7.0}/s  finish+take {:>7.0}/s  whole jobs {:>7.0}/s",
            n / submit_s,
            n / take_s,
            n / (submit_s + take_s)
        );
    }
    let (lpush, rpop) = redis_benchmark(&server.url, 200 * size.jobs / 100)?;
    println!(
        "  redis-benchmark, {THREADS} clients: LPUSH {lpush:.0}/s, RPOP {rpop:.0}/s, a pair {:.0}/s",
        1.0 / (1.0 / lpush + 1.0 / rpop)
    );
    let setting = format!(
        "Redis {version}, a server of the bench's own on loopback, persistence off (no RDB, no AOF) for both"
    );
    beside_bullmq(&server.url, &client, &mut con, size, &setting, &floor)?;
    println!(
        "\nScale: the server's time per finish-and-take call (INFO latencystats, {} calls), memory per queued job:",
        size.timed
    );
    for queue in QUEUES {
        for (tenants, each) in size.scale {
            scale(&mut con, queue, tenants, each, size.timed)?;
        }
    }
    Ok(())
}

/// The floor under a worker's call, printed: a bare PING's round trip back
/// to back and after a job's hold asleep (a worker's call after its job);
/// the sentence the report carries under its table.
fn floor(con: &mut Connection, size: &Size) -> Result<String> {
    let mut ping = || -> Result<()> {
        cmd("PING").query::<String>(con)?;
        Ok(())
    };
    let busy = time_calls(10_000, Duration::ZERO, &mut ping)?;
    let idle = time_calls(size.idle_calls, JOB_HOLD, &mut ping)?;
    let hold = JOB_HOLD.as_millis();
    println!(
        "  a bare PING's round trip: p50 {:.1} µs, p99 {:.1} µs (10,000, one client); after {hold} ms \
         asleep, as a worker's call after a job's hold: p50 {:.1} µs, p99 {:.1} µs ({})",
        busy.p50, busy.p99, idle.p50, idle.p99, size.idle_calls
    );
    let ms = |us: f64| units::ms(us / 1e3);
    Ok(format!(
        "The same server's floor: a bare PING's round trip is {} at p50 back to back and {} (p99 {}) \
         after {hold} ms asleep, as a worker's call comes after its job's hold.",
        ms(busy.p50),
        ms(idle.p50),
        ms(idle.p99)
    ))
}

/// A queue of `queue` under `p`, no cap, no limit, no lending; its takes
/// leased for a minute, as a lab's are (for a lease's length).
fn setup(con: &mut Connection, p: &str, queue: &str) -> Result<()> {
    cmd("FCALL")
        .arg("noisylab_setup")
        .arg(0)
        .arg(p)
        .arg(queue)
        .arg(-1)
        .arg(-1)
        .arg(-1)
        .query::<i64>(con)?;
    cmd("FCALL")
        .arg("noisylab_set")
        .arg(0)
        .arg(p)
        .arg("lease")
        .arg(60_000_000)
        .query::<i64>(con)?;
    Ok(())
}

/// A submit of job `id` of `tenant` (vtc's at cost 1, as the coordinator
/// sends it).
fn submit(p: &str, id: u32, tenant: u32, queue: &str) -> redis::Cmd {
    let mut c = cmd("FCALL");
    c.arg("noisylab_submit").arg(0).arg(p).arg(id).arg(tenant);
    if queue == "vtc" {
        c.arg("1");
    }
    c
}

/// Take and finish jobs until none is left or `most` calls were made; the
/// calls made.
fn drain(con: &mut Connection, p: &str, most: u32) -> Result<u32> {
    let mut next = worker::take(con, p, false)?;
    let mut calls = 1;
    while let Some(payload) = next {
        if calls >= most {
            break;
        }
        let job = worker::parse(&payload)?;
        next = worker::finish(con, p, job)?;
        calls += 1;
    }
    Ok(calls)
}

fn finished(con: &mut Connection, p: &str) -> Result<u64> {
    let done: Option<u64> = cmd("GET").arg(format!("{p}done")).query(con)?;
    Ok(done.unwrap_or(0))
}

/// `THREADS` threads, each with a connection of its own, running `work`
/// (given its index) at once; the seconds from the first start to the last
/// end.
fn parallel(
    client: &Client,
    work: impl Fn(&mut Connection, u32) -> Result<()> + Sync,
) -> Result<f64> {
    let cons: Vec<Connection> = (0..THREADS)
        .map(|_| client.get_connection())
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = cons
            .into_iter()
            .zip(0..)
            .map(|(mut con, k)| {
                let work = &work;
                s.spawn(move || work(&mut con, k))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a thread panicked"))?)
    })?;
    Ok(started.elapsed().as_secs_f64())
}

/// `redis-benchmark`'s LPUSH and RPOP rates with `THREADS` clients, over
/// `requests` of each.
fn redis_benchmark(url: &str, requests: u32) -> Result<(f64, f64)> {
    let port = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .context("a server URL without a port")?;
    let out = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", port, "-c", &THREADS.to_string()])
        .args(["-n", &requests.to_string(), "-t", "lpush,rpop", "--csv"])
        .output()
        .context("cannot run redis-benchmark (Debian: it comes with redis-tools)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = |test: &str| -> Result<f64> {
        text.lines()
            .find_map(|l| {
                let mut cols = l.split(',').map(|c| c.trim_matches('"'));
                (cols.next() == Some(test)).then(|| cols.next()?.parse().ok())?
            })
            .with_context(|| format!("no {test} rate in redis-benchmark's output: {text}"))
    };
    Ok((rate("LPUSH")?, rate("RPOP")?))
}

/// One scale state: `tenants` holding `each` queued jobs apiece, filled in
/// pipelined slices; then `timed` finish-and-take calls, each timed by the
/// server.
fn scale(con: &mut Connection, queue: &str, tenants: u32, each: u32, timed: u32) -> Result<()> {
    let p = format!("sc:{queue}:");
    let jobs = tenants * each;
    setup(con, &p, queue)?;
    let before = used_memory(con)?;
    let filled = Instant::now();
    for slice in (0..jobs).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for &id in slice {
            pipe.add_command(submit(&p, id, id % tenants, queue));
        }
        pipe.query::<()>(con)?;
    }
    let fill_s = filled.elapsed().as_secs_f64();
    let log: Option<u64> = cmd("MEMORY")
        .arg("USAGE")
        .arg(format!("{p}log"))
        .arg("SAMPLES")
        .arg(0)
        .query(con)?;
    let per_job = (used_memory(con)? - before - log.unwrap_or(0) as f64) / f64::from(jobs);
    cmd("CONFIG").arg("RESETSTAT").query::<()>(con)?;
    let calls = drain(con, &p, timed)?;
    let info: String = cmd("INFO").arg("all").query(con)?;
    let stat = |field: &str, key: &str| -> Result<f64> {
        rb::info_field(&info, field)
            .and_then(|v| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            })
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {field} {key} in INFO"))
    };
    let counted = stat("cmdstat_fcall", "calls")?;
    if counted != f64::from(calls) {
        bail!("{queue}: the server counted {counted} of {calls} calls");
    }
    let pct = |q: &str| stat("latency_percentiles_usec_fcall", q);
    println!(
        "  {queue:<4} {tenants:>7} tenants, {jobs:>9} queued: server µs p50 {} p99 {} p99.9 {} mean {:.1}; {per_job:.0} B a queued job; filled at {:.0} jobs/s",
        pct("p50")?,
        pct("p99")?,
        pct("p99.9")?,
        stat("cmdstat_fcall", "usec_per_call")?,
        f64::from(jobs) / fill_s
    );
    cmd("FLUSHALL").query::<()>(con)?;
    Ok(())
}

fn used_memory(con: &mut Connection) -> Result<f64> {
    let info: String = cmd("INFO").arg("memory").query(con)?;
    rb::info_field(&info, "used_memory")
        .and_then(|v| v.parse().ok())
        .context("no used_memory in INFO")
}

/// Seconds for `jobs` jobs of `queue` (new, under its own prefix) to be
/// submitted by [`THREADS`] threads, one call each, and then to be taken
/// and finished by as many worker threads; the server flushed after.
fn through(client: &Client, con: &mut Connection, queue: &str, jobs: u32) -> Result<(f64, f64)> {
    let p = format!("tp:{queue}:");
    setup(con, &p, queue)?;
    let submit_s = parallel(client, |con, k| {
        for id in (k..jobs).step_by(THREADS as usize) {
            let (ok, _): (i64, i64) = submit(&p, id, id % TENANTS, queue).query(con)?;
            if ok != 1 {
                bail!("job {id} refused");
            }
        }
        Ok(())
    })?;
    let take_s = parallel(client, |con, _| drain(con, &p, u32::MAX).map(|_| ()))?;
    let done = finished(con, &p)?;
    if done != u64::from(jobs) {
        bail!("{queue}: {done} of {jobs} jobs finished");
    }
    cmd("FLUSHALL").query::<()>(con)?;
    Ok((submit_s, take_s))
}

/// The fair queue's pickup on an idle pool, then its drain and fifo's
/// beside BullMQ's in rounds ([`peers::Rounds`]: our submits one call
/// each, its `addBulk`), on the same server (skipped in one line without
/// Node.js or its packages), the medians as ratios.
fn beside_bullmq(
    url: &str,
    client: &Client,
    con: &mut Connection,
    size: &Size,
    setting: &str,
    floor: &str,
) -> Result<()> {
    let (p50, p99) = pickup(client, con, size.pickups)?;
    println!(
        "\nPickup on an idle pool ({THREADS} workers blocked on the wake list, {} jobs 10 ms apart, \
         submit to take's reply): fair p50 {p50:.2} ms, p99 {p99:.2} ms",
        size.pickups
    );
    cmd("FLUSHALL").query::<()>(con)?;
    if let Some(why) = peers::missing() {
        println!("  BullMQ beside it: skipped: {why}");
        return Ok(());
    }
    let peer_jobs = size.jobs.min(20_000);
    let n = f64::from(size.jobs);
    let rounds = peers::Rounds::run(
        "bullmq",
        url,
        (peer_jobs, size.pickups, size.rounds),
        &["fair", "fifo"],
        |q| {
            let (submit_s, take_s) = through(client, con, q, size.jobs)?;
            Ok((n / submit_s, n / take_s))
        },
    )?;
    let b = rounds.peer_figures()?;
    let ours = rounds.ours_figures("noisylab fair (Redis functions)", (p50, p99));
    peers::print_beside(&ours, &b, "the same server", "addBulk");
    if size.report {
        let setting = format!(
            "{setting}; noisylab: {} jobs submitted by {THREADS} threads one call each, then drained by \
             {THREADS} worker threads, every take leased for a minute as a lab's are; {}: {peer_jobs} \
             jobs in one addBulk, then drained by one Worker at concurrency {THREADS}, its defaults",
            size.jobs, b.peer,
        );
        let notes = format!("{}\n\n{floor}", rounds.sentence());
        let path = peers::write_table("redis", &setting, &ours, &b, &notes)?;
        println!("  written to {}", path.display());
    }
    // BullMQ's keys out, before the scale states.
    cmd("FLUSHALL").query::<()>(con)?;
    Ok(())
}

/// Submit to start on an idle pool: `THREADS` workers that take, finish and
/// block on the wake list as the lab's do; `n` jobs of the fair queue
/// submitted 10 ms apart, each timed from just before its submit to its
/// take's reply: (p50, p99) in ms.
fn pickup(client: &Client, con: &mut Connection, n: u32) -> Result<(f64, f64)> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    let p = "pk:fair:";
    setup(con, p, "fair")?;
    let started = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let mut sent = Vec::with_capacity(n as usize);
    let cons: Vec<Connection> = (0..THREADS)
        .map(|_| client.get_connection())
        .collect::<Result<_, _>>()?;
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = cons
            .into_iter()
            .map(|mut w| {
                let (started, stop) = (&started, &stop);
                s.spawn(move || -> Result<()> {
                    let mut woken = false;
                    loop {
                        let mut next = worker::take(&mut w, p, woken)?;
                        while let Some(payload) = next {
                            let job = worker::parse(&payload)?;
                            started.lock().unwrap().push((job.id, Instant::now()));
                            next = worker::finish(&mut w, p, job)?;
                        }
                        let _: Vec<String> =
                            cmd("BLPOP").arg(format!("{p}wake")).arg(0).query(&mut w)?;
                        if stop.load(Ordering::SeqCst) {
                            return Ok(());
                        }
                        woken = true;
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(200));
        for id in 0..n {
            sent.push(Instant::now());
            let (ok, _): (i64, i64) = submit(p, id, id % TENANTS, "fair").query(con)?;
            if ok != 1 {
                bail!("job {id} refused");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while started.lock().unwrap().len() < n as usize && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
        for _ in 0..THREADS {
            cmd("RPUSH")
                .arg(format!("{p}wake"))
                .arg("stop")
                .query::<i64>(con)?;
        }
        workers
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?)
    })?;
    peers::waits_ms(&sent, &started.into_inner().unwrap())
}
