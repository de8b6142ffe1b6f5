//! The command line: clap options, each turned into a typed plan, then
//! dispatched to one function per command (`commands`). Ctrl-C handling
//! lives in `interrupt`.
//!
//! Exit codes: 0 done; 1 `validate` found a failing check; 2 bad input (the
//! message names the file, key and what is allowed); 130 interrupted by
//! Ctrl-C after saving what completed.

mod commands;
mod interrupt;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::backend::postgres::server::Durability;
use crate::backend::{QueueBackend, ServerPlan};
use crate::calibrate::CalibratePlan;
use crate::engine::Timer;
use crate::lab::{self, LabPlan};
use crate::reference::Reference;
use crate::report::Format;
use crate::results::ClockKind;
use crate::scenario::Scenario;

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
    /// Judge a results file: against the model on the same seeds (the verdict:
    /// exit 1 if a figure is outside its band), then against the post's
    /// figures and claims.
    Validate(ValidateOpts),
    /// Measure this machine's timer overshoot and dispatch floor.
    Calibrate(CalibrateOpts),
    /// The model's figures over many seeds (virtual clock): each figure's p5,
    /// median and p95, per strategy.
    Bands(BandsOpts),
    /// Print a scenario built into noisylab, to start your own from
    /// (`noisylab scenario article > my.toml`).
    Scenario(ScenarioOpts),
    /// Print a backend's scheduling code, explained, to paste into your own
    /// stack (`noisylab scripts redis > noisylab.lua`, `noisylab scripts
    /// postgres > noisylab.sql`).
    Scripts(ScriptsOpts),
    /// Join a lab on a queue server as worker threads, from this machine or
    /// another (`run --backend redis://… --processes 0` waits for them).
    Worker(WorkerOpts),
}

#[derive(Debug, Args)]
pub struct ScriptsOpts {
    /// Which queue server.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(
        crate::backend::ServerKind::ALL.map(|k| k.name())
    ))]
    pub backend: String,
}

#[derive(Debug, Args)]
pub struct WorkerOpts {
    /// The lab's server: `redis://HOST:PORT[/DB]` or
    /// `postgres://USER@HOST:PORT/DB`.
    #[arg(long)]
    pub backend: String,
    /// The lab's id, as the coordinator prints it.
    #[arg(long = "run", value_name = "ID")]
    pub run: String,
    /// Worker threads in this process.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub workers: u32,
}

/// What `bands` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BandsFormat {
    Table,
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct BandsOpts {
    /// Scenario file [default: lab/article.toml, else the built-in article lab].
    pub scenario: Option<PathBuf>,
    /// Seeds to run each strategy with, from the scenario's `seed` (or `--seed`).
    #[arg(long, default_value_t = crate::validate::bands::DEFAULT_SEEDS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub seeds: u32,
    /// The first seed (overrides the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, value_enum, default_value_t = BandsFormat::Table)]
    pub format: BandsFormat,
}

#[derive(Debug, Args)]
pub struct ScenarioOpts {
    /// Which built-in scenario: article (the post's lab), smoke (one second),
    /// scale, ai-product (a template: model calls, tokens, a provider's
    /// limits, API keys, retrying clients).
    #[arg(default_value = "article")]
    pub name: String,
}

/// The post's published figures, shared by the commands that judge results.
#[derive(Debug, Args)]
pub struct ReferenceArg {
    /// The post's figures [default: lab/reference/article.toml, else the copy
    /// built into the binary].
    #[arg(long = "reference", value_name = "FILE")]
    pub path: Option<PathBuf>,
}

