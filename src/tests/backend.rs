//! Backends. The in-process engine's figures computed from its records alone
//! (what a server-side backend has) equal the ones it integrates as it runs.
//! On Redis (a server each test starts on a free loopback port and stops,
//! pass or fail): the functions give the in-process schedulers' jobs and
//! refusals for random operation sequences, called alone and driven as a
//! lab's workers drive them (idle counts, wakes, halt: `worker_paths`,
//! PostgreSQL's functions too); a lab on worker processes loses nothing,
//! keeps every cap by the server's stamps (a cap passed only by lending,
//! while more than its reserve were idle) and reproduces the model; a cap
//! that lends lends as the model does, job for job; the faults a user meets first end in one line, not a hang (a
//! worker process killed mid-run is named); Ctrl-C leaves no server.
//!
//! Without `redis-server` on PATH the Redis tests pass without running and
//! say so on stderr (`make test` prints one line); with
//! `NOISYLAB_REQUIRE_SERVERS=1` (CI) they fail instead.

#[path = "backend/clients.rs"]
mod clients;
mod common;
#[path = "backend/faults.rs"]
mod faults;
#[path = "backend/postgres.rs"]
mod postgres;
#[path = "backend/steps.rs"]
mod steps;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;

use noisylab::backend::redis as redis_backend;
use noisylab::backend::redis::server::{self, OwnedServer};
use noisylab::backend::wire::queue_name;
use noisylab::backend::{Backend, RunError, RunInput, RunRecord, ServerKind, ServerPlan, Target};
use noisylab::engine::{Fate, JobRecord, NEVER, stats_from_records};
use noisylab::lab;
use noisylab::scenario::{FairBy, Queue, Scenario, Strategy as Def};
use noisylab::sched::{AnyScheduler, Scheduler};
use proptest::prelude::*;

const NOISYLAB: &str = env!("CARGO_BIN_EXE_noisylab");

/// Every test here takes its turn: a real-clock lab beside any other work
/// (another lab, a virtual run's CPU, processes started and refused) would
/// measure that load (a CI run failed a smoke lab's makespan so).
static REAL_CLOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    REAL_CLOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn figures_from_the_records_alone_equal_the_engines_own() {
    let _turn = one_at_a_time();
    for name in ["article", "lend", "smoke", "sybil", "tiers"] {
        let s = Scenario::load(Path::new(&format!("lab/{name}.toml"))).unwrap();
        for def in &s.strategy {
            let pool = lab::pool_for(&s, def);
            if pool.traffic.is_some() {
                continue; // clients and limits: the engine's alone
            }
            let (jobs, stats) = {
                let record = lab::Model::new(&s, def, s.seed).run();
                (record.jobs, record.stats)
            };
            // On the virtual clock a job found a worker idle exactly when it
            // started at its enqueue instant.
            let idle: Vec<bool> = jobs.iter().map(|j| j.started == j.enqueued).collect();
            let replay = stats_from_records(&pool, &jobs, &idle, stats.end);
            let what = format!("{name}: {}", def.name);
            assert_eq!(replay.samples, stats.samples, "{what}: samples");
            assert_eq!(replay.waiting_ns, stats.waiting_ns, "{what}");
            assert_eq!(
                replay.idle_worker_ns_while_waiting, stats.idle_worker_ns_while_waiting,
                "{what}"
            );
            assert_eq!(
                replay.waiting_ns_in_traffic, stats.waiting_ns_in_traffic,
                "{what}"
            );
            assert_eq!(
                replay.idle_worker_ns_while_waiting_in_traffic,
                stats.idle_worker_ns_while_waiting_in_traffic,
                "{what}"
            );
            assert_eq!(replay.dispatch_floor, stats.dispatch_floor, "{what}");
            assert!(stats.samples.len() > 10, "{what}: something to compare");
        }
    }
}

/// A server of the test's own, or `None` (said once on stderr) where
/// `redis-server` is missing and servers are not required.
fn server() -> Option<OwnedServer> {
    if noisylab::backend::process::on_path("redis-server").is_none() {
        assert!(
            std::env::var_os("NOISYLAB_REQUIRE_SERVERS").is_none(),
            "NOISYLAB_REQUIRE_SERVERS is set but {}",
            server::NOT_INSTALLED
        );
        eprintln!("skipped: {}", server::NOT_INSTALLED);
        return None;
    }
    Some(OwnedServer::start(false).expect("a redis-server of the test's own"))
}

/// A connection to the server at `url`, noisylab's functions loaded.
fn functions(url: &str) -> redis::Connection {
    let mut con = redis_backend::connect(url).unwrap();
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(redis_backend::LIBRARY)
        .query::<String>(&mut con)
        .unwrap();
    con
}

/// One step of the equivalence test.
#[derive(Debug, Clone)]
enum Op {
    /// Push a job of this tenant, with its API key number this (of 3,
    /// where the discipline turns keys).
    Push(u32, u32),
    /// Take, with this many workers idle (lending asks the rest).
    Take(u32),
    /// Finish the running job at this index (modulo those running).
    Finish(usize),
    /// Hand the running job at this index back, as a lease running out
    /// does (on a server whose takes hold leases).
    Back(usize),
}

fn ops(leases: bool) -> impl Strategy<Value = Vec<Op>> {
    let op = if leases {
        prop_oneof![
            4 => (0u32..5, 0u32..3).prop_map(|(t, k)| Op::Push(t, k)),
            3 => (1u32..8).prop_map(Op::Take),
            2 => any::<usize>().prop_map(Op::Finish),
            1 => any::<usize>().prop_map(Op::Back),
        ]
        .boxed()
    } else {
        prop_oneof![
            4 => (0u32..5, 0u32..3).prop_map(|(t, k)| Op::Push(t, k)),
            3 => (1u32..8).prop_map(Op::Take),
            2 => any::<usize>().prop_map(Op::Finish),
        ]
        .boxed()
    };
    prop::collection::vec(op, 1..120)
}

/// A discipline; with `keys`, fair and vtc turn each tenant's API keys in
/// half the cases.
fn discipline(keys: bool) -> impl Strategy<Value = Discipline> {
    (
        prop_oneof![Just(Queue::Fifo), Just(Queue::Fair), Just(Queue::Vtc)],
        prop::option::of(1u32..4),
        prop::option::of(1u32..6),
        prop::option::of(0u32..4),
        // vtc's weights (1, 2, 0.5, 3 or 1.5) and each job's cost: sums
        // that are not round in binary, to hold the server's arithmetic to
        // the bit.
        prop::collection::vec(
            prop_oneof![Just(1.0), Just(2.0), Just(0.5), Just(3.0), Just(1.5)],
            5,
        ),
        prop::collection::vec(prop_oneof![Just(1.0), 0.01f64..50.0], 120),
        any::<bool>(),
    )
        .prop_map(
            move |(queue, cap, limit, reserve, weights, costs, turn)| Discipline {
                queue,
                cap,
                limit,
                reserve: cap.and(reserve),
                weights,
                costs,
                keys: keys && turn && queue != Queue::Fifo,
            },
        )
}

