//! On PostgreSQL (a cluster each test makes in a temp folder and stops,
//! pass or fail): the SQL functions give the in-process schedulers' jobs
//! and refusals; twenty takers at once take each job once and keep every
//! cap; a lab on worker processes loses nothing and reproduces the model;
//! the faults a user meets first end in one line; Ctrl-C leaves no server.
//! Without PostgreSQL's binaries these pass without running and say so
//! (with `NOISYLAB_REQUIRE_SERVERS=1`, CI, they fail instead).

use std::path::Path;

use noisylab::backend::postgres::server::{self as pg_server, Durability, OwnedCluster};
use noisylab::backend::postgres::{self as pg, PgBackend};
use noisylab::backend::wire::queue_name;
use noisylab::backend::{ServerKind, ServerPlan, Target};
use noisylab::scenario::{Queue, Scenario};

use super::{
    Discipline, Functions, alive, ctrl_c_leaves_no_server, equivalence, failed_run,
    lab_loses_nothing, noisylab, one_at_a_time, server_plan, smoke_lab_reproduces_the_model,
};

/// A cluster of the test's own (fsync off: the tests check rules, not
/// durability), or `None` where PostgreSQL is missing and servers are not
/// required.
pub(super) fn cluster() -> Option<OwnedCluster> {
    if pg_server::binaries().is_none() {
        assert!(
            std::env::var_os("NOISYLAB_REQUIRE_SERVERS").is_none(),
            "NOISYLAB_REQUIRE_SERVERS is set but {}",
            pg_server::NOT_INSTALLED
        );
        eprintln!("skipped: {}", pg_server::NOT_INSTALLED);
        return None;
    }
    Some(OwnedCluster::start(Durability::NO_FSYNC).expect("a PostgreSQL cluster of the test's own"))
}

/// A connection on a schema of noisylab's functions.
pub(super) fn schema(url: &str, name: &str) -> postgres::Client {
    let mut client = pg::connect(url).unwrap();
    pg::make_schema(&mut client, name).unwrap();
    client
}

/// A new queue of discipline `d` on `client`'s schema (the last one's
/// rows gone), its workers told on `channel` || N.
pub(super) fn setup(client: &mut postgres::Client, d: &Discipline, channel: &str) {
    let opt = |v: Option<u32>| v.map_or(-1, |v| v as i32);
    let no_durations: Vec<i64> = Vec::new();
    client
        .execute(
            "SELECT noisylab_setup($1, $2, $3, $4, $5, $6, $7)",
            &[
                &queue_name(d.queue),
                &opt(d.cap),
                &opt(d.limit),
                &opt(d.reserve),
                &channel,
                &d.weights,
                &no_durations,
            ],
        )
        .unwrap();
}

/// `noisylab_submit` as the lab's submitter calls it: `Err(waiting)` where
/// the limit refused the job.
pub(super) fn submit(
    client: &mut postgres::Client,
    job: u32,
    tenant: u32,
    cost: f64,
) -> Result<(), u32> {
    let r = client
        .query_one(
            "SELECT ok, x FROM noisylab_submit($1, $2, $3)",
            &[&i64::from(job), &(tenant as i32), &cost],
        )
        .unwrap();
    let (ok, waiting): (bool, i32) = (r.get(0), r.get(1));
    if ok { Ok(()) } else { Err(waiting as u32) }
}

/// The functions on one schema; each case's setup empties the queue.
struct PgFunctions(postgres::Client);

impl Functions for PgFunctions {
    fn setup(&mut self, _case: u32, d: &Discipline) {
        setup(&mut self.0, d, "eq_");
    }

    fn push(&mut self, job: u32, tenant: u32, cost: f64, key: Option<u32>) -> Result<(), u32> {
        assert_eq!(key, None, "key turns are not carried on PostgreSQL");
        let row = self
            .0
            .query_one(
                "SELECT ok, waiting FROM noisylab_push($1, $2, $3)",
                &[&i64::from(job), &(tenant as i32), &cost],
            )
            .unwrap();
        if row.get(0) {
            Ok(())
        } else {
            Err(row.get::<_, i32>(1) as u32)
        }
    }

    fn pop(&mut self, idle: u32) -> Option<(u32, u32)> {
        let row = self
            .0
            .query_one(
                "SELECT tenant, job FROM noisylab_pop($1)",
                &[&(idle as i32)],
            )
            .unwrap();
        let (t, job): (Option<i32>, Option<i64>) = (row.get(0), row.get(1));
        Some((t? as u32, job? as u32))
    }

