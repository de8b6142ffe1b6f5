//! Reports from saved results: the generated markdown (snapshot), CSV/JSON
//! parity, and validate's pass and fail paths on doctored files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;

use noisylab::lab::{self, LabPlan};
use noisylab::machine::Machine;
use noisylab::output::progress::Progress;
use noisylab::reference::Reference;
use noisylab::report::readme::{self, Source};
use noisylab::report::{Exporter, csv::CsvExporter, json::JsonExporter};
use noisylab::results::ClockKind;
use noisylab::scenario::Scenario;
use noisylab::store;
use serde_json::Value;

/// The article lab on the virtual clock, histograms kept, on a fixed
/// "machine" so the output is the same everywhere.
fn saved_lab(dir: &Path) -> PathBuf {
    let plan = LabPlan {
        scenario: Scenario::load(Path::new("lab/article.toml")).unwrap(),
        clock: ClockKind::Virtual,
        timer: Default::default(),
        keep_raw: true,
        backend: Default::default(),
    };
    let mut results = lab::run(&plan, &AtomicBool::new(false), &Progress::hidden())
        .unwrap()
        .results;
    results.machine = Machine {
        host: "testhost".into(),
        cpu: "Test CPU".into(),
        cpu_mhz: 3000,
        cores: 8,
        physical_cores: Some(4),
        memory_bytes: 16 << 30,
        os: "TestOS 1".into(),
        kernel: "1.0".into(),
        load_start: None,
        load_end: None,
    };
    store::save(dir, &results).unwrap()
}

fn reference() -> Reference {
    Reference::load(Path::new(noisylab::reference::DEFAULT_PATH)).unwrap()
}

#[test]
fn a_saved_file_reads_back_the_same_and_keeps_its_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_lab(dir.path());
    assert_eq!(path.file_name().unwrap(), "undated-testhost-article.json");
    let again = saved_lab(dir.path());
    assert_eq!(
        again.file_name().unwrap(),
        "undated-testhost-article-2.json",
        "never overwrites"
    );
    let a = store::load(&path).unwrap();
    assert_eq!(a, store::load(&again).unwrap());
    // Any percentile can be recomputed from the saved histogram.
    let run = &a.strategies[0].runs[0];
    let h =
        noisylab::results::decode_histogram(&run.raw.as_ref().unwrap().histograms.normal_wait_ns)
            .unwrap();
    assert_eq!(h.len(), run.figures.normal_jobs);
    assert_eq!(
        h.value_at_quantile(0.95) as f64 / 1e6,
        run.figures.normal_wait_ms.p95
    );
}

#[test]
fn the_generated_report_markdown_is_stable() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_lab(dir.path());
    let results = store::load(&path).unwrap();
    let sources = [Source {
        link: "runs/undated-testhost-article.json".into(),
        results: &results,
    }];
    let page = readme::render(&sources, &reference()).unwrap();
    insta::assert_snapshot!("report_readme", page.readme);
    let names: Vec<&str> = page.plots.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "undated-testhost-article-waits.svg",
            "undated-testhost-article-busy.svg",
            "undated-testhost-article-queued.svg",
            "undated-testhost-article-tenants.svg"
        ]
    );
    for (name, svg) in &page.plots {
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name} is an SVG"
        );
        // One panel per strategy, each titled: no series can hide another.
        for s in &results.strategies {
            let title = format!(">\n{}\n</text>", s.name);
            assert_eq!(
                svg.matches(&title).count(),
                1,
                "{name}: a panel for {}",
                s.name
            );
        }
        // Counts are labelled as whole numbers (`20`, not `20.0`).
        if !name.ends_with("-waits.svg") && !name.ends_with("-tenants.svg") {
            let tick = |label: &str| svg.contains(&format!(">\n{label}\n</text>"));
            assert!(!tick("20.0") && !tick("2000.0"), "{name}");
            assert!(tick("20") || tick("2,000"), "{name}: integer ticks");
        }
    }
}

fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                leaves(
                    &if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}_{k}")
                    },
                    v,
                    out,
                );
            }
        }
        other => out.push((prefix.to_string(), other.clone())),
    }
}

