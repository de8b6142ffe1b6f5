//! The results as pretty JSON.

use anyhow::Result;

use super::Exporter;
use crate::results::LabResults;

pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn export(&self, results: &LabResults) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec_pretty(results)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}