    fn done(&mut self, tenant: u32) {
        self.0
            .execute("SELECT noisylab_done($1)", &[&(tenant as i32)])
            .unwrap();
    }

    fn back(&mut self, tenant: u32, job: u32) -> bool {
        self.0
            .execute(
                "SELECT noisylab_back($1, $2)",
                &[&(tenant as i32), &i64::from(job)],
            )
            .unwrap();
        true
    }
}

#[test]
fn the_sql_functions_take_the_same_jobs_as_the_in_process_schedulers() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    equivalence(
        256,
        &mut PgFunctions(schema(&cluster.url, "eq")),
        true,
        false,
    );
}

/// What one taker saw: (job, tenant, started, finished) by the stamps.
type Ran = Vec<(i64, i32, i64, i64)>;

#[test]
fn twenty_takers_at_once_take_each_job_once_and_keep_every_cap() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = schema(&cluster.url, "many");
    for (queue, cap, reserve) in [
        (Queue::Fifo, 3, -1),
        (Queue::Fair, 2, -1),
        (Queue::Vtc, 2, 1),
    ] {
        let no: Vec<f64> = Vec::new();
        let none: Vec<i64> = Vec::new();
        c.execute(
            "SELECT noisylab_setup($1, $2, -1, $3, 'many_', $4, $5)",
            &[&queue_name(queue), &cap, &reserve, &no, &none],
        )
        .unwrap();
        // 600 jobs of 6 tenants, tenant 0 holding 70 % of them.
        let jobs = 600i64;
        for job in 0..jobs {
            let tenant = if job % 10 < 7 {
                0
            } else {
                (job % 5 + 1) as i32
            };
            c.execute("SELECT noisylab_submit($1, $2, 1)", &[&job, &tenant])
                .unwrap();
        }
        let takers: Vec<_> = (1..=20)
            .map(|me: i32| {
                let url = cluster.url.clone();
                std::thread::spawn(move || -> Result<(), postgres::Error> {
                    let mut w = pg::connect(&url).unwrap();
                    w.batch_execute("SET search_path TO many")?;
                    let mut next =
                        w.query_one("SELECT job, tenant FROM noisylab_take($1, false)", &[&me])?;
                    while let (Some(job), Some(t)) =
                        (next.get::<_, Option<i64>>(0), next.get::<_, Option<i32>>(1))
                    {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        next = w.query_one(
                            "SELECT job, tenant FROM noisylab_finish($1, $2, $3, NULL)",
                            &[&me, &job, &t],
                        )?;
                    }
                    Ok(())
                })
            })
            .collect();
        for t in takers {
            // No deadlock, no serialization failure left to the caller.
            t.join().unwrap().unwrap();
        }
        let ran: Ran = c
            .query(
                "SELECT id, tenant, started, finished FROM job WHERE state = 'f'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let what = queue_name(queue);
        assert_eq!(ran.len() as i64, jobs, "{what}: every job ran once");
        // By the stamps: a finish and a start at one microsecond are the
        // finish first (one call: a worker's finish and its next start).
        let mut events: Vec<(i64, i32, i32)> = ran
            .iter()
            .flat_map(|&(_, t, s, f)| [(s, 1, t), (f, -1, t)])
            .collect();
        events.sort();
        let (mut per, mut most) = (std::collections::HashMap::<i32, i32>::new(), 0);
        let (mut busy, mut lent) = (0, 0);
        for (at, d, t) in events {
            let n = per.entry(t).or_default();
            if d > 0 && *n >= cap {
                // vtc lends an idle worker past the cap only while more
                // than its reserve of 1 is idle: by the stamps, the takers
                // not running a job (the taker among them) are more.
                assert!(reserve >= 0, "{what}: tenant {t} over its cap of {cap}");
                assert!(
                    busy + reserve < 20,
                    "{what}: lent at {at} µs with {busy} of 20 takers busy"
                );
                lent += 1;
            }
            *n += d;
            busy += d;
            most = most.max(*n);
        }
        assert!(most >= 2, "{what}: takers ran side by side");
        assert!(reserve < 0 || lent > 0, "{what}: the cap lent");
    }
}

#[test]
fn a_lab_on_postgres_loses_nothing_and_keeps_every_cap_by_the_servers_clock() {
    let _turn = one_at_a_time();
    let Some(gate) = cluster() else { return };
    drop(gate); // only the check; the backend makes its own
    let plan = server_plan(ServerKind::Postgres, Target::Own, Some(2));
    let mut backend = pg::start(&plan, 4, &[]).unwrap();
    lab_loses_nothing(&mut backend, false);
    let pid = backend.wire.own_server_pid().unwrap();
    drop(backend);
    assert!(!alive(pid), "the cluster stops with its lab");
}

