//! `make bench`: scheduler cost per job (finish + take + push) at 10 to
//! 1,000,000 tenants, ours beside the naive scans, and the virtual-clock
//! article lab end to end.
//!
//! The state: every tenant has one job running (cap 1) and one waiting, so
//! only the tenant whose job just finished may start another. One operation
//! is that tenant's finish, the take that starts its waiting job, and the push
//! of its next one; tenants are picked in a fixed random order, so the naive
//! scans search half the queue on average.

use std::path::Path;

use noisylab::sched::naive::{NaiveFair, NaiveFifo, NaiveVtc};
use noisylab::sched::{Fair, Fifo, Limits, Scheduler, Vtc};
use rand::{RngExt, SeedableRng};

const TENANTS: &[usize] = &[10, 1_000, 100_000, 1_000_000];
const LIMITS: Limits = Limits {
    cap: 1,
    limit: u32::MAX,
};

fn main() {
    divan::main();
}

struct Loaded<S> {
    sched: S,
    order: Vec<u32>,
    next_job: u32,
    at: usize,
}

/// Job ids a `vtc` bench reuses after the preloaded ones, so its cost table
/// (one entry a job id) stays small however many operations divan runs.
const VTC_SPAN: u32 = 4096;

fn loaded<S: Scheduler>(make: fn(usize, Limits) -> S, tenants: usize) -> Loaded<S> {
    loaded_with(make, tenants)
}

fn loaded_with<S: Scheduler>(make: impl Fn(usize, Limits) -> S, tenants: usize) -> Loaded<S> {
    let mut sched = make(tenants, LIMITS);
    let mut job = 0;
    for round in 0..2 {
        for t in 0..tenants as u32 {
            sched.push(t, job).unwrap();
            job += 1;
        }
        if round == 0 {
            for _ in 0..tenants {
                sched.take().unwrap();
            }
        }
    }
    Loaded {
        sched,
        order: order(tenants),
        next_job: job,
        at: 0,
    }
}

impl<S: Scheduler> Loaded<S> {
    #[inline]
    fn op(&mut self) {
        let t = self.order[self.at];
        self.at = (self.at + 1) & 4095;
        self.sched.finished(t);
        let (got, _) = self.sched.take().expect("the finished tenant is ready");
        debug_assert_eq!(got, t);
        self.sched.push(t, self.next_job).unwrap();
        self.next_job += 1;
    }

    /// The same, with job ids cycling through `base .. base + VTC_SPAN`.
    #[inline]
    fn op_cycling(&mut self, base: u32) {
        let t = self.order[self.at];
        self.at = (self.at + 1) & 4095;
        self.sched.finished(t);
        let (got, _) = self.sched.take().expect("the finished tenant is ready");
        debug_assert_eq!(got, t);
        self.sched.push(t, base + self.next_job % VTC_SPAN).unwrap();
        self.next_job += 1;
    }
}

fn bench<S: Scheduler>(b: divan::Bencher, make: fn(usize, Limits) -> S, tenants: usize) {
    run(b, loaded(make, tenants));
}

fn run<S: Scheduler>(b: divan::Bencher, mut state: Loaded<S>) {
    b.bench_local(|| state.op());
}

fn order(tenants: usize) -> Vec<u32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    (0..4096)
        .map(|_| rng.random_range(0..tenants as u32))
        .collect()
}

mod fair {
    use super::*;

    #[divan::bench(args = TENANTS)]
    fn ours(b: divan::Bencher, tenants: usize) {
        bench(b, Fair::new, tenants);
    }

    #[divan::bench(args = TENANTS, sample_count = 20)]
    fn naive(b: divan::Bencher, tenants: usize) {
        // Loading by pushes and takes would cost tenants² scans.
        let sched = NaiveFair::one_running_one_waiting(tenants, LIMITS);
        run(
            b,
            Loaded {
                sched,
                order: order(tenants),
                next_job: 2 * tenants as u32,
                at: 0,
            },
        );
    }
}

mod vtc {
    use super::*;

    fn costs(tenants: usize) -> Vec<f64> {
        vec![1.0; 2 * tenants + VTC_SPAN as usize]
    }

    #[divan::bench(args = TENANTS)]
    fn ours(b: divan::Bencher, tenants: usize) {
        let make = |n, limits| Vtc::new(n, limits, vec![1.0; n], costs(n));
        let mut state = loaded_with(make, tenants);
        state.next_job = 0;
        let base = 2 * tenants as u32;
        b.bench_local(|| state.op_cycling(base));
    }

