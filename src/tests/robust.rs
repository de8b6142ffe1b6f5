//! Every failure mode on purpose: bad input gets one line naming file, key,
//! what was found and what is allowed; nothing is lost; the invariants hold
//! on random scenarios; the parsers never panic.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use noisylab::lab;
use noisylab::scenario::{Queue, Scenario, Strategy as StrategyDef};
use noisylab::store;
use proptest::prelude::*;

const ARTICLE: &str = include_str!("../../lab/article.toml");

fn parse(text: &str) -> Result<Scenario, String> {
    Scenario::parse(Path::new("x.toml"), text).map_err(|e| e.to_string())
}

/// The article scenario with `from` replaced by `to` (once).
fn edit(from: &str, to: &str) -> String {
    assert!(ARTICLE.contains(from), "{from:?} is in lab/article.toml");
    ARTICLE.replacen(from, to, 1)
}

#[test]
fn each_bad_scenario_gets_its_message() {
    let cases: Vec<(String, &str)> = vec![
        (
            "name = \"x\"\nworkers = [\n".into(),
            "x.toml:2:12: invalid TOML: unclosed array, expected `]`",
        ),
        ("= 3".into(), "x.toml:1:1: invalid TOML:"),
        (
            edit("workers = 20", "wrokers = 20"),
            "x.toml:6:1: wrokers: unknown key `wrokers`; allowed keys:",
        ),
        (
            edit("rate_per_s = 2.0", "rate = 2.0"),
            "normal.rate: unknown key `rate`; allowed keys: `tenants`, `rate_per_s`, `arrivals`",
        ),
        (
            edit("jobs = 2000", "size = 2000"),
            "burst[0].size: unknown key `size`",
        ),
        (
            edit("limit = 100", "limt = 100"),
            "strategy[4].limt: unknown key `limt`; allowed keys: `name`, `queue`, `cap`, `limit`, `cost`, `cost_in`, `cost_out`, `reserve`, `fair_by`, `weighted`",
        ),
        (
            edit("workers = 20", "workers = \"20\""),
            "workers: wrong type: found string \"20\", expected a whole number of 0 or more",
        ),
        (
            edit("traffic_s = 12 ", "traffic_s = \"12\" "),
            "traffic_s: wrong type: found string \"12\", expected a number",
        ),
        (
            edit("tenants = 20", "tenants = 2.5"),
            "normal.tenants: wrong type: found floating point `2.5`",
        ),
        (
            edit("workers = 20", "workers = 0"),
            "x.toml: workers: must be at least 1, found 0",
        ),
        (
            edit("workers = 20", "workers = -3"),
            "workers: invalid value: found integer `-3`",
        ),
        (
            edit("job_ms = 100", "job_ms = 0"),
            "x.toml: job_ms: must be at least 1 ms, found 0",
        ),
        (
            edit("traffic_s = 12 ", "traffic_s = 0 "),
            "x.toml: traffic_s: must be more than 0 seconds, found 0",
        ),
        (
            edit("traffic_s = 12 ", "traffic_s = -1.5 "),
            "x.toml: traffic_s: must be more than 0 seconds, found -1.5",
        ),
        (
            edit("traffic_s = 12 ", "traffic_s = nan "),
            "x.toml: traffic_s: must be more than 0 seconds, found NaN",
        ),
        (
            edit("rate_per_s = 2.0", "rate_per_s = -2.0"),
            "x.toml: normal.rate_per_s: must be a rate of 0 or more jobs per second, found -2",
        ),
        (
            edit("rate_per_s = 2.0", "rate_per_s = 2e10"),
            "x.toml: normal.rate_per_s: at most 1e9 jobs per second per tenant, found 20000000000",
        ),
        (
            edit("runs = 3 ", "runs = 0 "),
            "x.toml: runs: must be at least 1, found 0",
        ),
        (
            edit("cap = 4", "cap = 0"),
            "x.toml: strategy[1].cap: must be at least 1 (leave it out for no cap), found 0",
        ),
        (
            edit("limit = 100", "limit = 0"),
            "x.toml: strategy[4].limit: must be at least 1 (leave it out for no limit), found 0",
        ),
        (
            edit("queue = \"fair\"", "queue = \"lifo\""),
            "strategy[2].queue: unknown value `lifo`; allowed: `fifo`, `fair`, `vtc`",
        ),
        (
            edit("arrivals = \"periodic\"", "arrivals = \"bursty\""),
            "normal.arrivals: unknown value `bursty`; allowed: `periodic` or `poisson`",
        ),
        (
            edit(
                "name = \"FIFO with cap of 4 per tenant\"",
                "name = \"Shared FIFO\"",
            ),
            "x.toml: strategy[1].name: duplicate strategy name \"Shared FIFO\" (also strategy[0]); names must be unique",
        ),
        (
            edit("at_s = 2.0", "at_s = -2.0"),
            "x.toml: burst[0].at_s: must be 0 or more seconds, found -2",
        ),
        (
            edit("jobs = 2000", "jobs = 0"),
            "x.toml: burst[0].jobs: must be at least 1, found 0",
        ),
        (
            edit("at_s = 2.0", "at_s = 15.0"),
            "x.toml: burst[0].at_s: 15 s is not before traffic_s = 12 s, so no normal job would run beside the burst; move the burst earlier or raise traffic_s",
        ),
        (
            edit("tenant = \"noisy\"", "tenant = \" \""),
            "x.toml: burst[0].tenant: must not be empty",
        ),
        (
            edit("name = \"article\"", "name = \"\""),
            "x.toml: name: must not be empty",
        ),
        (edit("workers = 20\n", ""), "x.toml: missing key `workers`"),
        (
            edit("tenants = 20", "tenants = 0"),
            "x.toml: normal: no normal jobs would be sent before traffic_s",
        ),
        (
            edit("jobs = 2000", "jobs = 4000000000"),
            "x.toml: one run would plan 4000000480 jobs (about 244140 MiB of job records); at most 100000000 are allowed",
        ),
        (
            format!(
                "strategy = []\n{}",
                ARTICLE.split("[[strategy]]").next().unwrap()
            ),
            "x.toml: strategy: at least one [[strategy]] is needed (queue = \"fifo\" or \"fair\")",
        ),
        (
            edit("workers = 20", "workers = 20\nlease_s = 0"),
            "x.toml: lease_s: must be more than 0 seconds, found 0",
        ),
        (
            format!("{ARTICLE}\n[[fault]]\nat_s = 3\nkind = \"melt_server\"\n"),
            "x.toml:48:8: fault[0].kind: unknown value `melt_server`; allowed: `kill_worker`, `pause_worker`, `drop_connections`, `restart_server`, `slow_link`",
        ),
        (
            format!("{ARTICLE}\n[backend]\nurl = \"postgres\"\nappend_only = true\n"),
            "x.toml: backend.append_only: goes with a Redis server of the lab's own (url = \"redis\")",
        ),
        (
            format!("{ARTICLE}\n[[fault]]\nat_s = 3\nkind = \"slow_link\"\n"),
            "x.toml: fault[0]: slow_link needs delay_ms, more than 0: how much longer each round trip takes",
        ),
        (
            format!("{ARTICLE}\n[[fault]]\nat_s = 3\nkind = \"pause_worker\"\n"),
            "x.toml: fault[0]: pause_worker needs duration_s, more than 0 seconds",
        ),
        (
            format!("{ARTICLE}\n[[fault]]\nat_s = -1\nkind = \"kill_worker\"\n"),
            "x.toml: fault[0]: at_s must be 0 or more seconds, found -1",
        ),
        (
            format!(
                "{ARTICLE}\n[[fault]]\nat_s = 3\nkind = \"kill_worker\"\nduration_s = 1\n\
                 [[fault]]\nat_s = 3.5\nkind = \"pause_worker\"\nduration_s = 1\n"
            ),
            "x.toml: fault[1]: it strikes worker process 1 at 3.5 s, while fault[0] has it down from 3 s to 4 s; one fault at a time on a process",
        ),
    ];
    assert!(cases.len() >= 25);
    for (text, expected) in &cases {
        let got = parse(text).expect_err(expected);
        assert!(
            got.contains(expected),
            "expected {expected:?}\n     got {got:?}"
        );
        assert_eq!(got.lines().count(), 1, "one line: {got}");
    }
}

