//! The lab on PostgreSQL: the queue disciplines as SQL functions over a job
//! table ([`SCHEMA`], `noisylab.sql`), the workers in separate `noisylab
//! worker` processes ([`worker`]) that wait on `LISTEN`, and every instant
//! the server's (`clock_timestamp()` inside the functions).
//!
//! A lab lives in a schema of its own, `noisylab_<id>` (refused if it is
//! there already, dropped at the end), on a cluster the lab makes and
//! starts ([`server`]) or on a database given by URL. This file is the
//! coordinator's side ([`PgWire`], driven by [`Coordinator`]): the jobs due
//! at one instant sent in one call and one transaction
//! (`noisylab_submit_many`, `submit.sql`); the records read back from the
//! job table's stamps.

pub mod server;
pub mod worker;

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Statement};

use super::coordinator::{Coordinator, lab_id};
use super::wire::{Calls, Crew, Lifecycle, Meter, ServerCost, Setup, Stamp, Submit, queue_name};
use super::{ServerKind, ServerPlan, Target};
use server::OwnedCluster;

/// The schema and its functions, as `noisylab scripts postgres` prints it:
/// the tables and the workers' calls, then the submits.
pub const SCHEMA: &str = concat!(
    include_str!("noisylab.sql"),
    include_str!("worker.sql"),
    include_str!("submit.sql")
);

/// A lab on PostgreSQL: the coordinator over the PostgreSQL wire.
pub type PgBackend = Coordinator<PgWire>;

/// Start (or reach) the server, make the lab's schema, start the worker
/// processes for a pool of `workers`, and wait until they have joined.
pub fn start(plan: &ServerPlan, workers: u32, slowed: &[u32]) -> Result<PgBackend> {
    let wire = PgWire::open(&plan.target, plan.durability, plan.unlogged)?;
    Coordinator::start(wire, workers, plan, slowed)
}

/// The schema of lab `id`.
pub fn schema_of(id: &str) -> String {
    format!("noisylab_{id}")
}

/// A connection, or one line saying which database could not be reached.
pub fn connect(url: &str) -> Result<Client> {
    let mut config: postgres::Config = url
        .parse()
        .with_context(|| format!("bad PostgreSQL URL {url:?}"))?;
    config.connect_timeout(Duration::from_secs(5));
    config.connect(NoTls).map_err(|e| {
        anyhow!(
            "cannot reach the PostgreSQL database at {url}: {}",
            one_line(&e)
        )
    })
}

/// An error's message in one line (the server's own, where it gave one).
pub fn one_line(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}

/// The submit of the jobs due at one instant.
pub const SUBMIT_MANY: &str = "SELECT ok, x FROM noisylab_submit_many($1, $2, $3)";

/// Jobs due at one instant (numbers, tenants, costs: `None` is 1) through
/// `noisylab_submit_many`, called again with the rest while a call returns
/// fewer rows than it was given (it handed jobs out, so that they start
/// first): (accepted, woke or the waiting it met) for each, in order.
/// `submit` is [`SUBMIT_MANY`], prepared on `client` (a call then costs one
/// round trip) or as text.
pub fn submit_many<S: postgres::ToStatement + ?Sized>(
    client: &mut Client,
    submit: &S,
    jobs: &[i64],
    tenants: &[i32],
    costs: &[Option<f64>],
) -> Result<Vec<(bool, i64)>> {
    let mut out = Vec::with_capacity(jobs.len());
    while out.len() < jobs.len() {
        let from = out.len();
        let rows = client
            .query(
                submit,
                &[&&jobs[from..], &&tenants[from..], &&costs[from..]],
            )
            .map_err(db)?;
        if rows.is_empty() || from + rows.len() > jobs.len() {
            bail!("{} replies to {} submits", rows.len(), jobs.len() - from);
        }
        out.extend(
            rows.iter()
                .map(|row| (row.get(0), i64::from(row.get::<_, i32>(1)))),
        );
    }
    Ok(out)
}

