//! Retrying clients and clients that stop waiting, on Redis. The functions:
//! a client gives up on a job that has not started (one that has cannot be
//! given up); a cancelled job is dropped at its turn without a worker (its
//! cap slot given back, counted as ended), a wasted one still runs. The
//! lab: the smoke lab with a queue limit and retrying clients, clients
//! that time out and cancel, and clients that time out and resend while
//! their job still runs: every attempt ends once, each job's attempts are
//! numbered in order, every cap is kept by the server's stamps, and the
//! figures count what the records hold.

use std::path::Path;

use noisylab::backend::Target;
use noisylab::backend::clients::wire_id;
use noisylab::backend::redis as redis_backend;
use noisylab::engine::Fate;
use noisylab::scenario::Scenario;

use super::faults::{fcall, log};
use super::{checked_run, functions, one_at_a_time, redis_plan, server};

#[test]
fn a_client_gives_up_only_on_a_waiting_job_and_a_cancelled_one_is_dropped_at_its_turn() {
    let _turn = one_at_a_time();
    let Some(server) = server() else { return };
    let mut con = functions(&server.url);
    for queue in ["fifo", "fair", "vtc"] {
        let p = format!("clients:{queue}:");
        // Tenant 1 with a cap of 1; its clients may stop waiting.
        let _: i64 = fcall(&mut con, "noisylab_setup", &[&p, queue, "1", "-1", "-1"]);
        let _: i64 = fcall(&mut con, "noisylab_set", &[&p, "watch", "1"]);
        for job in ["0", "1", "2"] {
            let _: (i64, i64) = fcall(&mut con, "noisylab_submit", &[&p, job, "1", "1"]);
        }
        let _: i64 = fcall(&mut con, "noisylab_expect", &[&p, "3"]);
        let first: String = fcall(&mut con, "noisylab_take", &[&p, "0"]);
        assert!(first.starts_with("0 1 "), "{queue}: {first}");
        // Job 0 has started: too late to give up on. Job 1's client
        // cancels it, job 2's leaves it to run; neither can be given up
        // twice.
        let gave_up = |con: &mut redis::Connection, job: &str, cancel: &str| -> i64 {
            fcall(con, "noisylab_abandon", &[&p, job, cancel])
        };
        assert_eq!(gave_up(&mut con, "0", "1"), 0, "{queue}");
        assert_eq!(gave_up(&mut con, "1", "1"), 1, "{queue}");
        assert_eq!(gave_up(&mut con, "2", "0"), 1, "{queue}");
        assert_eq!(gave_up(&mut con, "1", "1"), 0, "{queue}");
        assert_eq!(gave_up(&mut con, "2", "1"), 0, "{queue}");
        // Job 0's finish hands out the next job: job 1 is dropped at its
        // turn (its cap slot given back at once), job 2 runs.
        let next: String = fcall(&mut con, "noisylab_finish", &[&p, "0", "1", "0"]);
        assert!(next.starts_with("2 1 "), "{queue}: {next}");
        let none: Option<String> = fcall(&mut con, "noisylab_finish", &[&p, "2", "1", "0"]);
        assert_eq!(none, None, "{queue}");
        assert_eq!(
            log(&mut con, &p),
            [
                "e 0", "e 1", "e 2", "s 0", "a 1", "a 2", "f 0", "s 2", "f 2"
            ],
            "{queue}"
        );
        let get = |con: &mut redis::Connection, cmd: &str, key: &str, f: Option<&str>| {
            let mut c = redis::cmd(cmd);
            c.arg(format!("{p}{key}"));
            if let Some(f) = f {
                c.arg(f);
            }
            c.query::<Option<String>>(con).unwrap()
        };
        // Three jobs ended (the dropped one too): the run's end is signalled.
        assert_eq!(get(&mut con, "GET", "done", None), Some("3".into()));
        assert_eq!(get(&mut con, "LPOP", "end", None), Some("1".into()));
        assert_eq!(get(&mut con, "HGET", "run", Some("1")), Some("0".into()));
        assert_eq!(get(&mut con, "GET", "queued", None), Some("0".into()));
        if queue == "vtc" {
            // The dropped job's turn was used, as the in-process vtc
            // charges a job its client left when its turn comes.
            assert_eq!(get(&mut con, "HGET", "ctr", Some("1")), Some("3".into()));
        }
    }
}