/// The parts of a strategy the Redis functions carry; vtc's weights by
/// tenant and costs by job.
#[derive(Debug, Clone)]
struct Discipline {
    queue: Queue,
    cap: Option<u32>,
    limit: Option<u32>,
    reserve: Option<u32>,
    weights: Vec<f64>,
    costs: Vec<f64>,
    /// Two-level: each tenant's API keys take turns within its turn.
    keys: bool,
}

fn strategy_of(d: &Discipline) -> Def {
    let mut text = format!("name = \"s\"\nqueue = \"{}\"\n", queue_name(d.queue));
    for (key, v) in [("cap", d.cap), ("limit", d.limit), ("reserve", d.reserve)] {
        if let Some(v) = v {
            text += &format!("{key} = {v}\n");
        }
    }
    toml::from_str(&text).unwrap()
}

/// A server's scheduling functions alone, for the equivalence test.
trait Functions {
    /// A new queue of discipline `d` for case number `case`.
    fn setup(&mut self, case: u32, d: &Discipline);
    /// `Err(waiting)`: refused by the limit. `key`: the job's API key, where
    /// the discipline turns keys.
    fn push(&mut self, job: u32, tenant: u32, cost: f64, key: Option<u32>) -> Result<(), u32>;
    /// (tenant, job) with `idle` workers idle, or none.
    fn pop(&mut self, idle: u32) -> Option<(u32, u32)>;
    fn done(&mut self, tenant: u32);
    /// A running job handed back; `false` where the server leases nothing.
    fn back(&mut self, _tenant: u32, _job: u32) -> bool {
        false
    }
}

/// The functions, each case under a key prefix of its own (they refuse one
/// in use).
struct RedisFunctions(redis::Connection, String);

impl Functions for RedisFunctions {
    fn setup(&mut self, case: u32, d: &Discipline) {
        self.1 = format!("eq:{case}:");
        let opt = |v: Option<u32>| v.map_or(-1, i64::from);
        let mut setup = redis::cmd("FCALL");
        setup
            .arg("noisylab_setup")
            .arg(0)
            .arg(&self.1)
            .arg(queue_name(d.queue))
            .arg(opt(d.cap))
            .arg(opt(d.limit))
            .arg(opt(d.reserve));
        for (t, w) in d.weights.iter().enumerate().filter(|(_, w)| **w != 1.0) {
            setup.arg(t).arg(w.to_string());
        }
        setup.query::<i64>(&mut self.0).unwrap();
        if d.keys {
            redis::cmd("FCALL")
                .arg("noisylab_set")
                .arg(0)
                .arg(&self.1)
                .arg("keys")
                .arg(1)
                .query::<i64>(&mut self.0)
                .unwrap();
        }
    }

    fn push(&mut self, job: u32, tenant: u32, cost: f64, key: Option<u32>) -> Result<(), u32> {
        let (ok, waiting): (i64, i64) = redis::cmd("FCALL")
            .arg("noisylab_push")
            .arg(0)
            .arg(&self.1)
            .arg(job)
            .arg(tenant)
            .arg(cost.to_string())
            .arg(key)
            .query(&mut self.0)
            .unwrap();
        if ok == 1 { Ok(()) } else { Err(waiting as u32) }
    }

    fn pop(&mut self, idle: u32) -> Option<(u32, u32)> {
        redis::cmd("FCALL")
            .arg("noisylab_pop")
            .arg(0)
            .arg(&self.1)
            .arg(idle)
            .query(&mut self.0)
            .unwrap()
    }

    fn done(&mut self, tenant: u32) {
        redis::cmd("FCALL")
            .arg("noisylab_done")
            .arg(0)
            .arg(&self.1)
            .arg(tenant)
            .query::<i64>(&mut self.0)
            .unwrap();
    }

    fn back(&mut self, tenant: u32, job: u32) -> bool {
        redis::cmd("FCALL")
            .arg("noisylab_back")
            .arg(0)
            .arg(&self.1)
            .arg(tenant)
            .arg(job)
            .query::<i64>(&mut self.0)
            .unwrap();
        true
    }
}

/// The same operations on the in-process scheduler and on a server's
/// functions: every take gives the same job, every push the same refusal.
/// Returns how many running jobs were handed back.
fn same_jobs(server: &mut impl Functions, case: u32, d: &Discipline, ops: &[Op]) -> usize {
    let strategy = strategy_of(d);
    let mut reference = AnyScheduler::new(&strategy, d.weights.clone(), || d.costs.clone());
    if d.keys {
        reference.turn_keys(Vec::new());
    }
    server.setup(case, d);
    let (mut next_job, mut running) = (0u32, Vec::<(u32, u32)>::new());
    let mut backs = 0;
    for (k, op) in ops.iter().enumerate() {
        match *op {
            Op::Push(t, k) => {
                let cost = d.costs[next_job as usize];
                let key = d.keys.then_some(t * 3 + k);
                if let Some(key) = key {
                    reference.note(next_job, cost, key);
                }
                let want = reference.push(t, next_job).map_err(|r| r.waiting);
                let got = server.push(next_job, t, cost, key);
                assert_eq!(got, want, "op {k} {op:?} of {ops:?} under {d:?}");
                next_job += 1;
            }
            Op::Take(idle) => {
                let lend = d.reserve.is_some_and(|r| idle > r);
                let want = match reference.take() {
                    None if lend => reference.take_over_cap(),
                    n => n,
                };
                let got = server.pop(idle);
                assert_eq!(got, want, "op {k} {op:?} of {ops:?} under {d:?}");
                if let Some(taken) = got {
                    running.push(taken);
                }
            }
            Op::Finish(i) if !running.is_empty() => {
                let (t, _) = running.remove(i % running.len());
                reference.finished(t);
                server.done(t);
            }
            Op::Back(i) if !running.is_empty() => {
                let (t, job) = running.remove(i % running.len());
                reference.requeue(t, job);
                assert!(server.back(t, job), "hands jobs back");
                backs += 1;
            }
            Op::Finish(_) | Op::Back(_) => {}
        }
    }
    backs
}

