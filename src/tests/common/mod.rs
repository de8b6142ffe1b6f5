//! Checks shared by the integration tests, and the oracle the reported
//! outcomes are held to ([`tally`], [`check_outcomes`]).
//!
//! Mutations this suite must catch. Each was put in a scratch copy and the
//! suite run (`cargo test --lib --test limits --test workload --test article
//! --test robust --test scale --test fairness --test sched --test layout`,
//! and `--test backend` for the servers' code, with redis-server and
//! PostgreSQL installed); rerun them after a change to the code they touch:
//!
//! | mutation | caught by |
//! |---|---|
//! | `lab/delivery.rs` drops budget refusals (`Fate::Refused(l) if l != Budget`) | `limits`: `nothing_is_lost_under_any_retry_policy`, `the_lab_scenarios_lose_nothing` |
//! | … drops provider refusals | the same, and `a_timed_out_call_the_provider_refuses_later_is_not_sent_again` |
//! | `outcome()` counts timed-out jobs as rejected | `nothing_is_lost_under_any_retry_policy` |
//! | `outcome()` counts given-up jobs as rejected | the three `limits` tests above |
//! | per-class attempts count first attempts only | `limits` (five tests) |
//! | the engine records a rate-limit refusal as the queue limit's | `a_token_bucket_facing_saturating_demand_admits_burst_plus_rate_times_t`, `nothing_is_lost_under_any_retry_policy` |
//! | `Engine::refuse` follows up an attempt its client abandoned (a second retry) | `a_timed_out_call_the_provider_refuses_later_is_not_sent_again`, `nothing_is_lost_under_any_retry_policy` |
//! | lending starts only while more than `reserve + 1` workers are idle | `fairness`: `a_lending_cap_leaves_no_more_than_its_reserve_idle_while_work_waits` |
//! | `use super::report::Exporter as _;` in `engine/mod.rs` | `layout`: `modules_use_only_the_layers_below_their_own` |
//! | `super::report::…` inside a function in `sched/mod.rs` | the same |
//! | `use crate::{sched::{JobId}, report::Exporter};` in `engine/mod.rs` | the same |
//! | the precise timer's spin ends 20 µs early | `engine::clock::tests::a_real_clock_never_wakes_before_the_instant_asked_for` |
//! | `noisylab.lua`'s vtc charges a job's cost without its tenant's weight | `backend`: `the_redis_functions_take_the_same_jobs_as_the_in_process_schedulers` |
//! | … lifts a newcomer into an empty backlog to 0, not the last leaver's counter | the same |
//! | `noisylab.lua`'s finish fences before it reaps (a finish past its lease, with no call between, accepted) | `backend`: `a_finish_after_its_lease_s_instant_is_refused_with_no_call_between` |
//! | `noisylab.sql`'s `noisylab_accepted` counts the refused submits' rows too | `backend`: `a_finish_after_its_lease_s_instant_is_refused_with_no_call_between_on_postgres` |
//! | … the Lua's wake ignores lending (wakes for runnable jobs only) | `backend`: `the_redis_functions_driven_as_workers_drive_them_hand_out_the_schedulers_jobs` |
//! | … the Lua's take lends with one idle worker fewer (the asker not counted) | the same |
//! | … the Lua hands out jobs after a halt | the same |
//! | … the Lua's wake ignores the tokens already pending | the same |
//! | … the Lua lends while `reserve` workers are idle (`>=` for `>`) | the same, and `a_cap_that_lends_lends_as_the_model_does_on_redis` |
//! | … the Lua's renew counts no renewal | `backend`: `jobs_several_leases_long_renew_them_and_run_once` |
//! | `noisylab.sql`'s wake ignores lending (wakes for runnable jobs only) | `backend`: `the_sql_functions_driven_as_workers_drive_them_hand_out_the_schedulers_jobs` |
//! | … its start keeps a tenant in line at its cap (`<=` for `<`) | `backend`: `the_sql_functions_take_the_same_jobs_as_the_in_process_schedulers`, `the_sql_functions_driven_as_workers_drive_them_hand_out_the_schedulers_jobs` |
//! | … its finish leaves a tenant back below its cap first to lend to (`capped` kept) | `backend`: `the_sql_functions_take_the_same_jobs_as_the_in_process_schedulers` |
//! | … its vtc start charges a job's cost without its tenant's weight | both `the_sql_functions_…` tests |
//! | … a finish while a handed job waits runs its own job | `backend`: `a_finish_while_a_handed_job_waits_for_its_worker_runs_that_job_and_keeps_the_tenant_s_order` |
//! | `worker.sql`'s `noisylab_steps` does not carry the queue's row from one step to the next (`c := s.c` left out) | `backend`: `steps_sent_together_answer_and_leave_the_queue_as_the_same_calls_one_by_one` |
//! | the workers' combiner sends again a call already on its way in another thread's batch (its `waiting` check left out) | `noisylab` (lib): `backend::combine::tests::a_call_on_its_way_in_another_s_batch_is_not_sent_again_when_a_lane_frees` |
//! | the coordinator never turns a slow link well again (the delay's end ignored) | `backend`: `a_slow_link_holds_its_process_s_jobs_longer_and_loses_nothing` |
//! | the worker renews while half the lease or more is left (`>=` for `>`) | `noisylab` (lib): `backend::worker::tests::the_worker_renews_as_often_as_the_model_counts` |
//! | the machine check leaves out the CPU of the children the lab reaped | `noisylab` (lib): `machine::tests::processes_the_lab_started_are_the_lab_and_the_rest_are_others` |

