//! The AI product's limits and clients on the virtual clock: token buckets
//! and windows admit exactly what their arithmetic allows, nothing is lost
//! whatever the clients do, retries honour their retry-after, and the retry
//! storm of `lab/retry-storm.toml` is metastable where the lab says so.

mod common;

use std::path::Path;

use noisylab::engine::traffic::Refusal;
use noisylab::engine::{Fate, JobRecord, NEVER, Nanos};
use noisylab::lab;
use noisylab::scenario::{Retry, Scenario};
use proptest::prelude::*;

const ARTICLE: &str = include_str!("../../lab/article.toml");

fn parse(text: &str) -> Result<Scenario, String> {
    Scenario::parse(Path::new("x.toml"), text).map_err(|e| e.to_string())
}

fn load(name: &str) -> Scenario {
    Scenario::load(Path::new(&format!("lab/{name}.toml"))).unwrap()
}

fn strategy<'a>(s: &'a Scenario, name: &str) -> &'a noisylab::scenario::Strategy {
    s.strategy.iter().find(|d| d.name == name).unwrap()
}

/// One tenant, one worker-rich pool, a rate limit of 5 a second (bursts
/// of 10) and, after `extra`, one strategy.
fn one_tenant(extra: &str) -> Scenario {
    parse(&format!(
        r#"
name = "bucket"
runs = 1
workers = 1000
job_ms = 1
traffic_s = 10

[[tenants]]
name = "t"
count = 1
rate_per_s = 1000
rate_limit = {{ per_s = 5, burst = 10 }}
{extra}

[[strategy]]
name = "fifo"
queue = "fifo"
"#
    ))
    .unwrap()
}

/// A job every millisecond from t = 0 for ten seconds.
fn every_ms(tenant: u32) -> Vec<JobRecord> {
    (0..10_000u64)
        .map(|i| JobRecord::planned(tenant, i * 1_000_000, 1_000_000))
        .collect()
}

#[test]
fn a_token_bucket_facing_saturating_demand_admits_burst_plus_rate_times_t() {
    let s = one_tenant("");
    let def = &s.strategy[0];
    let pool = lab::pool_for(&s, def);
    let jobs = lab::Model::new(&s, def, 1)
        .on(pool)
        .with_plan(every_ms(0))
        .run()
        .jobs;
    let admitted: Vec<Nanos> = jobs
        .iter()
        .filter(|j| j.fate == Fate::Ran)
        .map(|j| j.enqueued)
        .collect();
    // The 10 in the bucket go to the first 10 jobs (0-9 ms); then one every
    // 200 ms: by 9.999 s, 10 + floor(5 x 9.999) = 59.
    assert_eq!(admitted.len(), 59, "{:?}", &admitted[..12]);
    assert_eq!(
        common::refused_at(&jobs, Refusal::Rate),
        10_000 - 59,
        "the rest refused by the rate limit"
    );
    // And over every prefix [0, t]: 10 + floor(5 t), once t is past the burst.
    for (k, &at) in admitted.iter().enumerate().skip(10) {
        let expected_by = 10 + (5 * at / 1_000_000_000) as usize;
        assert_eq!(k + 1, expected_by, "the {}th admission at {at} ns", k + 1);
    }
}

/// Calls that passed the provider: (start instant, input, output tokens).
fn passed(jobs: &[JobRecord]) -> Vec<(Nanos, f64, f64)> {
    let mut v: Vec<_> = jobs
        .iter()
        .filter(|j| j.started != NEVER && matches!(j.fate, Fate::Ran | Fate::Wasted))
        .map(|j| (j.started, f64::from(j.tokens_in), f64::from(j.tokens_out)))
        .collect();
    v.sort_by_key(|p| p.0);
    v
}

/// The most that passed in any window of `w` ns, by `amount`, over every
/// window that starts at a call.
fn busiest(
    calls: &[(Nanos, f64, f64)],
    w: Nanos,
    amount: impl Fn(&(Nanos, f64, f64)) -> f64,
) -> f64 {
    let (mut hi, mut sum, mut best) = (0, 0.0, 0.0f64);
    for lo in 0..calls.len() {
        while hi < calls.len() && calls[hi].0 < calls[lo].0 + w {
            sum += amount(&calls[hi]);
            hi += 1;
        }
        best = best.max(sum);
        sum -= amount(&calls[lo]);
    }
    best
}