/// A case the random draws once found, replayed first on every server: a
/// vtc tenant of weight 3 charged 3.9397… ÷ 3 and 1 ÷ 3, both refunded,
/// is left a rounding error below zero (-5.55e-17), and is taken before a
/// lower tenant id whose counter is exactly zero: the servers order the
/// counters as numbers, and the scheduler must too.
fn counter_below_zero() -> (Discipline, Vec<Op>) {
    let mut costs = vec![1.0; 5];
    costs[3] = 3.939709701895592;
    let d = Discipline {
        queue: Queue::Vtc,
        cap: None,
        limit: None,
        reserve: None,
        weights: vec![1.0, 1.0, 3.0, 1.0, 1.0],
        costs,
        keys: false,
    };
    use Op::{Back, Finish, Push, Take};
    let ops = vec![
        Push(3, 0),
        Push(1, 0),
        Push(0, 0),
        Take(1),
        Take(1),
        Finish(0),
        Push(2, 0),
        Take(1),
        Push(2, 0),
        Take(1),
        Take(1),
        Finish(2),
        Back(0),
        Back(0),
        Back(0),
        Take(1),
    ];
    (d, ops)
}

/// `cases` random disciplines and operation sequences, each on a fresh
/// queue of `server`'s, after the cases found before
/// ([`counter_below_zero`]); vtc drawn in at least a fifth, and with `keys`
/// fair or vtc turning API keys in at least a fifth.
fn equivalence(cases: u32, server: &mut impl Functions, leases: bool, keys: bool) {
    let (found, steps) = counter_below_zero();
    assert_eq!(same_jobs(server, 0, &found, &steps), 3, "three handed back");
    let (case, vtc_cases) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let key_cases = std::cell::Cell::new(0u32);
    let backs = std::cell::Cell::new(0usize);
    let server = std::cell::RefCell::new(server);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&(discipline(keys), ops(leases)), |(d, ops)| {
            case.set(case.get() + 1);
            backs.set(backs.get() + same_jobs(*server.borrow_mut(), case.get(), &d, &ops));
            if d.queue == Queue::Vtc {
                vtc_cases.set(vtc_cases.get() + 1);
            }
            key_cases.set(key_cases.get() + u32::from(d.keys));
            Ok(())
        })
        .unwrap();
    assert!(case.get() >= cases);
    if leases {
        assert!(
            backs.get() >= cases as usize,
            "jobs handed back: {}",
            backs.get()
        );
    }
    assert!(
        vtc_cases.get() >= cases / 5,
        "vtc drawn: {}",
        vtc_cases.get()
    );
    if keys {
        assert!(
            key_cases.get() >= cases / 5,
            "key turns drawn: {}",
            key_cases.get()
        );
    }
}

#[test]
fn the_redis_functions_take_the_same_jobs_as_the_in_process_schedulers() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let con = functions(&server.url);
    equivalence(256, &mut RedisFunctions(con, String::new()), true, true);
}

/// One step of the worker-path test: what a lab's submitter or one of its
/// workers does next.
#[derive(Debug, Clone)]
enum Step {
    /// The submitter sends a job of each of these tenants, in one round
    /// trip (jobs due at one instant), before any worker takes.
    Submit(Vec<u32>),
    /// The busy worker at this index (modulo those busy) finishes its job
    /// and takes the next in the same call.
    Finish(usize),
    /// The run is over early: no more jobs for anyone.
    Halt,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        5 => prop::collection::vec(0u32..5, 1..4).prop_map(Step::Submit),
        4 => any::<usize>().prop_map(Step::Finish),
        1 => Just(Step::Halt),
    ];
    // At most 117 jobs: the discipline draws 120 costs.
    prop::collection::vec(step, 1..40)
}

/// A server's functions as a lab's submitter and workers call them
/// (workers numbered from 0; a job handed out is (tenant, job)).
trait WorkerCalls {
    /// A new queue of discipline `d` for case number `case`, `workers`
    /// workers registered.
    fn setup(&mut self, case: u32, d: &Discipline, workers: usize);
    /// `Err(waiting)`: refused by the limit.
    fn submit(&mut self, job: u32, tenant: u32, cost: f64) -> Result<(), u32>;
    /// The jobs due at one instant, (job, tenant, cost) each, as the lab
    /// sends them: one call each unless the server takes them at once.
    fn submit_many(&mut self, jobs: &[(u32, u32, f64)]) -> Vec<Result<(), u32>> {
        jobs.iter()
            .map(|&(job, tenant, cost)| self.submit(job, tenant, cost))
            .collect()
    }
    /// Whether a submit hands each job that may start at once to the
    /// longest blocked worker (its woken take returns that job), rather
    /// than waking it to take by the discipline when its take comes.
    fn hands_off(&self) -> bool {
        false
    }
    /// Worker `w` asks, at the run's start or (`woken`) after a wake.
    fn take(&mut self, w: usize, woken: bool) -> Option<(u32, u32)>;
    /// Worker `w` finishes `job` of `tenant` and takes its next.
    fn finish(&mut self, w: usize, job: u32, tenant: u32) -> Option<(u32, u32)>;
    fn halt(&mut self);
    /// The workers woken since the last call, of those `blocked` (in the
    /// order they blocked).
    fn woken(&mut self, blocked: &[usize]) -> Vec<usize>;
    /// The server's count of idle workers, and of wakes sent and not
    /// taken up.
    fn counts(&mut self) -> (i64, i64);
}

/// `FCALL name 0 P args…` on the functions.
fn fcall_p<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    name: &str,
    p: &str,
    args: &[String],
) -> T {
    let mut c = redis::cmd("FCALL");
    c.arg(name).arg(0).arg(p);
    for a in args {
        c.arg(a);
    }
    c.query(con).unwrap()
}

/// A take's or a finish's reply, "job tenant lease", as (tenant, job).
fn handed(reply: Option<String>) -> Option<(u32, u32)> {
    let reply = reply?;
    let mut w = reply.split(' ').map(|x| x.parse::<u32>().unwrap());
    let (job, tenant) = (w.next()?, w.next()?);
    Some((tenant, job))
}

/// The Redis functions under prefix `.1`, with the wake tokens listed and
/// not yet handed to a worker (`.2`): a token goes to the worker blocked
/// longest, as the server serves blocked pops.
struct RedisWorkers(redis::Connection, String, i64);

