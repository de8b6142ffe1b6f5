//! Formatting that needs the results: a figure with the spread of its
//! runs, and the one-line header of a results file. Plain numbers are
//! formatted by `units`.

use crate::results::{ClockKind, Figures, LabResults, StrategyResults};
use crate::units::sig3;

/// `median (min–max)` for one figure of a strategy, when its runs differ.
pub fn with_spread(
    s: &StrategyResults,
    get: impl Fn(&Figures) -> f64,
    fmt: fn(f64) -> String,
) -> String {
    let (lo, mid, hi) = (get(&s.min), get(&s.median), get(&s.max));
    // Counts keep whole numbers in their range; a figure no run has (NaN)
    // has no range.
    let bare = |v: f64| {
        if v.fract() == 0.0 && v.abs() < 1e15 && mid.fract() == 0.0 {
            crate::units::count(v.abs() as u64)
        } else {
            sig3(v)
        }
    };
    if s.runs.len() < 2 || lo == hi || lo.is_nan() || hi.is_nan() {
        fmt(mid)
    } else {
        format!("{} ({}–{})", fmt(mid), bare(lo), bare(hi))
    }
}

/// One line saying what was run, where and how.
pub fn header(r: &LabResults) -> String {
    let clock = match (r.clock, r.timer()) {
        (ClockKind::Real, Some(t)) => {
            format!("real clock ({} timer)", format!("{t:?}").to_lowercase())
        }
        (ClockKind::Real, None) => "real clock".to_string(),
        (ClockKind::Virtual, _) => "virtual clock".to_string(),
    };
    let runs = r.strategies.iter().map(|s| s.runs.len()).max().unwrap_or(0);
    let mut line = format!(
        "scenario {} · {clock} · {runs} run{} per strategy, medians · seed {} · noisylab {}",
        r.scenario.name,
        if runs == 1 { "" } else { "s" },
        r.seed,
        r.tool
    );
    if let Some(b) = &r.backend {
        let durability = b
            .durability
            .as_ref()
            .map_or(String::new(), |d| format!(" ({d})"));
        line.push_str(&format!(
            " · on {} {}{durability}, {} worker process{}",
            b.kind,
            b.version,
            b.processes,
            if b.processes == 1 { "" } else { "es" }
        ));
    }
    if let Some(created) = r.created() {
        line.push_str(&format!(" · {created}"));
    }
    line
}