#[test]
fn the_provider_never_admits_more_than_its_limits_allow_in_any_window() {
    let s = load("provider");
    let def = strategy(&s, "Shared FIFO");
    let jobs = lab::Model::new(&s, def, s.seed).run().jobs;
    assert!(
        common::refused_at(&jobs, Refusal::Provider) > 1_000,
        "the import saturates the provider"
    );
    let calls = passed(&jobs);
    let minute: Nanos = 60_000_000_000;
    // Buckets of a minute's capacity: at most capacity + rate x t in any t.
    for (w, secs) in [(minute, 60.0), (minute / 6, 10.0), (minute / 60, 1.0)] {
        let requests = busiest(&calls, w, |_| 1.0);
        let input = busiest(&calls, w, |c| c.1);
        assert!(
            requests <= 1_000.0 + 1_000.0 * secs / 60.0,
            "{requests} requests in {secs} s"
        );
        assert!(
            input <= 1e6 + 1e6 * secs / 60.0,
            "{input} input tokens in {secs} s"
        );
    }
    // The bucket does let a minute's worth through on top of the refill:
    // more than rpm in some 60 s window (a sliding window would not).
    assert!(busiest(&calls, minute, |_| 1.0) > 1_000.0);

    // Checked over 10 s windows at the minute's rate, output reserved at the
    // start: never more than a sixth of each limit in any 10 s, so never
    // more than the limit in any minute.
    let text = std::fs::read_to_string("lab/provider.toml")
        .unwrap()
        .replace(
            "reject_ms = 100",
            "reject_ms = 100\nwindow_s = 10\nreserve_output = true",
        );
    let windowed_s = Scenario::parse(Path::new("lab/provider.toml"), &text).unwrap();
    let def = strategy(&windowed_s, "Shared FIFO");
    let jobs = lab::Model::new(&windowed_s, def, windowed_s.seed)
        .run()
        .jobs;
    assert!(common::refused_at(&jobs, Refusal::Provider) > 1_000);
    let calls = passed(&jobs);
    let ten_s: Nanos = 10_000_000_000;
    let eps = 1e-6;
    assert!(busiest(&calls, ten_s, |_| 1.0) <= 1_000.0 / 6.0 + eps);
    assert!(busiest(&calls, ten_s, |c| c.1) <= 1e6 / 6.0 + eps);
    assert!(busiest(&calls, ten_s, |c| c.2) <= 2e5 / 6.0 + eps);
    assert!(busiest(&calls, minute, |_| 1.0) <= 1_000.0 + eps);
    assert!(busiest(&calls, minute, |c| c.1) <= 1e6 + eps);
}

/// Nothing lost: every attempt of every run ended and was sent, and every
/// outcome and refusal the lab reports, per class and in all, is the count
/// the records give (the oracle in `common`). Returns each run's tallies.
fn check_nothing_lost(s: &Scenario) -> Vec<common::Tally> {
    common::check_lab_outcomes(s)
}

prop_compose! {
    fn clients()(
        retry in prop_oneof![Just("none"), Just("after"), Just("backoff")],
        jitter in prop_oneof![Just("none"), Just("full"), Just("equal"), Just("decorrelated")],
        attempts in 1u32..5,
        timeout in prop::option::of(1u32..30),
        waste in any::<bool>(),
        budget in prop::option::of(0u32..3),
        honour in any::<bool>(),
    ) -> String {
        let mut c = format!("retry = \"{retry}\"");
        if retry != "none" {
            c += &format!(", max_attempts = {attempts}, base_ms = 50, cap_ms = 2000, honour_retry_after = {honour}");
            if retry == "backoff" {
                c += &format!(", jitter = \"{jitter}\"");
            }
            if let Some(b) = budget {
                c += &format!(", retry_budget = {}", f64::from(b) / 4.0);
            }
        }
        if let Some(t) = timeout {
            c += &format!(", timeout_s = {}, on_timeout = \"{}\"", f64::from(t) / 10.0, if waste { "waste" } else { "cancel" });
        }
        c
    }
}