fn noisylab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_noisylab"))
}

/// docs/troubleshooting.md lists what the broken examples in
/// `lab/examples/` print; the tool must print exactly that.
#[test]
fn the_broken_examples_print_what_the_readme_documents() {
    let readme = std::fs::read_to_string("docs/troubleshooting.md").unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir("lab/examples").unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("broken")
        {
            continue;
        }
        let out = noisylab()
            .args(["run", "--clock", "virtual"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let line = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
        assert!(
            readme.contains(&format!("{line}\n")),
            "docs/troubleshooting.md does not document:\n{line}"
        );
        checked += 1;
    }
    assert!(checked >= 3, "the broken examples are there");
}

#[test]
fn an_unwritable_results_folder_fails_before_the_first_run() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let started = Instant::now();
    let out = noisylab()
        .args(["run", "lab/article.toml", "-q", "--out"])
        .arg(&blocker)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a-file/runs: cannot create the results folder"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it failed at once, not after the lab"
    );
}

fn sigint(child: &std::process::Child) {
    // SAFETY: kill sends a signal to our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
}

/// Real clock: Ctrl-C mid-lab keeps every completed run, says where, exits 130.
#[test]
fn ctrl_c_saves_the_completed_runs_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let child = noisylab()
        .args([
            "run",
            "lab/smoke.toml",
            "--runs",
            "6",
            "-q",
            "--format",
            "json",
            "--out",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Calibration takes about 1.5 s, each smoke run under a second.
    std::thread::sleep(Duration::from_millis(4000));
    sigint(&child);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted: kept "), "{err}");
    let files: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{err}");
    assert!(
        err.contains(&files[0].display().to_string()),
        "says where: {err}"
    );
    let saved = store::load(&files[0]).unwrap();
    let kept: usize = saved.strategies.iter().map(|s| s.runs.len()).sum();
    assert!((1..12).contains(&kept), "some runs, not all: {kept}");
    assert!(
        err.contains(&format!("kept {kept} completed run(s)")),
        "{err}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left behind");
}

#[test]
fn a_second_ctrl_c_exits_at_once() {
    // Bound for the whole test: a temporary one would be deleted before the
    // child writes there, and it would exit 2 for that instead.
    let dir = tempfile::tempdir().unwrap();
    let mut child = noisylab()
        .args(["run", "lab/article.toml", "-q", "--out"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Long enough for the handler to be in place (it is, before calibration).
    std::thread::sleep(Duration::from_millis(1000));
    sigint(&child);
    std::thread::sleep(Duration::from_millis(100));
    sigint(&child);
    let started = Instant::now();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// Random small scenarios: 1–64 workers, 1–500 tenants, bursts, caps,
/// limits, both queue kinds.
fn scenarios() -> impl Strategy<Value = Scenario> {
    (
        1u32..=64,
        1u32..=500,
        0.2f64..4.0,
        1u64..=200,
        prop::collection::vec((0.0f64..1.5, 1u32..=600, 0usize..3), 0..3),
        prop::collection::vec(
            (
                0u8..3,
                prop::option::of(1u32..6),
                prop::option::of(1u32..50),
            ),
            1..4,
        ),
        any::<bool>(),
    )
        .prop_map(
            |(workers, tenants, rate, job_ms, bursts, strategies, poisson)| {
                let text = format!(
                    "name = \"random\"\nworkers = {workers}\njob_ms = {job_ms}\ntraffic_s = 2.0\n\
                 [normal]\ntenants = {tenants}\nrate_per_s = {rate}\narrivals = \"{}\"\n",
                    if poisson { "poisson" } else { "periodic" }
                );
                let mut s = Scenario::parse(
                    Path::new("random.toml"),
                    &(text + "[[strategy]]\nname = \"x\"\nqueue = \"fifo\"\n"),
                )
                .expect("valid by construction");
                s.burst = bursts
                    .into_iter()
                    .map(|(at_s, jobs, who)| noisylab::scenario::Burst {
                        tenant: format!("b{who}"),
                        at_s,
                        jobs,
                        job_ms: None,
                        tokens_in: None,
                        tokens_out: None,
                        keys: None,
                        over_s: None,
                        rate_limit: None,
                        budget: None,
                        clients: None,
                    })
                    .collect();
                s.strategy = strategies
                    .into_iter()
                    .enumerate()
                    .map(|(i, (kind, cap, limit))| StrategyDef {
                        name: format!("s{i}"),
                        queue: [Queue::Fifo, Queue::Fair, Queue::Vtc][usize::from(kind)],
                        cap,
                        limit,
                        cost: None,
                        cost_in: None,
                        cost_out: None,
                        weighted: None,
                        retry_after: None,
                        layers: None,
                        clients: None,
                        reserve: None,
                        fair_by: None,
                    })
                    .collect();
                s
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn invariants_hold_on_random_scenarios(s in scenarios(), seed in any::<u32>()) {
        for strategy in &s.strategy {
            let (jobs, stats) = {
            let record = lab::Model::new(&s, strategy, u64::from(seed)).run();
            (record.jobs, record.stats)
        };
            common::check_invariants(&s, strategy, &jobs);
            if strategy.cap.is_none() {
                prop_assert_eq!(stats.idle_worker_ns_while_waiting, 0, "{} is work-conserving", strategy.name);
            }
            let again = lab::Model::new(&s, strategy, u64::from(seed)).run().jobs;
            prop_assert_eq!(jobs, again, "same seed, same run");
        }
    }
}

fn fuzz_cases() -> u32 {
    std::env::var("NOISYLAB_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Scenario text: arbitrary bytes, and the article with random edits (which
/// reach the validation past the TOML parser).
fn scenario_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        (0..ARTICLE.len(), 0..ARTICLE.len(), "[ -~\n]{0,12}").prop_map(|(a, b, insert)| {
            let (lo, hi) = (a.min(b), a.min(b) + (a.max(b) - a.min(b)).min(24));
            let (lo, hi) = (floor_char(ARTICLE, lo), floor_char(ARTICLE, hi));
            format!("{}{insert}{}", &ARTICLE[..lo], &ARTICLE[hi..])
        }),
    ]
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    /// Fuzz: the scenario parser never panics, and every error is one line.
    #[test]
    fn fuzz_the_scenario_parser(text in scenario_text()) {
        if let Err(e) = Scenario::parse(Path::new("fuzz.toml"), &text) {
            prop_assert_eq!(e.to_string().lines().count(), 1);
        }
    }

    /// Fuzz: the results reader never panics on arbitrary or cut-short JSON.
    #[test]
    fn fuzz_the_results_reader(bytes in prop::collection::vec(any::<u8>(), 0..256), cut in 0usize..4000) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = noisylab::store::parse(Path::new("fuzz.json"), &text);
        let sample = results_sample();
        let cut = floor_char(sample, cut.min(sample.len()));
        let _ = noisylab::store::parse(Path::new("fuzz.json"), &sample[..cut]);
    }
}

fn results_sample() -> &'static str {
    static SAMPLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SAMPLE.get_or_init(|| {
        let s = Scenario::load(Path::new("lab/smoke.toml")).unwrap();
        let plan = noisylab::lab::LabPlan {
            scenario: s,
            clock: noisylab::results::ClockKind::Virtual,
            timer: Default::default(),
            keep_raw: false,
            backend: Default::default(),
        };
        let r = noisylab::lab::run(
            &plan,
            &std::sync::atomic::AtomicBool::new(false),
            &noisylab::output::progress::Progress::hidden(),
        )
        .unwrap()
        .results;
        serde_json::to_string(&r).unwrap()
    })
}
