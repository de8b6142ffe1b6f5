//! Trace replay: a CSV of requests becomes part of a scenario's arrivals.
//!
//! Two layouts, told apart by the header:
//! - the Azure LLM inference trace's own `TIMESTAMP,ContextTokens,GeneratedTokens`
//!   (timestamps relative to the first row; no tenant column, so the
//!   scenario spreads the rows over `tenants` Zipf-weighted tenants);
//! - noisylab's `at_s,tenant,tokens_in,tokens_out[,job_ms]`.
//!
//! The rows are read when the scenario is loaded, so a bad trace is a
//! one-line error before anything runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::dist::Dist;

/// A `[[trace]]` of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// The CSV file, relative to the scenario file.
    pub file: PathBuf,
    /// Tenants a trace without a tenant column is spread over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<u32>,
    /// Tenant k of `tenants` gets weight 1/k^zipf (0: all alike).
    #[serde(default = "default_zipf")]
    pub zipf: f64,
    /// The class label in results (default `trace`).
    #[serde(default = "default_class")]
    pub class: String,
    /// Lab time of the trace's first row, in seconds.
    #[serde(default)]
    pub from_s: f64,
    /// Time scale: 2 replays twice as fast.
    #[serde(default = "default_speed")]
    pub speed: f64,
    /// Replay only the rows in the trace's first `limit_s` seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_s: Option<f64>,
    /// Job durations, where the file has no `job_ms` column (default: the
    /// scenario's `job_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ms: Option<Dist>,
    /// The rows, read at load time; not written to results files.
    #[serde(skip)]
    pub data: Arc<TraceData>,
}

impl Trace {
    /// The rows this trace replays (all, or those in its first `limit_s`).
    pub fn rows(&self) -> &[TraceRow] {
        let rows = &self.data.rows;
        match self.limit_s {
            None => rows,
            Some(limit) => &rows[..rows.partition_point(|r| r.at_s < limit)],
        }
    }

    pub fn rows_replayed(&self) -> usize {
        self.rows().len()
    }

    /// Read the file (relative to the scenario's folder `dir`).
    pub fn load(&mut self, dir: &Path) -> Result<(), (PathBuf, TraceError)> {
        let path = dir.join(&self.file);
        self.data = Arc::new(TraceData::read(&path).map_err(|e| (path, e))?);
        Ok(())
    }
}

fn default_zipf() -> f64 {
    1.0
}
fn default_class() -> String {
    "trace".into()
}
fn default_speed() -> f64 {
    1.0
}

/// A trace file's rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceData {
    pub rows: Vec<TraceRow>,
    /// Tenant names, in order of first appearance (noisylab layout only).
    pub tenant_names: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRow {
    /// Seconds after the trace's first row (Azure) or as written (noisylab).
    pub at_s: f64,
    /// Index into `tenant_names`, where the file has a tenant column.
    pub tenant: Option<u32>,
    pub tokens_in: u32,
    pub tokens_out: u32,
    pub job_ms: Option<f64>,
}

/// What is wrong with a trace file: the line and column (1-based), the
/// column's name, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub at: Option<(usize, usize)>,
    pub column: String,
    pub message: String,
}

const AZURE: [&str; 3] = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];
const OURS: [&str; 4] = ["at_s", "tenant", "tokens_in", "tokens_out"];

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Azure,
    Ours { job_ms: bool },
}

impl TraceData {
    /// Read and check a trace file.
    pub fn read(path: &Path) -> Result<TraceData, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|e| TraceError {
            at: None,
            column: String::new(),
            message: format!("cannot read trace file: {}", crate::fsio::io_reason(&e)),
        })?;
        TraceData::parse(&text)
    }

    pub fn parse(text: &str) -> Result<TraceData, TraceError> {
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or("")
            .trim_start_matches('\u{feff}')
            .split(',')
            .map(str::trim)
            .collect();
        let layout = if header == AZURE {
            Layout::Azure
        } else if header[..header.len().min(4)] == OURS && header.len() <= 5 {
            match header.get(4) {
                None => Layout::Ours { job_ms: false },
                Some(&"job_ms") => Layout::Ours { job_ms: true },
                Some(_) => return Err(bad_header(&header)),
            }
        } else {
            return Err(bad_header(&header));
        };
        let mut data = TraceData::default();
        let mut first_ts: Option<jiff::civil::DateTime> = None;
        let mut last_at = f64::NEG_INFINITY;
        for (i, line) in lines.enumerate() {
            let line_no = i + 2;
            if line.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let err = |field: usize, message: String| TraceError {
                at: Some((line_no, column_of(line, field))),
                column: header.get(field).unwrap_or(&"").to_string(),
                message,
            };
            if fields.len() != header.len() {
                return Err(err(
                    fields.len().min(header.len()),
                    format!("{} fields, the header has {}", fields.len(), header.len()),
                ));
            }
            let row = match layout {
                Layout::Azure => azure_row(&fields, &mut first_ts),
                Layout::Ours { job_ms } => data.our_row(&fields, job_ms),
            }
            .map_err(|(field, message)| err(field, message))?;
            if row.at_s < last_at {
                return Err(err(
                    0,
                    format!(
                        "time goes backwards: {} s after {} s on the row before; rows must be in time order",
                        row.at_s, last_at
                    ),
                ));
            }
            last_at = row.at_s;
            data.rows.push(row);
        }
        if data.rows.is_empty() {
            return Err(TraceError {
                at: None,
                column: String::new(),
                message: "the trace has no rows after its header".into(),
            });
        }
        Ok(data)
    }
}