prop_compose! {
    /// The post's lab, smaller (300 noisy jobs, 2 runs), with random clients
    /// for each class and each front-door layer drawn or not: a queue limit,
    /// a rate limit of 0.25 to 2.75 a second on the neighbours (who send 2),
    /// a token budget on them (120 tokens a job: it runs out after 2 to 19
    /// jobs, refilled at 0, 0.5 or 1 job's worth a second), the provider's
    /// requests a minute from a bucket of 20 to 399.
    fn random_lab()(
        normal in clients(),
        noisy in clients(),
        limit in prop::option::of(5u32..60),
        rate in prop::option::of(1u32..12),
        budget in prop::option::of((2u32..20, 0u32..3)),
        rpm in prop::option::of((300u32..3000, 20u32..400)),
        reject_ms in 0u32..50,
        fixed in any::<bool>(),
        queue in prop_oneof![Just("fifo"), Just("fair"), Just("vtc")],
    ) -> String {
        let noisy = format!("jobs = 300\nclients = {{ {noisy} }}");
        let mut text = ARTICLE
            .replace("runs = 3 ", "runs = 2 ")
            .replace("job_ms = 100 ", "job_ms = 100\ntokens_in = 100\ntokens_out = 20\n")
            .replace("jobs = 2000", &noisy);
        text = text[..text.find("[[strategy]]").unwrap()].to_string();
        text += &format!("\n[clients]\n{}\n", normal.replace(", ", "\n"));
        if let Some((r, burst)) = rpm {
            text += &format!("\n[provider]\nrpm = {r}\nburst = {burst}\ninput_tpm = 1e9\nreject_ms = {reject_ms}\n");
        }
        text += &format!("\n[[strategy]]\nname = \"s\"\nqueue = \"{queue}\"\n");
        if let Some(l) = limit {
            text += &format!("limit = {l}\n");
            if fixed {
                text += "retry_after = { fixed_s = 1 }\n";
            }
        }
        if let Some(r) = rate {
            text = text.replace("rate_per_s = 2.0", &format!("rate_per_s = 2.0\nrate_limit = {{ per_s = {} }}", f64::from(r) / 4.0));
        }
        if let Some((jobs, refill)) = budget {
            text = text.replace("rate_per_s = 2.0", &format!("rate_per_s = 2.0\nbudget = {{ tokens = {}, per_s = {} }}", jobs * 120, refill * 60));
        }
        text
    }
}

/// How many of the property test's cases met each refusal layer, outcome
/// and client policy: a policy counts where its class's clients had
/// something to act on (a refusal or a timeout).
#[derive(Debug, Default)]
struct Seen(std::collections::BTreeMap<String, u32>);

impl Seen {
    fn note(&mut self, s: &Scenario, runs: &[common::Tally]) {
        let mut met = std::collections::BTreeSet::new();
        for t in runs {
            for (layer, n) in ["limit", "rate", "budget", "provider"]
                .iter()
                .zip(t.refused)
            {
                if n > 0 {
                    met.insert(format!("refused by {layer}"));
                }
            }
            for (outcome, n) in [
                ("given up", t.given_up),
                ("rejected", t.rejected),
                ("timed out", t.timed_out),
            ] {
                if n > 0 {
                    met.insert(format!("outcome {outcome}"));
                }
            }
        }
        let strategy = &s.strategy[0];
        let (classes, _) = common::tally(
            s,
            strategy,
            &lab::Model::new(s, strategy, s.seed).run().jobs,
        );
        let clients = lab::limits::class_clients(s, strategy);
        for ((_, t), c) in classes.iter().zip(clients) {
            if t.completed == t.unique_jobs && t.attempts == t.unique_jobs {
                continue; // nothing to act on
            }
            met.insert(format!("retry {:?}", c.retry));
            if c.retry == Retry::Backoff {
                met.insert(format!("jitter {:?}", c.jitter));
            }
            if c.timeout_s.is_some() {
                met.insert(format!("on timeout {:?}", c.on_timeout));
            }
            if c.retry != Retry::None {
                met.insert(format!(
                    "honour retry-after {}",
                    c.honour_retry_after.unwrap_or(true)
                ));
                if c.retry_budget.is_some() {
                    met.insert("retry budget".to_string());
                }
            }
        }
        for m in met {
            *self.0.entry(m).or_default() += 1;
        }
    }
}

/// Cases of the property test below: enough that every refusal layer,
/// outcome and client policy is met several times (the test says how often).
const CASES: u32 = 64;

