//! Workloads of one's own: tenant groups, duration and token distributions,
//! trace replay, and the figures per class and per tenant (virtual clock,
//! but for one short real-clock run).

mod common;

use std::path::Path;
use std::sync::atomic::AtomicBool;

use noisylab::engine::NEVER;
use noisylab::lab::{self, LabPlan};
use noisylab::output::progress::Progress;
use noisylab::results::ClockKind;
use noisylab::scenario::Scenario;
use proptest::prelude::*;

/// Write `files` into a fresh folder and parse `scenario.toml` there.
fn parse_in_dir(files: &[(&str, &str)]) -> Result<Scenario, String> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    Scenario::load(&dir.path().join("scenario.toml")).map_err(|e| {
        // The folder differs run to run; keep the file's own name.
        e.to_string()
            .replace(&format!("{}/", dir.path().display()), "")
    })
}

const BASE: &str = "name = \"w\"\nworkers = 2\njob_ms = 100\ntraffic_s = 1\n";
const FIFO: &str = "[[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\n";

#[test]
fn bad_workloads_get_one_line_naming_the_key_or_the_trace_line() {
    let group = |extra: &str| {
        format!("{BASE}[[tenants]]\nname = \"chat\"\ncount = 2\nrate_per_s = 1\n{extra}\n{FIFO}")
    };
    let traced = |header_and_rows: &str| {
        vec![
            (
                "scenario.toml".to_string(),
                format!("{BASE}[[trace]]\nfile = \"t.csv\"\ntenants = 3\n{FIFO}"),
            ),
            ("t.csv".to_string(), header_and_rows.to_string()),
        ]
    };
    let cases: Vec<(Vec<(String, String)>, &str)> = vec![
        (
            vec![(
                "scenario.toml".into(),
                group("job_ms = { dist = \"lognormal\", median = 100, p99 = 50 }"),
            )],
            "scenario.toml: tenants[0].job_ms: lognormal needs p99 >= median, found median 100 and p99 50",
        ),
        (
            vec![(
                "scenario.toml".into(),
                group("tokens_out = { dist = \"exponential\", mean = -3 }"),
            )],
            "scenario.toml: tenants[0].tokens_out: mean must be a number of 0 or more, found -3",
        ),
        (
            vec![(
                "scenario.toml".into(),
                group("job_ms = { dist = \"uniform\", min = nan, max = 3 }"),
            )],
            "scenario.toml: tenants[0].job_ms: min must be a number of 0 or more, found NaN",
        ),
        (
            vec![(
                "scenario.toml".into(),
                group("job_ms = { dist = \"gamma\", k = 2 }"),
            )],
            "scenario.toml:9:19: tenants[0].job_ms.dist: unknown value `gamma`; allowed: `fixed`, `uniform`, `exponential`, `lognormal`, `tokens`",
        ),
        (
            vec![(
                "scenario.toml".into(),
                group("tokens_in = { dist = \"tokens\", base = 1, per_out_token = 1 }"),
            )],
            "scenario.toml: tenants[0].tokens_in: the `tokens` model is for job_ms only",
        ),
        (
            vec![("scenario.toml".into(), group("from_s = 5\nuntil_s = 2"))],
            "scenario.toml: tenants[0].until_s: must be a time of from_s (5 s) or later, found 2",
        ),
        (
            vec![(
                "scenario.toml".into(),
                format!(
                    "{BASE}[[tenants]]\nname = \"a\"\ncount = 1\nrate_per_s = 1\n[[tenants]]\nname = \"a\"\ncount = 1\nrate_per_s = 1\n{FIFO}"
                ),
            )],
            "scenario.toml: tenants[1].name: duplicate class name \"a\" (also tenants[0].name)",
        ),
        (
            traced("time,x\n1,2\n"),
            "t.csv:1:1: unknown trace header `time,x`; allowed: `TIMESTAMP,ContextTokens,GeneratedTokens`",
        ),
        (
            traced("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\nsoon,3,4\n"),
            "t.csv:3:1: TIMESTAMP: cannot read \"soon\" as a timestamp like 2023-11-16 18:15:46.6805900",
        ),
        (
            traced(
                "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\n2023-11-16 18:15:40,3,4\n",
            ),
            "t.csv:3:1: TIMESTAMP: time goes backwards: -6 s after 0 s on the row before",
        ),
        (
            traced("TIMESTAMP,ContextTokens,GeneratedTokens\n"),
            "t.csv: the trace has no rows after its header",
        ),
        (
            vec![(
                "scenario.toml".into(),
                format!("{BASE}[[trace]]\nfile = \"gone.csv\"\ntenants = 3\n{FIFO}"),
            )],
            "gone.csv: cannot read trace file: no such file",
        ),
    ];
    for (files, expected) in &cases {
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let got = parse_in_dir(&files).expect_err(expected);
        assert!(
            got.contains(expected),
            "expected {expected:?}\n     got {got:?}"
        );
        assert_eq!(got.lines().count(), 1, "one line: {got}");
    }
}