impl WorkerCalls for RedisWorkers {
    fn setup(&mut self, case: u32, d: &Discipline, _workers: usize) {
        self.1 = format!("wp:{case}:");
        self.2 = 0;
        let opt = |v: Option<u32>| v.map_or("-1".to_string(), |v| v.to_string());
        let mut setup = vec![
            queue_name(d.queue).to_string(),
            opt(d.cap),
            opt(d.limit),
            opt(d.reserve),
        ];
        for (t, w) in d.weights.iter().enumerate().filter(|(_, w)| **w != 1.0) {
            setup.extend([t.to_string(), w.to_string()]);
        }
        let _: i64 = fcall_p(&mut self.0, "noisylab_setup", &self.1, &setup);
    }

    fn submit(&mut self, job: u32, tenant: u32, cost: f64) -> Result<(), u32> {
        let args = [job.to_string(), tenant.to_string(), cost.to_string()];
        let (ok, waiting): (i64, i64) = fcall_p(&mut self.0, "noisylab_submit", &self.1, &args);
        if ok == 1 { Ok(()) } else { Err(waiting as u32) }
    }

    fn take(&mut self, _w: usize, woken: bool) -> Option<(u32, u32)> {
        if woken {
            // The worker's blocking pop returns the token.
            let _: Option<i64> = redis::cmd("LPOP")
                .arg(format!("{}wake", self.1))
                .query(&mut self.0)
                .unwrap();
        }
        let arg = if woken { "1" } else { "0" };
        handed(fcall_p(
            &mut self.0,
            "noisylab_take",
            &self.1,
            &[arg.into()],
        ))
    }

    fn finish(&mut self, _w: usize, job: u32, tenant: u32) -> Option<(u32, u32)> {
        let args = [job.to_string(), tenant.to_string(), "0".into()];
        handed(fcall_p(&mut self.0, "noisylab_finish", &self.1, &args))
    }

    fn halt(&mut self) {
        let _: i64 = fcall_p(&mut self.0, "noisylab_halt", &self.1, &[]);
    }

    fn woken(&mut self, blocked: &[usize]) -> Vec<usize> {
        let listed: i64 = redis::cmd("LLEN")
            .arg(format!("{}wake", self.1))
            .query(&mut self.0)
            .unwrap();
        let new = (listed - self.2).max(0) as usize;
        self.2 = listed;
        assert!(
            new <= blocked.len(),
            "{new} tokens for {} blocked",
            blocked.len()
        );
        blocked[..new].to_vec()
    }

    fn counts(&mut self) -> (i64, i64) {
        let mut get = |key: &str| -> i64 {
            redis::cmd("GET")
                .arg(format!("{}{key}", self.1))
                .query::<Option<i64>>(&mut self.0)
                .unwrap()
                .unwrap_or(0)
        };
        (get("idle"), get("pending"))
    }
}

/// What a worker of the test is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Doing {
    /// Running this job of this tenant.
    Busy(u32, u32),
    /// Blocked, waiting for a wake.
    Blocked,
    /// Woken, its take not yet sent.
    Woken,
}

/// The functions driven as a lab drives them: 4 workers that take at the
/// start, block when idle, take when woken and finish-and-take; a
/// submitter that sends jobs due at one instant before anyone takes; a
/// halt. Held to the in-process scheduler at every job handed out (lending
/// asked with the idle workers the server counts, the asker among them),
/// to the submit's refusals, and after each step, once every woken worker
/// has taken, to the lab's counts: the server's idle count is the workers
/// blocked, no wake is left pending, a woken worker was handed a job (a
/// wake is sent for a job no other wake covers), and no worker stays
/// blocked while the scheduler has a job to start. Where the server hands
/// jobs out at the submit (PostgreSQL), each hand-off is held to the
/// scheduler's take at that push, to the longest blocked worker, and each
/// woken take to the jobs handed out, in the order they were handed.
fn worker_path(server: &mut impl WorkerCalls, case: u32, d: &Discipline, steps: &[Step]) {
    let workers = 4usize;
    let strategy = strategy_of(d);
    let mut reference = AnyScheduler::new(&strategy, d.weights.clone(), || d.costs.clone());
    server.setup(case, d, workers);
    let mut doing = vec![Doing::Blocked; workers];
    // Where the server hands off: the jobs handed out and not yet picked
    // up, in the order they were handed (a woken worker picks up the
    // first), and which woken workers were woken for one.
    let mut pool = std::collections::VecDeque::new();
    let mut handed = vec![false; workers];
    // The blocked workers, in the order they blocked.
    let mut line: Vec<usize> = Vec::new();
    let (mut next_job, mut halted) = (0u32, false);
    // What the in-process scheduler hands a worker that asks while
    // `others` workers are blocked.
    let expect = |reference: &mut AnyScheduler, others: usize, halted: bool| {
        if halted {
            return None;
        }
        let lend = d.reserve.is_some_and(|r| others as u32 + 1 > r);
        match reference.take() {
            None if lend => reference.take_over_cap(),
            n => n,
        }
    };
    // Every worker takes at the run's start: all idle.
    for w in 0..workers {
        assert_eq!(
            server.take(w, false),
            None,
            "case {case}: worker {w} at the start"
        );
        line.push(w);
    }
    for (k, step) in steps.iter().enumerate() {
        let what = format!("case {case}, step {k} {step:?} of {steps:?} under {d:?}");
        match *step {
            Step::Submit(ref tenants) if !halted => {
                let jobs: Vec<(u32, u32, f64)> = (next_job..)
                    .zip(tenants)
                    .map(|(j, &t)| (j, t, d.costs[j as usize]))
                    .collect();
                let got = server.submit_many(&jobs);
                let blocked = line.clone();
                let mut handed_to = Vec::new();
                for (&(job, t, _), got) in jobs.iter().zip(got) {
                    let want = reference.push(t, job).map_err(|r| r.waiting);
                    assert_eq!(got, want, "{what}");
                    // Handed at the push, as the model's idle workers take:
                    // to the longest blocked, while a job may start.
                    while server.hands_off() && !line.is_empty() {
                        let w = line.remove(0);
                        match expect(&mut reference, line.len(), halted) {
                            Some(job) => {
                                pool.push_back(job);
                                handed[w] = true;
                                doing[w] = Doing::Woken;
                                handed_to.push(w);
                            }
                            None => {
                                line.insert(0, w);
                                break;
                            }
                        }
                    }
                }
                next_job += jobs.len() as u32;
                if server.hands_off() {
                    handed_to.sort_unstable();
                    assert_eq!(
                        server.woken(&blocked),
                        handed_to,
                        "{what}: the workers handed a job"
                    );
                }
            }
            Step::Submit(_) => {}
            Step::Finish(i) => {
                // (Every woken worker took after the last step: no job is
                // on its way to one.)
                let busy: Vec<usize> = (0..workers)
                    .filter(|&w| matches!(doing[w], Doing::Busy(..)))
                    .collect();
                if busy.is_empty() {
                    continue;
                }
                let w = busy[i % busy.len()];
                let Doing::Busy(job, t) = doing[w] else {
                    unreachable!()
                };
                reference.finished(t);
                let got = server.finish(w, job, t);
                assert_eq!(got, expect(&mut reference, line.len(), halted), "{what}");
                doing[w] = got.map_or(Doing::Blocked, |(t, j)| Doing::Busy(j, t));
                if got.is_none() {
                    line.push(w);
                }
            }
            Step::Halt => {
                server.halt();
                halted = true;
            }
        }
        // The woken workers take, one at a time (a take may wake no one:
        // only a submit or a lease running out wakes).
        loop {
            for w in server.woken(&line) {
                assert_eq!(doing[w], Doing::Blocked, "{what}: worker {w} woken twice");
                doing[w] = Doing::Woken;
                line.retain(|&b| b != w);
            }
            let Some(w) = doing.iter().position(|x| *x == Doing::Woken) else {
                break;
            };
            let got = server.take(w, true);
            let want = if std::mem::take(&mut handed[w]) {
                pool.pop_front()
            } else {
                expect(&mut reference, line.len(), halted)
            };
            assert_eq!(got, want, "{what}: worker {w}'s take, woken");
            assert!(
                got.is_some() || halted,
                "{what}: worker {w} woken for nothing"
            );
            doing[w] = got.map_or(Doing::Blocked, |(t, j)| Doing::Busy(j, t));
            if got.is_none() {
                line.push(w);
            }
        }
        let (idle, pending) = server.counts();
        assert_eq!(
            (idle, pending),
            (line.len() as i64, 0),
            "{what}: the server's idle workers and pending wakes"
        );
        if !line.is_empty() {
            assert_eq!(
                expect(&mut reference, line.len() - 1, halted),
                None,
                "{what}: a job could start while a worker stays blocked"
            );
        }
    }
}

