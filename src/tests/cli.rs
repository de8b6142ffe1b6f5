//! The binary end to end: bad input gets one line and exit code 2; a short
//! real-clock run exercises the real path; `report FILE` leaves the report
//! site alone unless `--out` says where to write one.

use std::path::Path;
use std::process::{Command, Output};

fn noisylab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noisylab"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Write a variant of the article scenario with one line replaced.
fn variant(dir: &Path, name: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string("lab/article.toml").unwrap();
    assert!(text.contains(from), "{from:?} is in lab/article.toml");
    let path = dir.join(name);
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path.to_string_lossy().into_owned()
}

fn assert_bad_input(args: &[&str], expected: &str) {
    let out = noisylab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(expected),
        "{args:?}: expected {expected:?} in {stderr:?}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout for bad input");
}

#[test]
fn bad_scenarios_get_one_line_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: Vec<(String, String)> = vec![
        (d.join("missing.toml").to_string_lossy().into(), "missing.toml: cannot read scenario file: no such file".into()),
        (variant(d, "zero.toml", "workers = 20", "workers = 0"), "zero.toml: workers: must be at least 1, found 0".into()),
        (
            variant(d, "neg.toml", "rate_per_s = 2.0", "rate_per_s = -2.0"),
            "neg.toml: normal.rate_per_s: must be a rate of 0 or more jobs per second, found -2".into(),
        ),
        (
            variant(d, "kind.toml", "queue = \"fair\"", "queue = \"lifo\""),
            "kind.toml:31:9: strategy[2].queue: unknown value `lifo`; allowed: `fifo`, `fair`, `vtc`".into(),
        ),
        (
            variant(d, "limt.toml", "limit = 100", "limt = 100"),
            "limt.toml:44:1: strategy[4].limt: unknown key `limt`; allowed keys: `name`, `queue`, `cap`, `limit`, `cost`, `cost_in`, `cost_out`, `reserve`, `fair_by`, `weighted`".into(),
        ),
        (
            variant(d, "syntax.toml", "workers = 20", "workers = [20"),
            "syntax.toml:7:1: invalid TOML: missing comma between array elements".into(),
        ),
    ];
    for (file, expected) in &cases {
        assert_bad_input(&["run", "--clock", "virtual", file], expected);
    }
}

#[test]
fn a_bad_fault_or_one_the_backend_cannot_inject_gets_one_line() {
    // clap's own layout: the error on its first line, then a hint to --help.
    let clap_error = |fault: &str, expected: &str| {
        let out = noisylab(&["run", "lab/smoke.toml", "--fault", fault]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(expected), "{expected:?} in {stderr:?}");
    };
    clap_error(
        "kill_worker",
        "\"kill_worker\" is not KEY=VALUE; a fault is kind=KIND,at_s=SECONDS",
    );
    clap_error("kind=kill_worker,at=1", "unknown field `at`");
    clap_error(
        "kind=slow_link,at_s=1,delay_ms=20",
        "slow_link needs duration_s, more than 0 seconds: how long the link stays slow",
    );
    // Each checked before anything starts: no lab, no server.
    let fault = "kind=kill_worker,at_s=0.2";
    assert_bad_input(
        &["run", "lab/smoke.toml", "--fault", fault],
        "fault[0]: a kill_worker fault: not carried by the in-process backend on real timers \
         (carried by: in-process on the virtual clock, redis, postgres)",
    );
    // Only a server the lab started can be restarted.
    for (url, kind) in [
        ("redis://127.0.0.1:1/", "redis"),
        ("postgres://noisylab@127.0.0.1:1/postgres", "postgres"),
    ] {
        assert_bad_input(
            &[
                "run",
                "lab/smoke.toml",
                "--backend",
                url,
                "--fault",
                "kind=restart_server,at_s=0.2",
            ],
            &format!(
                "fault[0]: restart_server restarts the server the lab starts (--backend {kind}), not one given by URL"
            ),
        );
    }
    // A server restarted from its append-only file cannot go without one;
    // a restart checks that the server kept every job it acknowledged,
    // which commits that reply before their flush may not.
    let dir = tempfile::tempdir().unwrap();
    for (backend, refused) in [
        (
            "url = \"redis\"\nappend_only = false",
            "backend.append_only = false, but a restart_server fault restarts the server from \
             its append-only file",
        ),
        (
            "url = \"postgres\"\nsynchronous_commit = false",
            "backend.synchronous_commit = false, but a restart_server fault checks that the \
             server keeps every job it acknowledged",
        ),
    ] {
        let text = std::fs::read_to_string("lab/smoke.toml").unwrap()
            + &format!("\n[backend]\n{backend}\n");
        let path = dir.path().join("restarted.toml");
        std::fs::write(&path, text).unwrap();
        assert_bad_input(
            &[
                "run",
                path.to_str().unwrap(),
                "--fault",
                "kind=restart_server,at_s=0.2",
            ],
            refused,
        );
    }
    // What the SQL functions do not carry yet (the Redis functions do).
    assert_bad_input(
        &["run", "lab/sybil.toml", "--backend", "postgres"],
        "strategy[2] (\"Fair queue over tenants\"): fair_by = \"tenant\" over tenants split into API keys",
    );
    assert_bad_input(
        &["run", "lab/smoke.toml", "--collector", "127.0.0.1:0"],
        "--collector goes with your own queue (--backend http://HOST:PORT/PATH)",
    );
    assert_bad_input(
        &["run", "lab/retry-storm.toml", "--backend", "postgres"],
        "strategy[1] (\"Retry after 1 s, no jitter\"): retrying clients, clients that stop waiting and \
         fixed retry-afters: not carried by the PostgreSQL backend (carried by: in-process, redis, http)",
    );
    assert_bad_input(
        &[
            "run",
            "lab/smoke.toml",
            "--backend",
            "redis",
            "--processes",
            "0",
            "--fault",
            fault,
        ],
        "[[fault]] strikes worker processes the lab starts: drop --processes 0",
    );
    assert_bad_input(
        &[
            "run",
            "lab/smoke.toml",
            "--backend",
            "redis",
            "--fault",
            "kind=kill_worker,at_s=0.2,target=3",
        ],
        "fault[0]: target 3 names a worker process, but the lab starts 2 (from 1 to 2)",
    );
}

