//! The lab on a real Redis server: the queue disciplines run inside the
//! server as one function library ([`LIBRARY`], `noisylab.lua`), the workers
//! in separate `noisylab worker` processes ([`worker`]), and every instant
//! is the server's (`TIME` inside the functions), so waits are measured on
//! one clock wherever the workers run.
//!
//! This file is the coordinator. For each run it gives the queue a key
//! prefix of its own, hands the run to every worker, submits the arrival
//! plan at its planned instants (jobs due at one instant pipelined in one
//! round trip), waits until every accepted job has finished, and rebuilds
//! the run's records from the server's log of stamps.

pub mod server;
pub mod worker;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use redis::{Client, Connection, cmd};

use super::{Backend, RunError, RunInput, RunRecord};
use crate::engine::clock::sleep_until_blocking;
use crate::engine::traffic::Refusal;
use crate::engine::{Fate, JobRecord, NEVER, Nanos, stats_from_records};
use crate::results::{BackendFacts, QueueFigures};
use crate::scenario::Queue;
use crate::stats::{decode_histogram, new_histogram, percentiles, record};
use server::OwnedServer;

/// The function library, as `noisylab scripts redis` prints it.
pub const LIBRARY: &str = include_str!("noisylab.lua");

/// Most workers one process runs by default.
pub const WORKERS_PER_PROCESS: u32 = 5;
/// How early the submitter's OS sleep ends, to spin to an arrival's instant.
const SUBMIT_MARGIN: Duration = Duration::from_micros(500);
/// How long workers started here may take to join, and how long workers
/// started elsewhere (`--processes 0`) are waited for.
const JOIN_OWN: Duration = Duration::from_secs(15);
const JOIN_ELSEWHERE: Duration = Duration::from_secs(120);

/// Which server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Start one of the lab's own (`--backend redis`).
    Own,
    /// Use this one (`--backend redis://HOST:PORT[/DB]`).
    Url(String),
}

/// A lab on Redis, as the command line asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisPlan {
    pub target: Target,
    /// Worker processes to start (`None`: enough that none runs more than
    /// [`WORKERS_PER_PROCESS`] workers, at least 2; 0: workers join from
    /// elsewhere).
    pub processes: Option<u32>,
    /// The `noisylab` binary the worker processes run (`None`: this one;
    /// tests give the binary Cargo built).
    pub worker_exe: Option<std::path::PathBuf>,
}

/// The functions' name for a discipline.
pub fn queue_name(queue: Queue) -> &'static str {
    match queue {
        Queue::Fifo => "fifo",
        Queue::Fair => "fair",
        Queue::Vtc => "vtc",
    }
}

/// The coordinator of a lab on Redis, and the server and worker processes
/// it started (stopped when dropped).
pub struct RedisBackend {
    con: Connection,
    url: String,
    /// The lab's id, and its key prefix `noisylab:<id>:`.
    id: String,
    lab: String,
    workers: u32,
    processes: u32,
    children: Vec<Child>,
    version: String,
    runs: u32,
    worker_exe: Option<std::path::PathBuf>,
    /// Last, so it stops after the coordinator has cleaned up.
    server: Option<OwnedServer>,
}

impl RedisBackend {
    /// Start (or reach) the server, load the functions, start the worker
    /// processes for a pool of `workers`, and wait until they have joined.
    pub fn start(plan: &RedisPlan, workers: u32) -> Result<RedisBackend> {
        let server = match &plan.target {
            Target::Own => Some(OwnedServer::start()?),
            Target::Url(_) => None,
        };
        let url = match (&server, &plan.target) {
            (Some(s), _) => s.url.clone(),
            (None, Target::Url(u)) => u.clone(),
            (None, Target::Own) => unreachable!("an own server was started"),
        };
        let mut con = connect(&url)?;
        let version = server_version(&mut con)?;
        cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(LIBRARY)
            .query::<String>(&mut con)
            .context("cannot load noisylab's functions into the server")?;
        let id = lab_id();
        let lab = format!("noisylab:{id}:");
        let taken: i64 = cmd("EXISTS").arg(format!("{lab}joined")).query(&mut con)?;
        if taken > 0 {
            bail!("the key prefix {lab} is already in use on {url}: another lab runs there");
        }
        let processes = plan
            .processes
            .unwrap_or_else(|| workers.div_ceil(WORKERS_PER_PROCESS).max(2).min(workers));
        let mut backend = RedisBackend {
            con,
            url,
            id,
            lab,
            workers,
            processes,
            children: Vec::new(),
            version,
            runs: 0,
            worker_exe: plan.worker_exe.clone(),
            server,
        };
        backend.spawn_workers()?;
        backend.wait_joined()?;
        Ok(backend)
    }