/// Make schema `schema` on `client` (refused if it exists) and load the
/// functions into it; the connection's `search_path` is left on it.
pub fn make_schema(client: &mut Client, schema: &str) -> Result<()> {
    let taken = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .map_err(db)?;
    if taken.is_some() {
        bail!("the schema {schema} already exists: another lab runs there");
    }
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema}; SET client_min_messages = warning;"
        ))
        .map_err(db)?;
    client
        .batch_execute(SCHEMA)
        .map_err(|e| anyhow!("cannot load noisylab's functions: {}", one_line(&e)))
}

fn db(e: postgres::Error) -> anyhow::Error {
    anyhow!("{}", one_line(&e))
}

/// One lab's connection to its database (and the cluster, if the lab made
/// it: last, so it stops after the lab has cleaned up).
pub struct PgWire {
    client: Client,
    url: String,
    id: String,
    schema: String,
    /// Workers hear on `channel || N`, the coordinator on `channel || "end"`.
    channel: String,
    version: String,
    /// Where `pg_stat_statements` is, if it is.
    statements: Option<String>,
    server: Option<OwnedCluster>,
    /// The highest worker number told this run's start (a replacement
    /// process's workers join with higher ones).
    told: i32,
    /// This run was handed to the workers (a later start is a
    /// replacement's).
    in_run: bool,
    /// Counters the server lost in its restarts (a crash resets its
    /// statement statistics; a new postmaster has its own CPU time).
    carried: PgMark,
    /// The run ended while the server restarted (its word to the
    /// coordinator was lost with the connection).
    ended: bool,
    /// The job table is unlogged: a crash empties it.
    unlogged: bool,
    /// [`SUBMIT_MANY`], prepared on `client`.
    submit: Statement,
}

/// Counters read before a run.
#[derive(Debug, Clone, Default)]
pub struct PgMark {
    calls: i64,
    ms: f64,
    lsn: String,
    cpu_s: Option<f64>,
}

impl PgWire {
    fn open(target: &Target, durability: server::Durability, unlogged: bool) -> Result<PgWire> {
        let server = match target {
            Target::Own => Some(OwnedCluster::start(durability)?),
            Target::Url(_) => None,
        };
        let url = match (&server, target) {
            (Some(s), _) => s.url.clone(),
            (None, Target::Url(u)) => u.clone(),
            (None, Target::Own) => unreachable!("a cluster was started"),
        };
        let mut client = connect(&url)?;
        let version = server_version(&mut client)?;
        if server.as_ref().is_some_and(|s| s.statements) {
            client
                .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .map_err(db)?;
        }
        let statements = client
            .query_opt(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace \
                 WHERE e.extname = 'pg_stat_statements'",
                &[],
            )
            .map_err(db)?
            .map(|row| row.get::<_, String>(0));
        let id = lab_id();
        let schema = schema_of(&id);
        make_schema(&mut client, &schema)?;
        if unlogged {
            client
                .batch_execute("ALTER TABLE job SET UNLOGGED")
                .map_err(db)?;
        }
        let channel = format!("{schema}_");
        client
            .batch_execute(&format!("LISTEN \"{channel}end\""))
            .map_err(db)?;
        let submit = client.prepare(SUBMIT_MANY).map_err(db)?;
        Ok(PgWire {
            submit,
            client,
            url,
            id,
            schema,
            channel,
            version,
            statements,
            server,
            told: 0,
            in_run: false,
            carried: PgMark::default(),
            ended: false,
            unlogged,
        })
    }

