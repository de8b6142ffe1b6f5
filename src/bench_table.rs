//! `make bench`, the queue on PostgreSQL: what the SQL functions cost on a
//! cluster of the bench's own (a temp folder, a free loopback port, fsync
//! on as in the lab).
//!
//! - The curve: jobs queued (1,000 to 1,000,000, one tenant holding 90 %
//!   of them, the rest one tenant a job or so: 100,000 tenants at a
//!   million) against the time of a take (`noisylab_pop`, its own
//!   transaction, timed by the client: the loopback round trip and the
//!   commit's flush included; each job then finished, untimed),
//!   for fifo, fair, fair with a cap of 4 and vtc; beside a window query
//!   over `PARTITION BY tenant` on the same table (the kind of fair take
//!   that sorts every queued job), timed a few times.
//! - Throughput with `job_ms = 0`: 20 client threads submit, one call
//!   each; then the same number of jobs added at once (one
//!   `noisylab_submit_many` call) and drained by 20 worker threads (a
//!   finish and the next take in one call), one call each, then again
//!   with their calls sent together as the lab's workers send theirs
//!   (`noisylab_steps`), for fifo and fair, every call a prepared
//!   statement as in the lab; beside `pgbench`'s simple-update
//!   rate (`-N`, 20 clients) and its tpcb-like rate at scale 1 (every
//!   transaction updating one row: the floor of one lock held through a
//!   commit) on the same cluster, in the same run.
//! - The floor under a worker's call: a bare `SELECT 1` and a one-row
//!   `UPDATE` with its commit flushed, back to back and after a job's hold
//!   asleep.
//! - Pickup on an idle pool; then graphile-worker beside the fair and
//!   fifo drains in three rounds, ours and the peer's back to back in each,
//!   taking turns to go first (a shared VM's speed drifts over a bench: a
//!   round's two sides see about the same machine), the medians and each
//!   round's ratio reported; then the fair drain and graphile-worker's
//!   again, in rounds, on a cluster with `fsync` off.
//!
//! Every take but the curve's is leased for a minute, as a lab's are.
//!
//! Without PostgreSQL's binaries it prints one line and exits 0.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use noisylab::backend::peers;
use noisylab::backend::postgres::server::{self, OwnedCluster};
use noisylab::backend::postgres::worker::Step;
use noisylab::backend::postgres::{self as pg};
use noisylab::stats::{JOB_HOLD, new_histogram, percentiles, record, time_calls};
use noisylab::units;
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

const THREADS: i32 = 20;

/// How much to measure: `cargo bench` passes `--bench`; `cargo test
/// --all-targets` (in `make test`) runs this file without it, as a check
/// that the bench still works, on a small share of the work.
struct Size {
    queued: &'static [i64],
    timed: u32,
    window_timed: u32,
    jobs: i64,
    pgbench_s: u32,
    /// Jobs of the burst timed entering.
    burst: i64,
    /// Jobs timed from submit to start on an idle pool.
    pickups: u32,
    /// Calls timed after a job's hold asleep.
    idle_calls: u32,
    /// Rounds of the drains beside graphile-worker's ([`peers::Rounds`]).
    rounds: usize,
    /// Whether to write the table beside the peer (reports/bench/).
    report: bool,
}

const FULL: Size = Size {
    queued: &[1_000, 25_000, 100_000, 1_000_000],
    timed: 2_000,
    window_timed: 5,
    jobs: 20_000,
    pgbench_s: 10,
    burst: 2_000,
    pickups: 200,
    idle_calls: 100,
    rounds: 3,
    report: true,
};
const CHECK: Size = Size {
    queued: &[100, 1_000],
    timed: 50,
    window_timed: 1,
    jobs: 200,
    pgbench_s: 1,
    burst: 200,
    pickups: 20,
    idle_calls: 2,
    rounds: 1,
    report: false,
};

