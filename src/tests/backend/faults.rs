//! Leases and faults on Redis (the lab-level checks are shared with the
//! PostgreSQL tests, `smoke_lab_on`). The functions: a job whose lease runs out
//! goes back to its tenant's queue (by its number) with its cap slot freed (and
//! vtc's charge refunded), the late holder's finish is refused, and a reap
//! with every worker gone wakes an idle one. The lab: a worker process
//! killed and another stopped past its lease during the smoke lab's burst,
//! under fifo, a capped fair queue and a capped vtc: nothing lost, every
//! cap kept by the server's stamps, the stopped worker's jobs counted as
//! ran twice and their finishes refused; every worker's connection dropped
//! twice: they connect again and nothing is lost; the server killed and
//! started again from its append-only file, twice: nothing lost; without
//! the file, every job lost and the run failed naming the promise. One
//! fencing rule: a finish after its lease's instant is refused with no
//! call between. Jobs several leases long renew them as the model counts
//! and run once; a slow link slows only the jobs inside its window, as
//! many as the model says.

use std::path::Path;
use std::time::Duration;

use noisylab::backend::{ServerPlan, Target};
use noisylab::engine::{Fate, JobRecord};
use noisylab::results::FaultFigures;
use noisylab::scenario::{Scenario, Strategy as Def};

use super::{checked_run, functions, one_at_a_time, redis_plan, server};

/// `FCALL name 0 args…` on `con`.
pub(super) fn fcall<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    name: &str,
    args: &[&str],
) -> T {
    let mut c = redis::cmd("FCALL");
    c.arg(name).arg(0);
    for a in args {
        c.arg(*a);
    }
    c.query(con).unwrap()
}

pub(super) fn log(con: &mut redis::Connection, p: &str) -> Vec<String> {
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{p}log"))
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap();
    // "kind job sec usec [woke]" without the instants.
    lines
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            format!("{} {}", w[0], w[1])
        })
        .collect()
}

#[test]
fn a_lease_that_runs_out_hands_the_job_back_and_fences_the_late_finish() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let mut con = functions(&server.url);
    for queue in ["fifo", "fair", "vtc"] {
        let p = format!("lease:{queue}:");
        // Tenant 1, a cap of 1, a lease of 50 ms; two jobs.
        let _: i64 = fcall(&mut con, "noisylab_setup", &[&p, queue, "1", "-1", "-1"]);
        let _: i64 = fcall(&mut con, "noisylab_set", &[&p, "lease", "50000"]);
        let _: (i64, i64) = fcall(&mut con, "noisylab_submit", &[&p, "0", "1", "1"]);
        let _: (i64, i64) = fcall(&mut con, "noisylab_submit", &[&p, "1", "1", "1"]);
        let _: i64 = fcall(&mut con, "noisylab_expect", &[&p, "2"]);
        let first: String = fcall(&mut con, "noisylab_take", &[&p, "0"]);
        assert!(first.starts_with("0 1 "), "{queue}: {first}");
        let idle: Option<String> = fcall(&mut con, "noisylab_take", &[&p, "0"]);
        assert_eq!(idle, None, "{queue}: tenant 1 is at its cap of 1");
        // The holder goes quiet past its lease; nobody calls but the reap,
        // which hands the job back and wakes the idle worker.
        std::thread::sleep(Duration::from_millis(120));
        let reaped: i64 = fcall(&mut con, "noisylab_reap", &[&p]);
        assert_eq!(reaped, 1, "{queue}");
        let woken: i64 = redis::cmd("LLEN")
            .arg(format!("{p}wake"))
            .query(&mut con)
            .unwrap();
        assert_eq!(woken, 1, "{queue}: the idle worker is woken for it");
        // The job starts again, first of its tenant's, under a new lease:
        // its cap slot was freed.
        let again: String = fcall(&mut con, "noisylab_take", &[&p, "1"]);
        assert!(
            again.starts_with("0 1 ") && again != first,
            "{queue}: {again}"
        );
        // The first holder wakes up and finishes: refused, and handed
        // nothing (the tenant is at its cap with the job's new holder).
        let old_lease = first.rsplit(' ').next().unwrap();
        let late: Option<String> = fcall(&mut con, "noisylab_finish", &[&p, "0", "1", old_lease]);
        assert_eq!(late, None, "{queue}");
        // A renewal of the lost lease fails; the new one's succeeds.
        let new_lease = again.rsplit(' ').next().unwrap();
        let lost: i64 = fcall(&mut con, "noisylab_renew", &[&p, "0", "1", old_lease]);
        let held: i64 = fcall(&mut con, "noisylab_renew", &[&p, "0", "1", new_lease]);
        assert_eq!((lost, held), (0, 1), "{queue}");
        let next: String = fcall(&mut con, "noisylab_finish", &[&p, "0", "1", new_lease]);
        assert!(next.starts_with("1 1 "), "{queue}: {next}");
        // The same finish sent again (its reply lost with a dropped
        // connection): known by its lease, neither refused nor counted.
        let again: Option<String> = fcall(&mut con, "noisylab_finish", &[&p, "0", "1", new_lease]);
        assert_eq!(again, None, "{queue}: tenant 1 at its cap with job 1");
        let lease = next.rsplit(' ').next().unwrap().to_string();
        let none: Option<String> = fcall(&mut con, "noisylab_finish", &[&p, "1", "1", &lease]);
        assert_eq!(none, None);
        assert_eq!(
            log(&mut con, &p),
            [
                "e 0", "e 1", "s 0", "l 0", "s 0", "x 0", "f 0", "s 1", "f 1"
            ],
            "{queue}"
        );
        let get = |con: &mut redis::Connection, k: &str, f: &str| -> Option<String> {
            redis::cmd("HGET")
                .arg(format!("{p}{k}"))
                .arg(f)
                .query(con)
                .unwrap()
        };
        let done: i64 = redis::cmd("GET")
            .arg(format!("{p}done"))
            .query(&mut con)
            .unwrap();
        assert_eq!(done, 2, "{queue}: the refused finish does not count");
        // No cap slot leaked.
        assert_eq!(get(&mut con, "run", "1"), Some("0".into()), "{queue}");
        if queue == "vtc" {
            // Charged for two jobs, not three: the lost start was refunded.
            assert_eq!(get(&mut con, "ctr", "1"), Some("2".into()));
        }
    }
}