    /// The cluster this lab made, if it made one: its postmaster's pid.
    pub fn own_server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(OwnedCluster::pid)
    }

    fn one<T: for<'a> postgres::types::FromSql<'a>>(&mut self, sql: &str) -> Result<T> {
        Ok(self.client.query_one(sql, &[]).map_err(db)?.get(0))
    }

    /// `message` to every live worker numbered past `after` (a worker
    /// whose server process is gone is dead): the highest number told, and
    /// how many were.
    fn tell(&mut self, after: i32, message: &str) -> Result<(i32, i64)> {
        let row = self
            .client
            .query_one(
                "SELECT coalesce(max(me), $3), count(*) FROM (SELECT w.me, pg_notify($1 || w.me, $2) \
                 FROM worker w JOIN pg_stat_activity a ON a.pid = w.pid WHERE w.me > $3) told",
                &[&self.channel, &message, &after],
            )
            .map_err(db)?;
        Ok((row.get(0), row.get(1)))
    }

    /// Live workers numbered past `after`.
    fn live_after(&mut self, after: i32) -> Result<i64> {
        Ok(self
            .client
            .query_one(
                "SELECT count(*) FROM worker w JOIN pg_stat_activity a ON a.pid = w.pid WHERE w.me > $1",
                &[&after],
            )
            .map_err(db)?
            .get(0))
    }

    /// The counters as the server has them now (since its last start).
    fn raw_mark(&mut self) -> Result<PgMark> {
        let (calls, ms) = match &self.statements {
            Some(at) => {
                let row = self
                    .client
                    .query_one(
                        &format!(
                            "SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8 \
                             FROM {at}.pg_stat_statements WHERE query ~ 'noisylab_(take|finish|steps|submit)'"
                        ),
                        &[],
                    )
                    .map_err(db)?;
                (row.get(0), row.get(1))
            }
            None => (0, 0.0),
        };
        Ok(PgMark {
            calls,
            ms,
            lsn: self.one("SELECT pg_current_wal_insert_lsn()::text")?,
            cpu_s: self.own_server_pid().and_then(server::cpu_s),
        })
    }

    /// A new connection of the coordinator's, listening for the run's end
    /// again.
    fn reconnect(&mut self) -> Result<()> {
        let mut client = connect(&self.url)?;
        client
            .batch_execute(&format!(
                "SET search_path TO {}; LISTEN \"{}end\"",
                self.schema, self.channel
            ))
            .map_err(db)?;
        self.submit = client.prepare(SUBMIT_MANY).map_err(db)?;
        self.client = client;
        Ok(())
    }
}

impl Calls for PgWire {
    /// Never called: PostgreSQL's declaration leaves out clients that stop
    /// waiting, so a lab that needs them is refused before it starts.
    fn abandon(&mut self, _jobs: &[(u32, bool)]) -> Result<Vec<bool>> {
        bail!(
            "clients that stop waiting are not carried by PostgreSQL (as its declaration \
             in scenario/backends.rs says)"
        )
    }

