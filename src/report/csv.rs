//! Every figure, run by run, as CSV: one row per strategy and run (plus its
//! median, min and max rows). The columns are the JSON figures flattened
//! (`normal_wait_ms.p95` becomes `normal_wait_ms_p95`), so the two formats
//! always carry the same fields. Per-class figures are columns too
//! (`classes_normal_wait_ms_p95`); a list of tenant names is one cell, `;`
//! between names.

use anyhow::Result;
use serde_json::Value;

use super::Exporter;
use crate::results::{Figures, LabResults};

pub struct CsvExporter;

/// Figures flattened to (column, value) pairs, in the struct's field order.
pub fn flatten(figures: &Figures) -> Vec<(String, String)> {
    let value = serde_json::to_value(figures).expect("figures serialize");
    let mut out = Vec::new();
    flatten_into("", &value, &mut out);
    out
}

fn flatten_into(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}_{k}")
                };
                flatten_into(&key, v, out);
            }
        }
        Value::Null => out.push((prefix.to_string(), String::new())),
        Value::String(text) => out.push((prefix.to_string(), text.clone())),
        // A list of names (the tenants over the alert) in one cell.
        Value::Array(items) => {
            let cells: Vec<String> = items
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), String::from))
                .collect();
            out.push((prefix.to_string(), cells.join(";")));
        }
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

impl Exporter for CsvExporter {
    fn export(&self, results: &LabResults) -> Result<Vec<u8>> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut wrote_header = false;
        for s in &results.strategies {
            let rows = [
                ("median", None, &s.median),
                ("min", None, &s.min),
                ("max", None, &s.max),
            ]
            .into_iter()
            .chain(
                s.runs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| ("run", Some((i + 1, r.seed)), &r.figures)),
            );
            for (kind, run, figures) in rows {
                let cells = flatten(figures);
                if !wrote_header {
                    let mut header = vec![
                        "strategy".to_string(),
                        "queue".into(),
                        "row".into(),
                        "seed".into(),
                    ];
                    header.extend(cells.iter().map(|(k, _)| k.clone()));
                    w.write_record(&header)?;
                    wrote_header = true;
                }
                let row_name = match run {
                    Some((i, _)) => format!("{kind} {i}"),
                    None => kind.to_string(),
                };
                let seed = run.map_or_else(String::new, |(_, seed)| seed.to_string());
                let mut record = vec![s.name.clone(), s.queue.to_string(), row_name, seed];
                record.extend(cells.into_iter().map(|(_, v)| v));
                w.write_record(&record)?;
            }
        }
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
    }
}