#[test]
fn csv_carries_every_json_figure_run_by_run() {
    let dir = tempfile::tempdir().unwrap();
    let results = store::load(&saved_lab(dir.path())).unwrap();
    let json: Value = serde_json::from_slice(&JsonExporter.export(&results).unwrap()).unwrap();
    let csv_bytes = CsvExporter.export(&results).unwrap();
    let mut reader = csv::Reader::from_reader(csv_bytes.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(
        rows.len(),
        5 * (3 + 3),
        "median, min, max and three runs per strategy"
    );
    for row in &rows {
        let s = json["strategies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == row[0])
            .unwrap();
        let figures = match &row[2] {
            "median" | "min" | "max" => s[&row[2]].clone(),
            run => {
                let i: usize = run.strip_prefix("run ").unwrap().parse().unwrap();
                let mut f = s["runs"][i - 1].clone();
                assert_eq!(f["seed"].to_string(), &row[3]);
                let obj = f.as_object_mut().unwrap();
                obj.remove("seed");
                obj.remove("raw");
                f
            }
        };
        let mut expected = Vec::new();
        leaves("", &figures, &mut expected);
        assert_eq!(expected.len(), header.len() - 4, "same fields in both");
        for (key, value) in expected {
            let col = header
                .iter()
                .position(|h| *h == key)
                .unwrap_or_else(|| panic!("CSV lacks {key}"));
            let cell = &row[col];
            match value {
                Value::Null => assert_eq!(cell, ""),
                Value::String(text) => assert_eq!(cell, text, "{key}"),
                Value::Array(items) => {
                    let names: Vec<&str> = items.iter().map(|v| v.as_str().unwrap()).collect();
                    assert_eq!(cell, names.join(";"), "{key}");
                }
                v => assert_eq!(cell.parse::<f64>().unwrap(), v.as_f64().unwrap(), "{key}"),
            }
        }
    }
}

fn validate(path: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_noisylab"))
        .arg("validate")
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Edit a saved file's JSON (as a person could) and save it under a new name.
fn doctor(path: &Path, name: &str, edit: impl Fn(&mut Value)) -> PathBuf {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    let out = path.with_file_name(name);
    std::fs::write(&out, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    out
}

fn strategy_mut<'a>(v: &'a mut Value, name: &str) -> &'a mut Value {
    v["strategies"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|s| s["name"] == name)
        .unwrap()
}

/// The post's fair-queue figures in place of the lockstep pool's (docs/validation.md).
fn as_the_post_measured(v: &mut Value) {
    let s = strategy_mut(v, "Fair queue, no cap");
    for k in ["median", "min", "max"] {
        s[k]["normal_wait_ms"]["p95"] = 27.1.into();
    }
}

#[test]
fn validate_passes_a_file_that_holds_every_claim_and_fails_the_right_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_lab(dir.path());

    let good = doctor(&path, "good.json", as_the_post_measured);
    let (code, out) = validate(&good);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("the post's claims hold here: 17 of 17 checks hold."),
        "{out}"
    );

    let slow = doctor(&path, "slow.json", |v| {
        as_the_post_measured(v);
        strategy_mut(v, "Shared FIFO")["median"]["noisy_done_s"] = 12.0.into();
    });
    let (code, out) = validate(&slow);
    assert_eq!(code, Some(1), "{out}");
    let failed: Vec<&str> = out.lines().filter(|l| l.contains("FAIL")).collect();
    assert_eq!(failed.len(), 2, "{out}");
    assert!(
        failed[0].contains("Shared FIFO: noisy tenant done after ≈ 10.1 s"),
        "{out}"
    );
    assert!(
        failed[1].contains("costs the noisy tenant about 2 s"),
        "the costs are measured from FIFO: {out}"
    );

    let lenient = doctor(&path, "lenient.json", |v| {
        as_the_post_measured(v);
        strategy_mut(v, "Fair queue, queue limit 100")["median"]["rejected"] = 1500.into();
    });
    let (code, out) = validate(&lenient);
    assert_eq!(code, Some(1));
    let failed: Vec<&str> = out.lines().filter(|l| l.contains("FAIL")).collect();
    assert_eq!(failed.len(), 1, "{out}");
    assert!(failed[0].contains("1,896 of 2,000 rejected"), "{out}");

    // The undoctored virtual lab: the lockstep pool misses the post's
    // fair-queue p95, and so does the model over 100 seeds: not a failure of
    // the machine but a claim the model does not give.
    let (code, out) = validate(&path);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("model differs ┆ Fair queue, no cap: beats Shared FIFO by ≥ 350×"),
        "{out}"
    );
    assert!(
        out.contains("15 of 17 checks hold; 2 are not what the model itself gives"),
        "{out}"
    );
}

