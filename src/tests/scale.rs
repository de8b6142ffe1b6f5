//! The scale scenario in CI, at a tenth of its size: same shape, invariants kept.

mod common;

use std::path::Path;

use noisylab::engine::traffic::Refusal;
use noisylab::lab;
use noisylab::scenario::Scenario;

#[test]
fn the_scale_scenario_at_a_tenth_keeps_every_invariant() {
    let mut s = Scenario::load(Path::new("lab/scale.toml")).unwrap();
    s.normal.as_mut().unwrap().tenants /= 10;
    s.workers /= 10;
    s.burst[0].jobs /= 10;
    for strategy in &mut s.strategy {
        strategy.cap = strategy.cap.map(|c| c / 10);
        strategy.limit = strategy.limit.map(|l| l / 10);
    }
    let strategies = s.strategy.clone();
    for strategy in &strategies {
        let jobs = lab::Model::new(&s, strategy, s.seed).run().jobs;
        common::check_invariants(&s, strategy, &jobs);
        let burst_done = jobs
            .iter()
            .filter(|j| {
                j.tenant == s.normal.as_ref().unwrap().tenants
                    && j.finished != noisylab::engine::NEVER
            })
            .map(|j| j.finished)
            .max()
            .unwrap();
        if strategy.cap == Some(40) && strategy.limit.is_none() {
            // 100,000 jobs, 40 at a time, 100 ms each: 2,500 rounds = 250 s after t = 2 s.
            assert_eq!(burst_done, 252_000_000_000, "{}", strategy.name);
        }
        if strategy.limit.is_some() {
            // 40 start, 1,000 wait, the rest are refused.
            assert_eq!(
                common::refused_at(&jobs, Refusal::Limit),
                100_000 - 40 - 1_000
            );
        }
    }
}
