//! Distributions of a job's duration and token counts, as a scenario writes
//! them: a plain number (fixed), or a table with `dist` naming the shape.
//!
//! ```toml
//! job_ms = 100                                        # fixed
//! job_ms = { dist = "lognormal", median = 100, p99 = 120 }
//! job_ms = { dist = "tokens", base = 300, per_out_token = 20 }
//! tokens_out = { dist = "lognormal", median = 129, p99 = 601 }
//! ```
//!
//! Draws come from the run's seeded generator at planning time, so runs stay
//! open-loop and the virtual clock byte-deterministic.

use std::fmt;

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Exp, LogNormal};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The z-score of the 99th percentile of a standard normal distribution.
const Z99: f64 = 2.326_347_874_040_841;

/// A distribution of non-negative values (milliseconds or tokens).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    Fixed {
        value: f64,
    },
    Uniform {
        min: f64,
        max: f64,
    },
    Exponential {
        mean: f64,
    },
    /// Set by its median and 99th percentile, as latencies are quoted.
    Lognormal {
        median: f64,
        p99: f64,
    },
    /// A model call: `base` plus `per_out_token` for each output token the
    /// job generates (time to first token, then decode). Durations only.
    Tokens {
        base: f64,
        per_out_token: f64,
    },
}

/// The table form, as serde reads it (`dist` is the tag).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
enum Table {
    Fixed { value: f64 },
    Uniform { min: f64, max: f64 },
    Exponential { mean: f64 },
    Lognormal { median: f64, p99: f64 },
    Tokens { base: f64, per_out_token: f64 },
}

impl Dist {
    pub const fn fixed(value: f64) -> Dist {
        Dist::Fixed { value }
    }

    /// The value when the distribution is fixed.
    pub fn fixed_value(&self) -> Option<f64> {
        match self {
            Dist::Fixed { value } => Some(*value),
            _ => None,
        }
    }

