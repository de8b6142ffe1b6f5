//! Command-line options, turned into a typed plan, then run.
//!
//! Exit codes: 0 done; 1 `validate` found a failing check; 2 bad input (the
//! message names the file, key and what is allowed); 130 interrupted by
//! Ctrl-C after saving what completed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};

use crate::engine::Timer;
use crate::lab::{self, LabPlan};
use crate::output::progress::Progress;
use crate::report::Format;
use crate::results::ClockKind;
use crate::scenario::Scenario;
use crate::store;

pub const EXIT_OK: i32 = 0;
pub const EXIT_CHECK_FAILED: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "noisylab",
    version,
    about = "Measure how multi-tenant job schedulers treat their tenants"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every strategy of a scenario and print the post's table.
    Run(RunOpts),
    /// Measure this machine's timer overshoot and dispatch floor.
    Calibrate(CalibrateOpts),
}

#[derive(Debug, Args)]
pub struct CalibrateOpts {
    /// Sleeps per timer.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub sleeps: u32,
    /// Length of each sleep, in milliseconds.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub sleep_ms: u64,
    /// Jobs dispatched to an idle worker, 1 ms apart.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub dispatches: u32,
    /// `table` or `json` (the others print the table).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct RunOpts {
    /// Scenario file.
    #[arg(default_value = "lab/article.toml")]
    pub scenario: PathBuf,
    /// `real`: wall-clock workers and real sleeps; `virtual`: deterministic, instant.
    #[arg(long, value_enum, default_value_t = ClockKind::Real)]
    pub clock: ClockKind,
    /// How the real clock waits (ignored on the virtual clock).
    #[arg(long, value_enum, default_value_t = Timer::Precise)]
    pub timer: Timer,
    /// Runs per strategy (overrides the scenario's `runs`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Seed of run 0; run k uses seed + k (overrides the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run only this strategy (by name; repeatable).
    #[arg(long = "strategy", value_name = "NAME")]
    pub strategies: Vec<String>,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Folder for results files (`DIR/runs/`). Real-clock runs always save,
    /// to `reports/` unless told; virtual runs save only when given one.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A `run` command, checked and ready.
#[derive(Debug)]
pub struct RunPlan {
    pub lab: LabPlan,
    pub format: Format,
    pub save_to: Option<PathBuf>,
    pub quiet: bool,
}

impl RunOpts {
    /// Load the scenario, apply the overrides, and decide where results go.
    pub fn plan(&self) -> Result<RunPlan> {
        let mut scenario = Scenario::load(&self.scenario)?;
        if let Some(runs) = self.runs {
            scenario.runs = runs;
        }
        if let Some(seed) = self.seed {
            scenario.seed = seed;
        }
        scenario
            .select(&self.strategies)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.scenario.display()))?;
        let save_to = match (self.clock, &self.out) {
            (_, Some(dir)) => Some(dir.clone()),
            (ClockKind::Real, None) => Some(lab::default_out()),
            (ClockKind::Virtual, None) => None,
        };
        Ok(RunPlan {
            lab: LabPlan {
                scenario,
                clock: self.clock,
                timer: self.timer,
                keep_raw: save_to.is_some(),
            },
            format: self.format,
            save_to,
            quiet: self.quiet,
        })
    }
}

/// Parse the command line, run it, and return the exit code. Errors are
/// printed once, as one line.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match execute(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("noisylab: {e:#}");
            EXIT_BAD_INPUT
        }
    }
}

pub fn execute(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Run(opts) => run(&opts.plan()?),
        Command::Calibrate(opts) => {
            let plan = crate::calibrate::CalibratePlan {
                sleeps: opts.sleeps,
                sleep: std::time::Duration::from_millis(opts.sleep_ms),
                dispatches: opts.dispatches,
            };
            let c = crate::calibrate::run(plan)?;
            let text = if opts.format == Format::Json {
                serde_json::to_string_pretty(&c)? + "\n"
            } else {
                crate::report::calibration::render(&c)
            };
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(EXIT_OK)
        }
    }
}

fn run(plan: &RunPlan) -> Result<i32> {
    if let Some(dir) = &plan.save_to {
        store::check_writable(dir)?;
    }
    let stop = watch_ctrl_c()?;
    let progress = Progress::new(plan.quiet);
    let wall = std::time::Instant::now();
    let outcome = lab::run(&plan.lab, &stop, &progress)?;
    let wall_s = wall.elapsed().as_secs_f64();
    let saved = match &plan.save_to {
        Some(dir) if !outcome.results.strategies.is_empty() => {
            Some(store::save(dir, &outcome.results)?)
        }
        _ => None,
    };
    let printed = if plan.format == Format::Json {
        outcome.results.without_raw()
    } else {
        outcome.results.clone()
    };
    let bytes = plan.format.exporter().export(&printed)?;
    std::io::stdout().write_all(&bytes)?;
    if !plan.quiet {
        eprintln!(
            "{:.1} s of lab time in {:.3} s of wall time; peak memory {:.0} MiB",
            outcome.results.lab_s_total(),
            wall_s,
            crate::machine::peak_rss_mib().unwrap_or(f64::NAN)
        );
    }
    if let Some(path) = &saved {
        eprintln!("results saved to {}", path.display());
    }
    if outcome.interrupted {
        let kept: usize = outcome
            .results
            .strategies
            .iter()
            .map(|s| s.runs.len())
            .sum();
        match &saved {
            Some(path) => eprintln!(
                "interrupted: kept {kept} completed run(s) in {}",
                path.display()
            ),
            None => {
                eprintln!("interrupted: {kept} completed run(s), nothing saved (no results folder)")
            }
        }
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(EXIT_OK)
}

/// The first Ctrl-C sets the returned flag (the lab stops after saving what
/// completed); a second exits at once.
fn watch_ctrl_c() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Register the handler before the lab starts, then wait on its own thread.
    let mut sigint = {
        let _context = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?
    };
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let _ = sigint.recv().await;
            flag.store(true, Ordering::Relaxed);
            eprintln!("\nnoisylab: stopping after saving the completed runs (Ctrl-C again to quit at once)");
            let _ = sigint.recv().await;
            std::process::exit(EXIT_INTERRUPTED);
        });
    });
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted before the lab started");
    }
    Ok(stop)
}
