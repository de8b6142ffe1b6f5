//! The calibration table: each timer's overshoot and the dispatch floor,
//! beside the targets.

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{Table, TableStyle};

use crate::calibrate::{
    Calibration, TARGET_DISPATCH_P50_US, TARGET_DISPATCH_P99_US, TARGET_OVERSHOOT_P50_MS,
    TARGET_OVERSHOOT_P99_MS,
};
use crate::units::{ms, us};

pub fn table(c: &Calibration, style: TableStyle) -> Table {
    let mut t = Table::new();
    t.load_style(style);
    t.set_header(vec!["Measure", "p50", "p95", "p99", "max", "Target"]);
    let target = format!(
        "p50 ≤ {}, p99 ≤ {}",
        ms(TARGET_OVERSHOOT_P50_MS),
        ms(TARGET_OVERSHOOT_P99_MS)
    );
    let p = &c.precise_overshoot_ms;
    t.add_row(vec![
        format!("Overshoot of a {} ms sleep, precise timer", c.sleep_ms),
        ms(p.p50),
        ms(p.p95),
        ms(p.p99),
        ms(p.max),
        target,
    ]);
    let k = &c.tokio_overshoot_ms;
    t.add_row(vec![
        format!("Overshoot of a {} ms sleep, tokio timer", c.sleep_ms),
        ms(k.p50),
        ms(k.p95),
        ms(k.p99),
        ms(k.max),
        "(for comparison)".to_string(),
    ]);
    let d = &c.dispatch_floor_us;
    t.add_row(vec![
        "Dispatch to an idle worker (enqueue to start)".to_string(),
        us(d.p50),
        us(d.p95),
        us(d.p99),
        us(d.max),
        format!(
            "p50 ≤ {}, p99 ≤ {}",
            us(TARGET_DISPATCH_P50_US),
            us(TARGET_DISPATCH_P99_US)
        ),
    ]);
    t
}

/// Plain text for the terminal (markdown-shaped, so it pastes into a README).
pub fn render(c: &Calibration) -> String {
    format!(
        "{} sleeps per timer, {} dispatches; precise timer woke early {} times\n\n{}\n",
        c.sleeps,
        c.dispatches,
        c.precise_early,
        table(c, ASCII_MARKDOWN)
    )
}