#[test]
fn a_finish_after_its_lease_s_instant_is_refused_with_no_call_between() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let mut con = functions(&server.url);
    for queue in ["fifo", "fair", "vtc"] {
        let p = format!("fence:{queue}:");
        // One job of tenant 1, a cap of 1, a lease of 30 ms.
        let _: i64 = fcall(&mut con, "noisylab_setup", &[&p, queue, "1", "-1", "-1"]);
        let _: i64 = fcall(&mut con, "noisylab_set", &[&p, "lease", "30000"]);
        let _: (i64, i64) = fcall(&mut con, "noisylab_submit", &[&p, "0", "1", "1"]);
        let _: i64 = fcall(&mut con, "noisylab_expect", &[&p, "1"]);
        let first: String = fcall(&mut con, "noisylab_take", &[&p, "0"]);
        // Quiet past the lease's instant: no call reaps it. Then the
        // holder's finish: refused, the job back in its queue and handed
        // out again (here to the same worker, the only one asking), under
        // a new lease.
        std::thread::sleep(Duration::from_millis(80));
        let old_lease = first.rsplit(' ').next().unwrap().to_string();
        let again: String = fcall(&mut con, "noisylab_finish", &[&p, "0", "1", &old_lease]);
        let new_lease = again.rsplit(' ').next().unwrap().to_string();
        assert!(
            again.starts_with("0 1 ") && new_lease != old_lease,
            "{queue}: {again}"
        );
        let none: Option<String> = fcall(&mut con, "noisylab_finish", &[&p, "0", "1", &new_lease]);
        assert_eq!(none, None, "{queue}");
        assert_eq!(
            log(&mut con, &p),
            ["e 0", "s 0", "l 0", "x 0", "s 0", "f 0"],
            "{queue}: the late finish refused and logged, the job run again"
        );
        let done: i64 = redis::cmd("GET")
            .arg(format!("{p}done"))
            .query(&mut con)
            .unwrap();
        assert_eq!(done, 1, "{queue}: only the new holder's finish counts");
    }
}

/// The smoke lab (4 workers in 2 processes, 20 ms jobs: a 60 ms lease)
/// with a capped vtc too and `faults` (TOML) added, on the server `plan`
/// names: every strategy's run loses nothing and keeps every cap by the
/// server's stamps; each run's fault figures, by strategy.
pub(super) fn smoke_lab_on(faults: &str, plan: ServerPlan) -> Vec<(String, FaultFigures)> {
    smoke_lab_records(faults, plan)
        .1
        .into_iter()
        .map(|(def, f, _)| (def.name, f))
        .collect()
}

