//! Reports: one file per format behind the [`Exporter`] trait. An exporter
//! returns bytes and does no I/O; the caller decides where they go.
//!
//! - [`table`]: the terminal table (the post's columns); [`carrier`]: what
//!   crossed the protocol of a team's own queue.
//! - [`markdown`]: one results file as a markdown section.
//! - [`csv`]: every figure, run by run.
//! - [`json`]: the results as JSON.
//! - [`compare`]: several results files side by side with the post.
//! - [`readme`] and [`plot`]: `reports/README.md` and its SVG charts.
//! - [`validation`] and [`calibration`]: what `validate` and `calibrate`
//!   found, as tables.
//! - [`format`](mod@format): a figure with its runs' spread, a results file's header line.

pub mod bands;
pub mod calibration;
pub mod carrier;
pub mod compare;
pub mod csv;
pub mod format;
pub mod json;
pub mod markdown;
pub mod plot;
pub mod readme;
pub mod table;
pub mod validation;

use anyhow::Result;

use crate::results::LabResults;

/// Turns one lab's results into the bytes of one format.
pub trait Exporter {
    fn export(&self, results: &LabResults) -> Result<Vec<u8>>;
}

/// The formats `run` and `report` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Markdown,
    Csv,
    Json,
}

impl Format {
    pub fn exporter(self) -> Box<dyn Exporter> {
        match self {
            Format::Table => Box::new(table::TableExporter),
            Format::Markdown => Box::new(markdown::MarkdownExporter),
            Format::Csv => Box::new(csv::CsvExporter),
            Format::Json => Box::new(json::JsonExporter),
        }
    }
}