    fn setup(&mut self, _run: u32, setup: &Setup<'_>) -> Result<()> {
        self.ended = false;
        let s = setup.strategy;
        let opt = |v: Option<u32>| v.map_or(-1, |v| v as i32);
        let durations: Vec<i64> = setup.durations.iter().map(|&d| d as i64).collect();
        self.client
            .execute(
                "SELECT noisylab_setup($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &queue_name(s.queue),
                    &opt(s.cap),
                    &opt(s.limit),
                    &opt(s.reserve),
                    &self.channel,
                    &setup.weights,
                    &durations,
                ],
            )
            .map_err(db)?;
        let lease = setup.lease_us.map(|us| us as i64);
        self.client
            .execute("SELECT noisylab_lease($1)", &[&lease])
            .map_err(db)?;
        self.in_run = false;
        Ok(())
    }

    fn now_us(&mut self) -> Result<u64> {
        let us: i64 = self.one("SELECT nl_now()")?;
        Ok(us as u64)
    }

    fn submit(&mut self, batch: &[Submit<'_>]) -> Result<Vec<(bool, i64)>> {
        // The jobs due at one instant in one call and one transaction: the
        // function hands the jobs that may start at once to idle workers
        // as they come and enters the rest set-based (submit.sql).
        let jobs: Vec<i64> = batch.iter().map(|j| i64::from(j.job)).collect();
        let tenants: Vec<i32> = batch.iter().map(|j| j.queue as i32).collect();
        let costs = batch
            .iter()
            .map(|j| j.cost.map(str::parse::<f64>).transpose())
            .collect::<Result<Vec<Option<f64>>, _>>()
            .context("a job's cost is not a number")?;
        submit_many(&mut self.client, &self.submit, &jobs, &tenants, &costs)
    }

    fn expect(&mut self, n: u64) -> Result<()> {
        self.client
            .execute("SELECT noisylab_expect($1)", &[&(n as i64)])
            .map_err(db)?;
        Ok(())
    }

    fn wait_end(&mut self, wait: Duration) -> Result<bool> {
        if std::mem::take(&mut self.ended) {
            return Ok(true);
        }
        let end = format!("{}end", self.channel);
        let mut heard = false;
        let mut notes = self.client.notifications();
        let mut it = notes.timeout_iter(wait);
        while let Some(n) = it.next().map_err(db)? {
            heard |= n.channel() == end;
            if heard {
                break;
            }
        }
        Ok(heard)
    }

    fn stamps(&mut self) -> Result<Vec<Stamp>> {
        let rows = self
            .client
            .query(
                "SELECT id, state::text, enqueued, started, finished, woke, redelivered, late FROM job",
                &[],
            )
            .map_err(db)?;
        let mut out = Vec::with_capacity(rows.len() * 3);
        for row in rows {
            let job = row.get::<_, i64>(0) as u32;
            let state: String = row.get(1);
            let us = |k: usize| row.get::<_, Option<i64>>(k).map(|v| v as u64);
            let enqueued = us(2).unwrap_or(0);
            if state == "x" {
                out.push(Stamp::Refused { job, us: enqueued });
                continue;
            }
            let woke = row.get(5);
            out.push(Stamp::Enqueued {
                job,
                us: enqueued,
                woke,
            });
            if let Some(us) = us(3) {
                out.push(Stamp::Started { job, us });
                // The times of a lease's end and a refused finish are not
                // kept: their counts are what the records need.
                let (again, late): (i32, i32) = (row.get(6), row.get(7));
                out.extend((0..again).map(|_| Stamp::Redelivered { job, us }));
                out.extend((0..late).map(|_| Stamp::LateFinish { job, us }));
            }
            if let Some(us) = us(4) {
                out.push(Stamp::Finished { job, us });
            }
        }
        Ok(out)
    }

    fn halt(&mut self) -> Result<()> {
        self.client
            .execute("SELECT noisylab_halt()", &[])
            .map_err(db)?;
        Ok(())
    }

    fn reap(&mut self) -> Result<()> {
        self.client
            .execute("SELECT noisylab_reap()", &[])
            .map_err(db)?;
        Ok(())
    }

    fn end_run(&mut self) -> Result<()> {
        Ok(())
    }
}

impl Crew for PgWire {
    fn url(&self) -> &str {
        &self.url
    }

    fn lab_id(&self) -> &str {
        &self.id
    }

    fn joined(&mut self) -> Result<u32> {
        let n: i64 =
            self.one("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM worker_ready")?;
        Ok(n as u32)
    }

