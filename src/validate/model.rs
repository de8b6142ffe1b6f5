//! Real against virtual on the same seeds: does this machine reproduce the
//! model? A statistical test with a stated level.
//!
//! For every run of a real-clock results file, the scenario is run again on
//! the virtual clock with the run's seed: exactly, and [`REPLICAS`] times
//! with the machine's own timing drawn: each wake of the loop let go a
//! lateness drawn from the run's measured wakes and each event handled in
//! a time drawn from its measured events ([`crate::engine::jitter`]), so
//! events due within one wake's lateness are handled together, as they
//! were on the machine. Each figure (waits, counts) is judged against its
//! replicas' prediction band ([`band`]) at the level that holds every
//! figure of the lab together at [`LEVEL`]: a machine that is the model,
//! its timing included, passes at least that often (measured by
//! simulation in `src/tests/verdict.rs`; see docs/validation.md).
//! Makespans are judged against the exact model within [`MAKESPAN_CLOSE`],
//! so a machine whose timers run late fails them. On a real queue (a
//! results file with a `backend`) each replica draws every job's hold from
//! the run's measured ones instead, and makespans are judged against those
//! replicas too: there every hold includes the queue's finish and take, an
//! overhead the backend adds by design, which the model must carry to say
//! whether the rest of the run is the model's.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::jitter::{Draws, Jitter};
use crate::engine::lateness::{Cause, Lateness};
use crate::lab::{self, summary};
use crate::results::{Figures, LabResults, RunResult, StrategyResults};
use crate::scenario::{Scenario, Strategy};
use crate::stats::decode_histogram;
use crate::validate::bands::figure_values;

/// Makespans (the noisy tenant's done time, the run's length) within 0.1 %.
pub const MAKESPAN_CLOSE: f64 = 0.001;
/// A wait figure may differ from the model by this many times the run's
/// harness error (see [`harness_error_ms`]) …
pub const WAIT_ERRORS: f64 = 3.0;
/// … plus this share of the model's figure: a percentile of a few hundred
/// waits moves by a neighbour's rank when one wait shifts.
pub const WAIT_CLOSE: f64 = 0.02;

/// How a figure is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Exact,
    Makespan,
    Wait,
}

/// One figure of one run, the machine's beside the model's.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureCheck {
    pub strategy: String,
    pub seed: u64,
    /// The key as in results (`normal_wait_ms.p95`).
    pub figure: String,
    pub rule: Rule,
    pub machine: f64,
    pub model: f64,
    /// The model's band: where its replicas put this figure at the
    /// verdict's level (both `model` where there are none, and for
    /// makespans on the engine).
    pub model_lo: f64,
    pub model_hi: f64,
    /// The largest distance allowed from that band, in the figure's unit:
    /// the makespan's 0.1 %, or for waits the run's harness error.
    pub tolerance: f64,
}

impl FigureCheck {
    pub fn holds(&self) -> bool {
        (self.machine >= self.model_lo - self.tolerance
            && self.machine <= self.model_hi + self.tolerance)
            || (self.machine.is_nan() && self.model.is_nan())
    }

    /// How far outside the model's range the machine's figure is (0 inside).
    pub fn off_by(&self) -> f64 {
        if self.machine < self.model_lo {
            self.machine - self.model_lo
        } else if self.machine > self.model_hi {
            self.machine - self.model_hi
        } else {
            0.0
        }
    }

    /// The figure's unit, from its key.
    pub fn unit(&self) -> &'static str {
        if self.figure.contains("_ms") {
            "ms"
        } else if self.figure.ends_with("_s") {
            "s"
        } else {
            ""
        }
    }
}

/// The verdict on a machine: every figure of every run against the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelVerdict {
    pub checks: Vec<FigureCheck>,
    /// Why the comparison could not run (a virtual-clock file, a trace
    /// whose rows are not in the file).
    pub not_run: Option<String>,
    /// Each run's late jobs and arrivals by cause, by (strategy, seed):
    /// runs that measured them.
    pub late: BTreeMap<(String, u64), Lateness>,
}