/// Ten jobs by hand on two workers (W1, W2), 100 ms each unless the trace
/// says otherwise; a completion is handled before an arrival at the same
/// instant, and jobs of one instant arrive in file order.
///
/// ```text
/// row  t(s)  tenant  ms   FIFO                         fair
/// a1   0.00  a       100  W1 at 0.00, wait 0           W1 at 0.00, wait 0
/// a2   0.00  a       100  W2 at 0.00, wait 0           W2 at 0.00, wait 0
/// a3   0.00  a       100  W1 at 0.10, wait 100         W2 at 0.10, wait 100 (after b1)
/// a4   0.00  a       100  W2 at 0.10, wait 100         W2 at 0.20, wait 200
/// b1   0.05  b       100  W1 at 0.20, wait 150         W1 at 0.10, wait 50 (b is fresh)
/// b2   0.05  b        50  W2 at 0.20, wait 150         W1 at 0.20, wait 150
/// c1   0.30  c       100  idle worker, wait 0          idle worker, wait 0
/// c2   0.30  c       100  idle worker, wait 0          idle worker, wait 0
/// a5   0.30  a       100  next completion 0.40, 100    next completion 0.40, 100
/// b3   0.60  b       200  idle since 0.40, wait 0      idle since 0.40, wait 0
/// ```
#[test]
fn a_hand_written_trace_gives_the_hand_computed_waits() {
    let trace = "at_s,tenant,tokens_in,tokens_out,job_ms\n\
                 0.00,a,1,10,100\n\
                 0.00,a,1,10,100\n\
                 0.00,a,1,10,100\n\
                 0.00,a,1,10,100\n\
                 0.05,b,2,20,100\n\
                 0.05,b,2,20,50\n\
                 0.30,c,3,30,100\n\
                 0.30,c,3,30,100\n\
                 0.30,a,1,10,100\n\
                 0.60,b,2,20,200\n";
    let scenario = "name = \"hand\"\nruns = 1\nworkers = 2\njob_ms = 100\ntraffic_s = 1\n\
         [[trace]]\nfile = \"t.csv\"\nclass = \"api\"\n\
         [[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\n\
         [[strategy]]\nname = \"fair\"\nqueue = \"fair\"\n";
    let s = parse_in_dir(&[("scenario.toml", scenario), ("t.csv", trace)]).unwrap();
    let waits_ms = |name: &str| -> Vec<f64> {
        let strategy = s.strategy.iter().find(|x| x.name == name).unwrap();
        let jobs = lab::Model::new(&s, strategy, 1).run().jobs;
        common::check_invariants(&s, strategy, &jobs);
        jobs.iter()
            .map(|j| ((j.started - j.enqueued) as f64 / 1e6 * 1e3).round() / 1e3)
            .collect()
    };
    assert_eq!(
        waits_ms("fifo"),
        [0.0, 0.0, 100.0, 100.0, 150.0, 150.0, 0.0, 0.0, 100.0, 0.0]
    );
    assert_eq!(
        waits_ms("fair"),
        [0.0, 0.0, 100.0, 200.0, 50.0, 150.0, 0.0, 0.0, 100.0, 0.0]
    );
}

#[test]
fn the_whole_conversation_trace_replays_with_its_published_counts() {
    let text = "name = \"whole\"\nruns = 1\nworkers = 50\ntraffic_s = 4000\n\
                job_ms = { dist = \"tokens\", base = 200, per_out_token = 10 }\n\
                [[trace]]\nfile = \"traces/azure-llm-2023-conv.csv\"\ntenants = 200\nzipf = 1.0\n\
                [[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\n";
    let s = Scenario::parse(Path::new("lab/whole.toml"), text).unwrap();
    let jobs = noisylab::engine::load::plan(&s, 1);
    assert_eq!(jobs.len(), 19_366);
    let mut out: Vec<u32> = jobs.iter().map(|j| j.tokens_out).collect();
    assert_eq!(out.iter().map(|&t| u64::from(t)).sum::<u64>(), 4_088_665);
    out.sort_unstable();
    let at = |q: f64| out[((q * out.len() as f64).ceil() as usize).clamp(1, out.len()) - 1];
    assert_eq!((at(0.50), at(0.90), at(0.99)), (129, 424, 601));
    // Zipf over 200 tenants: tenant 1 gets about 1/H(200) = 17 % of the rows.
    let first = jobs.iter().filter(|j| j.tenant == 0).count() as f64 / 19_366.0;
    assert!((0.15..0.19).contains(&first), "{first}");
    // Durations follow the tokens model exactly.
    assert!(
        jobs.iter()
            .all(|j| j.duration == (200 + 10 * u64::from(j.tokens_out)) * 1_000_000)
    );
}