#[test]
fn every_attempt_is_numbered_above_the_ones_sent_before_it() {
    // 10 planned jobs; sent in this order: job 0, 1, 2, a retry of 1,
    // job 3, a retry of 0, a retry of 3, job 4 … (k: retries sent so far).
    let sends = [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 3),
        (2, 0),
        (3, 3),
        (3, 4),
    ];
    let ids: Vec<u32> = sends
        .iter()
        .map(|&(k, j)| wire_id(k, j, 10).unwrap())
        .collect();
    assert_eq!(ids, [0, 1, 2, 11, 13, 20, 33, 34]);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    // Each holds its planned job's duration: durations[id % n].
    let held: Vec<u32> = ids.iter().map(|id| id % 10).collect();
    assert_eq!(held, sends.map(|(_, j)| j));
    assert_eq!(wire_id(1, 0, u32::MAX), Some(u32::MAX));
    assert_eq!(wire_id(2, 0, u32::MAX), None);
}

/// The smoke lab's strategies replaced by three with clients: a limited
/// fifo whose clients back off with full jitter, a capped fair queue whose
/// clients time out and cancel, and a limited vtc with a fixed retry-after
/// whose clients time out and resend while the job still runs.
const CLIENTS: &str = r#"
[[strategy]]
name = "FIFO, limit 5, backoff"
queue = "fifo"
limit = 5
clients = { retry = "backoff", jitter = "full", base_ms = 20, cap_ms = 200, max_attempts = 4, honour_retry_after = false }

[[strategy]]
name = "Fair, cap 2, time out and cancel"
queue = "fair"
cap = 2
clients = { retry = "after", base_ms = 30, max_attempts = 3, timeout_s = 0.06, on_timeout = "cancel" }

[[strategy]]
name = "VTC, limit 8, time out and waste"
queue = "vtc"
limit = 8
retry_after = { fixed_s = 0.05 }
clients = { retry = "backoff", base_ms = 20, max_attempts = 3, timeout_s = 0.04, on_timeout = "waste" }
"#;

#[test]
fn retrying_clients_on_redis_send_every_attempt_once_and_keep_every_cap() {
    let _turn = one_at_a_time();
    let Some(_gate) = server() else { return };
    drop(_gate); // only the check; the backend starts its own
    let smoke = std::fs::read_to_string("lab/smoke.toml").unwrap();
    let text = smoke[..smoke.find("[[strategy]]").unwrap()].to_string() + CLIENTS;
    let s = Scenario::parse(Path::new("clients.toml"), &text).unwrap();
    let mut backend =
        redis_backend::start(&redis_plan(Target::Own, Some(2)), s.workers, &[]).unwrap();
    let mut counted = Vec::new();
    for def in &s.strategy {
        // Every attempt sent and ended once, numbered 1, 2, … per job; the
        // figures count what the records hold.
        let (record, tally) = checked_run(&mut backend, &s, def);
        let planned = tally.unique_jobs;
        assert_eq!(
            tally.completed + tally.given_up + tally.rejected + tally.timed_out,
            planned,
            "{}",
            def.name
        );
        let count = |f: fn(&Fate) -> bool| record.jobs.iter().filter(|j| f(&j.fate)).count();
        counted.push((
            def.name.clone(),
            tally.attempts - planned,
            count(|f| matches!(f, Fate::Refused(_))),
            count(|f| *f == Fate::Cancelled),
            count(|f| *f == Fate::Wasted),
        ));
    }
    // What each strategy's clients did, by the records: (name, retries,
    // refused, cancelled, wasted). The burst of 40 meets a limit of 5 or
    // 8, or waits past its clients' patience.
    let [fifo, fair, vtc] = &counted[..] else {
        panic!("{counted:?}")
    };
    assert!(
        fifo.1 > 0 && fifo.2 > 0 && fifo.3 == 0 && fifo.4 == 0,
        "{fifo:?}"
    );
    assert!(
        fair.1 > 0 && fair.2 == 0 && fair.3 > 0 && fair.4 == 0,
        "{fair:?}"
    );
    assert!(vtc.1 > 0 && vtc.2 > 0 && vtc.3 == 0 && vtc.4 > 0, "{vtc:?}");
}