use std::collections::{BTreeMap, HashMap};

use noisylab::engine::traffic::Refusal;
use noisylab::engine::{Fate, JobRecord, NEVER};
use noisylab::results::Figures;
use noisylab::scenario::{Retry, Scenario, Strategy};

/// For a lab without clients or front-door limits: every planned job was
/// sent once and either ran, holding its worker exactly its duration, or was
/// refused by the queue's limit (never where there is none); a tenant's jobs
/// start in its own order, no tenant is above its cap, and never more jobs
/// run than there are workers.
#[allow(dead_code)]
pub fn check_invariants(scenario: &Scenario, strategy: &Strategy, jobs: &[JobRecord]) {
    for j in jobs {
        assert_ne!(j.enqueued, NEVER, "every planned job is submitted");
        assert_eq!(j.attempt, 1, "sent once");
        match j.fate {
            Fate::Ran => {
                assert!(j.started >= j.enqueued && j.started != NEVER);
                assert_eq!(
                    j.finished - j.started,
                    j.duration,
                    "a job holds its worker exactly its duration"
                );
            }
            Fate::Refused(Refusal::Limit) => {
                assert!(strategy.limit.is_some(), "refused without a limit: {j:?}");
                assert_eq!((j.started, j.finished), (NEVER, NEVER), "{j:?}");
            }
            other => panic!("{}: a job ended {other:?}: {j:?}", strategy.name),
        }
    }
    let tenants = scenario.population().tenants();
    let mut last_start = vec![0u64; tenants];
    let mut events: Vec<(u64, i32, usize)> = Vec::new();
    for j in jobs.iter().filter(|j| j.started != NEVER) {
        let t = j.tenant as usize;
        assert!(
            j.started >= last_start[t],
            "tenant {t}'s jobs start in their own order"
        );
        last_start[t] = j.started;
        events.push((j.started, 1, t));
        events.push((j.finished, -1, t));
    }
    // Finishes before starts at the same instant.
    events.sort();
    let mut running = vec![0i32; tenants];
    let mut busy = 0i32;
    let cap = strategy.cap.map_or(i32::MAX, |c| c as i32);
    for (_, delta, t) in events {
        running[t] += delta;
        busy += delta;
        assert!(running[t] <= cap, "tenant {t} above its cap");
        assert!(
            busy <= scenario.workers as i32,
            "more jobs running than workers"
        );
    }
}