fn main() {
    if server::binaries().is_none() {
        println!("bench table: skipped: {}", server::NOT_INSTALLED);
        return;
    }
    let size = if std::env::args().any(|a| a == "--bench") {
        &FULL
    } else {
        &CHECK
    };
    if let Err(e) = run(size) {
        eprintln!("bench table: {e:#}");
        std::process::exit(1);
    }
}

fn run(size: &Size) -> Result<()> {
    let cluster = OwnedCluster::start(server::Durability::FULL)?;
    let mut c = pg::connect(&cluster.url)?;
    pg::make_schema(&mut c, "bench")?;
    let version: String = c.query_one("SHOW server_version", &[])?.get(0);
    println!("PostgreSQL {version}, a cluster of the bench's own (fsync on), loopback");
    let floor = floor(&mut c, size)?;
    println!("\nA take's time (client-timed, one transaction), by jobs queued:");
    println!(
        "  {:>10} {:>8}  {:>22} {:>22} {:>22} {:>22}  {:>12}",
        "queued", "tenants", "fifo p50 / p99", "fair", "fair, cap 4", "vtc", "window query"
    );
    for &n in size.queued {
        let tenants = (n / 10).max(10);
        let mut line = format!("  {n:>10} {tenants:>8}");
        for (queue, cap) in [("fifo", -1), ("fair", -1), ("fair", 4), ("vtc", -1)] {
            fill(&mut c, queue, cap, n, tenants)?;
            // Each take timed, then its job finished (untimed).
            let mut last = None;
            let mut p = new_histogram();
            for _ in 0..u32::try_from(n / 2).unwrap_or(u32::MAX).min(size.timed) {
                if let Some(t) = last.take() {
                    c.execute("SELECT noisylab_done($1)", &[&t])?;
                }
                let t0 = Instant::now();
                let row = c.query_one("SELECT tenant FROM noisylab_pop(1)", &[])?;
                record(&mut p, t0.elapsed().as_nanos() as u64);
                let t: Option<i32> = row.get(0);
                last = Some(t.context("a take found nothing with jobs queued")?);
            }
            let p = percentiles(&p, 1e3);
            line += &format!(" {:>10.0} / {:>7.0} µs", p.p50, p.p99);
        }
        let w = time_calls(size.window_timed, Duration::ZERO, || {
            c.query_one(
                "SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY tenant ORDER BY id) AS rn \
                 FROM job WHERE state = 'q') r ORDER BY rn, id LIMIT 1",
                &[],
            )?;
            Ok(())
        })?;
        line += &format!("  {:>9.2} ms", w.p50 / 1e3);
        println!("{line}");
    }
    println!("\nThroughput, job_ms = 0, {THREADS} clients (jobs a second):");
    for queue in ["fifo", "fair"] {
        let r = throughput(&cluster.url, &mut c, queue, size.jobs)?;
        println!(
            "  {queue:<5} submit {:>8.0}   added at once {:>8.0}   take and finish: one call each \
             {:>6.0}, sent together {:>6.0} ({:.1} steps a call)",
            r.submit, r.add, r.drain, r.together.drain, r.together.steps_a_call
        );
    }
    let tps = pgbench(&cluster.url, size.pgbench_s, "-N")?;
    println!("  pgbench -N (simple update), {THREADS} clients: {tps:.0} transactions a second");
    let one_row = pgbench(&cluster.url, size.pgbench_s, "-btpcb-like")?;
    println!(
        "  pgbench -b tpcb-like at scale 1 (every transaction updates the one branch row, held \
         through its commit), {THREADS} clients: {one_row:.0} transactions a second"
    );
    let burst = burst(&mut c, size.burst)?;
    println!(
        "\nA burst of {} jobs of one tenant due at one instant, 4 workers idle (noisylab_submit_many, \
         queue limit 100 as the article lab's): {:.1} ms to enter",
        size.burst,
        burst * 1e3
    );
    let setting = format!(
        "PostgreSQL {version}, a cluster of the bench's own on loopback, fsync on, synchronous_commit on for both"
    );
    beside_graphile(&cluster.url, &mut c, size, &setting, &floor)?;
    drop(c);
    drop(cluster);
    without_fsync(size)
}

