//! Validate a machine's results against the post: every figure beside the
//! published one, then the post's claims as checks that pass, fail or could
//! not run. This module computes; `report::validation` renders.
//!
//! Strategies are found by what they are ([`Kind`]), never by name: the
//! baseline is `fifo` with neither cap nor limit, the capped ones have a cap
//! and no limit, the work-conserving fair queue has neither, the limited one
//! has a limit. The post's figures are then looked up under the name the
//! results give that strategy.

pub mod bands;
pub mod behaves;
pub mod model;

use std::fmt;

use crate::output::warnings::RUN_AGREEMENT;
use crate::reference::{FIGURES, RefStrategy, Reference};
use crate::results::{LabResults, StrategyResults};
use crate::scenario::Kind;
use crate::units::{count, ms, pct, ratio, sig3};

/// "Within 5 %" of a published figure.
pub const CLOSE: f64 = 0.05;
/// Every fix must beat FIFO by this much on the normal tenants' p95.
pub const FIX_FACTOR: f64 = 350.0;
/// The rejected count must be this close to the post's.
pub const REJECTED_CLOSE: f64 = 0.01;
/// What the work-conserving fair queue costs the noisy tenant against FIFO,
/// as the post says it, and how far from it a machine may be.
pub const FAIR_COST_S: f64 = 2.0;
pub const FAIR_COST_SLACK_S: f64 = 1.0;
/// Idle workers while capped jobs wait may be this far from the arithmetic.
pub const IDLE_SLACK: f64 = 1.0;

/// How one figure compares with the post's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// The post's figure is below a millisecond: the harness's dispatch cost
    /// on the post's machine, which ours need only match in order.
    MachineSet(MachineSet),
    /// Within [`CLOSE`] of the post's.
    Within,
    /// Off by this fraction (`None`: the post's figure is 0 and ours is not).
    Differs(Option<f64>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MachineSet {
    Better,
    SameOrder,
    /// More than ten times the post's; `factor` is ours ÷ the post's.
    Worse {
        factor: f64,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::MachineSet(MachineSet::Better) => f.write_str("machine-set: better"),
            Verdict::MachineSet(MachineSet::SameOrder) => f.write_str("machine-set: same order"),
            Verdict::MachineSet(MachineSet::Worse { factor }) => {
                let shown = if factor.is_finite() {
                    format!("×{}", sig3(*factor))
                } else {
                    "—".to_string()
                };
                write!(f, "machine-set: worse ({shown})")
            }
            Verdict::Within => write!(f, "within {}", pct(CLOSE)),
            Verdict::Differs(None) => f.write_str("differs"),
            Verdict::Differs(Some(off)) => write!(f, "differs by {:+.0} %", off * 100.0),
        }
    }
}

/// One figure of one strategy beside the post's, formatted for display.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureRow {
    pub strategy: String,
    pub figure: &'static str,
    pub ours: String,
    pub post: String,
    pub ratio: String,
    pub verdict: Verdict,
    /// The figure's key in results files, for its band.
    pub key: &'static str,
    /// The post's figure's value and the model's band over many seeds.
    pub post_value: f64,
    pub band: Option<bands::Band>,
    /// Where the post's figure falls against the band.
    pub against_model: Option<AgainstModel>,
}

/// A published figure against the model's band over many seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgainstModel {
    /// Inside the band, within the post's own rounding.
    Reproduced,
    /// Outside it: the post measured something the model does not give.
    Differs,
    /// Below a millisecond the post's figure is its harness's dispatch cost,
    /// which the model (0 by construction) does not have.
    MachineSet,
}