impl ModelVerdict {
    fn not_run(why: &str) -> ModelVerdict {
        ModelVerdict {
            checks: Vec::new(),
            not_run: Some(why.into()),
            late: BTreeMap::new(),
        }
    }

    pub fn failed(&self) -> Vec<&FigureCheck> {
        self.checks.iter().filter(|c| !c.holds()).collect()
    }

    pub fn reproduces(&self) -> bool {
        self.not_run.is_none() && self.failed().is_empty()
    }

    /// Every run's late events summed; `None` when no run measured them.
    pub fn late_total(&self) -> Option<Lateness> {
        Lateness::sum(self.late.values())
    }

    /// The late events of the runs with a figure outside tolerance (where
    /// the cause of a failure is), summed.
    pub fn late_where_failed(&self) -> Option<Lateness> {
        let failed = self.failed();
        Lateness::sum(self.late.iter().filter_map(|((strategy, seed), l)| {
            failed
                .iter()
                .any(|c| &c.strategy == strategy && c.seed == *seed)
                .then_some(l)
        }))
    }

    /// Whether a figure holds once the time `cause` took in its run is
    /// allowed beside its tolerance: a makespan may be long by all of it (one
    /// thread handles every completion, so no chain loses more), a wait by
    /// its longest single episode; counts stay exact.
    pub fn holds_allowing(&self, check: &FigureCheck, cause: Cause) -> bool {
        let Some(late) = self.late.get(&(check.strategy.clone(), check.seed)) else {
            return check.holds();
        };
        let allowed = match check.rule {
            Rule::Exact => 0.0,
            Rule::Makespan => late.time_ms.get(cause) / 1e3,
            Rule::Wait => late.longest_ms.get(cause),
        };
        FigureCheck {
            tolerance: check.tolerance + allowed,
            ..check.clone()
        }
        .holds()
    }

    /// Figures within tolerance with the time `cause` took allowed.
    pub fn within_allowing(&self, cause: Cause) -> usize {
        self.checks
            .iter()
            .filter(|c| self.holds_allowing(c, cause))
            .count()
    }
}

/// Thresholds past which a cause is named.
pub const OTHERS_CPU_PCT: f64 = 10.0;
pub const STEAL_PCT: f64 = 1.0;

/// What measurably disturbed a real-clock lab, each with its figure; empty
/// when nothing did.
pub fn causes(results: &LabResults) -> Vec<String> {
    let Some(real) = &results.real else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(c) = &real.causes {
        if let Some(others) = c.others_cpu_pct.filter(|p| *p > OTHERS_CPU_PCT) {
            out.push(format!(
                "other processes kept {others:.0} % of the CPUs busy during the lab ({:.0} involuntary context switches a second): close them, or pin the lab to a quiet core",
                c.involuntary_switches_per_s
            ));
        }
        if let Some(steal) = c.steal_pct.filter(|p| *p > STEAL_PCT) {
            out.push(format!(
                "the hypervisor ran other guests on this machine's CPUs for {steal:.1} % of the time (steal): a noisy neighbour, not this machine's own load; rerun later or on a dedicated host"
            ));
        }
    }
    let late = real.calibration.tokio_overshoot_ms.max;
    let margin = real.timer_margin_ms.unwrap_or(3.0);
    if late > margin {
        out.push(format!(
            "tokio's timer woke up to {late:.2} ms late in calibration, past the precise timer's {margin:.1} ms margin: the timer itself"
        ));
    }
    out
}

/// A run's harness error in milliseconds: how late its arrivals were
/// submitted, what a dispatch costs, how long its jobs overshot, each at p99.
pub fn harness_error_ms(f: &Figures) -> f64 {
    f.arrival_lag_ms.p99 + f.dispatch_floor_us.p99 / 1e3 + f.job_overshoot_ms.p99
}