/// The same, with the scenario and each run's records; `faults` may
/// begin with top-level keys (`lease_s`) before its tables.
pub(super) fn smoke_lab_records(
    faults: &str,
    plan: ServerPlan,
) -> (Scenario, Vec<(Def, FaultFigures, Vec<JobRecord>)>) {
    let (keys, tables) = faults.split_at(faults.find("[[").unwrap_or(faults.len()));
    let text = keys.to_string()
        + &std::fs::read_to_string("lab/smoke.toml").unwrap()
        + "\n[[strategy]]\nname = \"vtc, cap 2\"\nqueue = \"vtc\"\ncap = 2\n"
        + tables;
    let s = Scenario::parse(Path::new("faults.toml"), &text).unwrap();
    let mut backend = plan.open(&s).unwrap();
    let mut out = Vec::new();
    for def in &s.strategy {
        let (record, tally) = checked_run(backend.as_mut(), &s, def);
        assert_eq!(
            tally.completed + tally.rejected,
            tally.unique_jobs,
            "{}",
            def.name
        );
        let f = record.faults.expect("a lease on the server");
        // The scenario's, or three times the plan's p99 job of 20 ms.
        assert_eq!(f.lease_ms, s.lease_s.map_or(60.0, |l| l * 1e3));
        // Every job run twice (a finish refused, then its end) was handed
        // back first: the server's "lease ran out" beside its refusal.
        for j in &record.ran_twice {
            assert!(
                record.redelivered.contains(j),
                "{}: job {j} ran twice and was never handed back: {f:?}",
                def.name
            );
        }
        // The neighbours' waits across each fault, in time order, from the
        // server's stamps (the lab adds them to the run's figures).
        let recovery = noisylab::lab::recovery::across_faults(&s, &s.population(), &record.jobs);
        let at: Vec<f64> = recovery.iter().map(|r| r.at_s).collect();
        let mut want: Vec<f64> = s.fault.iter().map(|f| f.at_s).collect();
        want.sort_by(f64::total_cmp);
        assert_eq!(at, want, "{f:?}");
        out.push((def.clone(), f, record.jobs));
    }
    (s, out)
}

#[test]
fn a_worker_killed_and_one_stopped_past_its_lease_lose_nothing() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    // The burst of 40 at 0.1 s keeps every worker busy until about 0.3 s:
    // process 1 killed at 0.12 s (replaced at once), process 2 stopped
    // from 0.15 s for 0.2 s, past its lease.
    kill_and_pause_lose_nothing(redis_plan(Target::Own, Some(2)));
}

/// Process 1 killed at 0.12 s (replaced at once), process 2 stopped from
/// 0.15 s for 0.2 s, past its lease, on the server `plan` names.
pub(super) fn kill_and_pause_lose_nothing(plan: ServerPlan) {
    let runs = smoke_lab_on(
        "\n[[fault]]\nat_s = 0.12\nkind = \"kill_worker\"\ntarget = 1\n\
         \n[[fault]]\nat_s = 0.15\nkind = \"pause_worker\"\nduration_s = 0.2\ntarget = 2\n",
        plan,
    );
    let mut ran_twice = 0;
    for (name, f) in runs {
        // The killed process held jobs in the burst: they came back. (The
        // exact counts are the model's, tested on the virtual clock in
        // src/tests/faults.rs: with the smoke lab's 60 ms lease a loaded
        // machine lets a lease run out on a worker no fault struck too.)
        assert!(f.redelivered >= 1, "{name}: {f:?}");
        ran_twice += f.ran_twice;
    }
    assert!(ran_twice >= 1, "a stopped worker's job ran twice");
}

#[test]
fn the_workers_connections_dropped_twice_lose_nothing() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    drops_lose_nothing(redis_plan(Target::Own, Some(2)), true);
}

/// The burst in full flight: every worker's connection dropped at 0.15 s
/// and again at 0.3 s, on the server `plan` names; they connect again and
/// go on. `within_lease`: every worker is back within its lease (else a
/// worker may lose the lease it held at a drop, and its finish come late).
pub(super) fn drops_lose_nothing(plan: ServerPlan, within_lease: bool) {
    let runs = smoke_lab_on(
        "\n[[fault]]\nat_s = 0.15\nkind = \"drop_connections\"\n\
         \n[[fault]]\nat_s = 0.3\nkind = \"drop_connections\"\n",
        plan,
    );
    for (name, f) in runs {
        // The server's own count of the connections it closed: the 4
        // workers' at each drop.
        assert_eq!(f.dropped_connections, 8, "{name}: {f:?}");
        if within_lease {
            // They were back within a lease: no finish came late.
            assert_eq!(
                (f.ran_twice, f.late_finishes_refused),
                (0, 0),
                "{name}: {f:?}"
            );
        }
        // Else a worker may lose the lease it held at a drop (the 60 ms
        // lease is tight: on a loaded machine a worker no fault struck may
        // lose one too, so no count of the drops' own bounds them); each
        // job run twice was handed back first (smoke_lab_records).
    }
}

