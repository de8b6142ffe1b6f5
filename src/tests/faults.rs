//! Faults simulated on the virtual clock, the model a lab on a queue server
//! is validated against: the arithmetic of a pool that loses its workers,
//! and on random faults, leases and disciplines, nothing lost, each
//! tenant's jobs started in its order but for the redelivered ones, caps
//! held.

use std::path::Path;

use noisylab::engine::{Fate, JobRecord, NEVER, Nanos};
use noisylab::lab;
use noisylab::scenario::Scenario;
use proptest::prelude::*;

const MS: Nanos = 1_000_000;

/// 40 jobs of 100 ms at t = 0 on 4 workers in 2 processes (workers 0 and 1
/// are process 1's), leases of 0.3 s, one `[[fault]]` of `fault`'s keys.
fn burst_with(fault: &str) -> Scenario {
    let text = format!(
        "name = \"f\"\nruns = 1\nworkers = 4\njob_ms = 100\ntraffic_s = 1\nlease_s = 0.3\n\
         [backend]\nurl = \"redis\"\nprocesses = 2\n\
         [[burst]]\ntenant = \"noisy\"\nat_s = 0.0\njobs = 40\n\
         [[fault]]\n{fault}\n\
         [[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\n"
    );
    Scenario::parse(Path::new("f.toml"), &text).unwrap()
}

fn last_finish(jobs: &[JobRecord]) -> Nanos {
    jobs.iter().map(|j| j.finished).max().unwrap()
}

#[test]
fn a_killed_process_s_jobs_start_again_when_their_lease_runs_out() {
    let s = burst_with("at_s = 0.05\nkind = \"kill_worker\"\nduration_s = 1.0\ntarget = 1");
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    let tally = stats.faults.expect("faults simulated");
    // Jobs 0 and 1 were on the killed workers: back at 0.3 s, when their
    // leases ran out; the other two workers had taken jobs 8 and 9 at that
    // instant, so 0 and 1 (first again: fifo serves them by their arrival)
    // start at 0.4 s.
    assert_eq!(tally.redelivered, [0, 1]);
    assert!(tally.refused.is_empty(), "a dead worker finishes nothing");
    assert_eq!((jobs[0].started, jobs[1].started), (400 * MS, 400 * MS));
    // Two workers for 10 rounds (1.0 s), the replacements from 1.05 s: the
    // last 18 jobs in rounds of 100 ms staggered by 50 ms, the last done at
    // 1.55 s.
    assert_eq!(last_finish(&jobs), 1_550 * MS);
    assert!(jobs.iter().all(|j| j.fate == Fate::Ran));
    assert_eq!(tally.injected, 1);
}

#[test]
fn a_pause_past_the_lease_runs_the_job_twice_and_refuses_the_late_finish() {
    let s = burst_with("at_s = 0.05\nkind = \"pause_worker\"\nduration_s = 1.0\ntarget = 1");
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    let tally = stats.faults.expect("faults simulated");
    // The same timeline as a kill, but the stopped workers wake at 1.05 s,
    // report jobs 0 and 1 (refused: their leases ran out at 0.3 s) and take
    // work again.
    assert_eq!(tally.redelivered, [0, 1]);
    assert_eq!(tally.refused, [0, 1]);
    assert_eq!((jobs[0].finished, jobs[1].finished), (500 * MS, 500 * MS));
    assert_eq!(last_finish(&jobs), 1_550 * MS);
}

#[test]
fn a_pause_inside_the_lease_only_delays_the_finish() {
    let s = burst_with("at_s = 0.05\nkind = \"pause_worker\"\nduration_s = 0.2\ntarget = 1");
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    let tally = stats.faults.expect("faults simulated");
    assert!(tally.redelivered.is_empty() && tally.refused.is_empty());
    // Reported at 0.25 s, inside the 0.3 s lease.
    assert_eq!((jobs[0].finished, jobs[1].finished), (250 * MS, 250 * MS));
    assert_eq!(jobs[0].finished - jobs[0].started, 250 * MS);
}