#[test]
fn the_smoke_lab_on_postgres_reproduces_the_model() {
    let _turn = one_at_a_time();
    let Some(gate) = cluster() else { return };
    drop(gate);
    let v = smoke_lab_reproduces_the_model("postgres");
    assert!(
        v["backend"]["version"]
            .as_str()
            .unwrap()
            .starts_with(char::is_numeric)
    );
}

/// `noisylab run lab/smoke.toml ARGS -q`: its one error line, which must
/// hold `want`.
fn fails_with(args: &[&str], want: &str) {
    let dir = tempfile::tempdir().unwrap();
    let smoke = std::fs::canonicalize("lab/smoke.toml").unwrap();
    let mut all = vec!["run", smoke.to_str().unwrap()];
    all.extend(args);
    all.push("-q");
    let out = noisylab(&all, dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("noisylab:"))
        .collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains(want), "want {want:?} in {stderr:?}");
}

#[test]
fn faults_on_postgres_end_in_one_line() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    // Nobody at that address; a role the cluster does not have.
    let port = noisylab::backend::process::free_port().unwrap();
    let nobody = format!("postgres://noisylab@127.0.0.1:{port}/postgres");
    fails_with(
        &["--backend", &nobody],
        "cannot reach the PostgreSQL database",
    );
    let stranger = cluster.url.replace("noisylab@", "stranger@");
    fails_with(
        &["--backend", &stranger],
        "role \"stranger\" does not exist",
    );
    // A schema already there is refused, not reused.
    let mut c = schema(&cluster.url, "taken");
    let err = pg::make_schema(&mut c, "taken").unwrap_err().to_string();
    assert!(err.contains("schema taken already exists"), "{err}");
    // fsync and synchronous_commit are settings of the lab's own cluster
    // only.
    let dir = tempfile::tempdir().unwrap();
    for option in ["fsync", "synchronous_commit"] {
        let bad = std::fs::read_to_string("lab/smoke.toml").unwrap()
            + &format!("\n[backend]\nurl = \"{}\"\n{option} = false\n", cluster.url);
        std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
        let out = noisylab(&["run", "bad.toml", "-q"], dir.path());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "backend.{option}: goes with a PostgreSQL server of the lab's own"
            )),
            "{out:?}"
        );
    }
    // The server stops during a run: the run fails in one line naming the
    // backend; the workers and the lab stop.
    let s = Scenario::load(Path::new("lab/smoke.toml")).unwrap();
    let plan = server_plan(
        ServerKind::Postgres,
        Target::Url(cluster.url.clone()),
        Some(2),
    );
    let mut backend: PgBackend = pg::start(&plan, s.workers, &[]).unwrap();
    let killer = {
        let pid = cluster.pid();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            // SAFETY: a signal to the test's own postmaster (immediate
            // shutdown: every backend ends).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGQUIT) };
        })
    };
    let err = failed_run(&mut backend, &s);
    killer.join().unwrap();
    assert!(err.contains("the PostgreSQL backend failed"), "{err}");
}

#[test]
fn ctrl_c_on_postgres_leaves_no_server_behind() {
    let _turn = one_at_a_time();
    let Some(gate) = cluster() else { return };
    drop(gate);
    let lab = ctrl_c_leaves_no_server("postgres", "postgres", 30, 3000);
    let left = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("noisylab-pg-{lab}-")))
        .count();
    assert_eq!(left, 0, "its folder removed");
}

#[test]
fn a_worker_killed_and_one_stopped_past_its_lease_lose_nothing_on_postgres() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    // The job table's leases: the killed process's jobs go back when their
    // leases run out, the stopped one's late finishes are refused, and the
    // replacement's workers join the run under way.
    super::faults::kill_and_pause_lose_nothing(server_plan(
        ServerKind::Postgres,
        Target::Url(cluster.url.clone()),
        Some(2),
    ));
}

#[test]
fn the_server_stopped_as_by_a_crash_and_started_again_loses_nothing_on_postgres() {
    let _turn = one_at_a_time();
    let Some(gate) = cluster() else { return };
    drop(gate); // only the check; the lab starts its own, to restart it
    // An immediate shutdown (every server process quits, nothing written
    // on the way out) and a start that replays the write-ahead log: the
    // workers and the coordinator connect again, every committed job is
    // there (fsync off loses nothing in a crash of the server alone).
    super::faults::restarts_lose_nothing(ServerPlan {
        durability: Durability::NO_FSYNC,
        ..server_plan(ServerKind::Postgres, Target::Own, Some(2))
    });
}