/// `cases` random disciplines and step sequences on `server`.
fn worker_paths(cases: u32, server: &mut impl WorkerCalls) {
    let server = std::cell::RefCell::new(server);
    let case = std::cell::Cell::new(0u32);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&(discipline(false), steps()), |(d, steps)| {
            case.set(case.get() + 1);
            worker_path(*server.borrow_mut(), case.get(), &d, &steps);
            Ok(())
        })
        .unwrap();
    assert!(case.get() >= cases);
}

#[test]
fn the_redis_functions_driven_as_workers_drive_them_hand_out_the_schedulers_jobs() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let con = functions(&server.url);
    worker_paths(256, &mut RedisWorkers(con, String::new(), 0));
}

fn server_plan(server: ServerKind, target: Target, processes: Option<u32>) -> ServerPlan {
    ServerPlan {
        server,
        target,
        processes,
        worker_exe: Some(PathBuf::from(NOISYLAB)),
        durability: noisylab::backend::postgres::server::Durability::FULL,
        persist: false,
        unlogged: false,
    }
}

fn redis_plan(target: Target, processes: Option<u32>) -> ServerPlan {
    server_plan(ServerKind::Redis, target, processes)
}

/// From the server's stamps: each queue's jobs (a tenant's, or a key's
/// where the strategy counts keys) start in its order but for those whose
/// lease ran out (`redelivered`), no queue runs more than its cap at once,
/// never more jobs run than workers; every job either ran or was refused by
/// the limit, once.
fn check_stamps(s: &Scenario, strategy: &Def, jobs: &[JobRecord], redelivered: &[u32]) {
    let population = s.population();
    let by_key = population.by_key(strategy);
    let queues = if by_key {
        population.keys()
    } else {
        population.tenants()
    };
    let mut events = Vec::new();
    // (enqueued, started, queue) of every job that ran and was never
    // handed back: a queue's own jobs start in the order they came (with
    // key turns, a key's own).
    let mut order = Vec::new();
    let turns = population.turns_keys(strategy) && strategy.queue != Queue::Fifo;
    let order_queues = if turns { population.keys() } else { queues };
    for (i, j) in jobs.iter().enumerate() {
        assert_ne!(
            j.enqueued, NEVER,
            "{}: a job never submitted",
            strategy.name
        );
        match j.fate {
            // Wasted: its client had stopped waiting, but it ran.
            Fate::Ran | Fate::Wasted => {
                assert!(j.enqueued <= j.started && j.started < j.finished, "{j:?}");
                assert!(
                    j.finished - j.started >= j.duration,
                    "held its duration: {j:?}"
                );
                let q = j.queue(by_key);
                if !redelivered.contains(&(i as u32)) {
                    order.push((j.enqueued, j.started, if turns { j.key } else { q }));
                }
                events.push((j.started, 1i32, q));
                events.push((j.finished, -1, q));
            }
            Fate::Refused(_) => assert!(strategy.limit.is_some(), "{j:?}"),
            // Its client stopped waiting; dropped at its turn, never run.
            Fate::Cancelled => {
                assert!(j.started == NEVER && j.finished >= j.enqueued, "{j:?}")
            }
            other => panic!("{}: a job ended {other:?}: {j:?}", strategy.name),
        }
    }
    order.sort();
    let mut last_start = vec![0u64; order_queues];
    // Without a cap, fifo starts every job in the order they came.
    let one_line = strategy.queue == Queue::Fifo && strategy.cap.is_none();
    let mut last = 0;
    for (_, started, q) in order {
        let t = q as usize;
        assert!(started >= last_start[t], "queue {t}'s own order");
        last_start[t] = started;
        assert!(!one_line || started >= last, "fifo's one order");
        last = started;
    }
    events.sort();
    let (mut busy, mut per) = (0, vec![0i32; queues]);
    let cap = strategy.cap.map_or(i32::MAX, |c| c as i32);
    for (at, d, t) in events {
        if d > 0 && per[t as usize] >= cap {
            // Started over its cap: only by lending, and only while more
            // than the reserve were idle (the workers not running a job,
            // the taker among them, by the stamps: a superset of those the
            // server counted idle, which leaves out a worker woken and not
            // yet taking).
            let Some(reserve) = strategy.reserve else {
                panic!("queue {t} over its cap of {cap} at {at} ns, without lending")
            };
            assert!(
                busy + (reserve as i32) < s.workers as i32,
                "{}: queue {t} lent a worker at {at} ns with {busy} of {} busy (reserve {reserve})",
                strategy.name,
                s.workers
            );
        }
        busy += d;
        per[t as usize] += d;
        assert!(busy <= s.workers as i32, "more jobs running than workers");
    }
}