/// Whatever the clients and limits, nothing is lost and every figure is the
/// records' count (above), on random labs drawn from a fixed seed, so the
/// cases are the same on every machine; and those cases meet every refusal
/// layer, every outcome and every client policy.
#[test]
fn nothing_is_lost_under_any_retry_policy() {
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let config = ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let seen = std::cell::RefCell::new(Seen::default());
    let result = runner.run(&random_lab(), |text| {
        let s = Scenario::parse(Path::new("random.toml"), &text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let runs = check_nothing_lost(&s);
        seen.borrow_mut().note(&s, &runs);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let seen = seen.into_inner().0;
    eprintln!("{CASES} cases met: {seen:#?}");
    let mut want: Vec<String> = ["limit", "rate", "budget", "provider"]
        .iter()
        .map(|l| format!("refused by {l}"))
        .collect();
    want.extend(["given up", "rejected", "timed out"].map(|o| format!("outcome {o}")));
    want.extend(["None", "After", "Backoff"].map(|r| format!("retry {r}")));
    want.extend(["None", "Full", "Equal", "Decorrelated"].map(|j| format!("jitter {j}")));
    want.extend(["Cancel", "Waste"].map(|o| format!("on timeout {o}")));
    want.extend(["true", "false"].map(|h| format!("honour retry-after {h}")));
    want.push("retry budget".to_string());
    for w in want {
        let n = seen.get(&w).copied().unwrap_or(0);
        assert!(n >= 2, "only {n} of {CASES} cases met {w:?}: {seen:#?}");
    }
}

/// The case the oracle found: a client that timed out (`waste`) and sent
/// its job again, whose abandoned attempt the provider later refuses at its
/// start. The client is no longer waiting for it, so that refusal sends
/// nothing; it used to send a second retry, numbered as the first.
#[test]
fn a_timed_out_call_the_provider_refuses_later_is_not_sent_again() {
    let text = ARTICLE
        .replace("jobs = 2000", "jobs = 300\nclients = { retry = \"after\", max_attempts = 3, base_ms = 50, honour_retry_after = false, timeout_s = 0.8, on_timeout = \"waste\" }")
        .replacen("[[strategy]]", "[provider]\nrpm = 1599\nburst = 235\nreject_ms = 12\n\n[[strategy]]", 1);
    let s = parse(&text).unwrap();
    let tallies = check_nothing_lost(&s);
    assert!(
        tallies.iter().all(|t| t.refused[3] > 0 && t.given_up > 0),
        "{tallies:?}"
    );
}

#[test]
fn the_lab_scenarios_lose_nothing() {
    for name in ["provider", "layers", "retry-storm"] {
        check_nothing_lost(&load(name));
    }
}

#[test]
fn an_honoured_retry_after_is_never_cut_short() {
    // Queue limit 50 with a fixed retry-after of 1 s; the clients' own
    // backoff (10 ms doubling) is shorter, so the retry-after sets the delay.
    let text = ARTICLE.replace("jobs = 2000", "jobs = 2000\nclients = { retry = \"backoff\", jitter = \"full\", base_ms = 10, max_attempts = 6 }")
        .replace("limit = 100", "limit = 50\nretry_after = { fixed_s = 1 }");
    let s = Scenario::parse(Path::new("x.toml"), &text).unwrap();
    let def = strategy(&s, "Fair queue, queue limit 100");
    let jobs = lab::Model::new(&s, def, s.seed).run().jobs;
    assert!(common::refused_at(&jobs, Refusal::Limit) > 1_000);
    // Each retry's previous attempt: the latest of the same job before it.
    let mut prev: Vec<Option<usize>> = vec![None; jobs.len()];
    let mut last_of: std::collections::HashMap<u32, usize> = Default::default();
    for (i, j) in jobs.iter().enumerate() {
        if j.attempt > 1 {
            prev[i] = last_of.get(&j.origin).copied();
        }
        last_of.insert(j.origin, i);
    }
    let mut retries = 0;
    for (i, j) in jobs.iter().enumerate().filter(|(_, j)| j.attempt > 1) {
        let p = &jobs[prev[i].expect("a retry follows an attempt")];
        assert_eq!(p.fate, Fate::Refused(Refusal::Limit));
        assert!(
            j.enqueued >= p.enqueued + 1_000_000_000,
            "a retry {} ns after its refusal",
            j.enqueued - p.enqueued
        );
        retries += 1;
    }
    assert!(retries > 1_000, "{retries} retries");
}

#[test]
fn retrying_clients_change_nothing_where_nothing_is_refused() {
    // The post's lab with clients that retry: the strategies without a
    // queue limit refuse nothing, so every figure of theirs is as before
    // (the run takes the clients' path, with its own job ids, all the same).
    let plain = lab::virtual_lab(parse(ARTICLE).unwrap());
    let retrying = lab::virtual_lab(
        parse(&format!(
            "{ARTICLE}\n[clients]\nretry = \"after\"\ntimeout_s = 3600\n"
        ))
        .unwrap(),
    );
    for (a, b) in plain.strategies.iter().zip(&retrying.strategies).take(4) {
        assert_eq!(a.median, b.median, "{}", a.name);
        assert_eq!(a.runs, b.runs, "{}", a.name);
    }
    // The limit's refusals come back: more attempts than jobs.
    let limited = &retrying.strategies[4].median.delivery;
    assert!(limited.attempts > limited.unique_jobs, "{limited:?}");
}

#[test]
fn the_retry_storm_is_metastable_without_jitter_and_recovers_with_a_retry_budget() {
    let s = load("retry-storm");
    let r = lab::virtual_lab(s.clone());
    let by = |name: &str| r.strategy(name).unwrap();
    let burst_s = s.burst[0].over_s.unwrap();
    let after_burst = s.traffic_s - s.burst[0].at_s - burst_s;
    assert!(after_burst >= 10.0 * burst_s);
    // Timeouts shorter than the burst's queue wait, retries with no jitter,
    // work nobody reads: the neighbours never recover within the run, at
    // least 10 x the burst's length after it ends, in every run.
    for name in [
        "Retry after 1 s, no jitter",
        "Backoff, no jitter",
        "Backoff, full jitter",
    ] {
        let st = by(name);
        for run in &st.runs {
            assert_eq!(run.figures.delivery.recovery_s, None, "{name}");
            assert!(run.figures.delivery.amplification > 3.0, "{name}");
        }
    }
    // A retry budget, or clients that cancel: every run recovers, as the
    // clients that never retry do.
    for name in [
        "Send once, wait",
        "Full jitter, retry budget 10 %, drain retry-after",
        "Retry after 1 s, no jitter, cancel",
    ] {
        for run in &by(name).runs {
            assert!(run.figures.delivery.recovery_s.is_some(), "{name}");
        }
    }
}

#[test]
fn bad_limits_get_one_line_naming_the_key() {
    let base = ARTICLE
        .replace("[[strategy]]", "PLACE\n[[strategy]]")
        .replacen("PLACE\n", "", 4);
    let with = |extra: &str| base.replacen("PLACE", extra, 1);
    let cases = [
        (
            with("[provider]\nreject_ms = 5"),
            "provider: sets no limit: give rpm, input_tpm or output_tpm (per minute)",
        ),
        (
            with("[provider]\nrpm = 0"),
            "provider.rpm: must be more than 0 a minute, found 0",
        ),
        (
            with("[provider]\ninput_tpm = 100\nburst = 5"),
            "provider.burst: is the request bucket's size, so it needs rpm",
        ),
        (
            with(
                "[provider]\nrpm = 10\n[[provider.workspace]]\nname = \"w\"\ngroups = [\"nobody\"]\nrpm = 5",
            ),
            "provider.workspace[0].groups: no class \"nobody\"; classes: \"normal\", \"noisy\"",
        ),
        (
            with("[clients]\njitter = \"full\""),
            "clients.jitter: applies to retry = \"backoff\" only",
        ),
        (
            with("[clients]\nmax_attempts = 3"),
            "clients.max_attempts: applies to retrying clients only (set retry = \"after\" or \"backoff\")",
        ),
        (
            with("[clients]\nretry = \"backoff\"\nbase_ms = 500\ncap_ms = 100"),
            "clients.cap_ms: must be at least base_ms (500 ms), found 100",
        ),
        (
            with("[clients]\nretry = \"sometimes\""),
            "clients.retry: unknown value `sometimes`; allowed: `none`, `after`, `backoff`",
        ),
        (
            ARTICLE.replace(
                "rate_per_s = 2.0",
                "rate_per_s = 2.0\nrate_limit = { per_s = 0 }",
            ),
            "normal.rate_limit.per_s: must be a rate above 0 requests a second, found 0",
        ),
        (
            ARTICLE.replace("jobs = 2000", "jobs = 2000\nbudget = { tokens = -1 }"),
            "burst[0].budget.tokens: must be more than 0 tokens, found -1",
        ),
        (
            ARTICLE.replacen(
                "queue = \"fifo\"",
                "queue = \"fifo\"\nretry_after = { fixed_s = 1 }",
                1,
            ),
            "strategy[0].retry_after: is what a queue limit's refusal says, so it needs a limit (set limit = N)",
        ),
    ];
    for (text, want) in cases {
        let err = parse(&text).expect_err(want);
        assert!(
            err.ends_with(want) || err.contains(want),
            "got {err:?}, want {want:?}"
        );
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
}

#[test]
fn a_run_with_retrying_clients_repeats_exactly_for_its_seed() {
    // Jitter is drawn from the run's seed: the same seed, the same attempts.
    let s = load("jitter");
    let a = lab::virtual_lab(s.clone());
    let b = lab::virtual_lab(s);
    assert_eq!(a.strategies, b.strategies);
    let full = &a.strategies[1];
    assert_ne!(
        full.runs[0].figures.delivery, full.runs[1].figures.delivery,
        "another seed, other draws"
    );
}