#[test]
fn a_slow_link_holds_its_process_s_jobs_longer_and_loses_nothing_on_postgres() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    super::faults::slow_link_loses_nothing(
        server_plan(
            ServerKind::Postgres,
            Target::Url(cluster.url.clone()),
            Some(2),
        ),
        100,
        0.5,
    );
}

/// Schema `name` holding a fair queue, no cap, limit or lending, its
/// workers hearing on `name_N`.
fn fair_queue(url: &str, name: &str) -> postgres::Client {
    let mut c = schema(url, name);
    let fair = Discipline {
        queue: Queue::Fair,
        cap: None,
        limit: None,
        reserve: None,
        weights: Vec::new(),
        costs: Vec::new(),
        keys: false,
    };
    setup(&mut c, &fair, &format!("{name}_"));
    c
}

#[test]
fn a_job_handed_to_an_idle_worker_starts_and_renews_its_lease_at_its_pick_up() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = fair_queue(&cluster.url, "handed");
    // Worker 1, alive (this connection's server process), idle, a lease of
    // 50 ms; a submit hands it job 0.
    c.batch_execute("SELECT noisylab_ready(1); SELECT noisylab_lease(50000)")
        .unwrap();
    let idle: Option<i64> = c
        .query_one("SELECT job FROM noisylab_take(1, false)", &[])
        .unwrap()
        .get(0);
    assert_eq!(idle, None);
    let r = c
        .query_one("SELECT ok, x FROM noisylab_submit(0, 1, 1)", &[])
        .unwrap();
    assert_eq!((r.get::<_, bool>(0), r.get::<_, i32>(1)), (true, 1));
    // The worker is slow to hear, within the lease.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let got: Option<i64> = c
        .query_one("SELECT job FROM noisylab_take(1, true)", &[])
        .unwrap()
        .get(0);
    assert_eq!(got, Some(0));
    let row = c
        .query_one("SELECT enqueued, started, until FROM job WHERE id = 0", &[])
        .unwrap();
    let (enqueued, started, until): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert!(
        started - enqueued >= 30_000,
        "started at the pick-up: {enqueued} {started}"
    );
    assert_eq!(until - started, 50_000, "the lease renewed at the pick-up");
}

/// A finish sent again after its connection dropped, its first sending
/// through: it left the worker idle, and a submit then woke the worker for
/// a job handed to it, the wake lost with the connection. The finish sent
/// again picks that job up: a worker calling has heard the wake, whatever
/// its call says. (Left idle as well as woken, the worker was woken again
/// by the next submit, which failed on the woken line's key, as the
/// connections-dropped-twice test did.)
#[test]
fn a_finish_sent_again_after_a_wake_lost_with_its_connection_picks_up_the_job_handed() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = fair_queue(&cluster.url, "again");
    let submit = |c: &mut postgres::Client, id: i64| -> bool {
        c.query_one("SELECT ok FROM noisylab_submit($1, 1, 1)", &[&id])
            .unwrap()
            .get(0)
    };
    // Worker 1, alive and idle, a lease of 10 s; job 0 handed to it and
    // picked up.
    c.batch_execute("SELECT noisylab_ready(1); SELECT noisylab_lease(10000000)")
        .unwrap();
    let idle: Option<i64> = c
        .query_one("SELECT job FROM noisylab_take(1, false)", &[])
        .unwrap()
        .get(0);
    assert_eq!(idle, None);
    assert!(submit(&mut c, 0));
    let row = c
        .query_one("SELECT job, lease FROM noisylab_take(1, true)", &[])
        .unwrap();
    let (job, lease): (Option<i64>, Option<i64>) = (row.get(0), row.get(1));
    assert_eq!(job, Some(0));
    let finish = "SELECT job FROM noisylab_finish(1, 0, 1, $1)";
    // Its finish goes through (the worker idle), its answer lost; job 1 is
    // handed to it, the wake lost too; the finish is sent again.
    let next: Option<i64> = c.query_one(finish, &[&lease]).unwrap().get(0);
    assert_eq!(next, None);
    assert!(submit(&mut c, 1));
    let next: Option<i64> = c.query_one(finish, &[&lease]).unwrap().get(0);
    assert_eq!(next, Some(1), "the job handed to it");
    // No worker idle or woken: the next job waits for one.
    assert!(submit(&mut c, 2));
    let lines: (i64, i64) = {
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM idle), (SELECT count(*) FROM woken)",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(lines, (0, 0), "(idle, woken)");
}