    /// Check the parameters; `Err` says what is wrong and what is allowed.
    /// `tokens_ok`: whether the `tokens` model may be used here.
    pub fn check(&self, tokens_ok: bool) -> Result<(), String> {
        let bad = |v: f64| !(v.is_finite() && v >= 0.0);
        let params: Vec<(&str, f64)> = match *self {
            Dist::Fixed { value } => vec![("value", value)],
            Dist::Uniform { min, max } => vec![("min", min), ("max", max)],
            Dist::Exponential { mean } => vec![("mean", mean)],
            Dist::Lognormal { median, p99 } => vec![("median", median), ("p99", p99)],
            Dist::Tokens {
                base,
                per_out_token,
            } => vec![("base", base), ("per_out_token", per_out_token)],
        };
        if let Some((name, v)) = params.iter().find(|(_, v)| bad(*v)) {
            return Err(format!("{name} must be a number of 0 or more, found {v}"));
        }
        match *self {
            Dist::Uniform { min, max } if max < min => {
                Err(format!("uniform needs min <= max, found min {min} and max {max}"))
            }
            Dist::Lognormal { median, p99 } if p99 < median => Err(format!(
                "lognormal needs p99 >= median, found median {median} and p99 {p99}"
            )),
            Dist::Lognormal { median, .. } if median <= 0.0 => {
                Err("lognormal needs a median above 0, found 0".into())
            }
            Dist::Tokens { .. } if !tokens_ok => Err(
                "the `tokens` model is for job_ms only; allowed here: fixed, uniform, exponential, lognormal"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    /// The mean of the distribution (`mean_out_tokens` for the tokens model).
    pub fn mean(&self, mean_out_tokens: f64) -> f64 {
        match *self {
            Dist::Fixed { value } => value,
            Dist::Uniform { min, max } => (min + max) / 2.0,
            Dist::Exponential { mean } => mean,
            Dist::Lognormal { median, p99 } => {
                let sigma = (p99 / median).ln() / Z99;
                median * (sigma * sigma / 2.0).exp()
            }
            Dist::Tokens {
                base,
                per_out_token,
            } => base + per_out_token * mean_out_tokens,
        }
    }

    /// One draw. Fixed draws nothing from `rng`; `out_tokens` is the job's
    /// output tokens, for the tokens model.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R, out_tokens: u32) -> f64 {
        match *self {
            Dist::Fixed { value } => value,
            Dist::Uniform { min, max } => min + (max - min) * rng.random::<f64>(),
            Dist::Exponential { mean } if mean > 0.0 => {
                Exp::new(1.0 / mean).expect("a positive rate").sample(rng)
            }
            Dist::Exponential { .. } => 0.0,
            Dist::Lognormal { median, p99 } => {
                let sigma = (p99 / median).ln() / Z99;
                LogNormal::new(median.ln(), sigma)
                    .expect("checked: median > 0, sigma >= 0")
                    .sample(rng)
            }
            Dist::Tokens {
                base,
                per_out_token,
            } => base + per_out_token * f64::from(out_tokens),
        }
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dist::Fixed { value } => write!(f, "{value}"),
            Dist::Uniform { min, max } => write!(f, "uniform {min}–{max}"),
            Dist::Exponential { mean } => write!(f, "exponential, mean {mean}"),
            Dist::Lognormal { median, p99 } => write!(f, "lognormal, median {median}, p99 {p99}"),
            Dist::Tokens {
                base,
                per_out_token,
            } => write!(f, "{base} + {per_out_token} per output token"),
        }
    }
}

impl From<Table> for Dist {
    fn from(t: Table) -> Dist {
        match t {
            Table::Fixed { value } => Dist::Fixed { value },
            Table::Uniform { min, max } => Dist::Uniform { min, max },
            Table::Exponential { mean } => Dist::Exponential { mean },
            Table::Lognormal { median, p99 } => Dist::Lognormal { median, p99 },
            Table::Tokens {
                base,
                per_out_token,
            } => Dist::Tokens {
                base,
                per_out_token,
            },
        }
    }
}

impl From<Dist> for Table {
    fn from(d: Dist) -> Table {
        match d {
            Dist::Fixed { value } => Table::Fixed { value },
            Dist::Uniform { min, max } => Table::Uniform { min, max },
            Dist::Exponential { mean } => Table::Exponential { mean },
            Dist::Lognormal { median, p99 } => Table::Lognormal { median, p99 },
            Dist::Tokens {
                base,
                per_out_token,
            } => Table::Tokens {
                base,
                per_out_token,
            },
        }
    }
}

/// A fixed value is written as a plain number (whole numbers without a
/// fraction, so `job_ms = 100` reads back as it was); the rest as tables.
impl Serialize for Dist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Dist::Fixed { value } if value.fract() == 0.0 && (0.0..9e15).contains(&value) => {
                s.serialize_u64(value as u64)
            }
            Dist::Fixed { value } => s.serialize_f64(value),
            other => Table::from(other).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dist, D::Error> {
        struct DistVisitor;
        impl<'de> Visitor<'de> for DistVisitor {
            type Value = Dist;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a number, or a table with dist = \"fixed\", \"uniform\", \"exponential\", \"lognormal\" or \"tokens\"",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dist, E> {
                Ok(Dist::fixed(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dist, E> {
                Ok(Dist::fixed(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dist, E> {
                Ok(Dist::fixed(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Dist, A::Error> {
                Table::deserialize(de::value::MapAccessDeserializer::new(map)).map(Dist::from)
            }
        }
        d.deserialize_any(DistVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// The value at quantile `q` of 100,000 draws with a fixed seed.
    fn quantile(d: Dist, q: f64) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut v: Vec<f64> = (0..100_000).map(|_| d.sample(&mut rng, 0)).collect();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    }

    fn mean_of(d: Dist) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..100_000).map(|_| d.sample(&mut rng, 0)).sum::<f64>() / 100_000.0
    }

    fn within(ours: f64, theirs: f64, frac: f64) -> bool {
        ((ours - theirs) / theirs).abs() <= frac
    }

    #[test]
    fn lognormal_draws_have_the_median_and_p99_asked_for() {
        for (median, p99) in [
            (100.0, 105.0),
            (100.0, 120.0),
            (129.0, 601.0),
            (1000.0, 100_000.0),
        ] {
            let d = Dist::Lognormal { median, p99 };
            let (m, p) = (quantile(d, 0.5), quantile(d, 0.99));
            assert!(within(m, median, 0.02), "median {m} for {median}");
            assert!(within(p, p99, 0.02), "p99 {p} for {p99}");
            assert!(
                within(mean_of(d), d.mean(0.0), 0.02),
                "mean for {median}/{p99}"
            );
        }
    }

    #[test]
    fn uniform_and_exponential_draws_match_their_parameters() {
        let u = Dist::Uniform {
            min: 50.0,
            max: 150.0,
        };
        assert!(within(quantile(u, 0.0), 50.0, 0.02));
        assert!(within(quantile(u, 1.0), 150.0, 0.02));
        assert!(within(quantile(u, 0.5), 100.0, 0.02));
        assert!(within(mean_of(u), 100.0, 0.02));
        let e = Dist::Exponential { mean: 80.0 };
        assert!(within(mean_of(e), 80.0, 0.02));
        // The median of an exponential is its mean × ln 2.
        assert!(within(
            quantile(e, 0.5),
            80.0 * std::f64::consts::LN_2,
            0.02
        ));
    }

    #[test]
    fn fixed_draws_nothing_and_tokens_adds_per_token() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut untouched = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(Dist::fixed(100.0).sample(&mut rng, 0), 100.0);
        assert_eq!(rng.random::<u64>(), untouched.random::<u64>());
        let t = Dist::Tokens {
            base: 300.0,
            per_out_token: 20.0,
        };
        assert_eq!(t.sample(&mut rng, 129), 300.0 + 20.0 * 129.0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = Dist::Lognormal {
            median: 100.0,
            p99: 50.0,
        }
        .check(true)
        .unwrap_err();
        assert_eq!(
            e,
            "lognormal needs p99 >= median, found median 100 and p99 50"
        );
        let e = Dist::Exponential { mean: f64::NAN }
            .check(true)
            .unwrap_err();
        assert_eq!(e, "mean must be a number of 0 or more, found NaN");
        let e = Dist::Uniform {
            min: -1.0,
            max: 2.0,
        }
        .check(true)
        .unwrap_err();
        assert_eq!(e, "min must be a number of 0 or more, found -1");
        assert!(
            Dist::Tokens {
                base: 1.0,
                per_out_token: 1.0
            }
            .check(false)
            .unwrap_err()
            .contains("for job_ms only")
        );
    }
}
