//! Several results files side by side: one table per figure, the post's
//! published figure first, then a column per results file with its ratio to
//! the post.

use comfy_table::{CellAlignment, Table, TableStyle};

use crate::reference::{FIGURES, FigureDef, Reference};
use crate::results::LabResults;
use crate::units::ratio;
use crate::validate::model::{MAKESPAN_CLOSE, WAIT_CLOSE, WAIT_ERRORS, harness_error_ms};

/// A results file's column heading: its machine, its queue when that was
/// not in this process, and its date.
pub fn heading(r: &LabResults) -> String {
    let date = r.date().unwrap_or_else(|| "virtual".to_string());
    let queue = r
        .backend
        .as_ref()
        .map_or_else(String::new, |b| format!(" on {} {}", b.kind, b.version));
    format!("{} ({}){queue}, {date}", r.machine.host, r.machine.cpu)
}

/// Whether every file's figure agrees with the first file's within what
/// their two harness errors allow (as `validate` allows against the model):
/// counts exactly, makespans within 0.1 % each, waits within three times
/// the sum of the two harness errors plus 2 %.
fn across(files: &[&LabResults], strategy: &str, def: &FigureDef) -> String {
    let figure = |r: &LabResults| {
        let s = r.strategy(strategy)?;
        Some(((def.ours)(&s.median)?, harness_error_ms(&s.median)))
    };
    let Some((first, first_err)) = figure(files[0]) else {
        return "—".to_string();
    };
    let mut differ = Vec::new();
    for (i, r) in files.iter().enumerate().skip(1) {
        let Some((v, err)) = figure(r) else {
            continue;
        };
        let tolerance = match def.key {
            "rejected" => 0.0,
            "noisy_done_s" => {
                2.0 * MAKESPAN_CLOSE * first.abs().max(v.abs()) + (first_err + err) / 1e3
            }
            _ => WAIT_ERRORS * (first_err + err) + WAIT_CLOSE * first.abs().max(v.abs()),
        };
        if (v - first).abs() > tolerance {
            differ.push(format!("file {} by {}", i + 1, (def.show)(v - first)));
        }
    }
    if differ.is_empty() {
        "agree".to_string()
    } else {
        format!("DIFFER: {}", differ.join(", "))
    }
}

/// One table per figure, as text in `style`.
pub fn render(files: &[&LabResults], reference: &Reference, style: TableStyle) -> String {
    let mut out = String::new();
    // Files of different scenarios say which is which.
    let named = files
        .iter()
        .any(|r| r.scenario.name != files[0].scenario.name);
    for def in FIGURES {
        let mut table = Table::new();
        table.load_style(style);
        let mut header = vec![
            "Strategy".to_string(),
            format!("Post ({})", reference.machine),
        ];
        header.extend(files.iter().map(|r| {
            if named {
                format!("{}: {}", r.scenario.name, heading(r))
            } else {
                heading(r)
            }
        }));
        if files.len() > 1 {
            header.push("Across the files".to_string());
        }
        table.set_header(header);
        let mut rows = 0;
        for post in &reference.strategy {
            let Some(theirs) = (def.post)(post) else {
                continue;
            };
            let mut row = vec![post.name.clone(), (def.show)(theirs)];
            for r in files {
                let ours = r.strategy(&post.name).and_then(|s| (def.ours)(&s.median));
                row.push(match ours {
                    Some(v) => format!("{} ({})", (def.show)(v), ratio(v, theirs)),
                    None => "—".to_string(),
                });
            }
            if files.len() > 1 {
                row.push(across(files, &post.name, def));
            }
            table.add_row(row);
            rows += 1;
        }
        // The files' own strategies, which the post has no figure for.
        for name in own_strategies(files, reference) {
            let mut row = vec![name.clone(), "—".to_string()];
            for r in files {
                let ours = r.strategy(&name).and_then(|s| (def.ours)(&s.median));
                row.push(ours.map_or_else(|| "—".to_string(), def.show));
            }
            if files.len() > 1 {
                row.push(across(files, &name, def));
            }
            table.add_row(row);
            rows += 1;
        }
        if rows == 0 {
            continue;
        }
        for i in 1..table.column_count() {
            if let Some(c) = table.column_mut(i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        out.push_str(&format!("{}:\n\n{table}\n\n", def.label));
    }
    if files.len() > 1 {
        out.push_str(&verdicts(files));
    }
    out
}

/// The strategies of `files` the post does not have, each once, in the
/// order the files first name them.
fn own_strategies(files: &[&LabResults], reference: &Reference) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in files.iter().flat_map(|r| &r.strategies) {
        let known = reference.strategy.iter().any(|p| p.name == s.name);
        if !known && !names.contains(&s.name) {
            names.push(s.name.clone());
        }
    }
    names
}

/// What "agree" means beside `validate`, and each file's own verdict
/// against the model, so the two commands tell one story.
fn verdicts(files: &[&LabResults]) -> String {
    let mut out = format!(
        "\"Across the files\" compares each file's medians with the first file's, allowing both \
         files' errors together: makespans {:.1} % each plus both harness errors, waits {WAIT_ERRORS} \
         times both harness errors plus {:.0} %. `validate` holds one file, run by run, to the \
         model on the same seeds with its own allowance alone ({:.1} % on a makespan), so two \
         files can agree while one of them does not reproduce the model. Each file against the \
         model:\n\n",
        MAKESPAN_CLOSE * 100.0,
        WAIT_CLOSE * 100.0,
        MAKESPAN_CLOSE * 100.0,
    );
    for (i, r) in files.iter().enumerate() {
        let verdict = crate::validate::model::against_model(r);
        out.push_str(&format!(
            "- file {}: {}\n",
            i + 1,
            super::validation::verdict_line(&verdict, r)
        ));
    }
    out
}