/// Per class: submitted = completed + rejected; the classes add up to the
/// run's totals; and each class's counts are those of its tenants' jobs.
#[allow(dead_code)] // each test binary compiles this module; not all use it
pub fn check_classes(scenario: &Scenario, jobs: &[JobRecord], figures: &Figures) {
    let population = scenario.population();
    assert_eq!(
        figures.classes.len(),
        population.classes.len(),
        "a figure per class"
    );
    let mut total_jobs = 0;
    let mut total_rejected = 0;
    for c in &population.classes {
        let f = &figures.classes[&c.name];
        let mine: Vec<&JobRecord> = jobs
            .iter()
            .filter(|j| j.tenant >= c.first && j.tenant < c.first + c.count)
            .collect();
        let completed = mine.iter().filter(|j| j.finished != NEVER).count() as u64;
        let rejected = mine.iter().filter(|j| j.started == NEVER).count() as u64;
        assert_eq!(f.jobs, mine.len() as u64, "{}: jobs", c.name);
        assert_eq!(
            f.jobs,
            completed + rejected,
            "{}: submitted = completed + rejected",
            c.name
        );
        assert_eq!(f.rejected, rejected, "{}: rejected", c.name);
        let out: u64 = mine
            .iter()
            .filter(|j| j.started != NEVER)
            .map(|j| u64::from(j.tokens_out))
            .sum();
        assert_eq!(f.tokens_out, out, "{}: tokens out", c.name);
        total_jobs += f.jobs;
        total_rejected += f.rejected;
    }
    assert_eq!(
        total_jobs,
        jobs.len() as u64,
        "the classes add up to the whole"
    );
    assert_eq!(total_rejected, figures.rejected, "rejections add up");
}

/// A class's (or the run's) outcomes, counted from the job records alone,
/// by this file's own reading of the definitions in `results::Delivery`:
/// the oracle the reported figures are held to. Nothing here calls the
/// code that computes those figures (`lab::delivery`, `lab::summary`).
#[allow(dead_code)] // each test binary compiles this module; not all use it
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Records that were sent.
    pub attempts: u64,
    /// Distinct jobs (first attempts and their retries, counted once).
    pub unique_jobs: u64,
    pub completed: u64,
    pub given_up: u64,
    pub rejected: u64,
    pub timed_out: u64,
    /// Refused attempts, by layer: limit, rate, budget, provider.
    pub refused: [u64; 4],
}

#[allow(dead_code)]
impl Tally {
    fn add(&mut self, o: &Tally) {
        self.attempts += o.attempts;
        self.unique_jobs += o.unique_jobs;
        self.completed += o.completed;
        self.given_up += o.given_up;
        self.rejected += o.rejected;
        self.timed_out += o.timed_out;
        for (a, b) in self.refused.iter_mut().zip(o.refused) {
            *a += b;
        }
    }
}

/// Attempts in `jobs` refused at `layer`, from their records.
#[allow(dead_code)]
pub fn refused_at(jobs: &[JobRecord], layer: Refusal) -> u64 {
    jobs.iter()
        .filter(|j| j.fate == Fate::Refused(layer))
        .count() as u64
}

/// Where a layer's count sits in [`Tally::refused`].
fn layer_index(layer: Refusal) -> usize {
    match layer {
        Refusal::Limit => 0,
        Refusal::Rate => 1,
        Refusal::Budget => 2,
        Refusal::Provider => 3,
    }
}