#[test]
fn a_lab_on_redis_loses_nothing_and_keeps_every_cap_by_the_servers_clock() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    let mut backend = redis_backend::start(&redis_plan(Target::Own, Some(2)), 4, &[]).unwrap();
    lab_loses_nothing(&mut backend, true);
    let pid = backend.wire.own_server_pid().unwrap();
    drop(backend);
    assert!(!alive(pid), "the server stops with its lab");
}

#[test]
fn a_cap_that_lends_lends_as_the_model_does_on_redis() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate);
    lending_follows_the_model(redis_plan(Target::Own, Some(2)));
}

/// Starts over a cap (lent): each start of a job whose queue (`by_key`:
/// its key, else its tenant) already had `cap` running, by the records'
/// instants (a finish before a start at one instant).
fn lent_starts(jobs: &[JobRecord], cap: u32, by_key: bool) -> Vec<u32> {
    let mut events: Vec<(u64, i32, u32, u32)> = Vec::new();
    for (i, j) in jobs.iter().enumerate().filter(|(_, j)| j.started != NEVER) {
        events.push((j.started, 1, j.queue(by_key), i as u32));
        events.push((j.finished, -1, j.queue(by_key), i as u32));
    }
    events.sort();
    let mut running = std::collections::HashMap::<u32, u32>::new();
    let mut lent = Vec::new();
    for (_, d, q, i) in events {
        let r = running.entry(q).or_default();
        if d > 0 {
            if *r >= cap {
                lent.push(i);
            }
            *r += 1;
        } else {
            *r -= 1;
        }
    }
    lent.sort_unstable();
    lent
}

/// A noisy tenant's 6 jobs of 300 ms, one every 10 ms from 0.1 s, on 4
/// workers, capped at 1 with a reserve of 1: the cap lends two idle
/// workers (the third stays for the neighbours) and, as its jobs end 10 ms
/// apart, lends each finisher's worker again while another is idle; a
/// neighbour's job at 0.2 s starts on the worker kept back. Its lent
/// starts, read from the server's stamps, are the model's, job for job,
/// under fifo, the fair queue and vtc. (The jobs are spaced: at one
/// instant the model ends every job before it starts any, where a server
/// takes each finish with its next take.)
fn lending_follows_the_model(plan: ServerPlan) {
    let text = "name = \"lend\"\nruns = 1\nseed = 1\nworkers = 4\njob_ms = 300\n\
                traffic_s = 0.3\n\n[[tenants]]\nname = \"noisy\"\ncount = 1\n\
                rate_per_s = 100.0\narrivals = \"periodic\"\nfrom_s = 0.1\nuntil_s = 0.16\n\n\
                [[burst]]\ntenant = \"neighbour\"\nat_s = 0.2\njobs = 1\n\n\
                [[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\ncap = 1\nreserve = 1\n\n\
                [[strategy]]\nname = \"fair\"\nqueue = \"fair\"\ncap = 1\nreserve = 1\n\n\
                [[strategy]]\nname = \"vtc\"\nqueue = \"vtc\"\ncap = 1\nreserve = 1\n";
    let s = Scenario::parse(Path::new("lend.toml"), text).unwrap();
    let mut backend = plan.open(&s).unwrap();
    for def in &s.strategy {
        let (record, tally) = checked_run(backend.as_mut(), &s, def);
        assert_eq!(tally.rejected, 0, "{}", def.name);
        let model = lab::Model::new(&s, def, s.seed).run().jobs;
        let by_key = s.population().by_key(def);
        let (here, there) = (
            lent_starts(&record.jobs, 1, by_key),
            lent_starts(&model, 1, by_key),
        );
        assert_eq!(
            there,
            [1, 2, 3, 4, 5],
            "{}: the model lends five times",
            def.name
        );
        assert_eq!(here, there, "{}: lent starts, server and model", def.name);
    }
}

/// The smoke lab (4 workers), with a capped fifo with a limit, a capped
/// vtc that lends, and a fair queue over a noisy tenant's 8 keys (and, with
/// `two_level`, a capped fair queue and a capped vtc over tenants whose keys
/// take turns), on `backend`: nothing lost, every cap kept, every queue's
/// order, by the server's stamps.
fn lab_loses_nothing(backend: &mut dyn Backend, two_level: bool) {
    let mut s = Scenario::load(Path::new("lab/smoke.toml")).unwrap();
    s.strategy.push(strategy_of(&Discipline {
        queue: Queue::Fifo,
        cap: Some(2),
        limit: Some(5),
        reserve: None,
        weights: Vec::new(),
        costs: Vec::new(),
        keys: false,
    }));
    s.strategy.push(strategy_of(&Discipline {
        queue: Queue::Vtc,
        cap: Some(3),
        limit: None,
        reserve: Some(1),
        weights: Vec::new(),
        costs: Vec::new(),
        keys: false,
    }));
    // The noisy tenant split over 8 API keys, each a queue of its own: a
    // fair queue over keys with a cap of 1 a key.
    let mut keyed = std::fs::read_to_string("lab/smoke.toml")
        .unwrap()
        .replace("jobs = 40", "jobs = 40\nkeys = 8")
        + "\n[[strategy]]\nname = \"Fair over keys, cap 1\"\nqueue = \"fair\"\nfair_by = \"key\"\ncap = 1\n";
    if two_level {
        for queue in ["fair", "vtc"] {
            keyed += &format!(
                "\n[[strategy]]\nname = \"{queue} over tenants, keys in turn, cap 2\"\n\
                 queue = \"{queue}\"\nfair_by = \"tenant\"\ncap = 2\n"
            );
        }
    }
    let keyed = Scenario::parse(Path::new("keyed.toml"), &keyed).unwrap();
    assert_eq!(s.workers, 4);
    let labs = [&s, &keyed];
    for (s, def) in labs
        .iter()
        .flat_map(|s| s.strategy.iter().map(move |d| (*s, d)))
    {
        let (record, tally) = checked_run(backend, s, def);
        assert_eq!(tally.unique_jobs, record.jobs.len() as u64);
        assert_eq!(tally.completed + tally.rejected, tally.unique_jobs);
        if def.limit.is_some() {
            assert!(tally.rejected > 0, "the limit of 5 refuses some of 40");
        }
        if def.fair_by == Some(FairBy::Key) {
            // Its keys ran side by side, one each: the server saw the keys.
            assert!(
                most_at_once(&record.jobs) > 1,
                "{}: keys as queues",
                def.name
            );
        }
        let q = record.server.expect("the server's measures");
        // A job is handed out by one worker's call, and a call carries at
        // most one take or finish a worker (PostgreSQL's workers send
        // theirs together).
        assert!(
            q.take_rtt.value_at_quantile(0.5) > 0
                && q.cost.calls >= q.planned as u64 / u64::from(s.workers),
            "{} calls for {} jobs",
            q.cost.calls,
            q.planned
        );
    }
}

