//! The lab on a real Redis server: the queue disciplines run inside the
//! server as one function library ([`LIBRARY`], `noisylab.lua`), the workers
//! in separate `noisylab worker` processes ([`worker`]), and every instant
//! is the server's (`TIME` inside the functions), so waits are measured on
//! one clock wherever the workers run.
//!
//! This file is the coordinator's side ([`RedisWire`], driven by
//! [`Coordinator`]): each run's queue under a key prefix of its own, the
//! jobs due at one instant pipelined in one round trip, the records rebuilt
//! from the server's log of stamps.

pub mod server;
pub mod worker;

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use redis::{Client, Connection, cmd};

use super::coordinator::{Coordinator, lab_id};
use super::wire::{Calls, Crew, Lifecycle, Meter, ServerCost, Setup, Stamp, Submit, queue_name};
use super::{ServerKind, ServerPlan, Target};
use crate::scenario::Queue;
use server::OwnedServer;

/// The function library, as `noisylab scripts redis` prints it.
pub const LIBRARY: &str = include_str!("noisylab.lua");

/// A lab on Redis: the coordinator over the Redis wire.
pub type RedisBackend = Coordinator<RedisWire>;

/// Start (or reach) the server, load the functions, start the worker
/// processes for a pool of `workers`, and wait until they have joined.
pub fn start(plan: &ServerPlan, workers: u32, slowed: &[u32]) -> Result<RedisBackend> {
    let wire = RedisWire::open(&plan.target, plan.persist)?;
    Coordinator::start(wire, workers, plan, slowed)
}

/// One lab's connection to its Redis server (and the server, if the lab
/// started it: last, so it stops after the lab has cleaned up).
pub struct RedisWire {
    con: Connection,
    url: String,
    /// The lab's id, and its key prefix `noisylab:<id>:`.
    id: String,
    lab: String,
    /// The run's prefix, `noisylab:<id>:<run>:`.
    p: String,
    version: String,
    /// The server's counters lost to restarts, added to what it counts now.
    carried: ServerStats,
    server: Option<OwnedServer>,
}

impl RedisWire {
    fn open(target: &Target, persist: bool) -> Result<RedisWire> {
        let server = match target {
            Target::Own => Some(OwnedServer::start(persist)?),
            Target::Url(_) => None,
        };
        let url = match (&server, target) {
            (Some(s), _) => s.url.clone(),
            (None, Target::Url(u)) => u.clone(),
            (None, Target::Own) => unreachable!("an own server was started"),
        };
        let mut con = connect(&url)?;
        let version = server_version(&mut con)?;
        load_functions(&mut con)?;
        let id = lab_id();
        let lab = format!("noisylab:{id}:");
        let taken: i64 = cmd("EXISTS").arg(format!("{lab}joined")).query(&mut con)?;
        if taken > 0 {
            bail!("the key prefix {lab} is already in use on {url}: another lab runs there");
        }
        Ok(RedisWire {
            con,
            url,
            id,
            p: lab.clone(),
            lab,
            version,
            carried: ServerStats::default(),
            server,
        })
    }

    /// The server's counters now, with those lost to restarts.
    fn stats(&mut self) -> Result<ServerStats> {
        Ok(ServerStats::read(&mut self.con)?.plus(&self.carried))
    }