pub fn against_model(results: &LabResults) -> ModelVerdict {
    if results.real.is_none() {
        return ModelVerdict::not_run("a virtual-clock file is the model itself");
    }
    if results
        .scenario
        .trace
        .iter()
        .any(|t| t.data.rows.is_empty())
    {
        return ModelVerdict::not_run(
            "the scenario replays a trace whose rows are not in the results file",
        );
    }
    let scenario = as_run(results);
    let runs = results.strategies.iter().flat_map(|s| {
        let def = definition(&scenario, s);
        s.runs.iter().map(move |run| (def.clone(), run))
    });
    let mut verdict = judge(&scenario, runs, results.backend.is_some());
    for s in &results.strategies {
        for run in &s.runs {
            if let Some(l) = &run.late {
                verdict.late.insert((s.name.clone(), run.seed), l.clone());
            }
        }
    }
    verdict
}

/// The verdict on a machine's runs of `scenario` (each with the strategy it
/// ran; `queue`: on a queue server): every figure against its band, each at
/// the level that holds the runs' figures together at [`LEVEL`]
/// (Bonferroni: the figures of a run move together, which only makes the
/// level higher).
pub fn judge<'a>(
    scenario: &Scenario,
    runs: impl IntoIterator<Item = (Strategy, &'a RunResult)>,
    queue: bool,
) -> ModelVerdict {
    let mut pending = Vec::new();
    for (def, run) in runs {
        let model = model_of(scenario, &def, run, queue);
        pending.extend(compare_run(&def.name, run, &model));
    }
    let alpha = (1.0 - LEVEL) / pending.len().max(1) as f64;
    ModelVerdict {
        checks: pending.into_iter().map(|p| p.banded(alpha)).collect(),
        not_run: None,
        late: BTreeMap::new(),
    }
}

/// The model's predictions for one run: exact, with the run's mean
/// overshoot on every job, and its [`REPLICAS`]: on the engine each with the
/// run's own wake lateness and event handling drawn wake by wake and event
/// by event; on a queue each job's hold drawn from the run's (where the
/// queue's finish and take are).
fn model_of(scenario: &Scenario, def: &Strategy, run: &RunResult, queue: bool) -> Model {
    let machine = predict(scenario, def, run, modelled_overshoot_ns(run));
    let exact = if queue {
        machine.clone()
    } else {
        predict(scenario, def, run, 0)
    };
    let draws = loop_draws(run).filter(|_| !queue);
    let timed = draws.is_some();
    let replicas = match draws {
        Some((wake, gap)) => (0..REPLICAS)
            .map(|k| {
                let jitter = Jitter {
                    wake_late: wake.clone(),
                    event_gap: gap.clone(),
                    seed: run.seed,
                    stream: 100 + k,
                };
                predict_jittered(scenario, def, run, jitter)
            })
            .collect(),
        None => overshoot_distribution(run).map_or_else(Vec::new, |overshoot| {
            (0..REPLICAS)
                .map(|k| predict_sampled(scenario, def, run, &overshoot, k))
                .collect()
        }),
    };
    Model {
        queue,
        timed,
        exact,
        machine,
        replicas,
    }
}

/// What a run's loop measured of its wakes and events, to draw from
/// (`None`: a file without them, from a queue or from before they were
/// measured).
pub fn loop_draws(run: &RunResult) -> Option<(Arc<Draws>, Arc<Draws>)> {
    let h = &run.raw.as_ref()?.histograms;
    let draws = |encoded: &str| {
        decode_histogram(encoded)
            .ok()
            .and_then(|h| Draws::of(&h))
            .map(Arc::new)
    };
    Some((draws(&h.wake_late_ns)?, draws(&h.event_gap_ns)?))
}

/// A machine whose loop times its wakes and events as `jitter` draws them,
/// simulated: the run it would save, distributions included. The verdict's
/// level and power are measured on such machines (see docs/validation.md).
pub fn simulated_machine(
    scenario: &Scenario,
    def: &Strategy,
    seed: u64,
    jitter: Jitter,
) -> RunResult {
    let mut pool = lab::pool_for(scenario, def);
    pool.jitter = Some(jitter);
    let record = lab::Model::new(scenario, def, seed).on(pool.clone()).run();
    summary::run(scenario, def, &pool, seed, &record, true)
}

