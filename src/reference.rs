//! The post's published figures, kept as data in `lab/reference/article.toml`,
//! and the figures that `validate` and `compare` set side by side.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::results::Figures;
use crate::units::{count, ms, secs};

pub const DEFAULT_PATH: &str = "lab/reference/article.toml";
/// The same figures, compiled in, for a binary run outside the repository.
pub const BUILT_IN: &str = include_str!("../lab/reference/article.toml");

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    pub source: String,
    /// Where the published figures were measured.
    pub machine: String,
    pub runs: u32,
    pub strategy: Vec<RefStrategy>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefStrategy {
    pub name: String,
    pub normal_p50_ms: f64,
    pub normal_p95_ms: f64,
    pub normal_p99_ms: f64,
    #[serde(default)]
    pub normal_max_ms: Option<f64>,
    pub noisy_done_s: f64,
    pub rejected: u64,
}

impl Reference {
    pub fn load(path: &Path) -> Result<Reference> {
        let text = crate::fsio::read_text(path, "the reference figures")?;
        toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}", e.message()))
            .with_context(|| format!("{}: invalid reference file", path.display()))
    }

    /// The post's figures as built into the binary.
    pub fn built_in() -> Reference {
        toml::from_str(BUILT_IN).expect("the built-in reference parses (a test checks)")
    }

    pub fn strategy(&self, name: &str) -> Option<&RefStrategy> {
        self.strategy.iter().find(|s| s.name == name)
    }
}

/// One figure of the post's table.
pub struct FigureDef {
    pub label: &'static str,
    /// The figure's key in results files.
    pub key: &'static str,
    pub ours: fn(&Figures) -> Option<f64>,
    pub post: fn(&RefStrategy) -> Option<f64>,
    pub show: fn(f64) -> String,
    /// Below this the post's figure is the machine's dispatch cost, not the
    /// model's: it needs only be the same order of magnitude or better.
    pub machine_set_below: f64,
}

/// The post's columns, in its order, plus the FIFO maximum its text gives.
pub const FIGURES: &[FigureDef] = &[
    FigureDef {
        label: "Normal p50",
        key: "normal_wait_ms.p50",
        ours: |f| Some(f.normal_wait_ms.p50),
        post: |r| Some(r.normal_p50_ms),
        show: ms,
        machine_set_below: 1.0,
    },
    FigureDef {
        label: "Normal p95",
        key: "normal_wait_ms.p95",
        ours: |f| Some(f.normal_wait_ms.p95),
        post: |r| Some(r.normal_p95_ms),
        show: ms,
        machine_set_below: 1.0,
    },
    FigureDef {
        label: "Normal p99",
        key: "normal_wait_ms.p99",
        ours: |f| Some(f.normal_wait_ms.p99),
        post: |r| Some(r.normal_p99_ms),
        show: ms,
        machine_set_below: 1.0,
    },
    FigureDef {
        label: "Normal max",
        key: "normal_wait_ms.max",
        ours: |f| Some(f.normal_wait_ms.max),
        post: |r| r.normal_max_ms,
        show: ms,
        machine_set_below: 1.0,
    },
    FigureDef {
        label: "Noisy tenant, time after burst",
        key: "noisy_done_s",
        ours: |f| f.noisy_done_s,
        post: |r| Some(r.noisy_done_s),
        show: |v| secs(Some(v)),
        machine_set_below: 0.0,
    },
    FigureDef {
        label: "Jobs rejected",
        key: "rejected",
        ours: |f| Some(f.rejected as f64),
        post: |r| Some(r.rejected as f64),
        show: |v| count(v as u64),
        machine_set_below: 0.0,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_reference_is_the_file() {
        let file = Reference::load(Path::new(DEFAULT_PATH)).unwrap();
        assert_eq!(Reference::built_in(), file);
        assert_eq!(file.strategy.len(), 5);
    }
}