#[test]
fn bad_results_files_get_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_lab(dir.path());
    let text = std::fs::read_to_string(&path).unwrap();
    let truncated = dir.path().join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let other = dir.path().join("schema9.json");
    std::fs::write(&other, text.replacen("\"schema\": 1", "\"schema\": 9", 1)).unwrap();
    let not_json = dir.path().join("notes.json");
    std::fs::write(&not_json, "hello").unwrap();
    for (file, expected) in [
        (&truncated, "truncated results file (the JSON ends early)"),
        (
            &other,
            "results schema version 9, this noisylab reads version 1",
        ),
        (&not_json, "not a results file (invalid JSON)"),
        (
            &dir.path().join("absent.json"),
            "cannot read results file: no such file",
        ),
    ] {
        for cmd in ["validate", "report"] {
            let out = Command::new(env!("CARGO_BIN_EXE_noisylab"))
                .arg(cmd)
                .arg(file)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {file:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(expected),
                "{cmd}: expected {expected:?} in {err}"
            );
        }
    }
}

/// Every place where `now` lacks a key of `before` or holds another value
/// there (the machine block aside), as `path: before → now`.
fn differences(before: &Value, now: &Value, path: &str, out: &mut Vec<String>) {
    match (before, now) {
        (Value::Object(b), Value::Object(n)) => {
            for (k, v) in b {
                if k == "machine" {
                    continue;
                }
                match n.get(k) {
                    Some(w) => differences(v, w, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: missing")),
                }
            }
        }
        (Value::Array(b), Value::Array(n)) if b.len() == n.len() => {
            for (i, (v, w)) in b.iter().zip(n).enumerate() {
                differences(v, w, &format!("{path}[{i}]"), out);
            }
        }
        _ if before != now => out.push(format!("{path}: {before} → {now}")),
        _ => {}
    }
}

#[test]
fn the_article_lab_keeps_every_figure_of_the_fixture() {
    // Taken before the layout change (issue 8): every key and figure of it is
    // still there with the same value; the workload figures (issue 9) are new.
    let before: Value = serde_json::from_str(
        &std::fs::read_to_string("src/tests/fixtures/article-virtual-before.json").unwrap(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_noisylab"))
        .args([
            "run",
            "lab/article.toml",
            "--clock",
            "virtual",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let now: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut diffs = Vec::new();
    differences(&before, &now, "", &mut diffs);
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs[..diffs.len().min(20)].join("\n")
    );
    // The check sees the figures: it would catch a changed one.
    let mut moved = now.clone();
    moved["strategies"][3]["median"]["normal_wait_ms"]["p95"] = serde_json::json!(1.0);
    let mut diffs = Vec::new();
    differences(&before, &moved, "", &mut diffs);
    assert_eq!(diffs.len(), 1, "{diffs:?}");
}

#[test]
fn the_committed_real_clock_files_still_load_with_their_warnings() {
    let files = store::list(Path::new("reports")).unwrap();
    assert!(!files.is_empty(), "reports/runs/ holds the committed lab");
    for path in files {
        let results = store::load(&path).unwrap();
        let real = results
            .real
            .as_ref()
            .expect("a committed lab is real-clock");
        assert!(real.wall_s > 400.0, "{}: the whole lab", path.display());
        assert_eq!(results.strategies.len(), 5);
        // Warnings are computed once, when the lab ends; recomputing them
        // from the saved figures gives the same list.
        assert_eq!(
            results.warnings,
            noisylab::lab::warnings::check(&results),
            "{}",
            path.display()
        );
    }
}

#[test]
fn each_command_accepts_only_the_formats_it_prints() {
    let committed = "reports/runs/2026-12-02-vm-article.json";
    let cases: [&[&str]; 4] = [
        &["compare", committed, "--format", "csv"],
        &["compare", committed, "--format", "json"],
        &["calibrate", "--sleeps", "1", "--format", "csv"],
        &["calibrate", "--sleeps", "1", "--format", "markdown"],
    ];
    for args in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_noisylab"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("invalid value"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}
