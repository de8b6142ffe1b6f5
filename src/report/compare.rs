//! Several results files side by side: one table per figure, the post's
//! published figure first, then a column per results file with its ratio to
//! the post.

use comfy_table::{CellAlignment, Table, TableStyle};

use crate::reference::{FIGURES, Reference};
use crate::results::LabResults;
use crate::units::ratio;

/// A results file's column heading: its machine and date.
pub fn heading(r: &LabResults) -> String {
    let date = r.date().unwrap_or_else(|| "virtual".to_string());
    format!("{} ({}), {date}", r.machine.host, r.machine.cpu)
}

/// One table per figure, as text in `style`.
pub fn render(files: &[&LabResults], reference: &Reference, style: TableStyle) -> String {
    let mut out = String::new();
    for def in FIGURES {
        let mut table = Table::new();
        table.load_style(style);
        let mut header = vec![
            "Strategy".to_string(),
            format!("Post ({})", reference.machine),
        ];
        header.extend(files.iter().map(|r| heading(r)));
        table.set_header(header);
        let mut rows = 0;
        for post in &reference.strategy {
            let Some(theirs) = (def.post)(post) else {
                continue;
            };
            let mut row = vec![post.name.clone(), (def.show)(theirs)];
            for r in files {
                let ours = r
                    .strategies
                    .iter()
                    .find(|s| s.name == post.name)
                    .and_then(|s| (def.ours)(&s.median));
                row.push(match ours {
                    Some(v) => format!("{} ({})", (def.show)(v), ratio(v, theirs)),
                    None => "—".to_string(),
                });
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
    out
}
