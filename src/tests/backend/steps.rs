//! On PostgreSQL: the takes and finishes of several workers sent together
//! (`noisylab_steps`, as a worker process's threads send theirs) answer
//! each worker, and leave the queue, as the same calls sent one by one.

use noisylab::backend::postgres::worker::{STEPS, Step, StepArrays, job_of, step_answers};
use noisylab::backend::worker::Job;
use proptest::prelude::*;

use super::postgres::{cluster, schema, setup, submit};
use super::{Discipline, discipline, one_at_a_time};

const WORKERS: usize = 6;

/// Jobs submitted (their tenants), then the workers that may step (busy:
/// its finish; woken: its take) and whose `go` is set step, in the order
/// their `order` sorts them.
#[derive(Debug, Clone)]
struct Round {
    tenants: Vec<u32>,
    go: Vec<bool>,
    order: Vec<u8>,
}

fn rounds() -> impl Strategy<Value = Vec<Round>> {
    let round = (
        prop::collection::vec(0u32..5, 0..5),
        prop::collection::vec(any::<bool>(), WORKERS),
        prop::collection::vec(any::<u8>(), WORKERS),
    )
        .prop_map(|(tenants, go, order)| Round { tenants, go, order });
    // At most 44 jobs: the discipline draws 120 costs.
    prop::collection::vec(round, 1..12)
}

/// One schema's queue: the steps sent one call each, or all in one.
struct Queue {
    client: postgres::Client,
    together: bool,
}

impl Queue {
    fn setup(&mut self, d: &Discipline, first: bool) {
        let c = &mut self.client;
        setup(c, d, "st_");
        // Leases no step outlives: each finish names its lease.
        c.execute("SELECT noisylab_lease(3600000000)", &[]).unwrap();
        if first {
            for me in 1..=WORKERS as i32 {
                c.execute("SELECT noisylab_ready($1)", &[&me]).unwrap();
            }
        }
    }

    fn submit(&mut self, job: u32, tenant: u32, cost: f64) -> Result<(), u32> {
        submit(&mut self.client, job, tenant, cost)
    }

    fn steps(&mut self, steps: &[Step]) -> Vec<Option<Job>> {
        if self.together {
            let arrays = StepArrays::of(steps);
            let rows = self.client.query(STEPS, &arrays.params()).unwrap();
            return step_answers(steps, &rows).unwrap();
        }
        steps
            .iter()
            .map(|s| {
                let row = match s.finish {
                    None => self.client.query_one(
                        "SELECT job, tenant, lease FROM noisylab_take($1, $2)",
                        &[&s.me, &s.woken],
                    ),
                    Some(j) => self.client.query_one(
                        "SELECT job, tenant, lease FROM noisylab_finish($1, $2, $3, $4)",
                        &[
                            &s.me,
                            &i64::from(j.id),
                            &(j.queue as i32),
                            &(j.lease as i64),
                        ],
                    ),
                }
                .unwrap();
                job_of(&row, 0)
            })
            .collect()
    }

    fn woken(&mut self) -> Vec<i32> {
        self.client
            .query("SELECT worker FROM woken ORDER BY worker", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Everything the queue holds but the clock's stamps.
    fn state(&mut self) -> Vec<Option<String>> {
        let r = self
            .client
            .query_one(
                "SELECT (SELECT string_agg(format('%s %s %s %s %s', id, tenant, state, lid, woke), ','
                                           ORDER BY id) FROM job),
                        (SELECT string_agg(t::text, ',' ORDER BY t.t) FROM tenant t),
                        (SELECT (queued, runnable, idle, pending, done, vlast, taken, newest)::text
                           FROM cfg),
                        (SELECT string_agg(worker || ':' || since, ',' ORDER BY since) FROM idle),
                        (SELECT string_agg(worker || ':' || handed, ',' ORDER BY worker) FROM woken),
                        (SELECT string_agg(h::text, ',' ORDER BY seq) FROM handed h)",
                &[],
            )
            .unwrap();
        (0..6).map(|i| r.get(i)).collect()
    }
}

/// One case on both queues; how many of its calls sent together carried
/// more than one step.
fn same_steps(apart: &mut Queue, together: &mut Queue, d: &Discipline, rounds: &[Round]) -> u32 {
    let mut doing: Vec<Option<Job>> = vec![None; WORKERS];
    let start: Vec<Step> = (1..=WORKERS as i32)
        .map(|me| Step {
            me,
            woken: false,
            finish: None,
        })
        .collect();
    assert_eq!(apart.steps(&start), together.steps(&start));
    let (mut next_job, mut batches) = (0u32, 0);
    for (k, round) in rounds.iter().enumerate() {
        let what = format!("round {k} of {rounds:?} under {d:?}");
        for &t in &round.tenants {
            let cost = d.costs[next_job as usize];
            let a = apart.submit(next_job, t, cost);
            assert_eq!(a, together.submit(next_job, t, cost), "{what}");
            next_job += 1;
        }
        let woken = apart.woken();
        assert_eq!(woken, together.woken(), "{what}");
        let mut steps: Vec<(u8, Step)> = (0..WORKERS)
            .filter(|&w| round.go[w])
            .filter_map(|w| {
                let me = w as i32 + 1;
                let step = match doing[w] {
                    Some(job) => Step {
                        me,
                        woken: false,
                        finish: Some(job),
                    },
                    None if woken.contains(&me) => Step {
                        me,
                        woken: true,
                        finish: None,
                    },
                    None => return None,
                };
                Some((round.order[w], step))
            })
            .collect();
        steps.sort_by_key(|&(o, _)| o);
        let steps: Vec<Step> = steps.into_iter().map(|(_, s)| s).collect();
        let got = apart.steps(&steps);
        assert_eq!(got, together.steps(&steps), "{what}: steps {steps:?}");
        for (s, next) in steps.iter().zip(got) {
            doing[s.me as usize - 1] = next;
        }
        batches += u32::from(steps.len() > 1);
        assert_eq!(apart.state(), together.state(), "{what}: steps {steps:?}");
    }
    batches
}

#[test]
fn steps_sent_together_answer_and_leave_the_queue_as_the_same_calls_one_by_one() {
    let _turn = one_at_a_time();
    let Some(cluster) = cluster() else { return };
    let mut apart = Queue {
        client: schema(&cluster.url, "st_apart"),
        together: false,
    };
    let mut together = Queue {
        client: schema(&cluster.url, "st_together"),
        together: true,
    };
    let (cases, batches) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let cell = std::cell::RefCell::new((&mut apart, &mut together));
    runner
        .run(&(discipline(false), rounds()), |(d, rounds)| {
            let (apart, together) = &mut *cell.borrow_mut();
            apart.setup(&d, cases.get() == 0);
            together.setup(&d, cases.get() == 0);
            cases.set(cases.get() + 1);
            batches.set(batches.get() + same_steps(apart, together, &d, &rounds));
            Ok(())
        })
        .unwrap();
    // Not vacuous: calls of several steps were sent.
    let (cases, batches) = (cases.get(), batches.get());
    assert!(
        batches > 20,
        "{batches} calls of several steps in {cases} cases"
    );
}