/// The model on a clock that draws each wake's lateness and each event's
/// handling time from `jitter`.
pub fn predict_jittered(
    scenario: &Scenario,
    def: &Strategy,
    run: &RunResult,
    jitter: Jitter,
) -> Figures {
    let mut pool = model_pool(scenario, def, run);
    pool.jitter = Some(jitter);
    let record = lab::Model::new(scenario, def, run.seed)
        .on(pool.clone())
        .run();
    summary::run(scenario, def, &pool, run.seed, &record, false).figures
}

/// The scenario as it ran: with the worker processes the server's lab
/// started (a command line's `--processes` is not in the scenario), which
/// faults strike.
fn as_run(results: &LabResults) -> Scenario {
    let mut scenario = results.scenario.clone();
    if let (Some(facts), Some(spec)) = (&results.backend, &mut scenario.backend)
        && facts.processes > 0
    {
        spec.processes = Some(facts.processes);
    }
    scenario
}

/// The scenario's strategy of that name, else one rebuilt from the results.
fn definition(scenario: &Scenario, s: &StrategyResults) -> Strategy {
    scenario
        .strategy
        .iter()
        .find(|d| d.name == s.name)
        .cloned()
        .unwrap_or_else(|| Strategy {
            name: s.name.clone(),
            queue: s.queue.queue,
            cap: s.queue.cap,
            limit: s.queue.limit,
            cost: s.queue.cost,
            cost_in: None,
            cost_out: None,
            weighted: None,
            reserve: s.queue.reserve,
            fair_by: None,
            retry_after: None,
            layers: None,
            clients: None,
        })
}

/// The overshoot the model adds to every job of a run, in nanoseconds: the
/// run's mean (from its saved histogram), else its median. A chain of jobs
/// on one worker drifts by the sum of their overshoots, which the mean
/// predicts.
pub fn modelled_overshoot_ns(run: &RunResult) -> u64 {
    let mean = run
        .raw
        .as_ref()
        .and_then(|raw| decode_histogram(&raw.histograms.job_overshoot_ns).ok())
        .filter(|h| !h.is_empty())
        .map(|h| h.mean());
    let ns = mean.unwrap_or(run.figures.job_overshoot_ms.p50 * 1e6);
    ns.round().max(0.0) as u64
}

/// Replicas of the model for each run: on the engine with the run's own
/// wakes and events drawn (see [`crate::engine::jitter`]), on a queue with
/// every job's hold drawn from the run's: how much a figure moves with the
/// harness's microseconds.
pub const REPLICAS: u64 = 40;

/// The verdict's level: a machine that is the model, its own timing
/// included, has every figure of a lab inside its band at least this often.
pub const LEVEL: f64 = 0.99;

/// The model's predictions for a run: exact (what a perfect machine
/// measures: makespans on the engine are judged against it, so a machine
/// whose timers run late fails them), with the run's mean overshoot on
/// every job, and [`REPLICAS`] runs of this machine's timing (waits and
/// counts, and on a queue makespans, are judged against their band).
pub struct Model {
    /// The run was on a real queue: makespans are judged with its measured
    /// costs (see the module's doc).
    pub queue: bool,
    /// The replicas drew the loop's own wakes and events; else (a queue, or
    /// a file without them) each job's hold from the run's.
    pub timed: bool,
    pub exact: Figures,
    pub machine: Figures,
    pub replicas: Vec<Figures>,
}

/// A run's measured job overshoot as a distribution to draw from; `None`
/// without a saved histogram.
fn overshoot_distribution(run: &RunResult) -> Option<Draws> {
    let h = decode_histogram(&run.raw.as_ref()?.histograms.job_overshoot_ns).ok()?;
    Draws::of(&h)
}