/// The most jobs of one tenant that ran at once, by the stamps.
fn most_at_once(jobs: &[JobRecord]) -> i32 {
    let mut events: Vec<(u64, i32, u32)> = jobs
        .iter()
        .filter(|j| j.fate == Fate::Ran)
        .flat_map(|j| [(j.started, 1, j.tenant), (j.finished, -1, j.tenant)])
        .collect();
    events.sort();
    let mut per = std::collections::HashMap::<u32, i32>::new();
    let mut most = 0;
    for (_, d, t) in events {
        let n = per.entry(t).or_default();
        *n += d;
        most = most.max(*n);
    }
    most
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

fn noisylab(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(NOISYLAB)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn the_smoke_lab_on_redis_reproduces_the_model() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate);
    let v = smoke_lab_reproduces_the_model("redis");
    assert_eq!(v["backend"]["processes"], 2);
}

/// The smoke lab on a server of its own of `kind` (`redis`, `postgres`),
/// named by the scenario's `[backend]` with 2 processes, not the command
/// line; its results file names the backend and `validate` finds it
/// reproduces the model, on the first try or, its verdict on stderr, the
/// second (as the conformance suite's smoke labs: a real-clock lab this
/// short can lose a few milliseconds of a makespan's tolerance to a
/// neighbour's load). The results file.
fn smoke_lab_reproduces_the_model(kind: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let smoke = std::fs::read_to_string("lab/smoke.toml").unwrap()
        + &format!("\n[backend]\nurl = \"{kind}\"\nprocesses = 2\n");
    std::fs::write(dir.path().join("smoke.toml"), smoke).unwrap();
    // One try: the lab into folder `out`, then its results file, whether
    // `validate` finds it reproduces the model, and what it printed.
    let try_once = |out: &str| {
        let run = noisylab(&["run", "smoke.toml", "-q", "--out", out], dir.path());
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{stderr}");
        let runs = dir.path().join(out).join("runs");
        let file = std::fs::read_dir(runs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(&file).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["backend"]["kind"], kind);
        let out = noisylab(&["validate", file.to_str().unwrap()], dir.path());
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let holds = stdout.contains("reproduces the model");
        (v, holds, stdout + &String::from_utf8_lossy(&out.stderr))
    };
    let (v, holds, first) = try_once("first");
    if holds {
        return v;
    }
    eprintln!("outside the model on the first try, run once more:\n{first}");
    let (v, holds, second) = try_once("second");
    assert!(holds, "{first}\n{second}");
    v
}

#[test]
fn faults_a_user_meets_first_end_in_one_line() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let smoke = std::fs::canonicalize("lab/smoke.toml").unwrap();
    let smoke = smoke.to_str().unwrap();
    let one_line = |out: &std::process::Output, want: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        // Ours start "noisylab:"; clap's own (a bad value) "error:".
        let line = stderr
            .lines()
            .find(|l| l.starts_with("noisylab:") || l.starts_with("error:"))
            .unwrap_or("");
        assert!(line.contains(want), "want {want:?} in {stderr:?}");
    };
    // No server at that address.
    let port = noisylab::backend::process::free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}/");
    one_line(
        &noisylab(&["run", smoke, "--backend", &url, "-q"], dir.path()),
        "cannot reach the Redis server",
    );
    // Not a backend, on the command line or in the scenario.
    one_line(
        &noisylab(&["run", smoke, "--backend", "rabbit", "-q"], dir.path()),
        "allowed: in-process, redis, redis://",
    );
    let rabbit = std::fs::read_to_string(smoke).unwrap() + "\n[backend]\nurl = \"rabbit\"\n";
    std::fs::write(dir.path().join("rabbit.toml"), rabbit).unwrap();
    one_line(
        &noisylab(&["run", "rabbit.toml", "-q"], dir.path()),
        "backend.url: unknown backend \"rabbit\"; allowed: in-process, redis, redis://",
    );
    // What the functions do not carry yet, before anything starts.
    one_line(
        &noisylab(
            &["run", "lab/layers.toml", "--backend", "redis", "-q"],
            Path::new("."),
        ),
        "rate limits, budgets and the provider's limits: not carried by the Redis backend \
         (carried by: in-process)",
    );
    one_line(
        &noisylab(
            &["run", smoke, "--backend", "redis", "--clock", "virtual"],
            dir.path(),
        ),
        "real timers only",
    );
    // redis-server not on PATH.
    let out = Command::new(NOISYLAB)
        .args(["run", smoke, "--backend", "redis", "-q"])
        .env("PATH", dir.path())
        .current_dir(dir.path())
        .output()
        .unwrap();
    one_line(&out, "redis-server is not on PATH: install it");
}

#[test]
fn a_prefix_in_use_and_a_server_that_dies_mid_run_fail_loudly() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    // Another lab's keys under the prefix: refused by the functions.
    let mut con = functions(&server.url);
    let setup = |con: &mut redis::Connection| {
        redis::cmd("FCALL")
            .arg("noisylab_setup")
            .arg(0)
            .arg("taken:")
            .arg("fair")
            .arg(-1)
            .arg(-1)
            .arg(-1)
            .query::<i64>(con)
    };
    setup(&mut con).unwrap();
    let err = setup(&mut con).unwrap_err().to_string();
    assert!(err.contains("prefix taken: is already in use"), "{err}");
    // The server dies during a run: the run fails with one line naming the
    // backend; the workers and the lab stop.
    let s = Scenario::load(Path::new("lab/smoke.toml")).unwrap();
    let plan = redis_plan(Target::Url(server.url.clone()), Some(2));
    let mut backend = redis_backend::start(&plan, s.workers, &[]).unwrap();
    let killer = {
        let pid = server.pid();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            // SAFETY: a signal to the test's own server.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        })
    };
    let err = failed_run(&mut backend, &s);
    killer.join().unwrap();
    assert!(err.contains("the Redis backend failed"), "{err}");
    drop(backend);
}