#[test]
fn a_slow_link_holds_its_process_s_jobs_longer_and_loses_nothing() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    slow_link_loses_nothing(redis_plan(Target::Own, Some(2)), 100, 0.5);
}

/// Process 2's link `delay_ms` slower from 0.1 s for 0.3 s (the burst in
/// flight), under a lease of `lease_s`, on the server `plan` names: its
/// workers connect through a relay.
///
/// A job taken over the slow link reaches its worker half the delay after
/// its start stamp and its finish the server half the delay after its
/// end: held its duration plus the delay by the server's clock, where any
/// other job is held its duration plus the harness's own excess (a timer's
/// overshoot and two halves of a round trip: under 1 ms mostly, with
/// stalls of 15 to 26 ms measured on a 2-core VM, on both servers). So a
/// job counts as slowed when its hold exceeds its duration by half the
/// delay or more, and the delay is chosen well above the stalls (100 ms:
/// 50 ms), under a lease the slowed holds do not outlast. The model (the
/// same seeds on the virtual clock) says which jobs the link strikes.
/// Both ways: slowed jobs start only inside the window (plus one delay,
/// for a take sent just before it ended), so the link is well again once
/// it ends; and their count is the model's within a third of it, at least
/// 2 (on a server a queued job goes to whichever worker asks first, where
/// the model hands it to the slowed worker at its wake: measured, 4 to 6
/// on Redis and 3 to 6 on PostgreSQL against the model's 4).
pub(super) fn slow_link_loses_nothing(plan: ServerPlan, delay_ms: u64, lease_s: f64) {
    const MS: u64 = 1_000_000;
    let (delay, from, until) = (delay_ms * MS, 100 * MS, 400 * MS);
    let (s, runs) = smoke_lab_records(
        &format!(
            "lease_s = {lease_s}\n\n[[fault]]\nat_s = 0.1\nkind = \"slow_link\"\nduration_s = 0.3\n\
             delay_ms = {delay_ms}\ntarget = 2\n"
        ),
        plan,
    );
    let slowed = |jobs: &[JobRecord]| -> Vec<u64> {
        jobs.iter()
            .filter(|j| j.fate == Fate::Ran && j.finished - j.started >= j.duration + delay / 2)
            .map(|j| j.started)
            .collect()
    };
    for (def, _, jobs) in runs {
        let name = &def.name;
        let model = noisylab::lab::Model::new(&s, &def, s.seed).run().jobs;
        let (here, there) = (slowed(&jobs), slowed(&model));
        // The model's own arithmetic: held exactly 25 ms longer, inside
        // the window.
        assert!(!there.is_empty(), "{name}");
        for j in model.iter().filter(|j| j.fate == Fate::Ran) {
            let extra = j.finished - j.started - j.duration;
            assert!(extra == 0 || extra == delay, "{name}: model {j:?}");
        }
        for at in here.iter().chain(&there) {
            assert!(
                (from..until + delay).contains(at),
                "{name}: a job slowed at {at} ns, outside the link's window"
            );
        }
        // The longest hold: 20 ms and the link's delay.
        let held = jobs
            .iter()
            .map(|j| j.finished.saturating_sub(j.started))
            .max();
        assert!(
            held >= Some(20 * MS + delay),
            "{name}: longest hold {held:?} ns"
        );
        let tolerance = (there.len() / 3).max(2);
        assert!(
            here.len().abs_diff(there.len()) <= tolerance,
            "{name}: {} jobs slowed on the server, {} in the model (±{tolerance})",
            here.len(),
            there.len()
        );
        eprintln!(
            "{name}: slowed {} here, {} in the model",
            here.len(),
            there.len()
        );
    }
}

#[test]
fn the_server_killed_and_started_again_from_its_file_loses_nothing() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    restarts_lose_nothing(ServerPlan {
        // A server to restart keeps an append-only file.
        persist: true,
        ..redis_plan(Target::Own, Some(2))
    });
}