impl ReferenceArg {
    /// The file named, else the default file, else the built-in figures
    /// (said in one line on stderr).
    pub fn load(&self) -> Result<Reference> {
        let default = Path::new(crate::reference::DEFAULT_PATH);
        match &self.path {
            Some(path) => Reference::load(path),
            None if default.exists() => Reference::load(default),
            None => {
                eprintln!(
                    "noisylab: no {} in this folder: using the post's figures built into noisylab",
                    default.display()
                );
                Ok(Reference::built_in())
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportOpts {
    /// Results files (default: every file under OUT/runs/).
    pub files: Vec<PathBuf>,
    /// Print one results file in this format to stdout instead of regenerating the report.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The reports folder (default `reports`): the report site is built
    /// from the FILES given, or from every file under DIR/runs, and written
    /// there. FILES without --out are printed only: the site stays as it
    /// was.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub reference: ReferenceArg,
}

impl ReportOpts {
    /// The reports folder.
    pub fn out(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| PathBuf::from("reports"))
    }

    /// Whether to write the report site: from the folder's own results,
    /// or from files given with a folder to write them to.
    pub fn writes_site(&self) -> bool {
        self.files.is_empty() || self.out.is_some()
    }
}

/// What `compare` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    Table,
    Markdown,
}

#[derive(Debug, Args)]
pub struct CompareOpts {
    /// Two or more results files.
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub reference: ReferenceArg,
    /// `table` (terminal) or `markdown`.
    #[arg(long, value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
}

#[derive(Debug, Args)]
pub struct ValidateOpts {
    /// A results file (default: the newest under reports/runs/).
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub reference: ReferenceArg,
}

/// What `calibrate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CalibrateFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct CalibrateOpts {
    /// Sleeps per timer.
    #[arg(long, default_value_t = CalibratePlan::FULL.sleeps, value_parser = clap::value_parser!(u32).range(1..))]
    pub sleeps: u32,
    /// Length of each sleep, in milliseconds.
    #[arg(long, default_value_t = CalibratePlan::FULL.sleep.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub sleep_ms: u64,
    /// Jobs dispatched to an idle worker, 1 ms apart.
    #[arg(long, default_value_t = CalibratePlan::FULL.dispatches, value_parser = clap::value_parser!(u32).range(1..))]
    pub dispatches: u32,
    /// `table` or `json`.
    #[arg(long, value_enum, default_value_t = CalibrateFormat::Table)]
    pub format: CalibrateFormat,
}

impl CalibrateOpts {
    pub fn plan(&self) -> CalibratePlan {
        CalibratePlan {
            sleeps: self.sleeps,
            sleep: std::time::Duration::from_millis(self.sleep_ms),
            dispatches: self.dispatches,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunOpts {
    /// Scenario file [default: lab/article.toml, else the article lab built
    /// into the binary].
    pub scenario: Option<PathBuf>,
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
    #[arg(long, value_name = "NAME|URL", value_parser = parse_backend,
          help = "Where the queue lives: in-process, a queue server the lab starts, or yours by URL",
          long_help = crate::scenario::backends::help())]
    pub backend: Option<QueueBackend>,
    /// With a queue server: worker processes sharing the pool's workers
    /// [default: enough that none runs more than 5 workers, at least 2];
    /// 0 waits for `noisylab worker` processes started elsewhere.
    #[arg(long)]
    pub processes: Option<u32>,
    /// With your own queue (`--backend http://…`): the address the
    /// collector listens on and your workers report to, HOST:PORT (port 0:
    /// one the system picks) [default: 127.0.0.1:0, loopback only].
    #[arg(long, value_name = "HOST:PORT")]
    pub collector: Option<String>,
    /// A fault injected into every run on a queue server, as a scenario's
    /// `[[fault]]` says it (repeatable; added to the scenario's):
    /// `kind=pause_worker,at_s=6,duration_s=1,target=2`. Kinds:
    /// kill_worker, pause_worker, drop_connections, restart_server,
    /// slow_link (with delay_ms=MILLISECONDS).
    #[arg(long = "fault", value_name = "KEY=VALUE,…", value_parser = parse_fault)]
    pub faults: Vec<crate::scenario::Fault>,
}

/// `--fault`'s value: a `[[fault]]` table's keys, comma-separated.
fn parse_fault(text: &str) -> Result<crate::scenario::Fault, String> {
    const FORM: &str =
        "kind=KIND,at_s=SECONDS[,duration_s=SECONDS][,target=PROCESS][,delay_ms=MILLISECONDS]";
    let mut lines = Vec::new();
    for part in text.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not KEY=VALUE; a fault is {FORM}"))?;
        let (key, value) = (key.trim(), value.trim());
        lines.push(match key {
            "kind" => format!("{key} = {value:?}"),
            _ => format!("{key} = {value}"),
        });
    }
    let fault: crate::scenario::Fault = toml::from_str(&lines.join("\n"))
        .map_err(|e| format!("{}; a fault is {FORM}", e.message().trim()))?;
    fault.check()?;
    Ok(fault)
}

/// `--backend`'s value.
fn parse_backend(text: &str) -> Result<QueueBackend, String> {
    use crate::backend::{ServerKind, ServerPlan, Target};
    let (declared, url) = crate::scenario::backends::parse(text)?;
    if let (true, Some(url)) = (declared == &crate::scenario::backends::HTTP, url) {
        return Ok(QueueBackend::Yours(crate::backend::yours::YoursPlan::new(
            url,
        )));
    }
    let Some(server) = ServerKind::of(declared) else {
        return Ok(QueueBackend::InProcess);
    };
    Ok(QueueBackend::Server(ServerPlan {
        server,
        target: url.map_or(Target::Own, |u| Target::Url(u.to_string())),
        processes: None,
        worker_exe: None,
        durability: Durability::FULL,
        persist: false,
        unlogged: false,
    }))
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
    fn scenario(&self) -> Result<Scenario> {
        resolve_scenario(self.scenario.as_deref())
    }

    fn scenario_label(&self) -> String {
        match &self.scenario {
            Some(path) => path.display().to_string(),
            None => crate::scenario::DEFAULT_PATH.to_string(),
        }
    }

    /// Load the scenario, apply the overrides, and decide where results go.
    pub fn plan(&self) -> Result<RunPlan> {
        let mut scenario = self.scenario()?;
        if let Some(runs) = self.runs {
            scenario.runs = runs;
        }
        if let Some(seed) = self.seed {
            scenario.seed = seed;
        }
        scenario.fault.extend(self.faults.iter().cloned());
        scenario
            .select(&self.strategies)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.scenario_label()))?;
        // The command line's backend, else the scenario's (checked when it
        // was loaded; the virtual clock, the model, runs in this process
        // whatever the scenario says), else this process.
        let (mut backend, in_scenario) = match (&self.backend, &scenario.backend) {
            (Some(b), _) => (b.clone(), None),
            (None, Some(spec)) if self.clock == ClockKind::Real => (
                parse_backend(&spec.url).map_err(anyhow::Error::msg)?,
                Some(spec),
            ),
            (None, _) => (QueueBackend::InProcess, None),
        };
        let processes = self.processes.or(in_scenario.and_then(|s| s.processes));
        match (&mut backend, processes) {
            (QueueBackend::Server(r), processes) => {
                r.processes = processes;
                durability(r, in_scenario, &scenario)?;
            }
            (QueueBackend::InProcess, Some(_)) => anyhow::bail!(
                "--processes goes with a queue server (--backend redis or --backend postgres)"
            ),
            (QueueBackend::InProcess | QueueBackend::Yours(_) | QueueBackend::Other(_), None) => {}
            (QueueBackend::Yours(_) | QueueBackend::Other(_), Some(_)) => {
                anyhow::bail!("--processes goes with a queue server")
            }
        }
        match (&mut backend, &self.collector) {
            (QueueBackend::Yours(y), Some(at)) => y.listen = at.clone(),
            (_, Some(_)) => anyhow::bail!(
                "--collector goes with your own queue (--backend http://HOST:PORT/PATH)"
            ),
            (_, None) => {}
        }
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
                backend,
            },
            format: self.format,
            save_to,
            quiet: self.quiet,
        })
    }
}