/// Half a unit of the last digit the post prints a figure with: seconds to
/// one decimal, counts whole, milliseconds to three significant figures.
fn post_rounding(key: &str, v: f64) -> f64 {
    match key {
        "noisy_done_s" => 0.05,
        "rejected" => 0.5,
        _ if v == 0.0 => 0.0,
        _ => 10f64.powi(v.abs().log10().floor() as i32 - 2).max(1e-12) / 2.0,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// The results lack what the check needs: it neither passes nor fails.
    NotRun,
    /// The claim fails here and on the model itself over many seeds: the
    /// post's claim is not what the model gives, so no machine is to blame.
    ModelDiffers,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub claim: String,
    pub outcome: Outcome,
    pub detail: String,
}

impl Check {
    fn new(claim: String, pass: bool, detail: String) -> Check {
        Check {
            claim,
            outcome: if pass { Outcome::Pass } else { Outcome::Fail },
            detail,
        }
    }

    fn not_run(claim: impl Into<String>, why: impl Into<String>) -> Check {
        Check {
            claim: claim.into(),
            outcome: Outcome::NotRun,
            detail: why.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub figures: Vec<FigureRow>,
    pub checks: Vec<Check>,
}

impl Validation {
    pub fn passed(&self) -> bool {
        self.failed() == 0
    }

    pub fn failed(&self) -> usize {
        self.count(Outcome::Fail)
    }

    /// Claims the model itself does not hold.
    pub fn model_differs(&self) -> usize {
        self.count(Outcome::ModelDiffers)
    }

    /// Checks that ran (passed, failed or differ on the model).
    pub fn ran(&self) -> usize {
        self.checks.len() - self.count(Outcome::NotRun)
    }

    fn count(&self, outcome: Outcome) -> usize {
        self.checks.iter().filter(|c| c.outcome == outcome).count()
    }
}

/// The post's figures and claims against results alone.
pub fn validate(results: &LabResults, reference: &Reference) -> Validation {
    validate_with(results, reference, None)
}

/// The same, judged against the model over many seeds where it is given:
/// each figure row gains the model's band, and a claim that fails on the
/// model too is [`Outcome::ModelDiffers`] rather than a failure.
pub fn validate_with(
    results: &LabResults,
    reference: &Reference,
    model: Option<&bands::ModelLab>,
) -> Validation {
    let mut checks = claims(results, reference);
    if let Some(model) = model {
        let on_model = claims(&model.results, reference);
        let same_shape = on_model.len() == checks.len();
        for (i, c) in checks.iter_mut().enumerate() {
            let model_check = if same_shape {
                on_model.get(i)
            } else {
                on_model.iter().find(|m| m.claim == c.claim)
            };
            if c.outcome == Outcome::Fail && model_check.is_some_and(|m| m.outcome == Outcome::Fail)
            {
                c.outcome = Outcome::ModelDiffers;
                if let Some(m) = model_check {
                    c.detail = format!(
                        "{}; the model over {} seeds: {}",
                        c.detail, model.bands.seeds, m.detail
                    );
                }
            }
        }
    }
    let mut figures = figure_rows(results, reference);
    if let Some(model) = model {
        for row in &mut figures {
            row.band = model.bands.band(&row.strategy, row.key).copied();
            row.against_model = row.band.map(|b| {
                let machine_set = FIGURES
                    .iter()
                    .find(|d| d.key == row.key)
                    .is_some_and(|d| row.post_value < d.machine_set_below);
                let slack = post_rounding(row.key, row.post_value);
                if machine_set {
                    AgainstModel::MachineSet
                } else if row.post_value + slack >= b.p5 && row.post_value - slack <= b.p95 {
                    AgainstModel::Reproduced
                } else {
                    AgainstModel::Differs
                }
            });
        }
    }
    Validation { figures, checks }
}

fn claims(results: &LabResults, reference: &Reference) -> Vec<Check> {
    let lab = Lab { results, reference };
    let mut checks = fixes_beat_fifo(&lab);
    checks.extend(shared_fifo(&lab));
    checks.extend(caps(&lab));
    checks.extend(fair_queue(&lab));
    checks.extend(queue_limits(&lab));
    checks.extend(runs_agree(&lab));
    checks
}

fn figure_rows(results: &LabResults, reference: &Reference) -> Vec<FigureRow> {
    let mut rows = Vec::new();
    for s in &results.strategies {
        let Some(post) = reference.strategy(&s.name) else {
            continue;
        };
        for def in FIGURES {
            let (Some(ours), Some(theirs)) = ((def.ours)(&s.median), (def.post)(post)) else {
                continue;
            };
            rows.push(FigureRow {
                strategy: s.name.clone(),
                figure: def.label,
                ours: (def.show)(ours),
                post: (def.show)(theirs),
                ratio: ratio(ours, theirs),
                verdict: verdict(ours, theirs, def.machine_set_below),
                key: def.key,
                post_value: theirs,
                band: None,
                against_model: None,
            });
        }
    }
    rows
}

fn verdict(ours: f64, theirs: f64, machine_set_below: f64) -> Verdict {
    if theirs < machine_set_below {
        Verdict::MachineSet(if ours <= theirs {
            MachineSet::Better
        } else if ours <= theirs * 10.0 {
            MachineSet::SameOrder
        } else {
            MachineSet::Worse {
                factor: ours / theirs,
            }
        })
    } else if close(ours, theirs, CLOSE) {
        Verdict::Within
    } else if theirs == 0.0 {
        Verdict::Differs(None)
    } else {
        Verdict::Differs(Some(ours / theirs - 1.0))
    }
}

fn close(ours: f64, theirs: f64, within: f64) -> bool {
    if theirs == 0.0 {
        ours == 0.0
    } else {
        ((ours - theirs) / theirs).abs() <= within
    }
}

/// The results and the post, with the strategies found by kind.
struct Lab<'a> {
    results: &'a LabResults,
    reference: &'a Reference,
}

impl<'a> Lab<'a> {
    fn of_kind(&self, kind: Kind) -> Vec<&'a StrategyResults> {
        self.results
            .strategies
            .iter()
            .filter(|s| s.queue.kind() == kind)
            .collect()
    }

    fn first(&self, kind: Kind) -> Option<&'a StrategyResults> {
        self.of_kind(kind).into_iter().next()
    }

    /// The baseline every fix is judged against.
    fn baseline(&self) -> Option<&'a StrategyResults> {
        self.first(Kind::SharedFifo)
    }

    /// The post's figures for a strategy of the results.
    fn post(&self, s: &StrategyResults) -> Option<&'a RefStrategy> {
        self.reference.strategy(&s.name)
    }
}