/// The burst in flight: the server `plan` starts is killed at 0.15 s and
/// started again 50 ms later (a lease is 60 ms), and killed at 0.4 s and
/// started again at once. Workers and the coordinator connect again.
pub(super) fn restarts_lose_nothing(plan: ServerPlan) {
    let runs = smoke_lab_on(
        "\n[[fault]]\nat_s = 0.15\nkind = \"restart_server\"\nduration_s = 0.05\n\
         \n[[fault]]\nat_s = 0.4\nkind = \"restart_server\"\n",
        plan,
    );
    for (name, f) in runs {
        // Every job the server had accepted was still there after each
        // restart, else the run would have failed (as it does in
        // restart_that_loses_fails_the_run); the restart took time.
        assert!(f.restart_ms > 0.0, "{name}: {f:?}");
        // A finish refused is of a job that another worker then ran to its
        // end.
        assert!(
            f.late_finishes_refused == 0 || f.ran_twice >= 1,
            "{name}: {f:?}"
        );
    }
}

#[test]
fn a_server_that_loses_jobs_across_its_restart_fails_the_run_naming_its_promise() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    // Without an append-only file the server comes back empty.
    restart_that_loses_fails_the_run(
        redis_plan(Target::Own, Some(2)),
        "redis-server",
        noisylab::backend::redis::server::NO_PROMISE,
    );
}

/// The smoke lab's first strategy on the server `plan` starts, restarted
/// at 0.15 s (the burst of 40 queued): the server keeps none of the jobs
/// it had accepted, and the run fails in one line that counts them and
/// names `promise`; no server process (`comm`) of the lab's is left.
pub(super) fn restart_that_loses_fails_the_run(plan: ServerPlan, comm: &str, promise: &str) {
    let me = std::process::id();
    let before = super::children_named(me, comm);
    let text = std::fs::read_to_string("lab/smoke.toml").unwrap()
        + "\n[[fault]]\nat_s = 0.15\nkind = \"restart_server\"\nduration_s = 0.05\n";
    let s = Scenario::parse(Path::new("lose.toml"), &text).unwrap();
    let mut backend = plan.open(&s).unwrap();
    let err = super::failed_run(backend.as_mut(), &s);
    drop(backend);
    // "N of the N jobs the server had accepted were lost across its
    // restart (promise)": every one, and at least the burst.
    let words: Vec<&str> = err.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "jobs")
        .unwrap_or_else(|| panic!("{err}"));
    let (lost, accepted): (u64, u64) = (
        words[at - 4].parse().unwrap_or_else(|_| panic!("{err}")),
        words[at - 1].parse().unwrap_or_else(|_| panic!("{err}")),
    );
    assert!(lost == accepted && accepted >= 40, "{err}");
    assert!(
        err.contains("were lost across its restart") && err.contains(promise),
        "{err}"
    );
    let left: Vec<u32> = super::children_named(me, comm)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(left.is_empty(), "{comm} left running: {left:?}");
}

#[test]
fn jobs_several_leases_long_renew_them_and_run_once() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate);
    long_jobs_renew_their_leases(redis_plan(Target::Own, Some(2)));
}

/// Jobs of 350 ms under a 150 ms lease, no fault, on the server `plan`
/// names: every job starts once, none is handed back, no finish is
/// refused, and the server counts the renewals the model's arithmetic
/// gives (six a job: at 50, 100, …, 300 ms, while more than 75 ms is left;
/// each instant 25 ms from a boundary of the count).
pub(super) fn long_jobs_renew_their_leases(plan: ServerPlan) {
    let text = "name = \"long\"\nruns = 1\nseed = 3\nworkers = 4\njob_ms = 350\n\
                traffic_s = 0.5\nlease_s = 0.15\n\n[normal]\ntenants = 4\nrate_per_s = 3.0\n\n\
                [[burst]]\ntenant = \"noisy\"\nat_s = 0.1\njobs = 6\n\n\
                [[strategy]]\nname = \"fifo\"\nqueue = \"fifo\"\n\n\
                [[strategy]]\nname = \"fair, cap 2\"\nqueue = \"fair\"\ncap = 2\n";
    let s = Scenario::parse(Path::new("long.toml"), text).unwrap();
    let mut backend = plan.open(&s).unwrap();
    for def in &s.strategy {
        let (record, tally) = checked_run(backend.as_mut(), &s, def);
        assert_eq!(tally.rejected, 0, "{}", def.name);
        let f = record.faults.expect("a lease on the server");
        assert_eq!(f.lease_ms, 150.0);
        let want: u64 = record
            .jobs
            .iter()
            .map(|j| noisylab::engine::faults::renewals(j.duration, 150_000_000))
            .sum();
        assert_eq!(want, 6 * record.jobs.len() as u64, "{}", def.name);
        assert!(record.jobs.len() >= 10, "{}", def.name);
        assert_eq!(
            (f.redelivered, f.late_finishes_refused, f.renewals),
            (0, 0, want),
            "{}: {f:?}",
            def.name
        );
        assert!(record.redelivered.is_empty() && record.ran_twice.is_empty());
    }
}
