//! Command-line options, turned into a typed plan, then run.
//!
//! Exit codes: 0 done; 1 `validate` found a failing check; 2 bad input (the
//! message names the file, key and what is allowed); 130 interrupted by
//! Ctrl-C after saving what completed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use comfy_table::presets::UTF8_FULL_CONDENSED;

use crate::engine::Timer;
use crate::lab::{self, LabPlan};
use crate::output::progress::Progress;
use crate::reference::Reference;
use crate::report::Format;
use crate::report::readme::Source;
use crate::results::{ClockKind, LabResults};
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
    /// Regenerate `reports/README.md` and its charts from saved results, and
    /// print the tables (or one file in one `--format`).
    Report(ReportOpts),
    /// Several results files side by side with the post's figures.
    Compare(CompareOpts),
    /// Check a results file against the post's figures and claims (exit 1 if one fails).
    Validate(ValidateOpts),
    /// Measure this machine's timer overshoot and dispatch floor.
    Calibrate(CalibrateOpts),
}

#[derive(Debug, Args)]
pub struct ReportOpts {
    /// Results files (default: every file under OUT/runs/).
    pub files: Vec<PathBuf>,
    /// Print one results file in this format to stdout instead of regenerating the report.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The reports folder.
    #[arg(long, value_name = "DIR", default_value = "reports")]
    pub out: PathBuf,
    /// The post's figures.
    #[arg(long, value_name = "FILE", default_value = crate::reference::DEFAULT_PATH)]
    pub reference: PathBuf,
}

#[derive(Debug, Args)]
pub struct CompareOpts {
    /// Two or more results files.
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    #[arg(long, value_name = "FILE", default_value = crate::reference::DEFAULT_PATH)]
    pub reference: PathBuf,
    /// `table` (terminal) or `markdown`.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ValidateOpts {
    /// A results file (default: the newest under reports/runs/).
    pub file: Option<PathBuf>,
    #[arg(long, value_name = "FILE", default_value = crate::reference::DEFAULT_PATH)]
    pub reference: PathBuf,
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
        Command::Report(opts) => report(&opts),
        Command::Compare(opts) => {
            let reference = Reference::load(&opts.reference)?;
            let files = load_all(&opts.files)?;
            let refs: Vec<&LabResults> = files.iter().collect();
            let style = if opts.format == Format::Markdown {
                comfy_table::presets::ASCII_MARKDOWN
            } else {
                UTF8_FULL_CONDENSED
            };
            let text = crate::report::compare::render(&refs, &reference, style);
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(EXIT_OK)
        }
        Command::Validate(opts) => {
            let reference = Reference::load(&opts.reference)?;
            let path = match &opts.file {
                Some(p) => p.clone(),
                None => newest(&lab::default_out())?,
            };
            let results = LabResults::load(&path)?;
            let v = crate::validate::validate(&results, &reference);
            println!(
                "{} against {} ({})\n",
                path.display(),
                reference.source,
                reference.machine
            );
            print!("{}", v.render(UTF8_FULL_CONDENSED));
            Ok(if v.passed() {
                EXIT_OK
            } else {
                EXIT_CHECK_FAILED
            })
        }
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

fn load_all(paths: &[PathBuf]) -> Result<Vec<LabResults>> {
    paths.iter().map(|p| LabResults::load(p)).collect()
}

/// The newest results file under `out/runs/`, by its creation time.
fn newest(out: &std::path::Path) -> Result<PathBuf> {
    let mut best: Option<(Option<String>, PathBuf)> = None;
    for path in store::list(out)? {
        let created = LabResults::load(&path)?.created;
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
            store::runs_dir(out).display()
        )
    })
}

fn report(opts: &ReportOpts) -> Result<i32> {
    let paths = if opts.files.is_empty() {
        store::list(&opts.out)?
    } else {
        opts.files.clone()
    };
    if let Some(format) = opts.format {
        let path = match paths.as_slice() {
            [one] => one.clone(),
            [] => bail!(
                "{}: no results files to report",
                store::runs_dir(&opts.out).display()
            ),
            _ if opts.files.is_empty() => newest(&opts.out)?,
            _ => bail!(
                "--format prints one results file; {} were given",
                paths.len()
            ),
        };
        let results = LabResults::load(&path)?;
        std::io::stdout().write_all(&format.exporter().export(&results)?)?;
        return Ok(EXIT_OK);
    }
    if paths.is_empty() {
        bail!(
            "{}: no results files; run `make lab` (or `noisylab run`) first",
            store::runs_dir(&opts.out).display()
        );
    }
    let reference = Reference::load(&opts.reference)?;
    let files = load_all(&paths)?;
    let mut sources: Vec<Source<'_>> = paths
        .iter()
        .zip(&files)
        .map(|(p, results)| Source {
            link: p
                .strip_prefix(&opts.out)
                .unwrap_or(p)
                .to_string_lossy()
                .replace('\\', "/"),
            results,
        })
        .collect();
    crate::report::readme::order(&mut sources);
    let page = crate::report::readme::render(&sources, &reference)?;
    let plots_dir = opts.out.join("plots");
    std::fs::create_dir_all(&plots_dir)
        .with_context(|| format!("{}: cannot create the plots folder", plots_dir.display()))?;
    for (name, svg) in &page.plots {
        store::write_atomic(&plots_dir.join(name), svg.as_bytes())?;
    }
    remove_stale_plots(&plots_dir, &page.plots)?;
    let readme = opts.out.join("README.md");
    store::write_atomic(&readme, page.readme.as_bytes())?;
    let mut stdout = std::io::stdout().lock();
    for s in &sources {
        writeln!(stdout, "{}", s.link)?;
        stdout.write_all(&Format::Table.exporter().export(s.results)?)?;
        writeln!(stdout)?;
    }
    if files.len() > 1 {
        let refs: Vec<&LabResults> = sources.iter().map(|s| s.results).collect();
        stdout.write_all(
            crate::report::compare::render(&refs, &reference, UTF8_FULL_CONDENSED).as_bytes(),
        )?;
    }
    eprintln!(
        "wrote {} and {} charts in {}",
        readme.display(),
        page.plots.len(),
        plots_dir.display()
    );
    Ok(EXIT_OK)
}

/// Charts of results files that are gone.
fn remove_stale_plots(dir: &std::path::Path, keep: &[(String, String)]) -> Result<()> {
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
            None if kept == 0 => {
                eprintln!("interrupted before any run completed: nothing to save")
            }
            None => {
                eprintln!(
                    "interrupted: {kept} completed run(s), not saved (virtual clock without --out)"
                )
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