/// The fair drain again on a cluster of the bench's own with `fsync` off
/// (a lab's `[backend] fsync = false`), beside graphile-worker on the
/// same: what the write-ahead log's flush, paid inside the queue's lock,
/// costs the drain.
fn without_fsync(size: &Size) -> Result<()> {
    let cluster = OwnedCluster::start(server::Durability::NO_FSYNC)?;
    let mut c = pg::connect(&cluster.url)?;
    pg::make_schema(&mut c, "bench")?;
    println!(
        "\nWith fsync off (a crash of the machine may then lose jobs either queue \
         acknowledged), the fair drain, sent together:"
    );
    match peers::missing() {
        Some(why) => {
            let r = drain_together(&cluster.url, &mut c, "fair", size.jobs)?;
            println!(
                "  {:.0} jobs a second ({:.1} steps a call); graphile-worker beside it: skipped: {why}",
                r.drain, r.steps_a_call
            );
        }
        None => {
            beside_in_rounds(&cluster.url, &mut c, size, &["fair"], 1)?;
        }
    }
    Ok(())
}

/// The floor under a worker's call, printed: a bare `SELECT 1` and a
/// one-row `UPDATE` with its durable commit, back to back and after a
/// job's hold asleep (a worker's call after its job); the sentence the
/// report carries under its table.
fn floor(c: &mut Client, size: &Size) -> Result<String> {
    c.batch_execute("CREATE TABLE probe (n bigint NOT NULL); INSERT INTO probe VALUES (0)")?;
    let idle = JOB_HOLD.as_millis();
    println!(
        "  round trips, p50 / p99 µs, back to back ({}) and after {idle} ms asleep, as a worker's \
         call after a job's hold ({}):",
        size.timed, size.idle_calls
    );
    let ms = |us: f64| units::ms(us / 1e3);
    let mut after = Vec::new();
    for (what, sql) in [
        ("SELECT 1", "SELECT 1"),
        (
            "a one-row UPDATE with its commit flushed",
            "UPDATE probe SET n = n + 1",
        ),
    ] {
        let mut call = || -> Result<()> {
            c.execute(sql, &[])?;
            Ok(())
        };
        let busy = time_calls(size.timed, Duration::ZERO, &mut call)?;
        let idle_p = time_calls(size.idle_calls, JOB_HOLD, &mut call)?;
        println!(
            "    {what:<38} {:>7.0} / {:>7.0}   {:>7.0} / {:>7.0}",
            busy.p50, busy.p99, idle_p.p50, idle_p.p99
        );
        after.push(format!(
            "{what} takes {} at p50 back to back and {} (p99 {}) after {idle} ms asleep",
            ms(busy.p50),
            ms(idle_p.p50),
            ms(idle_p.p99)
        ));
    }
    c.batch_execute("DROP TABLE probe")?;
    Ok(format!(
        "The same cluster's floor, as a worker's call comes after its job's hold: {}.",
        after.join("; ")
    ))
}

