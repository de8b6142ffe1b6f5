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

/// Our drains beside a peer's, round by round: in each, ours for each of
/// our queues and the peer's add and drain, back to back on the same
/// server, so that the machine's speed (which on a shared VM drifts by a
/// fifth from minute to minute) is about the same on both sides of a
/// round's ratio; the spread of those ratios is the comparison's own error.
/// Ours go first in the odd rounds and the peer's in the even ones, so
/// that a steady drift over the rounds favours neither side.
pub struct Rounds {
    /// Our queues, in the order each round drains them.
    pub queues: Vec<String>,
    /// Our (add, drain) jobs a second by queue, a row a round.
    pub ours: Vec<Vec<(f64, f64)>>,
    /// The peer's figures, a round each (its pickup timed in the first).
    pub peer: Vec<PeerFigures>,
}

impl Rounds {
    /// `rounds` rounds of `ours(queue)` ((add, drain) jobs a second) for
    /// each of `queues` and `peer` ([`measure`]: `jobs` jobs, `pickups`
    /// timed in the first round, the one nearest a bench's own pickup, one
    /// in the others), each round printed.
    pub fn run(
        peer: &str,
        url: &str,
        (jobs, pickups, rounds): (u32, u32, usize),
        queues: &[&str],
        mut ours: impl FnMut(&str) -> Result<(f64, f64)>,
    ) -> Result<Rounds> {
        let mut r = Rounds {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            ours: Vec::new(),
            peer: Vec::new(),
        };
        for k in 1..=rounds {
            let timed = if k == 1 { pickups } else { 1 };
            let peer_first = k % 2 == 0;
            let mut ours_all = || queues.iter().map(|q| ours(q)).collect::<Result<Vec<_>>>();
            let (row, g) = if peer_first {
                let g = measure(peer, url, jobs, timed)?;
                (ours_all()?, g)
            } else {
                let row = ours_all()?;
                (row, measure(peer, url, jobs, timed)?)
            };
            let each: Vec<String> = queues
                .iter()
                .zip(&row)
                .map(|(q, (_, d))| format!("{q} {d:.0} (×{:.2})", d / g.drain_per_s))
                .collect();
            let order = if peer_first {
                "its first"
            } else {
                "ours first"
            };
            println!(
                "  round {k} ({order}): drained a second: {}; {} {:.0}",
                each.join(", "),
                g.peer,
                g.drain_per_s
            );
            r.ours.push(row);
            r.peer.push(g);
        }
        Ok(r)
    }

    /// Our first queue's add and drain, medians over the rounds, as
    /// `name`, with its pickup (p50, p99) ms.
    pub fn ours_figures(&self, name: &str, (p50, p99): (f64, f64)) -> PeerFigures {
        PeerFigures {
            peer: name.into(),
            add_per_s: median_of(self.ours.iter().map(|row| row[0].0)),
            drain_per_s: median_of(self.ours.iter().map(|row| row[0].1)),
            pickup_p50_ms: p50,
            pickup_p99_ms: p99,
        }
    }

    /// The peer's add and drain, medians over the rounds; its pickup, the
    /// first round's.
    pub fn peer_figures(&self) -> Result<PeerFigures> {
        let first = self.peer.first().context("no rounds")?;
        Ok(PeerFigures {
            add_per_s: median_of(self.peer.iter().map(|g| g.add_per_s)),
            drain_per_s: median_of(self.peer.iter().map(|g| g.drain_per_s)),
            ..first.clone()
        })
    }

    /// Each round's drain of our `q`th queue ÷ the peer's.
    pub fn ratios(&self, q: usize) -> Vec<f64> {
        self.ours
            .iter()
            .zip(&self.peer)
            .map(|(row, g)| row[q].1 / g.drain_per_s)
            .collect()
    }

    /// The rounds in a sentence, for under a report's table.
    pub fn sentence(&self) -> String {
        let peer = self.peer.first().map_or("the peer", |g| g.peer.as_str());
        let each: Vec<String> = (0..self.queues.len())
            .map(|q| {
                let r: Vec<String> = self.ratios(q).iter().map(|x| format!("×{x:.2}")).collect();
                format!("{} {}", self.queues[q], r.join(", "))
            })
            .collect();
        format!(
            "The drains ran in {} rounds, noisylab's ({}) and {peer}'s back to back in each, ours \
             first in the odd rounds and its first in the even ones; the table gives the medians; \
             each round's drain ÷ {peer}'s: {}.",
            self.peer.len(),
            self.queues.join(", then "),
            each.join("; ")
        )
    }
}

/// The median of some values.
fn median_of(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    crate::stats::median(&v)
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
/// (`setting`: the server, its version and durability), then `notes`
/// (how the figures were taken, the server's bare round trips), for `make
/// bench` to regenerate and the docs to link.
pub fn write_table(
    name: &str,
    setting: &str,
    ours: &PeerFigures,
    peer: &PeerFigures,
    notes: &str,
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
    text += &format!("\n{notes}\n");
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