/// The model with each job's overshoot drawn from `overshoot`, seeded by
/// the run and the replica.
fn predict_sampled(
    scenario: &Scenario,
    def: &Strategy,
    run: &RunResult,
    overshoot: &Draws,
    replica: u64,
) -> Figures {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(run.seed);
    rng.set_stream(100 + replica);
    let mut plan = crate::engine::load::plan(scenario, run.seed);
    for job in &mut plan {
        job.duration += overshoot.draw(&mut rng);
    }
    let pool = model_pool(scenario, def, run);
    let record = lab::Model::new(scenario, def, run.seed)
        .on(pool.clone())
        .with_plan(plan)
        .run();
    summary::run(scenario, def, &pool, run.seed, &record, false).figures
}

/// The model's figures for one real run: its seed, each job held its
/// duration plus `overshoot_ns`.
pub fn predict(scenario: &Scenario, def: &Strategy, run: &RunResult, overshoot_ns: u64) -> Figures {
    let mut pool = model_pool(scenario, def, run);
    pool.model_overshoot_ns = overshoot_ns;
    let record = lab::Model::new(scenario, def, run.seed)
        .on(pool.clone())
        .run();
    summary::run(scenario, def, &pool, run.seed, &record, false).figures
}

/// The model's pool for one real run; with faults, simulated as the run
/// met them: its lease, and each restart of the server as long as the
/// run's longest measured one (the model cannot know how long a server
/// takes to load its file).
fn model_pool(scenario: &Scenario, def: &Strategy, run: &RunResult) -> crate::engine::Pool {
    let mut pool = lab::pool_for(scenario, def);
    let Some(measured) = run.figures.fault_figures() else {
        return pool;
    };
    let longest_down = scenario
        .fault
        .iter()
        .filter(|f| f.kind == crate::scenario::FaultKind::RestartServer)
        .map(|f| f.duration())
        .fold(0.0, f64::max);
    let restart_ns = ((measured.restart_ms / 1e3 - longest_down).max(0.0) * 1e9).round() as u64;
    pool.faults = lab::fault_plan(scenario, restart_ns).map(|plan| {
        let mut plan = (*plan).clone();
        plan.lease_ns = Some((measured.lease_ms * 1e6).round() as u64);
        std::sync::Arc::new(plan)
    });
    pool
}

/// On a queue, what a chain of jobs pays once before its holds: the
/// arrival's lag and the first take's dispatch, each at p99, in seconds.
fn queue_start_s(f: &Figures) -> f64 {
    f.arrival_lag_ms.p99 / 1e3 + f.dispatch_floor_us.p99 / 1e6
}

/// The figures compared for every run, and how; each class adds its own.
const CHECKED: [(&str, Rule); 8] = [
    ("rejected", Rule::Exact),
    ("normal_jobs", Rule::Exact),
    ("lab_s", Rule::Makespan),
    ("noisy_done_s", Rule::Makespan),
    ("normal_wait_ms.p50", Rule::Wait),
    ("normal_wait_ms.p95", Rule::Wait),
    ("normal_wait_ms.p99", Rule::Wait),
    ("normal_wait_ms.max", Rule::Wait),
];

/// A figure with its replicas' values, waiting for the lab's level.
struct Pending {
    check: FigureCheck,
    /// The replicas' values (empty: the run saved no distributions).
    values: Vec<f64>,
    /// Waits are judged on a log scale shifted by this (ms): positive,
    /// skewed, and bounded below by the harness's own dispatch.
    log_floor: Option<f64>,
}

impl Pending {
    fn banded(mut self, alpha: f64) -> FigureCheck {
        if self.values.is_empty() {
            return self.check;
        }
        let (lo, hi) = band(&self.values, alpha, self.log_floor);
        let c = &mut self.check;
        c.model_lo = c.model_lo.min(lo);
        c.model_hi = c.model_hi.max(hi);
        c.model = c.model.clamp(c.model_lo, c.model_hi);
        self.check
    }
}

