//! Number formatting for every printer: waits in milliseconds to three
//! significant figures, counts with thousands separators, ratios.

/// Milliseconds to three significant figures, thousands separated:
/// `5,439 ms`, `27.1 ms`, `0.0450 ms`, `0 ms`.
pub fn ms(v: f64) -> String {
    format!("{} ms", sig3(v))
}

pub fn us(v: f64) -> String {
    format!("{} µs", sig3(v))
}

/// Seconds with one decimal, as the post gives them (`50.4 s`); finer when
/// the value is small.
pub fn secs(v: Option<f64>) -> String {
    match v {
        None => "—".to_string(),
        Some(v) if v < 1.0 => format!("{v:.3} s"),
        Some(v) if v >= 1000.0 => {
            let tenths = (v * 10.0).round() as u64;
            format!("{}.{} s", count(tenths / 10), tenths % 10)
        }
        Some(v) => format!("{v:.1} s"),
    }
}

/// Seconds to the millisecond, for the harness's own error.
pub fn secs_fine(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{v:.3} s"))
}

pub fn count(v: u64) -> String {
    thousands(&v.to_string())
}

/// A fraction as a whole percentage: `0.05` is `5 %`.
pub fn pct(fraction: f64) -> String {
    format!("{:.0} %", fraction * 100.0)
}

/// Three significant figures; integers of four or more digits in full.
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if a >= 1000.0 {
        return thousands(&format!("{v:.0}"));
    }
    let digits = a.log10().floor() as i32;
    let decimals = (2 - digits).max(0) as usize;
    format!("{v:.decimals$}")
}

/// `ours / theirs`, as `×1.02`; `—` when `theirs` is 0 and `ours` is not.
pub fn ratio(ours: f64, theirs: f64) -> String {
    if theirs == 0.0 {
        if ours == 0.0 {
            "×1".to_string()
        } else {
            "—".to_string()
        }
    } else {
        format!("×{}", sig3(ours / theirs))
    }
}

fn thousands(int: &str) -> String {
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_figures() {
        assert_eq!(sig3(5439.4), "5,439");
        assert_eq!(sig3(27.14), "27.1");
        assert_eq!(sig3(4.5), "4.50");
        assert_eq!(sig3(0.045), "0.0450");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(123456.0), "123,456");
        assert_eq!(count(1896), "1,896");
        assert_eq!(secs(Some(50.04)), "50.0 s");
        assert_eq!(secs(Some(1773.33)), "1,773.3 s");
        assert_eq!(pct(0.05), "5 %");
        assert_eq!(ratio(2.0, 1.0), "×2.00");
        assert_eq!(ratio(1.0, 0.0), "—");
    }
}