fn noisy_done(s: &StrategyResults) -> f64 {
    s.median.noisy_done_s.unwrap_or(f64::NAN)
}

/// Claim 1: every fix beats the shared FIFO by [`FIX_FACTOR`] on the neighbours' p95.
fn fixes_beat_fifo(lab: &Lab<'_>) -> Vec<Check> {
    let Some(base) = lab.baseline() else {
        return vec![Check::not_run(
            format!("every fix beats Shared FIFO by at least {FIX_FACTOR:.0}× on the normal p95"),
            "no Shared FIFO (fifo, no cap) in the results",
        )];
    };
    let base_p95 = base.median.normal_wait_ms.p95;
    let fixes = lab
        .results
        .strategies
        .iter()
        .filter(|s| s.queue.kind() != Kind::SharedFifo);
    fixes
        .map(|s| {
            let p95 = s.median.normal_wait_ms.p95;
            let factor = if p95 == 0.0 {
                f64::INFINITY
            } else {
                base_p95 / p95
            };
            let detail = if factor.is_infinite() {
                format!("p95 0 ms against {}", ms(base_p95))
            } else {
                format!(
                    "{}× ({} against {})",
                    count(factor.round() as u64),
                    ms(p95),
                    ms(base_p95)
                )
            };
            Check::new(
                format!(
                    "{}: beats {} by ≥ {FIX_FACTOR:.0}× on the normal p95",
                    s.name, base.name
                ),
                factor >= FIX_FACTOR,
                detail,
            )
        })
        .collect()
}

/// Claim 2: the shared FIFO: the noisy tenant done and the neighbours' p95 as the post says.
fn shared_fifo(lab: &Lab<'_>) -> Vec<Check> {
    let (Some(s), Some(p)) = (lab.baseline(), lab.baseline().and_then(|s| lab.post(s))) else {
        return vec![Check::not_run(
            "Shared FIFO figures",
            "no Shared FIFO in the results or the reference",
        )];
    };
    vec![
        done_check(s, p.noisy_done_s, "noisy tenant done"),
        Check::new(
            format!(
                "{}: normal p95 ≈ {:.1} s (within {})",
                s.name,
                p.normal_p95_ms / 1e3,
                pct(CLOSE)
            ),
            close(s.median.normal_wait_ms.p95, p.normal_p95_ms, CLOSE),
            format!("{:.2} s", s.median.normal_wait_ms.p95 / 1e3),
        ),
    ]
}

/// Claim 3: a cap: the noisy tenant done as the post says, and the idle workers
/// its arithmetic gives while the capped jobs wait.
fn caps(lab: &Lab<'_>) -> Vec<Check> {
    let capped = lab.of_kind(Kind::Capped);
    if capped.is_empty() {
        return vec![Check::not_run(
            "a cap of 4: noisy done ≈ 50 s",
            "no capped strategy in the results",
        )];
    }
    let workers = lab.results.scenario.workers;
    let mut out = Vec::new();
    for s in capped {
        let Some(p) = lab.post(s) else {
            out.push(Check::not_run(
                format!("{}: figures", s.name),
                "not in the reference",
            ));
            continue;
        };
        out.push(done_check(s, p.noisy_done_s, "noisy tenant done"));
        let idle = s.median.idle_workers_while_waiting_in_traffic;
        let expected = expected_idle(lab.results, s.queue.cap.unwrap_or(0));
        out.push(Check::new(
            format!(
                "{}: about {expected:.0} of {workers} workers idle while its jobs wait and normal traffic runs",
                s.name
            ),
            (idle - expected).abs() <= IDLE_SLACK,
            format!("{idle:.1} idle on average"),
        ));
    }
    out
}