/// A row's fault: the field and why.
type FieldError = (usize, String);

/// `TIMESTAMP,ContextTokens,GeneratedTokens`, the time relative to the first row.
fn azure_row(
    fields: &[&str],
    first_ts: &mut Option<jiff::civil::DateTime>,
) -> Result<TraceRow, FieldError> {
    let ts: jiff::civil::DateTime = fields[0].parse().map_err(|_| {
        (
            0,
            format!(
                "cannot read {:?} as a timestamp like 2023-11-16 18:15:46.6805900",
                fields[0]
            ),
        )
    })?;
    let first = *first_ts.get_or_insert(ts);
    Ok(TraceRow {
        at_s: ts.duration_since(first).as_secs_f64(),
        tenant: None,
        tokens_in: tokens(fields[1]).map_err(|m| (1, m))?,
        tokens_out: tokens(fields[2]).map_err(|m| (2, m))?,
        job_ms: None,
    })
}

impl TraceData {
    /// `at_s,tenant,tokens_in,tokens_out[,job_ms]`; a new tenant name is
    /// added to `tenant_names`.
    fn our_row(&mut self, fields: &[&str], job_ms: bool) -> Result<TraceRow, FieldError> {
        let at_s = number(fields[0]).map_err(|m| (0, m))?;
        let name = fields[1];
        if name.is_empty() {
            return Err((1, "the tenant must not be empty".into()));
        }
        let tenant = match self.tenant_names.iter().position(|n| n == name) {
            Some(k) => k,
            None => {
                self.tenant_names.push(name.to_string());
                self.tenant_names.len() - 1
            }
        };
        Ok(TraceRow {
            at_s,
            tenant: Some(tenant as u32),
            tokens_in: tokens(fields[2]).map_err(|m| (2, m))?,
            tokens_out: tokens(fields[3]).map_err(|m| (3, m))?,
            job_ms: if job_ms {
                Some(number(fields[4]).map_err(|m| (4, m))?)
            } else {
                None
            },
        })
    }
}

fn bad_header(header: &[&str]) -> TraceError {
    TraceError {
        at: Some((1, 1)),
        column: String::new(),
        message: format!(
            "unknown trace header `{}`; allowed: `{}` (the Azure LLM inference trace) or `{},job_ms` (job_ms optional)",
            header.join(","),
            AZURE.join(","),
            OURS.join(",")
        ),
    }
}

/// 1-based character column of field `i` of a plain comma-separated line.
fn column_of(line: &str, i: usize) -> usize {
    let start = line
        .split(',')
        .take(i)
        .map(|f| f.chars().count() + 1)
        .sum::<usize>()
        + 1;
    start.min(line.chars().count() + 1)
}

fn number(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("cannot read {text:?} as a number of 0 or more")),
    }
}

fn tokens(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .map_err(|_| format!("cannot read {text:?} as a whole number of tokens (0 to 4294967295)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_read() {
        let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                     2023-11-16 18:15:46.6805900,374,44\n\
                     2023-11-16 18:15:50.9951690,396,109\n";
        let d = TraceData::parse(azure).unwrap();
        assert_eq!(d.rows.len(), 2);
        assert_eq!(d.rows[0].at_s, 0.0);
        assert!(
            (d.rows[1].at_s - 4.314579).abs() < 1e-9,
            "{}",
            d.rows[1].at_s
        );
        assert_eq!((d.rows[1].tokens_in, d.rows[1].tokens_out), (396, 109));
        let ours =
            "at_s,tenant,tokens_in,tokens_out,job_ms\n0.5,a,10,20,100\n0.5,b,1,2,50\n1,a,3,4,7.5\n";
        let d = TraceData::parse(ours).unwrap();
        assert_eq!(d.tenant_names, ["a", "b"]);
        assert_eq!(d.rows[2].tenant, Some(0));
        assert_eq!(d.rows[2].job_ms, Some(7.5));
    }

    #[test]
    fn bad_traces_name_the_line_column_and_what_is_allowed() {
        let cases = [
            (
                "time,x\n1,2\n",
                Some((1, 1)),
                "unknown trace header `time,x`",
            ),
            (
                "TIMESTAMP,ContextTokens,GeneratedTokens\n",
                None,
                "the trace has no rows after its header",
            ),
            (
                "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\nyesterday,1,2\n",
                Some((3, 1)),
                "cannot read \"yesterday\" as a timestamp",
            ),
            (
                "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\n2023-11-16 18:15:45,1,2\n",
                Some((3, 1)),
                "time goes backwards: -1 s after 0 s",
            ),
            (
                "at_s,tenant,tokens_in,tokens_out\n0,a,1,x\n",
                Some((2, 7)),
                "cannot read \"x\" as a whole number of tokens",
            ),
            (
                "at_s,tenant,tokens_in,tokens_out\n-1,a,1,1\n",
                Some((2, 1)),
                "as a number of 0 or more",
            ),
            (
                "at_s,tenant,tokens_in,tokens_out\n1,a,1\n",
                Some((2, 6)),
                "3 fields, the header has 4",
            ),
        ];
        for (text, at, message) in cases {
            let e = TraceData::parse(text).unwrap_err();
            assert_eq!(e.at, at, "{text:?}: {e:?}");
            assert!(e.message.contains(message), "{text:?}: {}", e.message);
        }
    }
}