#[test]
fn a_finish_while_a_handed_job_waits_for_its_worker_runs_that_job_and_keeps_the_tenant_s_order() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = fair_queue(&cluster.url, "swap");
    let job = |c: &mut postgres::Client, sql: &str| -> Option<i64> {
        c.query_one(sql, &[]).unwrap().get(0)
    };
    let submit = |c: &mut postgres::Client, id: i64| {
        c.query_one("SELECT ok FROM noisylab_submit($1, 1, 1)", &[&id])
            .unwrap()
    };
    // Workers 1 and 2, alive and idle; job 0 is handed to worker 1, which
    // picks it up.
    c.batch_execute("SELECT noisylab_ready(1), noisylab_ready(2)")
        .unwrap();
    assert_eq!(job(&mut c, "SELECT job FROM noisylab_take(1, false)"), None);
    assert_eq!(job(&mut c, "SELECT job FROM noisylab_take(2, false)"), None);
    submit(&mut c, 0);
    assert_eq!(
        job(&mut c, "SELECT job FROM noisylab_take(1, true)"),
        Some(0)
    );
    // Job 1 is handed to worker 2, slow to hear; job 2 waits.
    submit(&mut c, 1);
    submit(&mut c, 2);
    // Worker 1 finishes: it runs job 1, handed out first, and worker 2
    // picks up job 2, which the finish started by the discipline.
    assert_eq!(
        job(&mut c, "SELECT job FROM noisylab_finish(1, 0, 1, NULL)"),
        Some(1)
    );
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert_eq!(
        job(&mut c, "SELECT job FROM noisylab_take(2, true)"),
        Some(2)
    );
    let started: Vec<i64> = c
        .query("SELECT started FROM job ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        started[0] <= started[1] && started[1] < started[2],
        "the tenant's jobs start in their order: {started:?}"
    );
}

#[test]
fn a_finish_while_another_tenant_s_handed_job_waits_for_its_worker_goes_on_with_the_discipline() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = fair_queue(&cluster.url, "keep");
    let job = |c: &mut postgres::Client, sql: &str| -> Option<i64> {
        c.query_one(sql, &[]).unwrap().get(0)
    };
    // Workers 1 and 2, alive and idle; job 0 of tenant 1 is handed to
    // worker 1, which picks it up.
    c.batch_execute("SELECT noisylab_ready(1), noisylab_ready(2)")
        .unwrap();
    assert_eq!(job(&mut c, "SELECT job FROM noisylab_take(1, false)"), None);
    assert_eq!(job(&mut c, "SELECT job FROM noisylab_take(2, false)"), None);
    c.query_one("SELECT ok FROM noisylab_submit(0, 1, 1)", &[])
        .unwrap();
    assert_eq!(
        job(&mut c, "SELECT job FROM noisylab_take(1, true)"),
        Some(0)
    );
    // Job 1 of tenant 2 is handed to worker 2, slow to hear; job 2 of
    // tenant 1 waits.
    c.batch_execute("SELECT noisylab_submit(1, 2, 1); SELECT noisylab_submit(2, 1, 1)")
        .unwrap();
    // Worker 1 finishes: it goes on with tenant 1's job 2, as the model's
    // worker does (there job 1 started at its submit, on worker 2), and
    // worker 2 picks up job 1, handed to it.
    assert_eq!(
        job(&mut c, "SELECT job FROM noisylab_finish(1, 0, 1, NULL)"),
        Some(2)
    );
    assert_eq!(
        job(&mut c, "SELECT job FROM noisylab_take(2, true)"),
        Some(1)
    );
    let left: i64 = c
        .query_one("SELECT count(*) FROM handed", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "every job handed out was picked up");
}

/// A job, its tenant and its lease, as a take or a finish hands it out.
type Handed = (Option<i64>, Option<i32>, Option<i64>);

