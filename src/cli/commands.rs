//! One function per command. Each returns its exit code; errors go up to
//! `cli::main`, which prints them once.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use comfy_table::presets::{ASCII_MARKDOWN, UTF8_FULL_CONDENSED};

use super::interrupt::watch_ctrl_c;
use super::{
    BandsFormat, BandsOpts, CalibrateFormat, CalibrateOpts, CompareFormat, CompareOpts,
    EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, ReportOpts, RunPlan, ScenarioOpts, ScriptsOpts,
    ValidateOpts, WorkerOpts,
};
use crate::lab::{self, LabOutcome};
use crate::output::progress::Progress;
use crate::report::readme::Source;
use crate::report::{Format, compare as compare_report, readme};
use crate::results::LabResults;
use crate::store;

pub fn run(plan: &RunPlan) -> Result<i32> {
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
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&plan.format.exporter().export(&printed)?)?;
    // What follows goes to stderr: let the tables land first.
    stdout.flush()?;
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
        say_what_was_kept(&outcome, saved.as_deref(), "interrupted");
        return Ok(EXIT_INTERRUPTED);
    }
    if let Some(why) = &outcome.failed {
        eprintln!("noisylab: {why}");
        say_what_was_kept(&outcome, saved.as_deref(), "stopped");
        return Ok(super::EXIT_BAD_INPUT);
    }
    Ok(EXIT_OK)
}

/// What a lab that ended early (`how`: "interrupted", "stopped") kept.
fn say_what_was_kept(outcome: &LabOutcome, saved: Option<&Path>, how: &str) {
    let kept: usize = outcome
        .results
        .strategies
        .iter()
        .map(|s| s.runs.len())
        .sum();
    match saved {
        Some(path) => eprintln!("{how}: kept {kept} completed run(s) in {}", path.display()),
        None if kept == 0 => eprintln!("{how} before any run completed: nothing to save"),
        None => {
            eprintln!("{how}: {kept} completed run(s), not saved (virtual clock without --out)")
        }
    }
}

pub fn report(opts: &ReportOpts) -> Result<i32> {
    let out = opts.out();
    let paths = if opts.files.is_empty() {
        store::list(&out)?
    } else {
        opts.files.clone()
    };
    if let Some(format) = opts.format {
        return print_one(opts, &paths, format);
    }
    if paths.is_empty() {
        bail!(
            "{}: no results files; run `make lab` (or `noisylab run`) first",
            store::runs_dir(&out).display()
        );
    }
    let reference = opts.reference.load()?;
    let files = store::load_all(&paths)?;
    let mut sources: Vec<Source<'_>> = paths
        .iter()
        .zip(&files)
        .map(|(p, results)| Source {
            link: p
                .strip_prefix(&out)
                .unwrap_or(p)
                .to_string_lossy()
                .replace('\\', "/"),
            results,
        })
        .collect();
    readme::order(&mut sources);
    let mut stdout = std::io::stdout().lock();
    for s in &sources {
        writeln!(stdout, "{}", s.link)?;
        stdout.write_all(&Format::Table.exporter().export(s.results)?)?;
        writeln!(stdout)?;
    }
    if files.len() > 1 {
        let refs: Vec<&LabResults> = sources.iter().map(|s| s.results).collect();
        stdout
            .write_all(compare_report::render(&refs, &reference, UTF8_FULL_CONDENSED).as_bytes())?;
    }
    stdout.flush()?;
    if !opts.writes_site() {
        eprintln!(
            "the report site in {} is left as it was (it is built from {}): give --out DIR \
             to write one from these files",
            out.display(),
            store::runs_dir(&out).display()
        );
        return Ok(EXIT_OK);
    }
    let page = readme::render(&sources, &reference)?;
    let written = store::write_site(&out, &page.readme, &page.plots)?;
    eprintln!(
        "wrote {} and {} charts in {}",
        written.display(),
        page.plots.len(),
        out.join("plots").display()
    );
    Ok(EXIT_OK)
}

/// `report --format F`: one results file in one format on stdout.
fn print_one(opts: &ReportOpts, paths: &[PathBuf], format: Format) -> Result<i32> {
    let path = match paths {
        [one] => one.clone(),
        [] => bail!(
            "{}: no results files to report",
            store::runs_dir(&opts.out()).display()
        ),
        _ if opts.files.is_empty() => store::newest(&opts.out())?,
        _ => bail!(
            "--format prints one results file; {} were given",
            paths.len()
        ),
    };
    let results = store::load(&path)?;
    std::io::stdout().write_all(&format.exporter().export(&results)?)?;
    Ok(EXIT_OK)
}

pub fn compare(opts: &CompareOpts) -> Result<i32> {
    let reference = opts.reference.load()?;
    let files = store::load_all(&opts.files)?;
    let refs: Vec<&LabResults> = files.iter().collect();
    let style = match opts.format {
        CompareFormat::Markdown => ASCII_MARKDOWN,
        CompareFormat::Table => UTF8_FULL_CONDENSED,
    };
    let text = compare_report::render(&refs, &reference, style);
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(EXIT_OK)
}

