//! The queues a team would otherwise pick (BullMQ on Redis, graphile-worker
//! on PostgreSQL), measured by their own Node.js script (`src/peers/`,
//! installed by `make peers` from its `package-lock.json`) on the server a
//! bench started, so that `make bench` prints them beside noisylab's own
//! functions from the same run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// A peer queue's figures, as its script prints them.
#[derive(Debug, Clone, Deserialize)]
pub struct PeerFigures {
    /// Its name and version, e.g. `BullMQ 6.7.6`.
    pub peer: String,
    /// Jobs added a second, all in one bulk call.
    pub add_per_s: f64,
    /// Jobs drained a second by one process at concurrency 20.
    pub drain_per_s: f64,
    /// Enqueue to start on an idle pool, jobs 10 ms apart, milliseconds.
    pub pickup_p50_ms: f64,
    pub pickup_p99_ms: f64,
}

/// The peers' folder in this checkout.
fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/peers")
}

/// Why the peers cannot run here, in one line, or `None` when they can.
pub fn missing() -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("Node.js is not on PATH (apt-get install nodejs npm, then make peers)".into());
    }
    if !folder().join("node_modules").is_dir() {
        return Some(format!(
            "{} has no node_modules: run make peers (npm ci from its package-lock.json)",
            folder().display()
        ));
    }
    None
}

/// Run `peer` (`bullmq` or `graphile-worker`) against the server at `url`:
/// `jobs` added at once then drained, `pickups` jobs 10 ms apart on an
/// idle pool.
pub fn measure(peer: &str, url: &str, jobs: u32, pickups: u32) -> Result<PeerFigures> {
    let script = folder().join("bench.js");
    let out = Command::new("node")
        .arg(&script)
        .args([peer, url, &jobs.to_string(), &pickups.to_string()])
        .output()
        .with_context(|| format!("cannot run node {}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("no message");
        bail!("{peer}'s bench failed: {last}");
    }
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("{peer}'s bench printed {line:?}"))
}

/// Each job's wait from `sent[job]` (just before its submit) to its start
/// in `started` (job, instant): (p50, p99) in milliseconds; an error when a
/// job never started.
pub fn waits_ms(sent: &[Instant], started: &[(u32, Instant)]) -> Result<(f64, f64)> {
    if started.len() != sent.len() {
        bail!("{} of {} jobs started", started.len(), sent.len());
    }
    let mut h = crate::stats::new_histogram();
    for &(job, at) in started {
        let from = sent
            .get(job as usize)
            .context("a job that was not sent started")?;
        crate::stats::record(
            &mut h,
            at.saturating_duration_since(*from).as_nanos() as u64,
        );
    }
    let p = crate::stats::percentiles(&h, 1e6);
    Ok((p.p50, p.p99))
}

/// Write `reports/bench/NAME.md` (under this checkout): the table of
/// noisylab's `ours` beside `peer`, measured in one run on one server
/// (`setting`: the server, its version and durability), then `floor`
/// (the server's bare round trips), for `make bench` to regenerate and the
/// docs to link.
pub fn write_table(
    name: &str,
    setting: &str,
    ours: &PeerFigures,
    peer: &PeerFigures,
    floor: &str,
) -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let path = dir.join(format!("{name}.md"));
    let machine = crate::machine::Machine::this().describe();
    let rows = [
        ("Jobs added a second", ours.add_per_s, peer.add_per_s, "/s"),
        (
            "Jobs drained a second (20 workers, no-op jobs)",
            ours.drain_per_s,
            peer.drain_per_s,
            "/s",
        ),
        (
            "Enqueue to start on an idle pool, p50",
            ours.pickup_p50_ms,
            peer.pickup_p50_ms,
            " ms",
        ),
        (
            "Enqueue to start on an idle pool, p99",
            ours.pickup_p99_ms,
            peer.pickup_p99_ms,
            " ms",
        ),
    ];
    let mut text = format!(
        "<!-- Written by `make bench` ({name}); do not edit. -->\n\n\
         {setting}; {machine}; one run.\n\n\
         | | {} | {} | ratio |\n|---|---|---|---|\n",
        ours.peer, peer.peer
    );
    for (what, a, b, unit) in rows {
        let fmt = |v: f64| {
            if unit == "/s" {
                crate::units::count(v.round() as u64)
            } else {
                format!("{v:.2}")
            }
        };
        text += &format!(
            "| {what} | {}{unit} | {}{unit} | ×{:.2} |\n",
            fmt(a),
            fmt(b),
            a / b
        );
    }
    text += &format!("\n{floor}\n");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Print `peer`'s figures (measured on `place`, added by `bulk`) and our
/// `ours` as ratios to them, in two lines.
pub fn print_beside(ours: &PeerFigures, peer: &PeerFigures, place: &str, bulk: &str) {
    println!(
        "  {} on {place}, concurrency 20, defaults: add {:.0}/s ({bulk}), drain {:.0}/s, \
         pickup p50 {:.2} ms, p99 {:.2} ms",
        peer.peer, peer.add_per_s, peer.drain_per_s, peer.pickup_p50_ms, peer.pickup_p99_ms
    );
    println!(
        "  ours ÷ {}'s: add ×{:.2}, drain ×{:.2}, pickup p50 ×{:.2}, p99 ×{:.2}",
        peer.peer,
        ours.add_per_s / peer.add_per_s,
        ours.drain_per_s / peer.drain_per_s,
        ours.pickup_p50_ms / peer.pickup_p50_ms,
        ours.pickup_p99_ms / peer.pickup_p99_ms
    );
}
