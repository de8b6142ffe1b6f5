//! Where results live: files `reports/runs/<date>-<host>-<scenario>.json`,
//! written atomically (a temporary file, then a rename), so a crash or a kill
//! never leaves half a file; reading them back with one-line errors; finding
//! the newest; and writing the report site (`README.md` and `plots/`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::output::warnings::Warning;
use crate::results::{LabResults, RealFacts, SCHEMA_VERSION};

pub use crate::fsio::read_text;

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
    let date = results.date().unwrap_or_else(|| "undated".to_string());
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

/// Read a results file; errors name the file and what is wrong with it.
pub fn load(path: &Path) -> Result<LabResults> {
    let text = read_text(path, "results file")?;
    parse(path, &text)
}

/// Every file of `paths`, in order.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<LabResults>> {
    paths.iter().map(|p| load(p)).collect()
}

/// Parse a results file's text; `path` is only used in messages. A file of
/// another noisylab version gains the warning that says so.
pub fn parse(path: &Path, text: &str) -> Result<LabResults> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        let what = if e.is_eof() {
            "truncated results file (the JSON ends early)"
        } else {
            "not a results file (invalid JSON)"
        };
        anyhow::anyhow!(
            "{}:{}:{}: {what}: {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })?;
    match value.get("schema").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        Some(v) => bail!(
            "{}: results schema version {v}, this noisylab reads version {SCHEMA_VERSION}; \
             rerun the lab with this version or use the noisylab that wrote it",
            path.display()
        ),
        None => bail!(
            "{}: not a noisylab results file (no \"schema\" field)",
            path.display()
        ),
    }
    real_facts_complete(path, &value)?;
    let mut results: LabResults = serde_path_to_error::deserialize(value)
        .map_err(|e| anyhow::anyhow!("{}: {}: {}", path.display(), e.path(), e.inner()))?;
    if let Some(w) = Warning::other_version(&results.tool)
        && !results.warnings.contains(&w)
    {
        results.warnings.push(w);
    }
    Ok(results)
}

/// A real-clock file has all of its real-only keys, each well formed, or it
/// is not whole: the flattened [`RealFacts`] would otherwise read as absent.
fn real_facts_complete(path: &Path, value: &serde_json::Value) -> Result<()> {
    const KEYS: [&str; 4] = ["timer", "created", "calibration", "wall_s"];
    let real = value.get("clock").and_then(serde_json::Value::as_str) == Some("real");
    if !real && KEYS.iter().all(|k| value.get(*k).is_none()) {
        return Ok(());
    }
    if let Some(missing) = KEYS.iter().find(|k| value.get(**k).is_none()) {
        bail!(
            "{}: {missing}: missing; a real-clock results file has {}",
            path.display(),
            KEYS.join(", ")
        );
    }
    let facts: serde_json::Map<String, serde_json::Value> = KEYS
        .iter()
        .chain(&["peak_rss_mib"])
        .filter_map(|k| Some((k.to_string(), value.get(*k)?.clone())))
        .collect();
    serde_path_to_error::deserialize::<_, RealFacts>(serde_json::Value::Object(facts))
        .map_err(|e| anyhow::anyhow!("{}: {}: {}", path.display(), e.path(), e.inner()))?;
    Ok(())
}

/// The newest results file under `out/runs/`, by its creation time (then
/// by name; virtual-clock files count as oldest).
pub fn newest(out: &Path) -> Result<PathBuf> {
    let mut best: Option<(Option<jiff::Timestamp>, PathBuf)> = None;
    for path in list(out)? {
        let created = load(&path)?.created();
        if best
            .as_ref()
            .is_none_or(|(c, p)| (&created, &path) > (c, p))
        {
            best = Some((created, path));
        }
    }
    best.map(|(_, p)| p).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: no results files; run `make lab` (or `noisylab run`) first",
            runs_dir(out).display()
        )
    })
}

/// Write the report site under `out`: `README.md` and `plots/` (each chart
/// given as `(file name, SVG text)`), removing the charts of results files
/// that are gone. Returns the README's path.
pub fn write_site(out: &Path, readme: &str, plots: &[(String, String)]) -> Result<PathBuf> {
    let plots_dir = out.join("plots");
    std::fs::create_dir_all(&plots_dir)
        .with_context(|| format!("{}: cannot create the plots folder", plots_dir.display()))?;
    for (name, svg) in plots {
        write_atomic(&plots_dir.join(name), svg.as_bytes())?;
    }
    remove_stale_plots(&plots_dir, plots)?;
    let path = out.join("README.md");
    write_atomic(&path, readme.as_bytes())?;
    Ok(path)
}

/// Charts of results files that are gone.
fn remove_stale_plots(dir: &Path, keep: &[(String, String)]) -> Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".svg") && !keep.iter().any(|(k, _)| *k == name) {
            std::fs::remove_file(entry.path()).with_context(|| {
                format!("{}: cannot remove a stale chart", entry.path().display())
            })?;
        }
    }
    Ok(())
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