    /// The server this lab started, if it started one: its process id.
    pub fn own_server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(OwnedServer::pid)
    }

    fn get(&mut self, key: &str) -> Result<u32> {
        let v: Option<u32> = cmd("GET").arg(key).query(&mut self.con)?;
        Ok(v.unwrap_or(0))
    }

    /// `n` copies of `token` onto the list `key`, in one round trip.
    fn push_n(&mut self, key: &str, token: &str, n: u32) -> Result<()> {
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.cmd("RPUSH").arg(key).arg(token);
        }
        Ok(pipe.query::<()>(&mut self.con)?)
    }

    /// Function `name` on the run's queue, with `args` after its prefix.
    fn fcall(&mut self, name: &str, args: &[&str]) -> Result<i64> {
        Ok(cmd("FCALL")
            .arg(name)
            .arg(0)
            .arg(&self.p)
            .arg(args)
            .query(&mut self.con)?)
    }

    /// Rewrite the append-only file (`BGREWRITEAOF`) and wait until it is
    /// done.
    fn rewrite_file(&mut self) -> Result<()> {
        cmd("BGREWRITEAOF").query::<String>(&mut self.con)?;
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = cmd("INFO").arg("persistence").query(&mut self.con)?;
            let busy = |key| info_field(&info, key) != Some("0");
            if !busy("aof_rewrite_in_progress") && !busy("aof_rewrite_scheduled") {
                return Ok(());
            }
            if std::time::Instant::now() > until {
                bail!("the server's append-only file was still being rewritten after 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
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

impl Calls for RedisWire {
    fn setup(&mut self, run: u32, setup: &Setup<'_>) -> Result<()> {
        self.p = format!("{}{run}:", self.lab);
        let s = setup.strategy;
        let opt = |v: Option<u32>| v.map_or(-1, i64::from);
        let mut call = cmd("FCALL");
        call.arg("noisylab_setup")
            .arg(0)
            .arg(&self.p)
            .arg(queue_name(s.queue))
            .arg(opt(s.cap))
            .arg(opt(s.limit))
            .arg(opt(s.reserve));
        if s.queue == Queue::Vtc {
            for (t, w) in setup.weights.iter().enumerate().filter(|(_, w)| **w != 1.0) {
                call.arg(t).arg(w.to_string());
            }
        }
        call.query::<i64>(&mut self.con)?;
        if let Some(us) = setup.lease_us {
            self.fcall("noisylab_set", &["lease", &us.to_string()])?;
        }
        if setup.watch {
            self.fcall("noisylab_set", &["watch", "1"])?;
        }
        if setup.keys {
            self.fcall("noisylab_set", &["keys", "1"])?;
        }
        let durations: Vec<String> = setup.durations.iter().map(u64::to_string).collect();
        cmd("SET")
            .arg(format!("{}durations", self.p))
            .arg(durations.join(","))
            .query::<()>(&mut self.con)?;
        Ok(())
    }

    fn now_us(&mut self) -> Result<u64> {
        let (s, us): (String, String) = cmd("TIME").query(&mut self.con)?;
        Ok(s.parse::<u64>()? * 1_000_000 + us.parse::<u64>()?)
    }

    fn submit(&mut self, batch: &[Submit<'_>]) -> Result<Vec<(bool, i64)>> {
        let mut pipe = redis::pipe();
        for j in batch {
            let call = pipe
                .cmd("FCALL")
                .arg("noisylab_submit")
                .arg(0)
                .arg(&self.p)
                .arg(j.job)
                .arg(j.queue);
            match (j.cost, j.key) {
                (Some(cost), key) => call.arg(cost).arg(key),
                // fair ignores a cost: any stands in before the key
                (None, Some(key)) => call.arg(1).arg(key),
                (None, None) => call,
            };
        }
        let replies: Vec<(i64, i64)> = pipe.query(&mut self.con)?;
        Ok(replies.into_iter().map(|(ok, x)| (ok == 1, x)).collect())
    }

    fn expect(&mut self, n: u64) -> Result<()> {
        cmd("FCALL")
            .arg("noisylab_expect")
            .arg(0)
            .arg(&self.p)
            .arg(n)
            .query::<i64>(&mut self.con)?;
        Ok(())
    }

    fn wait_end(&mut self, wait: Duration) -> Result<bool> {
        let end: Option<(String, String)> = cmd("BLPOP")
            .arg(format!("{}end", self.p))
            .arg(wait.as_secs_f64())
            .query(&mut self.con)?;
        Ok(end.is_some())
    }

    fn stamps(&mut self) -> Result<Vec<Stamp>> {
        let log: Vec<String> = cmd("LRANGE")
            .arg(format!("{}log", self.p))
            .arg(0)
            .arg(-1)
            .query(&mut self.con)?;
        log.iter().map(|line| stamp(line)).collect()
    }

    fn halt(&mut self) -> Result<()> {
        self.fcall("noisylab_halt", &[]).map(drop)
    }

    fn abandon(&mut self, jobs: &[(u32, bool)]) -> Result<Vec<bool>> {
        let mut pipe = redis::pipe();
        for &(job, cancel) in jobs {
            pipe.cmd("FCALL")
                .arg("noisylab_abandon")
                .arg(0)
                .arg(&self.p)
                .arg(job)
                .arg(u8::from(cancel));
        }
        let waiting: Vec<i64> = pipe.query(&mut self.con)?;
        Ok(waiting.into_iter().map(|w| w == 1).collect())
    }

    fn reap(&mut self) -> Result<()> {
        self.fcall("noisylab_reap", &[]).map(drop)
    }

    fn end_run(&mut self) -> Result<()> {
        let p = self.p.clone();
        self.delete(&p)?;
        if self.durability().is_some() {
            // The file rewritten from what is left, so the next run's
            // restart loads its own run's writes, not every run's before.
            self.rewrite_file()?;
        }
        Ok(())
    }
}

impl Crew for RedisWire {
    fn url(&self) -> &str {
        &self.url
    }

    fn lab_id(&self) -> &str {
        &self.id
    }

    fn joined(&mut self) -> Result<u32> {
        let key = format!("{}joined", self.lab);
        self.get(&key)
    }

    fn start_run(&mut self, workers: u32) -> Result<()> {
        let (key, p) = (format!("{}runs", self.lab), self.p.clone());
        self.push_n(&key, &p, workers)
    }

    fn idle(&mut self) -> Result<u32> {
        let key = format!("{}idle", self.p);
        self.get(&key)
    }

    fn stop_workers(&mut self, workers: u32) -> Result<()> {
        let key = format!("{}wake", self.p);
        self.push_n(&key, worker::STOP, workers)
    }

    fn left(&mut self) -> Result<u32> {
        Ok(cmd("LLEN")
            .arg(format!("{}rtt", self.p))
            .query(&mut self.con)?)
    }

    fn figures(&mut self) -> Result<Vec<String>> {
        Ok(cmd("LRANGE")
            .arg(format!("{}rtt", self.p))
            .arg(0)
            .arg(-1)
            .query(&mut self.con)?)
    }

    fn quit(&mut self, workers: u32) {
        let key = format!("{}runs", self.lab);
        let _ = self.push_n(&key, worker::QUIT, workers);
        let lab = self.lab.clone();
        let _ = self.delete(&lab);
    }
}

impl Lifecycle for RedisWire {
    fn kind(&self) -> ServerKind {
        ServerKind::Redis
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn drop_workers(&mut self) -> Result<u64> {
        // Every id the workers registered (a worker that connects again
        // registers anew), each dropped if it is still connected.
        let key = format!("{}clients", self.lab);
        let ids: Option<Vec<i64>> = cmd("LPOP").arg(&key).arg(100_000).query(&mut self.con)?;
        let mut pipe = redis::pipe();
        for id in ids.unwrap_or_default() {
            pipe.cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .arg("SKIPME")
                .arg("yes");
        }
        let killed: Vec<u64> = pipe.query(&mut self.con)?;
        Ok(killed.iter().sum())
    }

    fn restart(&mut self, down: Duration) -> Result<()> {
        let before = self.stats()?;
        let Some(server) = &mut self.server else {
            bail!(
                "restart_server restarts the server the lab started (--backend redis), not one given by URL"
            );
        };
        server.restart(down)?;
        self.con = connect(&self.url)?;
        // The file brought the functions back; loaded again all the same.
        load_functions(&mut self.con)?;
        self.carried = before;
        Ok(())
    }

    fn enqueued(&mut self) -> Result<u64> {
        // One "e" line for each submit the server accepted.
        let log: Vec<String> = cmd("LRANGE")
            .arg(format!("{}log", self.p))
            .arg(0)
            .arg(-1)
            .query(&mut self.con)?;
        Ok(log.iter().filter(|l| l.starts_with("e ")).count() as u64)
    }

    fn durability(&self) -> Option<String> {
        self.server
            .as_ref()
            .filter(|s| s.persists())
            .map(|_| "append-only file, fsync on every write".to_string())
    }

    fn promise(&self) -> &'static str {
        match &self.server {
            Some(s) if !s.persists() => server::NO_PROMISE,
            _ => server::PROMISE,
        }
    }
}

impl Meter for RedisWire {
    type Mark = ServerStats;

    fn mark(&mut self) -> Result<ServerStats> {
        self.stats()
    }

    fn cost_since(&mut self, before: ServerStats) -> Result<ServerCost> {
        let after = self.stats()?;
        Ok(ServerCost {
            us_per_call: Some(after.per_call_us(&before)),
            cpu_s: Some(after.cpu_s - before.cpu_s),
            calls: after.round_trips.saturating_sub(before.round_trips),
            bytes: Some(after.bytes.saturating_sub(before.bytes)),
            wal_bytes: None,
        })
    }

    fn renewals(&mut self) -> Result<u64> {
        let n: Option<u64> = cmd("GET")
            .arg(format!("{}renewed", self.p))
            .query(&mut self.con)?;
        Ok(n.unwrap_or(0))
    }
}

/// One line of the server's log: "kind job sec usec [woke]" (kinds in
/// `noisylab.lua`'s header).
fn stamp(line: &str) -> Result<Stamp> {
    let mut it = line.split(' ');
    let (Some(kind), Some(job), Some(sec), Some(usec)) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        bail!("a log line that is not \"kind job sec usec\": {line:?}");
    };
    let job: u32 = job.parse()?;
    let us = sec.parse::<u64>()? * 1_000_000 + usec.parse::<u64>()?;
    Ok(match kind {
        "e" => Stamp::Enqueued {
            job,
            us,
            woke: it.next() == Some("1"),
        },
        "s" => Stamp::Started { job, us },
        "f" => Stamp::Finished { job, us },
        "r" => Stamp::Refused { job, us },
        "l" => Stamp::Redelivered { job, us },
        "x" => Stamp::LateFinish { job, us },
        "a" => Stamp::Abandoned { job, us },
        _ => bail!("a log line of unknown kind: {line:?}"),
    })
}

/// noisylab's functions loaded into the server (replacing any older ones).
fn load_functions(con: &mut Connection) -> Result<()> {
    cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(LIBRARY)
        .query::<String>(con)
        .context("cannot load noisylab's functions into the server")?;
    Ok(())
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

/// The server's counters, from one INFO.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerStats {
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

    /// These counters and `other`'s together.
    fn plus(&self, other: &ServerStats) -> ServerStats {
        ServerStats {
            fcall_calls: self.fcall_calls + other.fcall_calls,
            fcall_usec: self.fcall_usec + other.fcall_usec,
            round_trips: self.round_trips + other.round_trips,
            cpu_s: self.cpu_s + other.cpu_s,
            bytes: self.bytes + other.bytes,
        }
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