/// One run of `def` of `s` on `backend`, seeded `s.seed`, as the lab gives
/// it.
fn run_one(backend: &mut dyn Backend, s: &Scenario, def: &Def) -> Result<RunRecord, RunError> {
    let pool = lab::pool_for(s, def);
    let plan = noisylab::engine::load::plan(s, s.seed);
    let input = RunInput {
        scenario: s,
        strategy: def,
        pool: &pool,
        plan,
        seed: s.seed,
    };
    backend.run(input, &AtomicBool::new(false))
}

/// One run that must finish, held to the server's stamps
/// ([`check_stamps`]) and its figures to its records (every planned job
/// has its attempts, each ended once): the record, and its tally.
fn checked_run(backend: &mut dyn Backend, s: &Scenario, def: &Def) -> (RunRecord, common::Tally) {
    let record = run_one(backend, s, def).unwrap();
    check_stamps(s, def, &record.jobs, &record.redelivered);
    let pool = lab::pool_for(s, def);
    let run = lab::summary::run(s, def, &pool, s.seed, &record, false);
    let tally = common::check_outcomes(s, def, &record.jobs, &run.figures);
    let planned = noisylab::engine::load::plan(s, s.seed).len() as u64;
    assert_eq!(tally.unique_jobs, planned, "{}", def.name);
    (record, tally)
}

/// The smoke lab's first strategy on `backend`, which must fail, within
/// 20 s, in one line: that line.
fn failed_run(backend: &mut dyn Backend, s: &Scenario) -> String {
    let started = std::time::Instant::now();
    let err = match run_one(backend, s, &s.strategy[0]) {
        Ok(_) => panic!("a run that must fail finished"),
        Err(e) => e.to_string(),
    };
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(started.elapsed().as_secs() < 20, "no hang: {err}");
    err
}

/// Processes whose parent is `parent` and whose name is `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // "pid (comm) state ppid …"
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((comm, rest)) = stat.split_once(") ") else {
                return false;
            };
            comm.ends_with(&format!("({name}"))
                && rest.split(' ').nth(1) == Some(&parent.to_string())
                && alive(*pid)
        })
        .collect()
}

/// Processes whose command line holds `needle` (from `/proc`).
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
                && alive(*pid)
        })
        .collect()
}

#[test]
fn a_worker_process_that_exits_is_named_and_the_run_stops() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let s = Scenario::load(Path::new("lab/smoke.toml")).unwrap();
    let plan = redis_plan(Target::Url(server.url.clone()), Some(2));
    let mut backend = redis_backend::start(&plan, s.workers, &[]).unwrap();
    let workers = processes_with(&format!("worker\0--backend\0{}", server.url));
    assert_eq!(workers.len(), 2, "two worker processes: {workers:?}");
    // SAFETY: a signal to a worker process this test's backend started.
    unsafe { libc::kill(workers[0] as libc::pid_t, libc::SIGKILL) };
    let err = failed_run(&mut backend, &s);
    assert!(
        err.contains(&format!("(pid {}) exited", workers[0])),
        "names the process: {err}"
    );
    drop(backend);
    assert!(
        processes_with(&format!("worker\0--backend\0{}", server.url)).is_empty(),
        "the other worker process stops with the backend"
    );
}

/// A quiet lab (`args`, then `-q --out .`) in `dir`, its stderr piped,
/// with the guard that interrupts it: should an assertion fail first, the
/// lab is still interrupted (and so stops its server) rather than left
/// running.
fn spawn_lab(dir: &Path, args: &[&str]) -> (std::process::Child, Interrupt) {
    let child = Command::new(NOISYLAB)
        .args(args)
        .args(["-q", "--out", "."])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let guard = Interrupt(child.id());
    (child, guard)
}

/// Ctrl-C to the test's own child when dropped, a failed assertion's
/// unwinding too.
struct Interrupt(u32);

impl Drop for Interrupt {
    fn drop(&mut self) {
        // SAFETY: a signal to a process this test started.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGINT) };
    }
}

#[test]
fn ctrl_c_on_redis_leaves_no_server_behind() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate);
    ctrl_c_leaves_no_server("redis", "redis-server", 10, 1500);
}

/// The article lab on a server of its own (`--backend kind`), interrupted
/// once `settle_ms` after its server (a `name` process whose parent is the
/// lab, up within `start_s`) is up: it exits 130 and the server is gone.
/// The lab's pid.
fn ctrl_c_leaves_no_server(kind: &str, name: &str, start_s: u64, settle_ms: u64) -> u32 {
    let dir = tempfile::tempdir().unwrap();
    let article = std::fs::canonicalize("lab/article.toml").unwrap();
    let article = article.to_str().unwrap();
    let (child, ctrl_c) = spawn_lab(dir.path(), &["run", article, "--backend", kind]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(start_s);
    let mut own = Vec::new();
    while own.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        own = children_named(child.id(), name);
    }
    assert_eq!(own.len(), 1, "the lab started its server");
    let lab = child.id();
    std::thread::sleep(std::time::Duration::from_millis(settle_ms));
    drop(ctrl_c); // Ctrl-C, once
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(!alive(own[0]), "no server left: {stderr}");
    lab
}

#[test]
fn workers_started_elsewhere_join_a_lab_and_run_it() {
    use std::io::BufRead;
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let smoke = std::fs::canonicalize("lab/smoke.toml").unwrap();
    let smoke = smoke.to_str().unwrap();
    let args = ["run", smoke, "--backend", &server.url, "--processes", "0"];
    let (mut lab, ctrl_c) = spawn_lab(dir.path(), &args);
    // The coordinator says how to join, in one line.
    let mut lines = std::io::BufReader::new(lab.stderr.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("workers to join"))
        .expect("a line saying how to join");
    let id = line
        .split("--run ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no lab id in {line:?}"));
    // Two processes of 2 workers each, as a second machine would start them.
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(NOISYLAB)
                .args(["worker", "--backend", &server.url, "--run", id])
                .args(["--workers", "2"])
                .spawn()
                .unwrap()
        })
        .collect();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = lab.wait().unwrap();
    std::mem::forget(ctrl_c); // the lab has ended
    assert_eq!(status.code(), Some(0), "{}", rest.join("\n"));
    for mut w in workers {
        // The coordinator tells its workers to quit when it ends.
        assert!(w.wait().unwrap().success(), "a worker exits cleanly");
    }
    let file = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(v["backend"]["processes"], 0, "workers from elsewhere");
    assert_eq!(v["strategies"].as_array().unwrap().len(), 2);
}
