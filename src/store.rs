//! Where results files live: `reports/runs/<date>-<host>-<scenario>.json`,
//! written atomically (a temporary file, then a rename), so a crash or a kill
//! never leaves half a file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::results::LabResults;

/// The folder of results files under an output folder.
pub fn runs_dir(out: &Path) -> PathBuf {
    out.join("runs")
}

/// Fail now, not after a seven-minute lab, if results cannot be written.
pub fn check_writable(out: &Path) -> Result<()> {
    let dir = runs_dir(out);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("{}: cannot create the results folder", dir.display()))?;
    let probe = dir.join(format!(".noisylab-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .with_context(|| format!("{}: results folder is not writable", dir.display()))?;
    std::fs::remove_file(&probe).ok();
    Ok(())
}

/// Write `bytes` to `path` through a temporary file in the same folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("{}: cannot write", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        std::fs::remove_file(&tmp).ok();
        format!(
            "{}: cannot move the finished file into place",
            path.display()
        )
    })
}

/// Save a lab's results under `out/runs/`, never over an earlier file.
pub fn save(out: &Path, results: &LabResults) -> Result<PathBuf> {
    let dir = runs_dir(out);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("{}: cannot create the results folder", dir.display()))?;
    let date = results
        .created
        .as_deref()
        .and_then(|c| c.get(..10))
        .unwrap_or("undated")
        .to_string();
    let stem = format!(
        "{date}-{}-{}",
        slug(&results.machine.host),
        slug(&results.scenario.name)
    );
    let mut path = dir.join(format!("{stem}.json"));
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("{stem}-{n}.json"));
        n += 1;
    }
    let mut bytes = serde_json::to_vec_pretty(results)?;
    bytes.push(b'\n');
    write_atomic(&path, &bytes)?;
    Ok(path)
}

/// A file's text, or one line: `PATH: cannot read WHAT: why`.
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot read {what}: {}",
            path.display(),
            crate::scenario::io_reason(&e)
        )
    })
}

/// Every results file under `out/runs/`, sorted by name.
pub fn list(out: &Path) -> Result<Vec<PathBuf>> {
    let dir = runs_dir(out);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => bail!("{}: cannot list results: {e}", dir.display()),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// A file-name-safe version of a host or scenario name.
fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let out = out.trim_matches('-').to_string();
    if out.is_empty() {
        "unnamed".to_string()
    } else {
        out
    }
}