#[test]
fn the_normal_section_and_an_equal_group_give_the_same_run() {
    let article = std::fs::read_to_string("lab/article.toml").unwrap();
    let grouped = article.replace(
        "[normal]\ntenants = 20\nrate_per_s = 2.0\narrivals = \"periodic\"",
        "[[tenants]]\nname = \"normal\"\ncount = 20\nrate_per_s = 2.0\narrivals = \"periodic\"",
    );
    assert_ne!(article, grouped);
    let a = lab::virtual_lab(Scenario::parse(Path::new("a.toml"), &article).unwrap());
    let b = lab::virtual_lab(Scenario::parse(Path::new("b.toml"), &grouped).unwrap());
    for (x, y) in a.strategies.iter().zip(&b.strategies) {
        assert_eq!(x.runs, y.runs, "{}", x.name);
    }
}

#[test]
fn per_class_and_per_tenant_figures_answer_the_alert() {
    let text = "name = \"tiers\"\nruns = 1\nworkers = 4\njob_ms = 100\ntraffic_s = 10\nalert_p95_ms = 50\n\
                [[tenants]]\nname = \"light\"\ncount = 3\nrate_per_s = 1\n\
                [[tenants]]\nname = \"heavy\"\ncount = 1\nrate_per_s = 50\nuntil_s = 5\n\
                [[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\n\
                [[strategy]]\nname = \"fair\"\nqueue = \"fair\"\n";
    let r = lab::virtual_lab(Scenario::parse(Path::new("t.toml"), text).unwrap());
    let fifo = &r.strategies[0].median;
    let fair = &r.strategies[1].median;
    // The heavy tenant alone asks 5 of 4 workers: FIFO queues everyone behind it.
    assert_eq!(fifo.classes["heavy"].jobs, 250);
    assert_eq!(fifo.classes["light"].jobs, 30);
    assert!(
        fifo.classes["light"].wait_ms.p95 > 100.0,
        "{:?}",
        fifo.classes["light"]
    );
    assert!(
        fifo.tenants
            .over_alert
            .iter()
            .any(|t| t.starts_with("light-"))
    );
    assert!(fifo.tenants.over_alert.contains(&"heavy-1".to_string()));
    // The fair queue serves a light tenant's job before the heavy backlog.
    assert!(
        fair.classes["light"].wait_ms.p95 < 100.0,
        "{:?}",
        fair.classes["light"]
    );
    assert_eq!(fair.tenants.worst, "heavy-1");
    assert_eq!(fair.tenants.over_alert, ["heavy-1"]);
    // Slowdown: FIFO slows the light tenants as much as the heavy one (16×
    // at p95); the fair queue keeps them near 1 and leaves the heavy one its
    // own backlog. Jain's index over mean slowdown therefore calls FIFO the
    // even one (0.97) and the fair queue uneven (0.43): it measures equal
    // suffering, not protection.
    assert!(fifo.classes["light"].slowdown.p95 > 10.0);
    assert!(fair.classes["light"].slowdown.p95 < 1.5);
    assert!(fair.classes["heavy"].slowdown.p50 > 5.0);
    assert!(
        fifo.tenants.jain_slowdown > 0.9,
        "{}",
        fifo.tenants.jain_slowdown
    );
    assert!(
        fair.tenants.jain_slowdown < 0.5,
        "{}",
        fair.tenants.jain_slowdown
    );
}