#[test]
fn a_restart_holds_every_report_until_the_workers_connect_again() {
    let s = burst_with("at_s = 0.05\nkind = \"restart_server\"\nduration_s = 0.1");
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    let tally = stats.faults.expect("faults simulated");
    // The first round's reports fail at 0.1 s; the server is back at
    // 0.15 s; the workers try at 1, 3, 7, 15, 31 and 63 ms after 0.1 s:
    // through at 0.163 s. Nine more rounds: the last done at 1.063 s.
    assert_eq!(jobs[0].finished, 163 * MS);
    assert_eq!(last_finish(&jobs), 1_063 * MS);
    assert_eq!((tally.dropped, tally.restart_ns), (0, 100 * MS));
    assert!(tally.redelivered.is_empty());
}

#[test]
fn dropped_connections_cost_each_worker_one_backoff_step() {
    let s = burst_with("at_s = 0.05\nkind = \"drop_connections\"");
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    assert_eq!(jobs[0].finished, 101 * MS);
    assert_eq!(last_finish(&jobs), 1_001 * MS);
    assert_eq!(stats.faults.expect("faults simulated").dropped, 4);
}

#[test]
fn a_slow_link_slows_its_process_s_rounds_by_the_delay() {
    let s =
        burst_with("at_s = 0.05\nkind = \"slow_link\"\nduration_s = 10\ndelay_ms = 20\ntarget = 1");
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    let tally = stats.faults.expect("faults simulated");
    assert_eq!(tally.injected, 1);
    assert!(tally.redelivered.is_empty() && tally.refused.is_empty());
    // Jobs 0–3 were taken before the link turned slow (at 0.05 s): done at
    // 0.1 s. From then, process 2's workers take a job every 100 ms
    // (0.1, 0.2, … s) and process 1's every 120 ms, taking on with their
    // own finish (0.1, 0.22, 0.34, … s): 36 jobs are taken by 1.0 s, the
    // last two on process 2's workers at 1.0 s, done at 1.1 s (without the
    // fault 1.0 s).
    let started = |id: usize| jobs[id].started;
    assert_eq!((started(4), started(5)), (100 * MS, 100 * MS));
    assert_eq!(last_finish(&jobs), 1_100 * MS);
    let slow_starts: Vec<Nanos> = jobs
        .iter()
        .filter(|j| j.finished - j.started == 120 * MS)
        .map(|j| j.started)
        .collect();
    // Two workers' rounds of 120 ms from 0.1 s, the last at 0.94 s.
    let want: Vec<Nanos> = (0..8).flat_map(|m| [100 * MS + m * 120 * MS; 2]).collect();
    let mut got = slow_starts.clone();
    got.sort_unstable();
    assert_eq!(got, want);
    // The link's 20 ms are the fault's, not the harness's: the run's job
    // overshoot (what `validate` draws a replay's holds from) leaves them
    // out, so on the virtual clock it stays 0.
    let results = lab::virtual_lab(s);
    let overshoot = &results.strategies[0].median.job_overshoot_ms;
    assert_eq!((overshoot.p99, overshoot.max), (0.0, 0.0));
}

#[test]
fn a_scenario_without_faults_simulates_none() {
    let mut s = burst_with("at_s = 0.05\nkind = \"drop_connections\"");
    s.fault.clear();
    let (jobs, stats) = {
        let record = lab::Model::new(&s, &s.strategy[0], 1).run();
        (record.jobs, record.stats)
    };
    assert!(stats.faults.is_none());
    assert_eq!(last_finish(&jobs), 1_000 * MS);
}

/// A slow link's delay in the random labs.
const SLOW_MS: u64 = 30;