#[test]
fn a_lease_that_runs_out_in_the_job_table_hands_the_job_back_and_fences_the_late_finish() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = schema(&cluster.url, "lease");
    let handed = |row: postgres::Row| -> Handed { (row.get(0), row.get(1), row.get(2)) };
    // Workers 1 to 3, alive (their server process is this connection's).
    c.batch_execute("SELECT noisylab_ready(1), noisylab_ready(2), noisylab_ready(3)")
        .unwrap();
    for queue in ["fifo", "fair", "vtc"] {
        // Tenant 1, a cap of 1, a lease of 50 ms; two jobs.
        let (weights, durations): (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
        c.execute(
            "SELECT noisylab_setup($1, 1, -1, -1, 'lease_', $2, $3)",
            &[&queue, &weights, &durations],
        )
        .unwrap();
        c.batch_execute(
            "SELECT noisylab_lease(50000); SELECT * FROM noisylab_submit(0, 1, 1); \
             SELECT * FROM noisylab_submit(1, 1, 1); SELECT noisylab_expect(2)",
        )
        .unwrap();
        let take = |c: &mut postgres::Client, me: i32, woken: bool| {
            handed(
                c.query_one(
                    "SELECT job, tenant, lease FROM noisylab_take($1, $2)",
                    &[&me, &woken],
                )
                .unwrap(),
            )
        };
        let finish = |c: &mut postgres::Client, me: i32, job: i64, lease: Option<i64>| {
            handed(
                c.query_one(
                    "SELECT job, tenant, lease FROM noisylab_finish($1, $2, 1, $3)",
                    &[&me, &job, &lease],
                )
                .unwrap(),
            )
        };
        let first = take(&mut c, 1, false);
        assert_eq!((first.0, first.1), (Some(0), Some(1)), "{queue}");
        assert_eq!(
            take(&mut c, 2, false).0,
            None,
            "{queue}: tenant 1 at its cap of 1"
        );
        // The holder goes quiet past its lease; nobody calls but the reap,
        // which hands the job back and wakes the idle worker.
        std::thread::sleep(std::time::Duration::from_millis(120));
        let reaped: i32 = c.query_one("SELECT noisylab_reap()", &[]).unwrap().get(0);
        assert_eq!(reaped, 1, "{queue}");
        let woken: i64 = c
            .query_one("SELECT count(*) FROM woken", &[])
            .unwrap()
            .get(0);
        assert_eq!(woken, 1, "{queue}: the idle worker is woken for it");
        // Started again under a new lease: its cap slot was freed.
        let again = take(&mut c, 2, true);
        assert_eq!((again.0, again.1), (Some(0), Some(1)), "{queue}");
        assert_ne!(again.2, first.2, "{queue}: a new lease");
        // The first holder's finish is refused, and it is handed nothing.
        assert_eq!(finish(&mut c, 1, 0, first.2).0, None, "{queue}");
        let renew = |c: &mut postgres::Client, lease: Option<i64>| -> bool {
            c.query_one("SELECT noisylab_renew(0, $1)", &[&lease])
                .unwrap()
                .get(0)
        };
        assert_eq!(
            (renew(&mut c, first.2), renew(&mut c, again.2)),
            (false, true),
            "{queue}"
        );
        let next = finish(&mut c, 2, 0, again.2);
        assert_eq!(next.0, Some(1), "{queue}");
        // The same finish sent again (its reply lost): known by its lease,
        // neither refused nor counted.
        assert_eq!(finish(&mut c, 3, 0, again.2).0, None, "{queue}");
        assert_eq!(finish(&mut c, 2, 1, next.2).0, None, "{queue}");
        let rows: Vec<(String, i32, i32)> = c
            .query(
                "SELECT state::text, redelivered, late FROM job ORDER BY id",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let want = [("f".to_string(), 1, 1), ("f".to_string(), 0, 0)];
        assert_eq!(rows, want, "{queue}");
        let (done, running): (i64, i32) = {
            let r = c
                .query_one(
                    "SELECT done, (SELECT running FROM tenant WHERE t = 1) FROM cfg",
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert_eq!(
            (done, running),
            (2, 0),
            "{queue}: no cap slot leaked, the refused finish uncounted"
        );
        if queue == "vtc" {
            let ctr: f64 = c
                .query_one("SELECT ctr FROM tenant WHERE t = 1", &[])
                .unwrap()
                .get(0);
            assert_eq!(
                ctr, 2.0,
                "charged for two jobs, not three: the lost start refunded"
            );
        }
    }
}

#[test]
fn a_finish_after_its_lease_s_instant_is_refused_with_no_call_between_on_postgres() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut c = schema(&cluster.url, "fence");
    c.batch_execute("SELECT noisylab_ready(1)").unwrap();
    let handed = |row: postgres::Row| -> Handed { (row.get(0), row.get(1), row.get(2)) };
    for queue in ["fifo", "fair", "vtc"] {
        // One job of tenant 1, a cap of 1, a lease of 30 ms.
        let (weights, durations): (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
        c.execute(
            "SELECT noisylab_setup($1, 1, -1, -1, 'fence_', $2, $3)",
            &[&queue, &weights, &durations],
        )
        .unwrap();
        c.batch_execute(
            "SELECT noisylab_lease(30000); SELECT * FROM noisylab_submit(0, 1, 1); \
             SELECT noisylab_expect(1)",
        )
        .unwrap();
        let first = handed(
            c.query_one(
                "SELECT job, tenant, lease FROM noisylab_take(1, false)",
                &[],
            )
            .unwrap(),
        );
        assert_eq!((first.0, first.1), (Some(0), Some(1)), "{queue}");
        // Quiet past the lease's instant: no call reaps it. The holder's
        // finish is refused, the job back in its queue and handed out again
        // (to the same worker, the only one asking) under a new lease.
        std::thread::sleep(std::time::Duration::from_millis(80));
        let finish = |c: &mut postgres::Client, lease: Option<i64>| {
            handed(
                c.query_one(
                    "SELECT job, tenant, lease FROM noisylab_finish(1, 0, 1, $1)",
                    &[&lease],
                )
                .unwrap(),
            )
        };
        let again = finish(&mut c, first.2);
        assert_eq!((again.0, again.1), (Some(0), Some(1)), "{queue}");
        assert_ne!(again.2, first.2, "{queue}: a new lease");
        assert_eq!(finish(&mut c, again.2).0, None, "{queue}");
        let r = c
            .query_one(
                "SELECT state::text, redelivered, late, (SELECT done FROM cfg) FROM job WHERE id = 0",
                &[],
            )
            .unwrap();
        let row: (String, i32, i32, i64) = (r.get(0), r.get(1), r.get(2), r.get(3));
        assert_eq!(
            row,
            ("f".to_string(), 1, 1, 1),
            "{queue}: the late finish refused and counted, the job run again and done once"
        );
    }
    // What a restart is checked against counts the submits accepted, not
    // the refused ones' rows: a limit of 1 refuses two of three.
    let (weights, durations): (Vec<f64>, Vec<i64>) = (Vec::new(), Vec::new());
    c.execute(
        "SELECT noisylab_setup('fair', -1, 1, -1, 'fence_', $1, $2)",
        &[&weights, &durations],
    )
    .unwrap();
    let oks: Vec<bool> = (0..3i64)
        .map(|j| {
            c.query_one("SELECT ok FROM noisylab_submit($1, 1, 1)", &[&j])
                .unwrap()
                .get(0)
        })
        .collect();
    assert_eq!(oks, [true, false, false]);
    let counted =
        |c: &mut postgres::Client, sql: &str| -> i64 { c.query_one(sql, &[]).unwrap().get(0) };
    assert_eq!(
        (
            counted(&mut c, "SELECT count(*) FROM job"),
            counted(&mut c, "SELECT noisylab_accepted()")
        ),
        (3, 1)
    );
}

#[test]
fn the_workers_connections_dropped_twice_lose_nothing_on_postgres() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    // Each worker's server process ended (pg_terminate_backend), twice:
    // they connect again, listen again, and a wake sent meanwhile is not
    // lost. A new connection is a new server process: longer than what is
    // left of the smoke lab's 60 ms lease for some, whose finish comes late.
    super::faults::drops_lose_nothing(
        server_plan(
            ServerKind::Postgres,
            Target::Url(cluster.url.clone()),
            Some(2),
        ),
        false,
    );
}

#[test]
fn a_server_that_loses_jobs_across_its_restart_fails_the_run_naming_its_promise_on_postgres() {
    let _turn = one_at_a_time();
    let Some(gate) = cluster() else { return };
    drop(gate); // only the check; the lab starts its own, to restart it
    // An unlogged job table: a crash of the server empties it.
    super::faults::restart_that_loses_fails_the_run(
        ServerPlan {
            durability: Durability::NO_FSYNC,
            unlogged: true,
            ..server_plan(ServerKind::Postgres, Target::Own, Some(2))
        },
        "postgres",
        pg_server::NO_PROMISE,
    );
}

#[test]
fn jobs_several_leases_long_renew_them_and_run_once_on_postgres() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    super::faults::long_jobs_renew_their_leases(server_plan(
        ServerKind::Postgres,
        Target::Url(cluster.url.clone()),
        Some(2),
    ));
}

#[test]
fn a_cap_that_lends_lends_as_the_model_does_on_postgres() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    super::lending_follows_the_model(server_plan(
        ServerKind::Postgres,
        Target::Url(cluster.url.clone()),
        Some(2),
    ));
}