/// Random groups and distributions: per class, submitted = completed +
/// rejected; classes add up; the usual invariants hold.
fn workloads() -> impl Strategy<Value = Scenario> {
    (
        1u32..=16,
        prop::collection::vec((1u32..=30, 0.5f64..20.0, 1.0f64..300.0, 1.0f64..4.0, any::<bool>()), 1..4),
        prop::collection::vec((0.0f64..1.5, 1u32..=300), 0..2),
        prop::collection::vec((any::<bool>(), prop::option::of(1u32..6), prop::option::of(1u32..50)), 1..4),
    )
        .prop_map(|(workers, groups, bursts, strategies)| {
            let mut text = format!("name = \"random\"\nworkers = {workers}\njob_ms = 50\ntraffic_s = 2.0\n");
            for (i, (count, rate, median, spread, poisson)) in groups.iter().enumerate() {
                text += &format!(
                    "[[tenants]]\nname = \"g{i}\"\ncount = {count}\nrate_per_s = {rate}\narrivals = \"{}\"\n\
                     job_ms = {{ dist = \"lognormal\", median = {median}, p99 = {} }}\n\
                     tokens_out = {{ dist = \"uniform\", min = 1, max = 500 }}\n",
                    if *poisson { "poisson" } else { "periodic" },
                    median * spread
                );
            }
            for (i, (at, jobs)) in bursts.iter().enumerate() {
                text += &format!(
                    "[[burst]]\ntenant = \"b{i}\"\nat_s = {at}\njobs = {jobs}\n\
                     job_ms = {{ dist = \"exponential\", mean = 40 }}\n"
                );
            }
            for (i, (fair, cap, limit)) in strategies.iter().enumerate() {
                text += &format!(
                    "[[strategy]]\nname = \"s{i}\"\nqueue = \"{}\"\n",
                    if *fair { "fair" } else { "fifo" }
                );
                if let Some(c) = cap {
                    text += &format!("cap = {c}\n");
                }
                if let Some(l) = limit {
                    text += &format!("limit = {l}\n");
                }
            }
            Scenario::parse(Path::new("random.toml"), &text).expect("valid by construction")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn class_invariants_hold_on_random_workloads(s in workloads(), seed in any::<u32>()) {
        for strategy in &s.strategy {
            let seed = u64::from(seed);
            let record = lab::Model::new(&s, strategy, seed).run();
            let jobs = &record.jobs;
            common::check_invariants(&s, strategy, jobs);
            let pool = lab::pool_for(&s, strategy);
            let run = lab::summary::run(&s, strategy, &pool, seed, &record, false);
            common::check_classes(&s, jobs, &run.figures);
            common::check_outcomes(&s, strategy, jobs, &run.figures);
            let again = lab::Model::new(&s, strategy, seed).run().jobs;
            prop_assert_eq!(jobs, &again, "same seed, same run");
            prop_assert!(jobs.iter().all(|j| j.started == NEVER || j.finished == j.started + j.duration));
        }
    }
}

/// About a second of real time with lognormal durations: the real path
/// with variable jobs.
#[test]
fn a_short_real_clock_run_with_lognormal_jobs() {
    let text = "name = \"jitter\"\nruns = 1\nworkers = 4\ntraffic_s = 0.6\n\
                job_ms = { dist = \"lognormal\", median = 20, p99 = 40 }\n\
                [normal]\ntenants = 4\nrate_per_s = 10\n\
                [[burst]]\ntenant = \"noisy\"\nat_s = 0.1\njobs = 30\n\
                [[strategy]]\nname = \"fair\"\nqueue = \"fair\"\n";
    let plan = LabPlan {
        scenario: Scenario::parse(Path::new("jitter.toml"), text).unwrap(),
        clock: ClockKind::Real,
        timer: Default::default(),
        keep_raw: false,
        backend: Default::default(),
    };
    let r = lab::run(&plan, &AtomicBool::new(false), &Progress::hidden())
        .unwrap()
        .results;
    let f = &r.strategies[0].median;
    assert_eq!(f.classes["normal"].jobs, 24);
    assert_eq!(f.classes["noisy"].jobs, 30);
    assert_eq!(f.rejected, 0);
    // Real timers hold a job a little longer than its drawn duration (never
    // shorter: the overshoot is a saturating difference, so only its size
    // is checked here).
    assert!(f.job_overshoot_ms.p50 < 5.0, "{:?}", f.job_overshoot_ms);
    assert!(f.classes["noisy"].done_s.unwrap() > 0.1);
}

#[test]
fn a_job_record_is_the_size_the_memory_estimate_uses() {
    assert_eq!(
        std::mem::size_of::<noisylab::engine::JobRecord>() as u64,
        noisylab::scenario::JOB_RECORD_BYTES
    );
    const {
        assert!(
            noisylab::scenario::JOB_RECORD_BYTES <= 64,
            "one cache line a job at most"
        )
    };
}
