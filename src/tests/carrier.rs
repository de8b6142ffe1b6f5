//! The second kind of queue behind the seam: one that only carries jobs,
//! whose discipline is someone else's. Here a plain FIFO broker in this
//! process (one shared queue and worker threads that take from it),
//! declared to carry nothing beyond the core: no discipline of noisylab's,
//! no server clock, no leases, no clients. Its workers report when each
//! job started and ended on their own clock, as a team's system would, and
//! the lab computes every figure from that record alone. Its shared FIFO
//! reproduces the model; what it does not carry is refused in one line.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use noisylab::backend::{Backend, Given, QueueBackend, RunError, RunInput, RunRecord};
use noisylab::engine::clock::sleep_until_blocking;
use noisylab::engine::{Fate, Nanos, Timer, stats_from_records};
use noisylab::lab::{self, LabPlan};
use noisylab::output::progress::Progress;
use noisylab::results::ClockKind;
use noisylab::scenario::Scenario;
use noisylab::scenario::backends::Declared;

static BROKER: Declared = Declared {
    name: "fifo-broker",
    title: "plain FIFO broker",
    schemes: &[],
    url_form: None,
    own: "a FIFO queue and worker threads in this process",
    yours: "",
    own_options: &[],
    carries: &[],
    on_the_model: &[],
};

fn broker() -> QueueBackend {
    QueueBackend::Other(Given {
        declared: &BROKER,
        open: |_| Ok(Box::new(Broker)),
    })
}

struct Broker;

/// The broker's queue: jobs in arrival order, idle workers, and whether
/// the run's submits are over.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<usize>,
    idle: u32,
    done: bool,
}

/// Workers hold their jobs on an OS sleep, as a team's workers would: no
/// spin (four spinning threads on two cores would hold each other up).
const MARGIN: Duration = Duration::ZERO;

impl Backend for Broker {
    /// A queue outside the engine: its hand-offs are in each job's hold, so
    /// the model replays the run with the run's own overshoot.
    fn facts(&self) -> Option<noisylab::results::BackendFacts> {
        Some(noisylab::results::BackendFacts {
            kind: BROKER.name.into(),
            version: "threads in this process".into(),
            processes: 0,
            durability: None,
        })
    }

    fn run(&mut self, input: RunInput<'_>, _stop: &AtomicBool) -> Result<RunRecord, RunError> {
        let origin = Instant::now();
        let at = move |ns: Nanos| origin + Duration::from_nanos(ns);
        let since = move || origin.elapsed().as_nanos() as Nanos;
        let shared = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let holds: Arc<Vec<Nanos>> = Arc::new(input.plan.iter().map(|j| j.duration).collect());
        let workers: Vec<_> = (0..input.pool.workers)
            .map(|_| {
                let (shared, holds) = (shared.clone(), holds.clone());
                std::thread::spawn(move || {
                    let mut reports = Vec::new();
                    loop {
                        let (lock, wake) = &*shared;
                        let mut q = lock.lock().unwrap();
                        q.idle += 1;
                        while q.jobs.is_empty() && !q.done {
                            q = wake.wait(q).unwrap();
                        }
                        q.idle -= 1;
                        let Some(i) = q.jobs.pop_front() else { break };
                        let start = since();
                        drop(q);
                        sleep_until_blocking(at(start + holds[i]), MARGIN);
                        reports.push((i, start, since()));
                    }
                    reports
                })
            })
            .collect();
        let mut jobs = input.plan;
        let mut found_idle = vec![false; jobs.len()];
        for i in 0..jobs.len() {
            sleep_until_blocking(at(jobs[i].planned), MARGIN);
            let (lock, wake) = &*shared;
            let mut q = lock.lock().unwrap();
            jobs[i].enqueued = since();
            found_idle[i] = q.idle as usize > q.jobs.len();
            q.jobs.push_back(i);
            wake.notify_one();
        }
        shared.0.lock().unwrap().done = true;
        shared.1.notify_all();
        let mut end = 0;
        for worker in workers {
            for (i, start, finish) in worker.join().expect("a worker thread") {
                (jobs[i].started, jobs[i].finished, jobs[i].fate) = (start, finish, Fate::Ran);
                end = end.max(finish);
            }
        }
        let stats = stats_from_records(input.pool, &jobs, &found_idle, end);
        Ok(RunRecord {
            jobs,
            stats,
            server: None,
            late: None,
            redelivered: Vec::new(),
            ran_twice: Vec::new(),
            faults: None,
        })
    }
}

fn plan(scenario: Scenario) -> LabPlan {
    LabPlan {
        scenario,
        clock: ClockKind::Real,
        timer: Timer::default(),
        keep_raw: false,
        backend: broker(),
    }
}

/// The smoke lab's shared FIFO on the broker: every planned job ran once,
/// and the figures from its workers' reports reproduce the model.
#[test]
fn a_queue_that_only_carries_jobs_runs_the_shared_fifo_as_the_model_does() {
    let mut scenario = Scenario::load(std::path::Path::new("lab/smoke.toml")).unwrap();
    scenario.select(&["Shared FIFO".to_string()]).unwrap();
    let outcome = lab::run(
        &plan(scenario),
        &AtomicBool::new(false),
        &Progress::hidden(),
    )
    .unwrap();
    let results = &outcome.results;
    assert_eq!((outcome.interrupted, &outcome.failed), (false, &None));
    let run = &results.strategies[0].runs[0];
    let planned = noisylab::engine::load::plan(&results.scenario, run.seed).len();
    let class_jobs: u64 = run.figures.classes.values().map(|c| c.jobs).sum();
    assert_eq!(class_jobs, planned as u64, "every planned job ran once");
    assert_eq!(results.backend.as_ref().unwrap().kind, "fifo-broker");
    // The model's verdict judges a machine, within the run's own error; the
    // broker's order is held to FIFO by its records.
    let verdict = noisylab::validate::model::against_model(results);
    assert!(
        verdict.reproduces(),
        "the broker's FIFO against the model: {:?}",
        verdict.failed()
    );
    let s = &results.scenario;
    let def = &s.strategy[0];
    let pool = lab::pool_for(s, def);
    let input = RunInput {
        scenario: s,
        strategy: def,
        pool: &pool,
        plan: noisylab::engine::load::plan(s, s.seed),
        seed: s.seed,
    };
    let mut jobs = Broker.run(input, &AtomicBool::new(false)).unwrap().jobs;
    jobs.sort_by_key(|j| j.enqueued);
    assert!(
        jobs.windows(2).all(|w| w[0].started <= w[1].started),
        "jobs start in the order they were queued"
    );
}

/// A strategy the broker cannot run, and a fault, are refused before
/// anything starts, in one line naming what it does not carry.
#[test]
fn what_a_carrier_does_not_carry_is_refused_before_it_starts() {
    let scenario = Scenario::load(std::path::Path::new("lab/smoke.toml")).unwrap();
    let e = lab::run(
        &plan(scenario),
        &AtomicBool::new(false),
        &Progress::hidden(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "strategy[1] (\"Fair queue with cap of 2\"): noisylab's queue disciplines: not carried \
         by the plain FIFO broker backend (carried by: in-process, redis, postgres)"
    );
    let mut faulty = Scenario::load(std::path::Path::new("lab/faults.toml")).unwrap();
    faulty.select(&["Shared FIFO".to_string()]).unwrap();
    faulty.backend = None;
    let e = lab::run(&plan(faulty), &AtomicBool::new(false), &Progress::hidden()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("fault[0]: a kill_worker fault: not carried by the plain FIFO broker"),
        "{e}"
    );
}