#[test]
fn an_unknown_strategy_filter_lists_the_known_ones() {
    assert_bad_input(
        &["run", "--clock", "virtual", "--strategy", "LIFO"],
        "lab/article.toml: --strategy \"LIFO\": no such strategy in scenario \"article\"; known: \"Shared FIFO\"",
    );
}

#[test]
fn virtual_json_has_the_contract_fields() {
    let out = noisylab(&[
        "run",
        "lab/article.toml",
        "--clock",
        "virtual",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scenario"]["name"], "article");
    assert_eq!(v["clock"], "virtual");
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
    let strategies = v["strategies"].as_array().unwrap();
    assert_eq!(strategies.len(), 5);
    for s in strategies {
        for key in ["p50", "p95", "p99", "max"] {
            assert!(s["median"]["normal_wait_ms"][key].is_f64(), "{key}");
        }
        assert!(s["median"]["noisy_done_s"].is_f64());
        assert!(s["median"]["rejected"].is_u64());
        assert_eq!(s["runs"].as_array().unwrap().len(), 3);
        assert!(s["runs"][0]["raw"].is_null(), "no histograms on stdout");
    }
    assert_eq!(strategies[4]["median"]["rejected"], 1896);
}

/// About a second of real time: the real clock, the precise timer and saving.
#[test]
fn a_short_real_clock_run_completes_and_saves_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_string_lossy().into_owned();
    let out = noisylab(&[
        "run",
        "lab/smoke.toml",
        "--format",
        "json",
        "--out",
        &out_dir,
        "-q",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clock"], "real");
    assert_eq!(v["timer"], "precise");
    for s in v["strategies"].as_array().unwrap() {
        let run = &s["runs"][0];
        assert_eq!(run["rejected"], 0);
        // 4 tenants × 10/s × 0.6 s.
        assert_eq!(run["normal_jobs"], 24);
        assert!(run["noisy_done_s"].as_f64().unwrap() > 0.0);
    }
    let saved: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .collect();
    assert_eq!(saved.len(), 1, "one results file");
    let path = saved[0].as_ref().unwrap().path();
    let results = noisylab::store::load(&path).unwrap();
    let raw = results.strategies[0].runs[0]
        .raw
        .as_ref()
        .expect("histograms saved");
    let h = noisylab::results::decode_histogram(&raw.histograms.normal_wait_ns).unwrap();
    assert_eq!(h.len(), 24, "the saved histogram holds every normal job");
}

#[test]
fn a_report_of_files_prints_them_and_leaves_the_site_unless_told_where() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("reports");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("README.md"), "the site\n").unwrap();
    let mut runs: Vec<_> = std::fs::read_dir("reports/runs")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    runs.sort();
    let file = std::fs::canonicalize(&runs[0]).unwrap();
    let file = file.to_str().unwrap();
    let report = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_noisylab"))
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    // A file given alone: its tables printed, the site as it was.
    let out = report(&["report", file]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Strategy"));
    assert!(err.contains("left as it was"), "{err}");
    assert_eq!(
        std::fs::read_to_string(site.join("README.md")).unwrap(),
        "the site\n"
    );
    assert!(!site.join("plots").exists());
    // With --out, the site from that file is written there.
    let out = report(&["report", file, "--out", "elsewhere"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(dir.path().join("elsewhere/README.md")).unwrap();
    assert!(written.len() > 1000, "a report site: {written}");
    assert_eq!(
        std::fs::read_to_string(site.join("README.md")).unwrap(),
        "the site\n"
    );
}