/// Seconds for a burst of `n` jobs of one tenant, due at one instant, to
/// enter a fair queue with a limit of 100 and 4 idle workers: the calls
/// the coordinator makes (the first hands the 4 jobs out and returns).
fn burst(c: &mut Client, n: i64) -> Result<f64> {
    let none: (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
    c.execute(
        "SELECT noisylab_setup('fair', -1, 100, -1, 'burst_', $1, $2)",
        &[&none.0, &none.1],
    )?;
    for me in 1..=4 {
        c.query_one("SELECT job FROM noisylab_take($1, false)", &[&me])?;
    }
    let jobs: Vec<i64> = (0..n).collect();
    let tenants = vec![20i32; jobs.len()];
    let submit = c.prepare(pg::SUBMIT_MANY)?;
    let started = Instant::now();
    pg::submit_many(c, &submit, &jobs, &tenants, &vec![None; jobs.len()])?;
    let took = started.elapsed().as_secs_f64();
    let refused: i64 = c
        .query_one("SELECT count(*) FROM job WHERE state = 'x'", &[])?
        .get(0);
    if refused != (n - 104).max(0) {
        bail!("the burst: {refused} refused, not {}", (n - 104).max(0));
    }
    Ok(took)
}

/// The fair queue's pickup on an idle pool, then its drain and fifo's
/// beside graphile-worker's in rounds ([`beside_in_rounds`]; skipped in one
/// line without Node.js or its packages), the medians as ratios.
fn beside_graphile(
    url: &str,
    c: &mut Client,
    size: &Size,
    setting: &str,
    floor: &str,
) -> Result<()> {
    let (p50, p99) = pickup(url, c, size.pickups)?;
    println!(
        "\nPickup on an idle pool ({THREADS} workers on LISTEN, {} jobs 10 ms apart, submit to take's \
         reply): fair p50 {p50:.2} ms, p99 {p99:.2} ms",
        size.pickups
    );
    if let Some(why) = peers::missing() {
        println!("  graphile-worker beside it: skipped: {why}");
        return Ok(());
    }
    let queues = ["fair", "fifo"];
    let rounds = beside_in_rounds(url, c, size, &queues, size.pickups)?;
    let g = rounds.peer_figures()?;
    let ours = rounds.ours_figures("noisylab fair (SQL functions)", (p50, p99));
    peers::print_beside(&ours, &g, "the same cluster", "addJobs");
    if size.report {
        let setting = format!(
            "{setting}; noisylab: {} jobs in one noisylab_submit_many call, then drained by {THREADS} \
             worker threads of one process, their calls sent together as the lab's workers send \
             theirs (noisylab_steps, prepared), every take leased for a minute as a lab's are; {}: \
             {} jobs in one addJobs, then drained by one runner at concurrency {THREADS}, its \
             defaults",
            size.jobs, g.peer, size.jobs
        );
        let notes = format!("{}\n\n{floor}", rounds.sentence());
        let path = peers::write_table("postgres", &setting, &ours, &g, &notes)?;
        println!("  written to {}", path.display());
    }
    Ok(())
}

/// [`peers::Rounds`] of our drains of `queues`, their calls sent together,
/// beside graphile-worker's; the peer times its pickup (`pickups` jobs) in
/// the first round.
fn beside_in_rounds(
    url: &str,
    c: &mut Client,
    size: &Size,
    queues: &[&str],
    pickups: u32,
) -> Result<peers::Rounds> {
    let jobs = size.jobs;
    peers::Rounds::run(
        "graphile-worker",
        url,
        (jobs as u32, pickups, size.rounds),
        queues,
        |q| {
            let d = drain_together(url, c, q, jobs)?;
            Ok((d.add, d.drain))
        },
    )
}

/// Jobs through the pickup's workers before it times any, two a worker:
/// a connection's first woken take costs more than the ones after it (a
/// function's statements are planned on their first run in each
/// connection) and would land in the tail, where graphile-worker's pickup
/// runs on the runner its drain warmed.
const WARM: u32 = 2 * THREADS as u32;

/// Submit to start on an idle pool: `THREADS` workers that join, `LISTEN`
/// and take as the lab's do; [`WARM`] jobs untimed, then `n` jobs of the
/// fair queue submitted 10 ms apart, each timed from just before its
/// submit to its take's reply: (p50, p99) in ms.
fn pickup(url: &str, c: &mut Client, n: u32) -> Result<(f64, f64)> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    let none: (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
    c.execute(
        "SELECT noisylab_setup('fair', -1, -1, -1, 'pk_', $1, $2)",
        &[&none.0, &none.1],
    )?;
    c.execute("SELECT noisylab_lease(60000000)", &[])?;
    c.batch_execute("TRUNCATE worker")?;
    let started = Mutex::new(Vec::new());
    let steps = &pg::worker::Steps::new(pg::worker::LANES);
    let stop = AtomicBool::new(false);
    let ready = std::sync::Barrier::new(THREADS as usize + 1);
    let mut sent = Vec::with_capacity(n as usize);
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (started, stop, ready) = (&started, &stop, &ready);
                s.spawn(move || -> Result<()> {
                    let mut w = pg::connect(url)?;
                    w.batch_execute("SET search_path TO bench")?;
                    let me: i32 = w.query_one("SELECT noisylab_join()", &[])?.get(0);
                    w.batch_execute(&format!("LISTEN pk_{me}"))?;
                    w.query_one("SELECT noisylab_ready($1)", &[&me])?;
                    let statement = w.prepare(pg::worker::STEPS)?;
                    ready.wait();
                    let mut woken = false;
                    loop {
                        let take = Step {
                            me,
                            woken,
                            finish: None,
                        };
                        let mut next = send_step(steps, &mut w, &statement, take)?;
                        while let Some(job) = next {
                            started.lock().unwrap().push((job.id, Instant::now()));
                            let finish = Step {
                                me,
                                woken: false,
                                finish: Some(job),
                            };
                            next = send_step(steps, &mut w, &statement, finish)?;
                        }
                        w.notifications().blocking_iter().next()?;
                        if stop.load(Ordering::SeqCst) {
                            return Ok(());
                        }
                        woken = true;
                    }
                })
            })
            .collect();
        let submit = c.prepare("SELECT ok FROM noisylab_submit($1, $2, 1)")?;
        ready.wait();
        std::thread::sleep(Duration::from_millis(200));
        let all_started = |k: u32| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while started.lock().unwrap().len() < k as usize && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        for id in 0..WARM + n {
            if id == WARM {
                all_started(WARM);
            }
            sent.push(Instant::now());
            c.query_one(&submit, &[&i64::from(id), &((id % 21) as i32)])?;
            std::thread::sleep(Duration::from_millis(10));
        }
        all_started(WARM + n);
        stop.store(true, Ordering::SeqCst);
        c.batch_execute("SELECT pg_notify('pk_' || me, 'stop') FROM worker")?;
        workers
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?)
    })?;
    let timed: Vec<(u32, Instant)> = started
        .into_inner()
        .unwrap()
        .into_iter()
        .filter(|&(id, _)| id >= WARM)
        .map(|(id, at)| (id - WARM, at))
        .collect();
    peers::waits_ms(&sent[WARM as usize..], &timed)
}