/// The server's durability as the scenario's `[backend]` asks (each
/// setting on by default), checked against its faults: a restart needs
/// an append-only file on Redis and flushed commits on PostgreSQL.
fn durability(
    r: &mut ServerPlan,
    in_scenario: Option<&crate::scenario::BackendSpec>,
    scenario: &Scenario,
) -> Result<()> {
    r.durability = Durability {
        fsync: in_scenario.and_then(|s| s.fsync).unwrap_or(true),
        synchronous_commit: in_scenario
            .and_then(|s| s.synchronous_commit)
            .unwrap_or(true),
    };
    let restarts = scenario
        .fault
        .iter()
        .any(|f| f.kind == crate::scenario::FaultKind::RestartServer);
    if restarts && !r.durability.synchronous_commit {
        anyhow::bail!(
            "backend.synchronous_commit = false, but a restart_server fault checks that the \
             server keeps every job it acknowledged, which a crash may lose without it: drop one \
             of them"
        );
    }
    let append_only = in_scenario.and_then(|s| s.append_only);
    if restarts && append_only == Some(false) {
        anyhow::bail!(
            "backend.append_only = false, but a restart_server fault restarts the server from \
             its append-only file: drop one of them"
        );
    }
    r.persist = restarts || append_only == Some(true);
    Ok(())
}

/// The file named, else `lab/article.toml`, else the built-in article lab
/// (said in one line on stderr).
pub fn resolve_scenario(path: Option<&Path>) -> Result<Scenario> {
    let default = Path::new(crate::scenario::DEFAULT_PATH);
    Ok(match path {
        Some(path) => Scenario::load(path)?,
        None if default.exists() => Scenario::load(default)?,
        None => {
            eprintln!(
                "noisylab: no {} in this folder: running the article lab built into noisylab \
                 (`noisylab scenario article` prints it)",
                default.display()
            );
            Scenario::built_in("article")?
        }
    })
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
        Command::Run(opts) => commands::run(&opts.plan()?),
        Command::Report(opts) => commands::report(&opts),
        Command::Compare(opts) => commands::compare(&opts),
        Command::Validate(opts) => commands::validate(&opts),
        Command::Calibrate(opts) => commands::calibrate(&opts),
        Command::Scenario(opts) => commands::scenario(&opts),
        Command::Bands(opts) => commands::bands(&opts),
        Command::Scripts(opts) => commands::scripts(&opts),
        Command::Worker(opts) => commands::worker(&opts),
    }
}