/// A random lab: a few tenants, a burst, random leases and faults, one of
/// the disciplines with or without a cap.
fn faulty_lab() -> impl Strategy<Value = Scenario> {
    let fault = (
        0.0f64..1.5,
        prop_oneof![
            Just("kill_worker"),
            Just("pause_worker"),
            Just("drop_connections"),
            Just("restart_server"),
            Just("slow_link")
        ],
        0.01f64..0.8,
        1u32..=3,
    );
    (
        2u32..=8,
        1u32..=3,
        prop_oneof![Just("fifo"), Just("fair"), Just("vtc")],
        prop_oneof![Just(None), (1u32..=3).prop_map(Some)],
        0.05f64..0.5,
        prop::collection::vec(fault, 1..=4),
        1u32..=3,
        any::<bool>(),
    )
        .prop_map(
            |(workers, processes, queue, cap, lease, faults, tenants, long)| {
                let cap = cap.map_or(String::new(), |c| format!("cap = {c}\n"));
                let job = if long {
                    "job_ms = { dist = \"uniform\", min = 20, max = 400 }"
                } else {
                    "job_ms = 100"
                };
                let mut text = format!(
                    "name = \"p\"\nruns = 1\nworkers = {workers}\n{job}\ntraffic_s = 1.5\n\
                 lease_s = {lease:.3}\n[backend]\nurl = \"redis\"\nprocesses = {processes}\n\
                 [normal]\ntenants = {tenants}\nrate_per_s = 4.0\n\
                 [[burst]]\ntenant = \"noisy\"\nat_s = 0.2\njobs = 30\n"
                );
                // One fault at a time on a process (the scenario's rule).
                let mut down: Vec<(u32, f64, f64)> = Vec::new();
                for (at, kind, duration, target) in faults {
                    let target = target.min(processes);
                    let strikes = kind == "kill_worker" || kind == "pause_worker";
                    let (at, duration) = ((at * 1e3).round() / 1e3, (duration * 1e3).round() / 1e3);
                    if strikes
                        && down
                            .iter()
                            .any(|&(p, a, b)| p == target && at <= b && a <= at + duration)
                    {
                        continue;
                    }
                    if strikes {
                        down.push((target, at, at + duration));
                    }
                    text.push_str(&format!("[[fault]]\nat_s = {at:.3}\nkind = \"{kind}\"\n"));
                    if kind != "drop_connections" {
                        text.push_str(&format!("duration_s = {duration:.3}\n"));
                    }
                    if kind == "kill_worker" || kind == "pause_worker" || kind == "slow_link" {
                        text.push_str(&format!("target = {target}\n"));
                    }
                    if kind == "slow_link" {
                        text.push_str(&format!("delay_ms = {SLOW_MS}\n"));
                    }
                }
                text.push_str(&format!(
                    "[[strategy]]\nname = \"s\"\nqueue = \"{queue}\"\n{cap}"
                ));
                Scenario::parse(Path::new("p.toml"), &text).unwrap()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_faults_lose_nothing_keep_each_tenant_s_order_and_hold_the_caps(s in faulty_lab()) {
        let strategy = &s.strategy[0];
        let (jobs, stats) = {
            let record = lab::Model::new(&s, strategy, 7).run();
            (record.jobs, record.stats)
        };
        let tally = stats.faults.expect("faults simulated");
        // Nothing lost: every job ran to a finish, once (its record keeps
        // the start that finished it).
        for j in &jobs {
            prop_assert_eq!(j.fate, Fate::Ran, "{:?}", j);
            prop_assert!(j.enqueued <= j.started && j.started != NEVER);
            prop_assert!(j.finished >= j.started + j.duration, "a job holds its whole duration");
        }
        // A refused finish is a lease that ran out.
        prop_assert!(tally.refused.iter().all(|id| tally.redelivered.contains(id)));
        prop_assert!(tally.refused.len() <= tally.redelivered.len());
        // Each tenant's jobs start in its order, but for the redelivered
        // ones (started again later); with a slow link, within its delay
        // (the model hands a job to a slowed worker at the wake and starts
        // it a delay later, so a later job may start first on another).
        let slack = if s.fault.iter().any(|f| f.kind == noisylab::scenario::FaultKind::SlowLink) {
            SLOW_MS * MS
        } else {
            0
        };
        let mut last = std::collections::HashMap::new();
        for (i, j) in jobs.iter().enumerate() {
            if tally.redelivered.contains(&(i as u32)) {
                continue;
            }
            let prev = last.insert(j.tenant, j.started).unwrap_or(0);
            prop_assert!(j.started + slack >= prev, "tenant {}: job {} started before an earlier one", j.tenant, i);
        }
        // No tenant over its cap, by the starts that finished the jobs.
        if let Some(cap) = strategy.cap {
            let mut events: Vec<(Nanos, i32, u32)> = jobs
                .iter()
                .flat_map(|j| [(j.started, 1, j.tenant), (j.finished, -1, j.tenant)])
                .collect();
            events.sort_by_key(|&(t, d, _)| (t, d));
            let mut running = std::collections::HashMap::<u32, i32>::new();
            for (t, d, tenant) in events {
                let r = running.entry(tenant).or_default();
                *r += d;
                prop_assert!(*r <= cap as i32, "tenant {} ran {} jobs at {} ns, cap {}", tenant, r, t, cap);
            }
        }
        // Deterministic: the same seed, the same run.
        let again = lab::Model::new(&s, strategy, 7).run().jobs;
        prop_assert_eq!(again, jobs);
    }
}

#[test]
fn the_command_line_simulates_faults_on_the_virtual_clock_and_reports_them() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_noisylab"))
        .args([
            "run",
            "lab/faults.toml",
            "--clock",
            "virtual",
            "--runs",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Leases and faults"), "{stdout}");
    assert!(
        stdout.contains("simulated on the pool's workers"),
        "{stdout}"
    );
}

#[test]
fn the_neighbours_waits_across_each_fault_say_when_they_were_back() {
    let s = Scenario::load(Path::new("lab/faults.toml")).unwrap();
    let results = lab::virtual_lab(s);
    let across = |name: &str| {
        let s = results.strategies.iter().find(|s| s.name == name).unwrap();
        s.median.fault_figures().unwrap().recovery.clone()
    };
    // Behind FIFO's burst no neighbour's job starts from 2 s until the
    // burst is through: nothing before any fault to be back to.
    let fifo = across("Shared FIFO");
    assert_eq!(fifo.len(), 4);
    assert!(
        fifo.iter()
            .all(|f| f.before_ms.is_none() && f.recovered_s.is_none())
    );
    let capped = across("Fair queue with cap of 4");
    let kinds: Vec<&str> = capped.iter().map(|f| f.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "kill_worker",
            "pause_worker",
            "drop_connections",
            "restart_server"
        ]
    );
    // 40 neighbours' jobs a second: windows of 20 of them, 0.5 s.
    assert!(capped.iter().all(|f| f.window_ms == 500.0));
    // Under the cap a neighbour's job starts as it arrives (0 ms on the
    // virtual clock). The kill struck only the noisy tenant's jobs.
    assert_eq!(
        (
            capped[0].before_ms,
            capped[0].peak_ms,
            capped[0].recovered_s
        ),
        (Some(0.0), Some(0.0), Some(0.0))
    );
    // The stop at 6 s struck neighbours' jobs that had started at once:
    // each started again when its lease ran out, a wait of exactly the
    // lease (300 ms), ending between 6.2 and 6.25 s (they started between
    // 5.9 and 5.95 s). The last 0.5 s window holding one ends at 6.7 s
    // (steps of 50 ms); from 6.75 s the p95 is back under 2 × 0 (1 ms at
    // least): back 0.75 s after the fault.
    assert_eq!(
        (
            capped[1].before_ms,
            capped[1].peak_ms,
            capped[1].recovered_s
        ),
        (Some(0.0), Some(300.0), Some(0.75))
    );
}
