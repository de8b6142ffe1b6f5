//! Statistics every layer shares: percentiles of nanosecond histograms, the
//! histogram codec of results files (hdrhistogram V2 + deflate, base64), and
//! the median of sorted values.

use anyhow::{Context, Result};
use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub const ZERO: Percentiles = Percentiles {
        p50: 0.0,
        p95: 0.0,
        p99: 0.0,
        max: 0.0,
    };
}

/// An auto-resizing histogram with three significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant figures is valid")
}

/// Record one value; an auto-resizing histogram takes any `u64`.
#[inline]
pub fn record(h: &mut Histogram<u64>, value: u64) {
    h.record(value)
        .expect("an auto-resizing histogram takes any u64");
}

/// How long a worker of the article lab is idle between its calls: one
/// job's hold.
pub const JOB_HOLD: Duration = Duration::from_millis(100);

/// Percentiles, in microseconds, of `times` calls of `call`, each timed
/// alone, each after `idle` asleep (zero: back to back). A call after a
/// job's hold ([`JOB_HOLD`]) is what a worker's finish pays: the server's
/// process and the worker's own thread may both have gone to sleep, and on
/// a virtual machine each wake costs far more than the call itself.
pub fn time_calls(
    times: u32,
    idle: Duration,
    mut call: impl FnMut() -> Result<()>,
) -> Result<Percentiles> {
    let mut h = new_histogram();
    for _ in 0..times {
        if !idle.is_zero() {
            std::thread::sleep(idle);
        }
        let t = Instant::now();
        call()?;
        record(&mut h, t.elapsed().as_nanos() as u64);
    }
    Ok(percentiles(&h, 1e3))
}

/// p50, p95, p99 and max of a histogram of nanoseconds, divided by `per_unit`.
pub fn percentiles(h: &Histogram<u64>, per_unit: f64) -> Percentiles {
    if h.is_empty() {
        return Percentiles::ZERO;
    }
    let at = |q: f64| h.value_at_quantile(q) as f64 / per_unit;
    Percentiles {
        p50: at(0.50),
        p95: at(0.95),
        p99: at(0.99),
        max: h.max() as f64 / per_unit,
    }
}

/// Jain's fairness index: (Σx)² ÷ (n Σx²); 1 when all are equal.
pub fn jain(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|v| v * v).sum();
    if values.is_empty() || squares == 0.0 {
        1.0
    } else {
        sum * sum / (values.len() as f64 * squares)
    }
}

/// The median of sorted values (the mean of the middle two for an even count).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serializing into memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn decode_histogram(text: &str) -> Result<Histogram<u64>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .context("histogram is not base64")?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| anyhow::anyhow!("histogram is not hdrhistogram V2: {e:?}"))
}

/// Index of the nearest-rank quantile `q` of `n` sorted values.
pub fn nearest_rank(n: usize, q: f64) -> usize {
    ((q * n as f64).ceil() as usize).clamp(1, n) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_calls_times_each_call_alone_not_its_idle_spell() {
        let mut calls = 0;
        let p = time_calls(3, Duration::from_millis(40), || {
            calls += 1;
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 3);
        // Each call slept 1 ms (at least 1,000 µs); the 40 ms before each
        // is not in its time.
        assert!(p.p50 >= 1_000.0 && p.max < 40_000.0, "{p:?}");
    }

    #[test]
    fn a_failed_call_ends_the_timing_with_its_error() {
        let mut calls = 0;
        let err = time_calls(5, Duration::ZERO, || {
            calls += 1;
            anyhow::bail!("refused")
        })
        .unwrap_err();
        assert_eq!((calls, err.to_string()), (1, "refused".to_string()));
    }
}