/// A queue of `queue` (with `cap`, -1: none) holding `n` jobs of `tenants`
/// tenants, tenant 0 holding 90 %, loaded in bulk in the state the
/// functions would leave.
fn fill(c: &mut Client, queue: &str, cap: i32, n: i64, tenants: i64) -> Result<()> {
    let none: (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
    c.execute(
        "SELECT noisylab_setup($1, $2, -1, -1, 'bench_', $3, $4)",
        &[&queue, &cap, &none.0, &none.1],
    )?;
    c.execute(
        "INSERT INTO job (id, tenant, state, enqueued) SELECT g, \
           CASE WHEN g % 10 < 9 THEN 0 ELSE 1 + (g / 10) % ($2::bigint - 1) END, 'q', 0 \
         FROM generate_series(0, $1::bigint - 1) g",
        &[&n, &tenants],
    )?;
    // fifo with a cap: each tenant ready at its oldest job; fair: in line
    // (the ring, by oldest job); vtc: all ready, counters 0.
    c.execute(
        "INSERT INTO tenant (t, waiting, lane, ready, vready) \
         SELECT tenant, count(*), 1, \
           CASE WHEN $1 = 'fair' THEN row_number() OVER (ORDER BY min(id)) \
                WHEN $1 = 'fifo' AND $2 >= 0 THEN min(id) END, \
           $1 = 'vtc' \
         FROM job GROUP BY tenant",
        &[&queue, &cap],
    )?;
    c.execute(
        "UPDATE cfg SET queued = $1, runnable = (SELECT sum(least(waiting, cap)) FROM tenant)",
        &[&n],
    )?;
    c.batch_execute("ANALYZE job; ANALYZE tenant; CHECKPOINT")?;
    Ok(())
}

/// Rates (jobs a second) of `jobs` jobs of 21 tenants.
struct Rates {
    /// Submitted by 20 threads, one call each.
    submit: f64,
    /// Added at once: one `noisylab_submit_many` call.
    add: f64,
    /// Taken and finished by 20 worker threads, one call each, after the
    /// add.
    drain: f64,
    /// The same, the threads' calls sent together ([`drain_together`]).
    together: Drain,
}

/// A drain's rates: the jobs added at once, then taken and finished.
struct Drain {
    /// Jobs added a second, one `noisylab_submit_many` call.
    add: f64,
    /// Jobs taken and finished a second.
    drain: f64,
    /// The mean steps a call.
    steps_a_call: f64,
}

/// A new queue of `queue`, its takes leased for a minute, as a lab's are
/// (and as graphile-worker locks each job it takes until a timeout).
fn setup(c: &mut Client, queue: &str) -> Result<()> {
    let none: (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
    c.execute(
        "SELECT noisylab_setup($1, -1, -1, -1, 'bench_', $2, $3)",
        &[&queue, &none.0, &none.1],
    )?;
    c.execute("SELECT noisylab_lease(60000000)", &[])?;
    Ok(())
}

/// `jobs` jobs of 21 tenants added at once, one call, to a new queue of
/// `queue`: jobs a second.
fn add_at_once(c: &mut Client, queue: &str, jobs: i64) -> Result<f64> {
    setup(c, queue)?;
    let ids: Vec<i64> = (0..jobs).collect();
    let tenants: Vec<i32> = ids.iter().map(|j| (j % 21) as i32).collect();
    let many = c.prepare(pg::SUBMIT_MANY)?;
    let t0 = Instant::now();
    pg::submit_many(c, &many, &ids, &tenants, &vec![None; ids.len()])?;
    Ok(jobs as f64 / t0.elapsed().as_secs_f64())
}

/// The queue's [`Rates`]; every call a prepared statement, as the lab's
/// workers and coordinator make them.
fn throughput(url: &str, c: &mut Client, queue: &str, jobs: i64) -> Result<Rates> {
    setup(c, queue)?;
    // Numbered by the server, under its lock: submits from many clients.
    let submit = parallel(url, move |me, w| {
        let one = w.prepare("SELECT noisylab_submit(NULL, $1, 1)")?;
        let mut job = i64::from(me - 1);
        while job < jobs {
            w.execute(&one, &[&((job % 21) as i32)])?;
            job += i64::from(THREADS);
        }
        Ok(())
    })?;
    let add = add_at_once(c, queue, jobs)?;
    let drain = parallel(url, |me, w| {
        let finish = w.prepare("SELECT job, tenant, lease FROM noisylab_finish($1, $2, $3, $4)")?;
        let mut next = w.query_one(
            "SELECT job, tenant, lease FROM noisylab_take($1, false)",
            &[&me],
        )?;
        while let (Some(job), Some(t), lease) = (
            next.get::<_, Option<i64>>(0),
            next.get::<_, Option<i32>>(1),
            next.get::<_, Option<i64>>(2),
        ) {
            next = w.query_one(&finish, &[&me, &job, &t, &lease])?;
        }
        Ok(())
    })?;
    all_done(c, queue, jobs)?;
    Ok(Rates {
        submit: jobs as f64 / submit,
        add,
        drain: jobs as f64 / drain,
        together: drain_together(url, c, queue, jobs)?,
    })
}

/// `jobs` jobs of 21 tenants added at once to a new queue of `queue`,
/// then taken and finished by [`THREADS`] worker threads whose calls go
/// together as the lab's workers send theirs (`noisylab_steps`).
fn drain_together(url: &str, c: &mut Client, queue: &str, jobs: i64) -> Result<Drain> {
    let add = add_at_once(c, queue, jobs)?;
    let steps = pg::worker::Steps::new(pg::worker::LANES);
    let took = parallel(url, |me, w| {
        let statement = w.prepare(pg::worker::STEPS)?;
        let mut next = send_step(
            &steps,
            w,
            &statement,
            Step {
                me,
                woken: false,
                finish: None,
            },
        )?;
        while let Some(job) = next {
            let finish = Step {
                me,
                woken: false,
                finish: Some(job),
            };
            next = send_step(&steps, w, &statement, finish)?;
        }
        Ok(())
    })?;
    all_done(c, queue, jobs)?;
    let (calls, sends) = steps.counts();
    Ok(Drain {
        add,
        drain: jobs as f64 / took,
        steps_a_call: calls as f64 / sends.max(1) as f64,
    })
}

/// `step`'s next job, sent as the lab's workers send theirs: together with
/// the steps the process's other threads make meanwhile (`statement` is
/// [`pg::worker::STEPS`] prepared on `w`).
fn send_step(
    steps: &pg::worker::Steps,
    w: &mut Client,
    statement: &postgres::Statement,
    step: Step,
) -> Result<Option<noisylab::backend::worker::Job>> {
    steps.call(step, |calls| {
        let arrays = pg::worker::StepArrays::of(&calls);
        let rows = w.query(statement, &arrays.params())?;
        pg::worker::step_answers(&calls, &rows)
    })
}

/// Every one of the `jobs` jobs of the drain finished, or what is left.
fn all_done(c: &mut Client, queue: &str, jobs: i64) -> Result<()> {
    let done: i64 = c
        .query_one("SELECT count(*) FROM job WHERE state = 'f'", &[])?
        .get(0);
    if done != jobs {
        let left: Vec<String> = c
            .query(
                "SELECT id || ' ' || tenant || ' ' || state::text FROM job WHERE state <> 'f'",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let cfg: String = c.query_one("SELECT cfg::text FROM cfg", &[])?.get(0);
        bail!("{queue}: {done} of {jobs} jobs finished; left {left:?}; {cfg}");
    }
    Ok(())
}

/// Seconds for `THREADS` threads, each on its own connection, to run `work`.
fn parallel(url: &str, work: impl Fn(i32, &mut Client) -> Result<()> + Sync) -> Result<f64> {
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..=THREADS)
            .map(|me| {
                let work = &work;
                s.spawn(move || -> Result<()> {
                    let mut w = pg::connect(url)?;
                    w.batch_execute("SET search_path TO bench")?;
                    work(me, &mut w)
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a thread panicked"))?)
    })?;
    Ok(started.elapsed().as_secs_f64())
}

/// pgbench's transactions a second, 20 clients, of the built-in script
/// `script` picks (`-N`: simple update, rows at random; `-btpcb-like`:
/// where at scale 1 every transaction updates one row, as every call of
/// the queue takes its one lock).
fn pgbench(url: &str, seconds: u32, script: &str) -> Result<f64> {
    let bin = server::binaries().context("no PostgreSQL binaries")?;
    let exe = bin.join("pgbench");
    let init = std::process::Command::new(&exe)
        .args(["-i", "-s", "1", "-q", url])
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !init.status.success() {
        bail!(
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
    }
    let out = std::process::Command::new(&exe)
        .args([script, "-n", "-c", &THREADS.to_string(), "-j", "2"])
        .args(["-T", &seconds.to_string(), url])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("tps = ")?.split(' ').next()?.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {text}"))
}