    #[divan::bench(args = TENANTS, sample_count = 20)]
    fn naive(b: divan::Bencher, tenants: usize) {
        // Loading by pushes and takes would cost tenants² scans.
        let sched = NaiveVtc::one_running_one_waiting(tenants, LIMITS, costs(tenants));
        let mut state = Loaded {
            sched,
            order: order(tenants),
            next_job: 0,
            at: 0,
        };
        let base = 2 * tenants as u32;
        b.bench_local(|| state.op_cycling(base));
    }
}

mod fifo_cap {
    use super::*;

    #[divan::bench(args = TENANTS)]
    fn ours(b: divan::Bencher, tenants: usize) {
        bench(b, Fifo::new, tenants);
    }

    #[divan::bench(args = TENANTS, sample_count = 20)]
    fn naive(b: divan::Bencher, tenants: usize) {
        bench(b, NaiveFifo::new, tenants);
    }
}

/// The whole article lab (5 strategies × 3 runs, about 440 s of lab time)
/// on the virtual clock.
#[divan::bench(sample_count = 20)]
fn virtual_article_lab(b: divan::Bencher) {
    let scenario = noisylab::scenario::Scenario::load(Path::new("lab/article.toml")).unwrap();
    b.bench_local(|| {
        for strategy in &scenario.strategy {
            for k in 0..scenario.runs {
                divan::black_box(
                    noisylab::lab::Model::new(&scenario, strategy, scenario.seed + u64::from(k))
                        .run(),
                );
            }
        }
    });
}

/// Time a whole lab on the virtual clock, summaries included.
fn bench_lab(b: divan::Bencher, scenario: noisylab::scenario::Scenario) {
    let plan = noisylab::lab::LabPlan {
        scenario,
        clock: noisylab::results::ClockKind::Virtual,
        timer: Default::default(),
        keep_raw: false,
        backend: Default::default(),
    };
    let never = std::sync::atomic::AtomicBool::new(false);
    let progress = noisylab::output::progress::Progress::hidden();
    b.bench_local(|| divan::black_box(noisylab::lab::run(&plan, &never, &progress).unwrap()));
}

/// The article scenario with `extra` TOML after it.
fn article_with(extra: &str) -> noisylab::scenario::Scenario {
    let text = format!(
        "{}{extra}",
        noisylab::scenario::built_in_text("article").unwrap()
    );
    noisylab::scenario::Scenario::parse(Path::new("article+"), &text).unwrap()
}

/// Whole labs on the virtual clock, summaries included (what `noisylab run
/// --clock virtual` computes): the article lab, the AI product's traffic,
/// and the Azure conversation trace, its first ten minutes and all of it.
#[divan::bench(
    args = ["article", "ai-calls", "trace", "trace-whole"],
    sample_count = 10
)]
fn virtual_lab(b: divan::Bencher, name: &str) {
    let path = format!("lab/{name}.toml");
    let scenario = noisylab::scenario::Scenario::load(Path::new(&path)).unwrap();
    bench_lab(b, scenario);
}

/// The article lab with every discipline of the fairness issue beside the
/// post's five (vtc by jobs and by time, the cap that lends, on fifo, fair
/// and vtc), 3 runs each, summaries included.
#[divan::bench(sample_count = 10)]
fn virtual_article_every_discipline(b: divan::Bencher) {
    let extra = r#"
[[strategy]]
name = "VTC, jobs"
queue = "vtc"

[[strategy]]
name = "VTC, time"
queue = "vtc"
cost = "time"

[[strategy]]
name = "FIFO, cap 4 lending all but 4"
queue = "fifo"
cap = 4
reserve = 4

[[strategy]]
name = "Fair queue, cap 4 lending all but 4"
queue = "fair"
cap = 4
reserve = 4

[[strategy]]
name = "VTC, cap 4 lending all but 4"
queue = "vtc"
cap = 4
reserve = 4
"#;
    let scenario = article_with(extra);
    assert_eq!(scenario.strategy.len(), 10);
    bench_lab(b, scenario);
}

/// The article lab with retrying clients: every client retries with
/// full-jitter backoff, 5 attempts in all, so the queue limit's refusals
/// come back (9,440 attempts for its 2,480 jobs); and the same clients
/// giving up waiting after 2 s and leaving their jobs to run unread, a
/// storm (about 4 attempts a job under every strategy).
#[divan::bench(args = ["backoff", "backoff-timeout-waste"], sample_count = 10)]
fn virtual_article_retrying(b: divan::Bencher, clients: &str) {
    let timeout = match clients {
        "backoff" => "",
        _ => "timeout_s = 2\non_timeout = \"waste\"\n",
    };
    let clients =
        format!("\n[clients]\nretry = \"backoff\"\njitter = \"full\"\nmax_attempts = 5\n{timeout}");
    bench_lab(b, article_with(&clients));
}