    fn start_run(&mut self, workers: u32) -> Result<()> {
        if !self.in_run {
            // Every live worker, between runs.
            self.told = self.tell(0, worker::RUN)?.0;
            self.in_run = true;
            return Ok(());
        }
        // A replacement process's workers, once they listen.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.live_after(self.told)? < i64::from(workers) {
            if std::time::Instant::now() > deadline {
                bail!("{workers} replacement workers did not join within 10 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.told = self.tell(self.told, worker::RUN)?.0;
        Ok(())
    }

    fn idle(&mut self) -> Result<u32> {
        let n: i32 = self.one("SELECT idle FROM cfg")?;
        Ok(n as u32)
    }

    fn stop_workers(&mut self, _workers: u32) -> Result<()> {
        self.in_run = false;
        self.tell(0, worker::STOP).map(drop)
    }

    fn left(&mut self) -> Result<u32> {
        let n: i64 = self.one("SELECT count(*) FROM figures")?;
        Ok(n as u32)
    }

    fn figures(&mut self) -> Result<Vec<String>> {
        let rows = self
            .client
            .query("SELECT text FROM figures", &[])
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn quit(&mut self, _workers: u32) {
        let _ = self.tell(0, worker::QUIT);
        let _ = self
            .client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

impl Lifecycle for PgWire {
    fn kind(&self) -> ServerKind {
        ServerKind::Postgres
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn drop_workers(&mut self) -> Result<u64> {
        // Every live worker's server process ends; the workers connect
        // again (nobody else's connection is touched).
        let n: i64 = self.one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid)) \
             FROM worker w JOIN pg_stat_activity a ON a.pid = w.pid",
        )?;
        Ok(n as u64)
    }

    fn restart(&mut self, down: Duration) -> Result<()> {
        let before = self.mark()?;
        let Some(server) = &mut self.server else {
            bail!(
                "restart_server restarts the server the lab started (--backend postgres), not one given by URL"
            );
        };
        server.restart(down)?;
        self.reconnect()?;
        let now = self.raw_mark()?;
        self.carried = PgMark {
            calls: before.calls - now.calls,
            ms: before.ms - now.ms,
            lsn: String::new(),
            cpu_s: before.cpu_s.zip(now.cpu_s).map(|(b, n)| b - n),
        };
        // The last finish's word may have been lost with the connection.
        self.ended = self.one("SELECT coalesce(done >= expect, false) FROM cfg")?;
        Ok(())
    }

    fn enqueued(&mut self) -> Result<u64> {
        let n: i64 = self.one("SELECT noisylab_accepted()")?;
        Ok(n as u64)
    }

    fn durability(&self) -> Option<String> {
        self.server.as_ref().map(|s| {
            format!(
                "write-ahead log{}, fsync {}{}",
                if self.unlogged {
                    " (the job table unlogged)"
                } else {
                    ""
                },
                if s.fsync() { "on" } else { "off" },
                if s.synchronous_commit() {
                    ""
                } else {
                    ", synchronous_commit off"
                }
            )
        })
    }

    fn promise(&self) -> &'static str {
        if self.unlogged {
            server::NO_PROMISE
        } else {
            server::PROMISE
        }
    }
}

impl Meter for PgWire {
    type Mark = PgMark;

    fn mark(&mut self) -> Result<PgMark> {
        let now = self.raw_mark()?;
        let c = &self.carried;
        Ok(PgMark {
            calls: now.calls + c.calls,
            ms: now.ms + c.ms,
            lsn: now.lsn,
            cpu_s: now.cpu_s.map(|a| a + c.cpu_s.unwrap_or(0.0)),
        })
    }

    fn cost_since(&mut self, before: PgMark) -> Result<ServerCost> {
        let wal: f64 = self
            .client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::float8",
                &[&before.lsn],
            )
            .map_err(db)?
            .get(0);
        let after = self.mark()?;
        let calls = (after.calls - before.calls).max(0);
        Ok(ServerCost {
            us_per_call: (self.statements.is_some() && calls > 0)
                .then(|| (after.ms - before.ms) * 1e3 / calls as f64),
            cpu_s: after.cpu_s.zip(before.cpu_s).map(|(a, b)| a - b),
            calls: calls as u64,
            bytes: None,
            wal_bytes: Some(wal as u64),
        })
    }

    fn renewals(&mut self) -> Result<u64> {
        let n: i64 = self.one("SELECT coalesce(sum(renewed), 0)::bigint FROM job")?;
        Ok(n as u64)
    }
}

/// The server's version; the SQL needs 9.5 (SKIP LOCKED, ON CONFLICT) and
/// noisylab's reference is 15.
fn server_version(client: &mut Client) -> Result<String> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version'), current_setting('server_version_num')::int",
            &[],
        )
        .map_err(db)?;
    let version: String = row.get(0);
    let num: i32 = row.get(1);
    if num < 90500 {
        bail!("the PostgreSQL server is version {version}: noisylab's SQL needs 9.5 or later");
    }
    Ok(version
        .split_whitespace()
        .next()
        .unwrap_or(&version)
        .to_string())
}
