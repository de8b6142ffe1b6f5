//! `validate`'s findings as text: the figures beside the post's, the checks,
//! and the one-line verdict.

use std::fmt::Write as _;

use comfy_table::{Table, TableStyle};

use crate::validate::{Outcome, Validation};

pub fn render(v: &Validation, style: TableStyle) -> String {
    let mut figures = Table::new();
    figures.load_style(style);
    figures.set_header(vec![
        "Strategy", "Figure", "Ours", "Post", "Ratio", "Verdict",
    ]);
    for r in &v.figures {
        figures.add_row(vec![
            r.strategy.clone(),
            r.figure.to_string(),
            r.ours.clone(),
            r.post.clone(),
            r.ratio.clone(),
            r.verdict.to_string(),
        ]);
    }
    let mut checks = Table::new();
    checks.load_style(style);
    checks.set_header(vec!["Check", "Claim", "Measured"]);
    for c in &v.checks {
        let mark = match c.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::NotRun => "not run",
        };
        checks.add_row(vec![mark, &c.claim, &c.detail]);
    }
    let mut out = String::new();
    let _ = writeln!(out, "{figures}\n\n{checks}\n");
    let _ = writeln!(
        out,
        "{}: {} of {} checks hold.",
        if v.passed() {
            "validated"
        } else {
            "not validated"
        },
        v.ran() - v.failed(),
        v.ran()
    );
    out
}
