//! Seed bands: what the model itself gives for a scenario over many seeds.
//!
//! Every figure of every strategy is computed on the virtual clock for seeds
//! `seed .. seed + n`, and its distribution over the seeds summarised as p5,
//! median and p95. A published figure inside its band is one the model
//! reproduces; outside, the model differs, and the band says by how much.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::lab;
use crate::results::{Figures, LabResults};
use crate::scenario::Scenario;

/// Seeds `noisylab bands` uses unless told.
pub const DEFAULT_SEEDS: u32 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    pub p5: f64,
    pub median: f64,
    pub p95: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyBands {
    pub name: String,
    /// By figure key as in results files (`normal_wait_ms.p95`).
    pub figures: BTreeMap<String, Band>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bands {
    pub seeds: u32,
    /// The first seed; the bands cover `first_seed .. first_seed + seeds`.
    #[serde(skip)]
    pub first_seed: u64,
    pub strategies: Vec<StrategyBands>,
}

impl Bands {
    pub fn band(&self, strategy: &str, key: &str) -> Option<&Band> {
        self.strategies
            .iter()
            .find(|s| s.name == strategy)?
            .figures
            .get(key)
    }
}

/// Figures the model does not have: the harness's own error is zero on the
/// virtual clock by construction.
const HARNESS_KEYS: [&str; 3] = ["job_overshoot_ms", "dispatch_floor_us", "arrival_lag_ms"];

/// Every numeric figure of a run, by dotted key.
pub fn figure_values(f: &Figures) -> Vec<(String, f64)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            Value::Number(n) => out.extend(n.as_f64().map(|x| (prefix.to_string(), x))),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(
        "",
        &serde_json::to_value(f).expect("figures serialize"),
        &mut out,
    );
    out.retain(|(k, _)| !HARNESS_KEYS.iter().any(|h| k.starts_with(h)));
    out
}

/// The model over many seeds: the virtual lab itself (one run per seed),
/// and the bands of its figures.
#[derive(Debug, Clone)]
pub struct ModelLab {
    pub results: LabResults,
    pub bands: Bands,
}

/// The model's lab for `scenario`, one run per seed for `seeds` seeds from
/// its own, and the bands of every figure.
pub fn model_lab(scenario: &Scenario, seeds: u32) -> ModelLab {
    let mut scenario = scenario.clone();
    scenario.runs = seeds;
    let results = lab::virtual_lab(scenario);
    let bands = bands_of(&results);
    ModelLab { results, bands }
}

/// The bands of a lab's runs, figure by figure.
pub fn bands_of(results: &LabResults) -> Bands {
    let strategies = results
        .strategies
        .iter()
        .map(|s| {
            let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for run in &s.runs {
                for (key, v) in figure_values(&run.figures) {
                    values.entry(key).or_default().push(v);
                }
            }
            let figures = values
                .into_iter()
                .map(|(key, mut v)| {
                    v.sort_by(f64::total_cmp);
                    (key, band_of(&v))
                })
                .collect();
            StrategyBands {
                name: s.name.clone(),
                figures,
            }
        })
        .collect();
    let seeds = results
        .strategies
        .iter()
        .map(|s| s.runs.len())
        .max()
        .unwrap_or(0) as u32;
    Bands {
        seeds,
        first_seed: results.seed,
        strategies,
    }
}

/// p5, median and p95 (nearest rank) of sorted values.
fn band_of(sorted: &[f64]) -> Band {
    let at =
        |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Band {
        p5: at(0.05),
        median: crate::stats::median(sorted),
        p95: at(0.95),
    }
}