    /// `processes` worker processes sharing the pool's workers evenly.
    fn spawn_workers(&mut self) -> Result<()> {
        let exe = match &self.worker_exe {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().context("cannot find noisylab's own binary")?,
        };
        for k in 0..self.processes {
            let share =
                self.workers / self.processes + u32::from(k < self.workers % self.processes);
            let mut cmd = Command::new(&exe);
            cmd.args(["worker", "--backend", &self.url, "--run", &self.id])
                .args(["--workers", &share.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            server::die_with_parent(&mut cmd);
            self.children
                .push(cmd.spawn().context("cannot start a worker process")?);
        }
        Ok(())
    }

    fn wait_joined(&mut self) -> Result<()> {
        let deadline = if self.processes == 0 {
            eprintln!(
                "noisylab: waiting for {} workers to join: run `noisylab worker --backend {} --run {} \
                 --workers N` where they should run",
                self.workers, self.url, self.id
            );
            JOIN_ELSEWHERE
        } else {
            JOIN_OWN
        };
        let key = format!("{}joined", self.lab);
        let (workers, lab) = (self.workers, self.lab.clone());
        self.wait_for(deadline, |con| {
            let joined: Option<u32> = cmd("GET").arg(&key).query(con)?;
            Ok(joined.unwrap_or(0) >= workers)
        })
        .map_err(|e| anyhow!("{e:#} (waiting for {workers} workers to join lab {lab})"))
    }

    /// Until `done`, checking the worker processes and the deadline.
    fn wait_for(
        &mut self,
        deadline: Duration,
        mut done: impl FnMut(&mut Connection) -> Result<bool>,
    ) -> Result<()> {
        let until = Instant::now() + deadline;
        loop {
            if done(&mut self.con)? {
                return Ok(());
            }
            self.check_children()?;
            if Instant::now() > until {
                bail!("gave up after {} s", deadline.as_secs());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// An error naming the first worker process that has exited.
    fn check_children(&mut self) -> Result<()> {
        let total = self.children.len();
        for (k, child) in self.children.iter_mut().enumerate() {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "worker process {} of {total} (pid {}) exited ({status}): the run cannot finish",
                    k + 1,
                    child.id()
                );
            }
        }
        Ok(())
    }

    /// One run under the key prefix `p`.
    fn run_on(
        &mut self,
        p: &str,
        input: RunInput<'_>,
        stop: &AtomicBool,
    ) -> Result<RunRecord, RunError> {
        let s = input.strategy;
        let opt = |v: Option<u32>| v.map_or(-1, i64::from);
        let mut setup = cmd("FCALL");
        setup
            .arg("noisylab_setup")
            .arg(0)
            .arg(p)
            .arg(queue_name(s.queue))
            .arg(opt(s.cap))
            .arg(opt(s.limit))
            .arg(opt(s.reserve));
        if s.queue == Queue::Vtc {
            let weights = input.scenario.population().queue_weights(s);
            for (t, w) in weights.iter().enumerate().filter(|(_, w)| **w != 1.0) {
                setup.arg(t).arg(w.to_string());
            }
        }
        setup
            .query::<i64>(&mut self.con)
            .map_err(|e| failed(e.into()))?;
        // Each job's hold, for the workers to read once.
        let durations: Vec<String> = input.plan.iter().map(|j| j.duration.to_string()).collect();
        cmd("SET")
            .arg(format!("{p}durations"))
            .arg(durations.join(","))
            .query::<()>(&mut self.con)
            .map_err(|e| failed(e.into()))?;
        self.start_run(p).map_err(failed)?;
        let before = ServerStats::read(&mut self.con).map_err(failed)?;
        let t0_us = server_time_us(&mut self.con).map_err(failed)?;
        // vtc's cost of each job, in Rust's shortest round-trip digits (the
        // server reads back the cost the in-process scheduler charges),
        // made before the first arrival rather than on its way.
        let costs: Option<Vec<String>> = (s.queue == Queue::Vtc).then(|| {
            let cost = |j: &JobRecord| s.job_cost(j.duration, j.tokens_in, j.tokens_out);
            input.plan.iter().map(|j| cost(j).to_string()).collect()
        });
        let origin = Instant::now();
        let submitted = self.submit_all(p, &input, costs.as_deref(), origin, stop)?;
        self.wait_end(p, &input, submitted.accepted, stop)?;
        let after = ServerStats::read(&mut self.con).map_err(failed)?;
        let (take_rtt, hold_late) = self.end_run(p).map_err(failed)?;
        let log: Vec<String> = cmd("LRANGE")
            .arg(format!("{p}log"))
            .arg(0)
            .arg(-1)
            .query(&mut self.con)
            .map_err(|e| failed(e.into()))?;
        let n = input.plan.len() as f64;
        let queue = QueueFigures {
            take_rtt_us: percentiles(&take_rtt, 1e3),
            hold_overshoot_us: percentiles(&hold_late, 1e3),
            submit_rtt_us: percentiles(&submitted.rtt, 1e3),
            server_us_per_call: after.per_call_us(&before),
            server_cpu_s: after.cpu_s - before.cpu_s,
            calls_per_job: after.round_trips.saturating_sub(before.round_trips) as f64 / n,
            bytes_per_job: (after.bytes - before.bytes) as f64 / n,
        };
        let (jobs, found_idle, end) = records(input.plan, &log, t0_us).map_err(failed)?;
        let mut stats = stats_from_records(input.pool, &jobs, &found_idle, end);
        stats.retry_after_s_max = submitted.retry_after_s_max;
        Ok(RunRecord {
            jobs,
            stats,
            queue: Some(queue),
        })
    }

    /// Hand the run to every worker and wait until all are idle on it.
    fn start_run(&mut self, p: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        for _ in 0..self.workers {
            pipe.cmd("RPUSH").arg(format!("{}runs", self.lab)).arg(p);
        }
        pipe.query::<()>(&mut self.con)?;
        let (key, workers) = (format!("{p}idle"), self.workers);
        self.wait_for(JOIN_OWN, |con| {
            let idle: Option<u32> = cmd("GET").arg(&key).query(con)?;
            Ok(idle.unwrap_or(0) >= workers)
        })
        .context("the workers did not start the run")
    }

    /// Every planned job at its instant (with vtc, its cost); those due at
    /// one instant in one pipelined round trip.
    fn submit_all(
        &mut self,
        p: &str,
        input: &RunInput<'_>,
        costs: Option<&[String]>,
        origin: Instant,
        stop: &AtomicBool,
    ) -> Result<Submitted, RunError> {
        let plan = &input.plan;
        let mut out = Submitted {
            accepted: 0,
            rtt: new_histogram(),
            retry_after_s_max: 0,
        };
        let mut i = 0;
        while i < plan.len() {
            let at = plan[i].planned;
            let k = i + plan[i..].iter().take_while(|j| j.planned == at).count();
            sleep_until_blocking(origin + Duration::from_nanos(at), SUBMIT_MARGIN);
            if stop.load(Ordering::Relaxed) {
                self.halt(p);
                return Err(RunError::Interrupted);
            }
            let mut pipe = redis::pipe();
            for (id, j) in plan.iter().enumerate().take(k).skip(i) {
                let call = pipe
                    .cmd("FCALL")
                    .arg("noisylab_submit")
                    .arg(0)
                    .arg(p)
                    .arg(id)
                    .arg(j.queue(input.pool.by_key));
                if let Some(costs) = costs {
                    call.arg(&costs[id]);
                }
            }
            let sent = Instant::now();
            let replies: Vec<(i64, i64)> =
                pipe.query(&mut self.con).map_err(|e| failed(e.into()))?;
            record(&mut out.rtt, sent.elapsed().as_nanos() as u64);
            for (j, (ok, x)) in plan[i..k].iter().zip(replies) {
                if ok == 1 {
                    out.accepted += 1;
                } else {
                    let hint = input.pool.retry_after_s(j.tenant, x as u32);
                    out.retry_after_s_max = out.retry_after_s_max.max(hint);
                }
            }
            i = k;
        }
        Ok(out)
    }

    /// Until every accepted job has finished; fails on a worker process that
    /// exits, or a run far past any length the plan allows.
    fn wait_end(
        &mut self,
        p: &str,
        input: &RunInput<'_>,
        accepted: u64,
        stop: &AtomicBool,
    ) -> Result<(), RunError> {
        cmd("FCALL")
            .arg("noisylab_expect")
            .arg(0)
            .arg(p)
            .arg(accepted)
            .query::<i64>(&mut self.con)
            .map_err(|e| failed(e.into()))?;
        // Every job one after another, after the last arrival: the longest a
        // run can take; then 30 s more.
        let work: Nanos = input.plan.iter().map(|j| j.duration).sum();
        let last = input.plan.last().map_or(0, |j| j.planned);
        let deadline = Instant::now() + Duration::from_nanos(last + work) + Duration::from_secs(30);
        loop {
            let end: Option<(String, String)> = cmd("BLPOP")
                .arg(format!("{p}end"))
                .arg(0.25)
                .query(&mut self.con)
                .map_err(|e| failed(e.into()))?;
            if end.is_some() {
                return Ok(());
            }
            if stop.load(Ordering::Relaxed) {
                self.halt(p);
                return Err(RunError::Interrupted);
            }
            if let Err(e) = self.check_children() {
                self.halt(p);
                return Err(failed(e));
            }
            if Instant::now() > deadline {
                self.halt(p);
                return Err(failed(anyhow!(
                    "the run on Redis did not finish in time: {accepted} jobs accepted, not all finished"
                )));
            }
        }
    }

    /// Stop every worker's run and merge their round-trip times and their
    /// timers' lateness.
    fn end_run(
        &mut self,
        p: &str,
    ) -> Result<(hdrhistogram::Histogram<u64>, hdrhistogram::Histogram<u64>)> {
        let mut pipe = redis::pipe();
        for _ in 0..self.workers {
            pipe.cmd("RPUSH").arg(format!("{p}wake")).arg(worker::STOP);
        }
        pipe.query::<()>(&mut self.con)?;
        let (key, workers) = (format!("{p}rtt"), self.workers);
        self.wait_for(JOIN_OWN, |con| {
            let n: u32 = cmd("LLEN").arg(&key).query(con)?;
            Ok(n >= workers)
        })
        .context("the workers did not end the run")?;
        let encoded: Vec<String> = cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query(&mut self.con)?;
        let (mut rtt, mut late) = (new_histogram(), new_histogram());
        for text in encoded {
            let (a, b) = text
                .split_once(' ')
                .ok_or_else(|| anyhow!("a worker's figures that are not two histograms"))?;
            rtt.add(decode_histogram(a)?)?;
            late.add(decode_histogram(b)?)?;
        }
        Ok((rtt, late))
    }

    /// No more jobs for anyone; the workers leave the run (best effort: the
    /// run is failing or interrupted already).
    fn halt(&mut self, p: &str) {
        let _ = cmd("FCALL")
            .arg("noisylab_halt")
            .arg(0)
            .arg(p)
            .query::<i64>(&mut self.con);
        let _ = self.end_run(p);
    }

    /// The server this lab started, if it started one: its process id.
    pub fn own_server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(OwnedServer::pid)
    }

    /// Delete every key under `prefix` (and the functions' copy of a
    /// queue's settings).
    fn delete(&mut self, prefix: &str) -> Result<()> {
        cmd("FCALL")
            .arg("noisylab_forget")
            .arg(0)
            .arg(prefix)
            .query::<i64>(&mut self.con)?;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(1000)
                .query(&mut self.con)?;
            if !keys.is_empty() {
                cmd("UNLINK").arg(&keys).query::<i64>(&mut self.con)?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

impl Backend for RedisBackend {
    fn run(&mut self, input: RunInput<'_>, stop: &AtomicBool) -> Result<RunRecord, RunError> {
        let p = format!("{}{}:", self.lab, self.runs);
        self.runs += 1;
        let out = self.run_on(&p, input, stop);
        let _ = self.delete(&p);
        out
    }

    fn facts(&self) -> Option<BackendFacts> {
        Some(BackendFacts {
            kind: "redis".to_string(),
            version: self.version.clone(),
            processes: self.processes,
        })
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        let mut pipe = redis::pipe();
        for _ in 0..self.workers {
            pipe.cmd("RPUSH")
                .arg(format!("{}runs", self.lab))
                .arg(worker::QUIT);
        }
        let _ = pipe.query::<()>(&mut self.con);
        let deadline = Instant::now() + Duration::from_secs(5);
        for child in &mut self.children {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let lab = self.lab.clone();
        let _ = self.delete(&lab);
    }
}

/// What `submit_all` learned.
struct Submitted {
    accepted: u64,
    rtt: hdrhistogram::Histogram<u64>,
    retry_after_s_max: u64,
}

fn failed(e: anyhow::Error) -> RunError {
    RunError::Failed(e.context("the Redis backend failed"))
}

/// A connection, or one line saying which server could not be reached.
pub fn connect(url: &str) -> Result<Connection> {
    let client = Client::open(url).with_context(|| format!("bad Redis URL {url:?}"))?;
    client
        .get_connection_with_timeout(Duration::from_secs(5))
        .with_context(|| format!("cannot reach the Redis server at {url}"))
}

/// The server's version; functions need Redis 7.
fn server_version(con: &mut Connection) -> Result<String> {
    let info: String = cmd("INFO").arg("server").query(con)?;
    let version = info_field(&info, "redis_version")
        .ok_or_else(|| anyhow!("the server's INFO gives no redis_version"))?
        .to_string();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 7 {
        bail!("the Redis server is version {version}: noisylab's functions need Redis 7 or later");
    }
    Ok(version)
}

/// A field of an `INFO` reply.
pub fn info_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// The server's clock, in microseconds since the epoch.
fn server_time_us(con: &mut Connection) -> Result<u64> {
    let (s, us): (String, String) = cmd("TIME").query(con)?;
    Ok(s.parse::<u64>()? * 1_000_000 + us.parse::<u64>()?)
}

/// A fresh id for a lab's keys: this process and the clock, in hex.
fn lab_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos & 0xff_ffff_ffff)
}

/// The server's counters, from one INFO.
struct ServerStats {
    fcall_calls: u64,
    fcall_usec: u64,
    /// Clients' calls: functions, blocking pops, pushes (the commands the
    /// functions run inside count apart, under their own names).
    round_trips: u64,
    cpu_s: f64,
    bytes: u64,
}

impl ServerStats {
    fn read(con: &mut Connection) -> Result<ServerStats> {
        let info: String = cmd("INFO").arg("all").query(con)?;
        let num = |key: &str| info_field(&info, key).and_then(|v| v.parse::<f64>().ok());
        let stat = |command: &str, name: &str| {
            info_field(&info, &format!("cmdstat_{command}"))
                .unwrap_or("")
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(ServerStats {
            fcall_calls: stat("fcall", "calls"),
            fcall_usec: stat("fcall", "usec"),
            round_trips: stat("fcall", "calls") + stat("blpop", "calls"),
            cpu_s: num("used_cpu_sys").unwrap_or(0.0) + num("used_cpu_user").unwrap_or(0.0),
            bytes: (num("total_net_input_bytes").unwrap_or(0.0)
                + num("total_net_output_bytes").unwrap_or(0.0)) as u64,
        })
    }

    /// Server microseconds per function call since `before`.
    fn per_call_us(&self, before: &ServerStats) -> f64 {
        let calls = self.fcall_calls.saturating_sub(before.fcall_calls);
        if calls == 0 {
            return 0.0;
        }
        self.fcall_usec.saturating_sub(before.fcall_usec) as f64 / calls as f64
    }
}

/// The run's records from the plan and the server's log ("kind job sec
/// usec [woke]"), with each job's found-idle mark and the run's end, in lab
/// time from `t0_us` on the server's clock.
fn records(
    mut jobs: Vec<JobRecord>,
    log: &[String],
    t0_us: u64,
) -> Result<(Vec<JobRecord>, Vec<bool>, Nanos)> {
    for (i, j) in jobs.iter_mut().enumerate() {
        j.origin = i as u32;
    }
    let mut found_idle = vec![false; jobs.len()];
    let mut end: Nanos = 0;
    for line in log {
        let mut it = line.split(' ');
        let (Some(kind), Some(job), Some(sec), Some(usec)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            bail!("a log line that is not \"kind job sec usec\": {line:?}");
        };
        let job: usize = job.parse()?;
        let us = sec.parse::<u64>()? * 1_000_000 + usec.parse::<u64>()?;
        let at: Nanos = us.saturating_sub(t0_us) * 1_000;
        let j = jobs
            .get_mut(job)
            .ok_or_else(|| anyhow!("the log names job {job}, which was not planned"))?;
        end = end.max(at);
        match kind {
            "e" => {
                j.enqueued = at;
                found_idle[job] = it.next() == Some("1");
            }
            "s" => j.started = at,
            "f" => {
                j.finished = at;
                j.fate = Fate::Ran;
            }
            "r" => {
                j.enqueued = at;
                j.fate = Fate::Refused(Refusal::Limit);
            }
            _ => bail!("a log line of unknown kind: {line:?}"),
        }
    }
    if let Some(j) = jobs
        .iter()
        .find(|j| j.fate == Fate::Pending || j.enqueued == NEVER)
    {
        bail!("job {} has no end in the server's log: {j:?}", j.origin);
    }
    Ok((jobs, found_idle, end))
}