/// Each class's [`Tally`] (by name) and the run's, from its records. A
/// class's clients retry or not as the scenario configures them; a job ends
/// as its highest-numbered attempt did: an answer is completed; a refusal or
/// a timeout is given up for a client that retries, else rejected or timed
/// out.
#[allow(dead_code)]
pub fn tally(
    scenario: &Scenario,
    strategy: &Strategy,
    jobs: &[JobRecord],
) -> (BTreeMap<String, Tally>, Tally) {
    let population = scenario.population();
    let retrying: Vec<bool> = noisylab::lab::limits::class_clients(scenario, strategy)
        .iter()
        .map(|c| c.retry != Retry::None)
        .collect();
    let class_of = |j: &JobRecord| {
        population
            .classes
            .iter()
            .position(|c| j.tenant >= c.first && j.tenant < c.first + c.count)
            .expect("every tenant is in a class")
    };
    let mut classes = vec![Tally::default(); population.classes.len()];
    // Each job's last attempt: the highest attempt number among its records.
    let mut last: HashMap<u32, &JobRecord> = HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if j.attempt == 1 {
            assert_eq!(j.origin as usize, i, "a first attempt is its own origin");
        }
        // A finished run sends every attempt and resolves it.
        assert_ne!(j.enqueued, NEVER, "an attempt never sent: {j:?}");
        assert_ne!(j.fate, Fate::Pending, "an attempt never resolved: {j:?}");
        classes[class_of(j)].attempts += 1;
        let slot = last.entry(j.origin).or_insert(j);
        if j.attempt > slot.attempt {
            assert_eq!(j.tenant, slot.tenant, "a retry is its job's tenant's");
            *slot = j;
        }
    }
    for j in jobs {
        if let Fate::Refused(layer) = j.fate {
            classes[class_of(j)].refused[layer_index(layer)] += 1;
        }
    }
    // A job's attempts are numbered 1, 2, … n, each once: one client sends
    // one attempt at a time.
    let mut per_job: HashMap<u32, u64> = HashMap::new();
    for j in jobs {
        *per_job.entry(j.origin).or_default() += 1;
    }
    for (origin, n) in &per_job {
        let top = last[origin];
        assert_eq!(
            u64::from(top.attempt),
            *n,
            "job {origin}: {n} records, highest attempt {}: {top:?}",
            top.attempt
        );
    }
    for j in last.values() {
        let k = class_of(j);
        let t = &mut classes[k];
        t.unique_jobs += 1;
        match (j.fate, retrying[k]) {
            (Fate::Ran, _) => t.completed += 1,
            (Fate::Pending, _) => unreachable!("checked above"),
            (_, true) => t.given_up += 1,
            (Fate::Refused(_), false) => t.rejected += 1,
            (Fate::Wasted | Fate::Cancelled, false) => t.timed_out += 1,
        }
    }
    let mut total = Tally::default();
    for t in &classes {
        total.add(t);
    }
    let named = population
        .classes
        .iter()
        .map(|c| c.name.clone())
        .zip(classes)
        .collect();
    (named, total)
}

/// What the figures report, in a [`Tally`]'s shape.
#[allow(dead_code)]
fn reported(d: &noisylab::results::Delivery, rejected: u64) -> Tally {
    Tally {
        attempts: d.attempts,
        unique_jobs: d.unique_jobs,
        completed: d.completed,
        given_up: d.given_up,
        rejected,
        timed_out: d.timed_out,
        refused: [
            d.refused.limit,
            d.refused.rate,
            d.refused.budget,
            d.refused.provider,
        ],
    }
}

/// Every outcome and refusal the figures report, per class and in all,
/// equals the oracle's count from the same run's records; and so do the
/// class's attempts (`jobs`) and amplification. Returns the run's tally.
#[allow(dead_code)]
pub fn check_outcomes(
    scenario: &Scenario,
    strategy: &Strategy,
    jobs: &[JobRecord],
    figures: &Figures,
) -> Tally {
    let (classes, total) = tally(scenario, strategy, jobs);
    let amplification = |t: &Tally| {
        if t.unique_jobs == 0 {
            0.0
        } else {
            t.attempts as f64 / t.unique_jobs as f64
        }
    };
    for (name, want) in &classes {
        let c = &figures.classes[name];
        let what = format!("{}: class {name}", strategy.name);
        assert_eq!(&reported(&c.delivery, c.rejected), want, "{what}");
        assert_eq!(c.jobs, want.attempts, "{what}: jobs (attempts sent)");
        assert_eq!(c.delivery.amplification, amplification(want), "{what}");
    }
    let what = format!("{}: all classes", strategy.name);
    assert_eq!(
        reported(&figures.delivery, figures.rejected),
        total,
        "{what}"
    );
    assert_eq!(
        figures.delivery.amplification,
        amplification(&total),
        "{what}"
    );
    total
}

/// The whole lab on the virtual clock, and each of its runs held to the
/// oracle: run `k` of a strategy is re-run on its seed (`seed + k`) for its
/// records. Returns every run's tally.
#[allow(dead_code)]
pub fn check_lab_outcomes(scenario: &Scenario) -> Vec<Tally> {
    let results = noisylab::lab::virtual_lab(scenario.clone());
    let mut out = Vec::new();
    for (def, st) in scenario.strategy.iter().zip(&results.strategies) {
        assert_eq!(st.name, def.name);
        for (k, run) in st.runs.iter().enumerate() {
            let seed = scenario.seed + k as u64;
            assert_eq!(run.seed, seed, "{}: run {k}'s seed", def.name);
            let jobs = noisylab::lab::Model::new(scenario, def, seed).run().jobs;
            out.push(check_outcomes(scenario, def, &jobs, &run.figures));
        }
    }
    out
}