/// The SQL functions on one schema, as a lab's workers call them: worker
/// `w` is number `w + 1` (registered once, alive: its server process is
/// this connection's); the wakes are read from the `woken` table, where the
/// server names the worker it woke.
struct PgWorkers {
    client: postgres::Client,
    registered: bool,
    /// The workers in `woken` at the last look.
    seen: Vec<usize>,
}

impl super::WorkerCalls for PgWorkers {
    fn setup(&mut self, _case: u32, d: &Discipline, workers: usize) {
        setup(&mut self.client, d, "wp_");
        if !self.registered {
            for me in 1..=workers as i32 {
                self.client
                    .execute("SELECT noisylab_ready($1)", &[&me])
                    .unwrap();
            }
            self.registered = true;
        }
        self.seen.clear();
    }

    fn submit(&mut self, job: u32, tenant: u32, cost: f64) -> Result<(), u32> {
        submit(&mut self.client, job, tenant, cost)
    }

    fn submit_many(&mut self, jobs: &[(u32, u32, f64)]) -> Vec<Result<(), u32>> {
        let ids: Vec<i64> = jobs.iter().map(|j| i64::from(j.0)).collect();
        let tenants: Vec<i32> = jobs.iter().map(|j| j.1 as i32).collect();
        let costs: Vec<Option<f64>> = jobs.iter().map(|j| Some(j.2)).collect();
        pg::submit_many(&mut self.client, pg::SUBMIT_MANY, &ids, &tenants, &costs)
            .unwrap()
            .into_iter()
            .map(|(ok, x)| if ok { Ok(()) } else { Err(x as u32) })
            .collect()
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn take(&mut self, w: usize, woken: bool) -> Option<(u32, u32)> {
        let r = self
            .client
            .query_one(
                "SELECT job, tenant FROM noisylab_take($1, $2)",
                &[&(w as i32 + 1), &woken],
            )
            .unwrap();
        pg_handed(&r)
    }

    fn finish(&mut self, w: usize, job: u32, tenant: u32) -> Option<(u32, u32)> {
        let r = self
            .client
            .query_one(
                "SELECT job, tenant FROM noisylab_finish($1, $2, $3, NULL)",
                &[&(w as i32 + 1), &i64::from(job), &(tenant as i32)],
            )
            .unwrap();
        pg_handed(&r)
    }

    fn halt(&mut self) {
        self.client.execute("SELECT noisylab_halt()", &[]).unwrap();
    }

    fn woken(&mut self, blocked: &[usize]) -> Vec<usize> {
        let now: Vec<usize> = self
            .client
            .query("SELECT worker FROM woken ORDER BY worker", &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i32>(0) as usize - 1)
            .collect();
        let new: Vec<usize> = now
            .iter()
            .copied()
            .filter(|w| !self.seen.contains(w))
            .collect();
        for w in &new {
            assert!(blocked.contains(w), "worker {w} woken, not blocked");
        }
        self.seen = now;
        new
    }

    fn counts(&mut self) -> (i64, i64) {
        let r = self
            .client
            .query_one("SELECT idle, pending FROM cfg", &[])
            .unwrap();
        (i64::from(r.get::<_, i32>(0)), i64::from(r.get::<_, i32>(1)))
    }
}

/// A take's or a finish's (job, tenant) as (tenant, job).
fn pg_handed(r: &postgres::Row) -> Option<(u32, u32)> {
    let (job, tenant): (Option<i64>, Option<i32>) = (r.get(0), r.get(1));
    Some((tenant? as u32, job? as u32))
}

#[test]
fn the_sql_functions_driven_as_workers_drive_them_hand_out_the_schedulers_jobs() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let client = schema(&cluster.url, "wp");
    super::worker_paths(
        128,
        &mut PgWorkers {
            client,
            registered: false,
            seen: Vec::new(),
        },
    );
}

/// A cluster of the lab's own runs with the durability it was asked for,
/// as the server itself reports it.
#[test]
fn a_cluster_of_the_lab_s_own_runs_with_the_durability_asked_for() {
    let _turn = one_at_a_time();
    let Some(gate) = cluster() else { return };
    drop(gate); // only the check; each setting gets a cluster of its own
    let on = |b: bool| if b { "on" } else { "off" };
    for d in [
        Durability::FULL,
        Durability {
            fsync: true,
            synchronous_commit: false,
        },
    ] {
        let c = OwnedCluster::start(d).unwrap();
        let mut client = pg::connect(&c.url).unwrap();
        let mut show = |setting: &str| -> String {
            client
                .query_one(&format!("SHOW {setting}"), &[])
                .unwrap()
                .get(0)
        };
        assert_eq!(show("fsync"), on(d.fsync), "{d:?}");
        assert_eq!(
            show("synchronous_commit"),
            on(d.synchronous_commit),
            "{d:?}"
        );
        assert_eq!(
            (c.fsync(), c.synchronous_commit()),
            (d.fsync, d.synchronous_commit)
        );
    }
}