/// Claim 4: the fair queue without cap: work-conserving, the noisy tenant done as
/// the post says, at a cost of about 2 s against the cap's 40.
fn fair_queue(lab: &Lab<'_>) -> Vec<Check> {
    let Some(s) = lab.first(Kind::Fair) else {
        return vec![Check::not_run(
            "fair queue without cap",
            "no fair queue without cap in the results",
        )];
    };
    let mut out = vec![Check::new(
        format!(
            "{}: work-conserving (no worker idle while a job waits)",
            s.name
        ),
        s.max.idle_workers_while_waiting < 0.01,
        format!(
            "{:.3} idle on average while jobs waited",
            s.max.idle_workers_while_waiting
        ),
    )];
    if let Some(p) = lab.post(s) {
        out.push(done_check(s, p.noisy_done_s, "noisy tenant done"));
    }
    if let (Some(base), Some(cap)) = (lab.baseline(), lab.first(Kind::Capped)) {
        let fair_cost = noisy_done(s) - noisy_done(base);
        let cap_cost = noisy_done(cap) - noisy_done(base);
        let post_cap_cost = match (lab.post(cap), lab.post(base)) {
            (Some(c), Some(b)) => c.noisy_done_s - b.noisy_done_s,
            _ => f64::NAN,
        };
        out.push(Check::new(
            format!(
                "{} costs the noisy tenant about {FAIR_COST_S:.0} s, the cap about {post_cap_cost:.0} s (within {})",
                s.name,
                pct(CLOSE)
            ),
            (fair_cost - FAIR_COST_S).abs() <= FAIR_COST_SLACK_S
                && close(cap_cost, post_cap_cost, CLOSE),
            format!("{fair_cost:.2} s against {cap_cost:.2} s"),
        ));
    }
    out
}

/// Claim 5: a queue limit: the post's rejections, and the accepted work done in its time.
fn queue_limits(lab: &Lab<'_>) -> Vec<Check> {
    let limited = lab.of_kind(Kind::Limited);
    if limited.is_empty() {
        return vec![Check::not_run(
            "queue limit 100",
            "no strategy with a limit in the results",
        )];
    }
    let burst: u64 = lab
        .results
        .scenario
        .burst
        .iter()
        .map(|b| u64::from(b.jobs))
        .sum();
    let mut out = Vec::new();
    for s in limited {
        let Some(p) = lab.post(s) else {
            out.push(Check::not_run(
                format!("{}: figures", s.name),
                "not in the reference",
            ));
            continue;
        };
        out.push(Check::new(
            format!(
                "{}: {} of {} rejected (about {})",
                s.name,
                count(p.rejected),
                count(burst),
                pct(p.rejected as f64 / burst.max(1) as f64)
            ),
            close(s.median.rejected as f64, p.rejected as f64, REJECTED_CLOSE),
            format!("{} rejected", count(s.median.rejected)),
        ));
        out.push(done_check(s, p.noisy_done_s, "accepted work done"));
    }
    out
}

/// Claim 6: the runs of each strategy agree within [`RUN_AGREEMENT`] on the p95
/// where it is above a millisecond.
fn runs_agree(lab: &Lab<'_>) -> Vec<Check> {
    let mut out = Vec::new();
    for s in &lab.results.strategies {
        let (lo, mid, hi) = (
            s.min.normal_wait_ms.p95,
            s.median.normal_wait_ms.p95,
            s.max.normal_wait_ms.p95,
        );
        if s.runs.len() < 2 || mid <= 1.0 {
            continue;
        }
        let spread = (hi - lo) / mid;
        out.push(Check::new(
            format!(
                "{}: the {} runs agree within {} on the normal p95",
                s.name,
                s.runs.len(),
                pct(RUN_AGREEMENT)
            ),
            spread <= RUN_AGREEMENT,
            format!("{:.1} % ({}–{})", spread * 100.0, ms(lo), ms(hi)),
        ));
    }
    out
}

/// The noisy tenant's time after its burst against the post's, within [`CLOSE`].
fn done_check(s: &StrategyResults, post_s: f64, what: &str) -> Check {
    let ours = noisy_done(s);
    Check::new(
        format!(
            "{}: {what} after ≈ {post_s} s (within {})",
            s.name,
            pct(CLOSE)
        ),
        close(ours, post_s, CLOSE),
        format!("{ours:.2} s"),
    )
}

/// Workers idle while a capped tenant's jobs wait: the pool, less the cap
/// of each bursting tenant, less what the normal tenants keep busy (rate ×
/// duration, per tenant).
fn expected_idle(results: &LabResults, cap: u32) -> f64 {
    let sc = &results.scenario;
    let population = sc.population();
    let normal_busy: f64 = sc
        .groups()
        .iter()
        .zip(&population.classes)
        .map(|(g, c)| f64::from(g.count) * g.rate_per_s * c.mean_job_ms / 1e3)
        .sum();
    let bursting = sc.burst_tenants().len() as f64;
    f64::from(sc.workers) - bursting * f64::from(cap) - normal_busy
}
