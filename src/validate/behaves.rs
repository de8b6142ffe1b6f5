//! Which of the post's strategies a queue behaves like, where the queue's
//! discipline is its own (`--backend http://…`, a team's queue): the model
//! runs the results' scenario, seeds and runs under each of the post's five
//! strategies, and each is ranked by its distance from what the queue did.
//!
//! The distance is the mean, over the figures both have, of the absolute
//! natural log of their ratio: the neighbours' wait p50, p95 and p99
//! (each + 1 ms), the noisy tenant's time to finish (+ 0.1 s) and the jobs
//! rejected (+ 1). 0 is the same figures; 0.69 is, on average, a factor
//! of 2 apart. The offsets keep a figure near zero on both sides (a wait of
//! 0.01 ms against 0.02 ms) from counting as far apart.

use serde::Serialize;

use crate::lab;
use crate::results::{Figures, LabResults};
use crate::scenario::Scenario;
use crate::scenario::backends::{BACKENDS, Capability};

/// The figures compared.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compared {
    pub normal_p50_ms: f64,
    pub normal_p95_ms: f64,
    pub normal_p99_ms: f64,
    pub noisy_done_s: Option<f64>,
    pub rejected: u64,
}

impl Compared {
    fn of(f: &Figures) -> Compared {
        Compared {
            normal_p50_ms: f.normal_wait_ms.p50,
            normal_p95_ms: f.normal_wait_ms.p95,
            normal_p99_ms: f.normal_wait_ms.p99,
            noisy_done_s: f.noisy_done_s,
            rejected: f.rejected,
        }
    }

    /// The distance from `other` (see the module's docs).
    pub fn distance(&self, other: &Compared) -> f64 {
        let far = |a: f64, b: f64, offset: f64| ((a + offset) / (b + offset)).ln().abs();
        let mut terms = vec![
            far(self.normal_p50_ms, other.normal_p50_ms, 1.0),
            far(self.normal_p95_ms, other.normal_p95_ms, 1.0),
            far(self.normal_p99_ms, other.normal_p99_ms, 1.0),
            far(self.rejected as f64, other.rejected as f64, 1.0),
        ];
        if let (Some(a), Some(b)) = (self.noisy_done_s, other.noisy_done_s) {
            terms.push(far(a, b, 0.1));
        }
        terms.iter().sum::<f64>() / terms.len() as f64
    }
}

/// One of the post's strategies, on the model, and how far it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub strategy: String,
    pub model: Compared,
    pub distance: f64,
}

/// What one strategy of the results (a run of the queue) is nearest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Behaviour {
    /// The strategy the results name the runs by.
    pub run: String,
    pub measured: Compared,
    /// Nearest first.
    pub candidates: Vec<Candidate>,
}

/// Whether the results' backend runs a discipline of its own (one that does
/// not carry noisylab's).
pub fn own_discipline(results: &LabResults) -> bool {
    let Some(facts) = &results.backend else {
        return false;
    };
    BACKENDS
        .iter()
        .find(|b| b.name == facts.kind)
        .is_some_and(|b| !b.carries(Capability::Discipline, false))
}

/// For results on a queue whose discipline is its own, each strategy's
/// nearest of the post's strategies on the model; empty otherwise.
pub fn nearest(results: &LabResults) -> Vec<Behaviour> {
    if !own_discipline(results) {
        return Vec::new();
    }
    let model = lab::virtual_lab(post_scenario(&results.scenario));
    let candidates: Vec<(String, Compared)> = model
        .strategies
        .iter()
        .map(|s| (s.name.clone(), Compared::of(&s.median)))
        .collect();
    results
        .strategies
        .iter()
        .map(|s| {
            let measured = Compared::of(&s.median);
            let mut ranked: Vec<Candidate> = candidates
                .iter()
                .map(|(name, model)| Candidate {
                    strategy: name.clone(),
                    model: *model,
                    distance: measured.distance(model),
                })
                .collect();
            ranked.sort_by(|a, b| a.distance.total_cmp(&b.distance));
            Behaviour {
                run: s.name.clone(),
                measured,
                candidates: ranked,
            }
        })
        .collect()
}

/// The scenario with the post's strategies (the built-in article lab's) in
/// place of its own.
fn post_scenario(scenario: &Scenario) -> Scenario {
    let post = Scenario::built_in("article").expect("the built-in article lab parses");
    let mut s = scenario.clone();
    s.strategy = post.strategy;
    s.backend = None;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(p50: f64, p95: f64, p99: f64, done: f64, rejected: u64) -> Compared {
        Compared {
            normal_p50_ms: p50,
            normal_p95_ms: p95,
            normal_p99_ms: p99,
            noisy_done_s: Some(done),
            rejected,
        }
    }

    #[test]
    fn the_distance_is_the_mean_log_ratio_with_its_offsets() {
        let a = at(0.0, 1.0, 3.0, 9.9, 0);
        assert_eq!(a.distance(&a), 0.0);
        // p50 1 ms against 0 (offset 1: ln 2), p95 and p99 the same, the
        // noisy tenant 19.9 s against 9.9 (offset 0.1: ln 2), none rejected.
        let b = at(1.0, 1.0, 3.0, 19.9, 0);
        let d = a.distance(&b);
        assert!((d - 2.0 * 2f64.ln() / 5.0).abs() < 1e-12, "{d}");
        assert_eq!(d, b.distance(&a), "symmetric");
        // Without a noisy tenant on one side, four figures count.
        let c = Compared {
            noisy_done_s: None,
            ..b
        };
        assert!((a.distance(&c) - 2f64.ln() / 4.0).abs() < 1e-12);
    }
}