/// Where a further run of the replicas' model falls with probability
/// `1 − alpha`: Student's t prediction interval of the replicas' values (of
/// `ln(v + floor)` where a floor is given), widened to hold every replica.
pub fn band(values: &[f64], alpha: f64, log_floor: Option<f64>) -> (f64, f64) {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let n = values.len();
    if n < 3 || lo == hi {
        return (lo, hi);
    }
    let to = |v: f64| log_floor.map_or(v, |f| (v.max(0.0) + f).ln());
    let from = |y: f64| log_floor.map_or(y, |f| y.exp() - f);
    let ys: Vec<f64> = values.iter().map(|&v| to(v)).collect();
    let mean = ys.iter().sum::<f64>() / n as f64;
    let var = ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
        .expect("n − 1 ≥ 2 degrees of freedom")
        .inverse_cdf(1.0 - alpha / 2.0);
    let half = t * (var * (1.0 + 1.0 / n as f64)).sqrt();
    (from(mean - half).min(lo), from(mean + half).max(hi))
}

fn compare_run(strategy: &str, run: &RunResult, both: &Model) -> Vec<Pending> {
    let values = |f: &Figures| -> BTreeMap<String, f64> { figure_values(f).into_iter().collect() };
    let (real, exact, machine) = (
        values(&run.figures),
        values(&both.exact),
        values(&both.machine),
    );
    let replicas: Vec<BTreeMap<String, f64>> = both.replicas.iter().map(values).collect();
    let f = &run.figures;
    let error = harness_error_ms(f);
    let mut keys: Vec<(String, Rule)> = CHECKED.iter().map(|(k, r)| (k.to_string(), *r)).collect();
    for class in f.classes.keys() {
        keys.push((format!("classes.{class}.jobs"), Rule::Exact));
        keys.push((format!("classes.{class}.rejected"), Rule::Exact));
        keys.push((format!("classes.{class}.wait_ms.p95"), Rule::Wait));
    }
    keys.into_iter()
        .filter_map(|(figure, rule)| {
            let measured = *real.get(&figure)?;
            let spread: Vec<f64> = replicas
                .iter()
                .filter_map(|r| r.get(&figure).copied())
                .collect();
            // On the engine makespans are judged against the exact model (a
            // machine whose timers run late fails them); on a queue, and for
            // everything else, against the replicas of this machine's.
            let banded = !spread.is_empty() && (rule != Rule::Makespan || both.queue);
            let predicted = match rule {
                Rule::Makespan => *exact.get(&figure)?,
                _ if banded && both.timed => {
                    let mut sorted = spread.clone();
                    sorted.sort_by(f64::total_cmp);
                    crate::stats::median(&sorted)
                }
                _ => *machine.get(&figure)?,
            };
            let tolerance = match rule {
                Rule::Exact => 0.0,
                // On a queue a makespan also starts after an arrival's lag
                // and a woken worker's first take, once a chain.
                Rule::Makespan if both.queue => predicted.abs() * MAKESPAN_CLOSE + queue_start_s(f),
                Rule::Makespan => predicted.abs() * MAKESPAN_CLOSE,
                // Waits: the harness's own error beside the band (the model
                // starts a job on an idle worker at once, the harness after
                // its dispatch; and on real runs the replicas do not yet
                // reproduce every tie of the fair queue: docs/validation.md).
                Rule::Wait => WAIT_ERRORS * error + WAIT_CLOSE * predicted.abs(),
            };
            Some(Pending {
                check: FigureCheck {
                    strategy: strategy.to_string(),
                    seed: run.seed,
                    figure,
                    rule,
                    machine: measured,
                    model: predicted,
                    model_lo: predicted,
                    model_hi: predicted,
                    tolerance,
                },
                values: if banded { spread } else { Vec::new() },
                log_floor: (rule == Rule::Wait).then(|| (f.dispatch_floor_us.p50 / 1e3).max(1e-3)),
            })
        })
        .collect()
}
