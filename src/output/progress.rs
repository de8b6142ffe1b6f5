//! A progress bar per real-clock run on stderr (indicatif), hidden when
//! stderr is not a terminal or with `--quiet`.
//!
//! The bar is advanced by a thread of its own from the wall clock, so the
//! engine's thread never stops to draw.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Clone, Copy)]
pub struct Progress {
    shown: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Progress {
        Progress {
            shown: !quiet && std::io::stderr().is_terminal(),
        }
    }

    pub fn hidden() -> Progress {
        Progress { shown: false }
    }

    /// A bar for run `run` of `runs` of one strategy (`index` of `total` overall),
    /// expected to take `expected_s` of lab time.
    pub fn run_bar(
        &self,
        strategy: &str,
        run: u32,
        runs: u32,
        index: usize,
        total: usize,
        expected_s: f64,
    ) -> RunBar {
        if !self.shown {
            return RunBar { ticker: None };
        }
        let bar = ProgressBar::with_draw_target(
            Some((expected_s * 10.0).ceil() as u64),
            ProgressDrawTarget::stderr_with_hz(4),
        );
        bar.set_style(
            ProgressStyle::with_template("{prefix:.bold} {msg} [{bar:30}] {elapsed} of ~{len_s}")
                .expect("valid template")
                .with_key(
                    "len_s",
                    |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.0}s", s.len().unwrap_or(0) as f64 / 10.0);
                    },
                )
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("[{}/{}]", index + 1, total));
        bar.set_message(format!("{strategy}, run {run} of {runs}"));
        let done = Arc::new(AtomicBool::new(false));
        let handle = {
            let (bar, done) = (bar.clone(), done.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    bar.set_position((start.elapsed().as_secs_f64() * 10.0) as u64);
                    std::thread::sleep(Duration::from_millis(250));
                }
                bar.finish_and_clear();
            })
        };
        RunBar {
            ticker: Some((done, handle)),
        }
    }
}

pub struct RunBar {
    ticker: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl RunBar {
    pub fn finish(self) {
        if let Some((done, handle)) = self.ticker {
            done.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
    }
}
