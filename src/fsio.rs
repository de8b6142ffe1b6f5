//! Reading a file for any layer, with one-line errors: `PATH: cannot read
//! WHAT: why`. A leaf, so the scenario parser and the results store share it.

use std::path::Path;

use anyhow::Result;

/// A file's text, or one line: `PATH: cannot read WHAT: why`.
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read {what}: {}", path.display(), io_reason(&e)))
}

/// An I/O error in the few words a person needs.
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