pub fn validate(opts: &ValidateOpts) -> Result<i32> {
    let reference = opts.reference.load()?;
    let path = match &opts.file {
        Some(p) => p.clone(),
        None => store::newest(&lab::default_out())?,
    };
    let results = store::load(&path)?;
    let model = crate::validate::model::against_model(&results);
    println!("{}: against the model on the same seeds\n", path.display());
    print!(
        "{}",
        crate::report::validation::render_model(&model, &results, UTF8_FULL_CONDENSED)
    );
    print!("{}", crate::report::validation::render_causes(&results));
    let behaviour = crate::validate::behaves::nearest(&results);
    if !behaviour.is_empty() {
        println!();
        print!(
            "{}",
            crate::report::validation::render_behaviour(&behaviour, UTF8_FULL_CONDENSED)
        );
    }
    let seeds = crate::validate::bands::DEFAULT_SEEDS;
    let model_lab = crate::validate::bands::model_lab(&results.scenario, seeds);
    let v = crate::validate::validate_with(&results, &reference, Some(&model_lab));
    println!(
        "\nAgainst the post: {} ({}), and the model over seeds {}–{}\n",
        reference.source,
        reference.machine,
        model_lab.bands.first_seed,
        model_lab.bands.first_seed + u64::from(seeds) - 1
    );
    print!(
        "{}",
        crate::report::validation::render(&v, UTF8_FULL_CONDENSED)
    );
    // The headline decides, and is said again last: a real-clock file
    // passes when this machine reproduces the model; a virtual one, the
    // model itself, by the claims.
    if model.not_run.is_none() {
        println!(
            "\n{}",
            crate::report::validation::verdict_line(&model, &results)
        );
    }
    let passed = match model.not_run {
        None => model.reproduces(),
        Some(_) => v.passed(),
    };
    Ok(if passed { EXIT_OK } else { EXIT_CHECK_FAILED })
}

pub fn bands(opts: &BandsOpts) -> Result<i32> {
    let mut scenario = super::resolve_scenario(opts.scenario.as_deref())?;
    if let Some(seed) = opts.seed {
        scenario.seed = seed;
    }
    let b = crate::validate::bands::model_lab(&scenario, opts.seeds).bands;
    let text = match opts.format {
        BandsFormat::Json => serde_json::to_string_pretty(&b)? + "\n",
        BandsFormat::Table | BandsFormat::Markdown => {
            let style = if opts.format == BandsFormat::Markdown {
                ASCII_MARKDOWN
            } else {
                UTF8_FULL_CONDENSED
            };
            format!(
                "{}\n{}\n",
                crate::report::bands::heading(&scenario.name, &b),
                crate::report::table::fit_terminal(crate::report::bands::table(&b, style))
            )
        }
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(EXIT_OK)
}

/// Print a built-in scenario's text as it is compiled in.
pub fn scenario(opts: &ScenarioOpts) -> Result<i32> {
    let Some(text) = crate::scenario::built_in_text(&opts.name) else {
        bail!(
            "scenario {:?}: no such built-in scenario; built in: {}",
            opts.name,
            crate::scenario::built_in_names()
        );
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(EXIT_OK)
}

pub fn calibrate(opts: &CalibrateOpts) -> Result<i32> {
    let c = crate::calibrate::run(opts.plan())?;
    let text = match opts.format {
        CalibrateFormat::Json => serde_json::to_string_pretty(&c)? + "\n",
        CalibrateFormat::Table => crate::report::calibration::render(&c),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(EXIT_OK)
}

/// `noisylab scripts redis|postgres`: the function library or the schema,
/// as loaded into the server.
pub fn scripts(opts: &ScriptsOpts) -> Result<i32> {
    print!("{}", server_named(&opts.backend)?.scripts());
    Ok(EXIT_OK)
}

/// The queue server `name` names.
fn server_named(name: &str) -> Result<crate::backend::ServerKind> {
    let (declared, _) = crate::scenario::backends::parse(name).map_err(anyhow::Error::msg)?;
    crate::backend::ServerKind::of(declared)
        .ok_or_else(|| anyhow::anyhow!("{name:?} is no queue server"))
}

/// `noisylab worker`: serve a lab on a queue server until its coordinator
/// says quit.
pub fn worker(opts: &WorkerOpts) -> Result<i32> {
    let (declared, url) =
        crate::scenario::backends::parse(&opts.backend).map_err(anyhow::Error::msg)?;
    let (Some(server), Some(url)) = (crate::backend::ServerKind::of(declared), url) else {
        let forms: Vec<&str> = crate::scenario::backends::BACKENDS
            .iter()
            .filter_map(|b| b.url_form)
            .collect();
        anyhow::bail!(
            "--backend {:?}: a worker joins a server by URL ({})",
            opts.backend,
            forms.join(" or ")
        );
    };
    server.serve(url, &opts.run, opts.workers)?;
    Ok(EXIT_OK)
}
