//! A run rebuilt from a queue server's stamps: every attempt's instants
//! and fate, with the server's promise (a job starts after its submit,
//! starts again only after it was handed back, and counts once) checked.

use anyhow::{Result, anyhow, bail};

use super::wire::Stamp;
use crate::engine::traffic::Refusal;
use crate::engine::{Fate, JobRecord, NEVER, Nanos};
use crate::results::FaultFigures;

/// The jobs that ran to their end after a finish of theirs was refused:
/// their work was done twice. Fails if a job has no end in the stamps.
fn ran_twice(jobs: &[JobRecord], refused_finish: &[bool]) -> Result<Vec<u32>> {
    if let Some(j) = jobs
        .iter()
        .find(|j| j.fate == Fate::Pending || j.enqueued == NEVER)
    {
        bail!("job {} has no end in the server's stamps: {j:?}", j.origin);
    }
    Ok((0..jobs.len())
        .filter(|&i| refused_finish[i] && matches!(jobs[i].fate, Fate::Ran | Fate::Wasted))
        .map(|i| i as u32)
        .collect())
}

/// Fails if the server stamped a job started before its submit (the
/// stamps are one clock's, so its wait would be negative).
fn starts_after_submits(jobs: &[JobRecord]) -> Result<()> {
    if let Some(j) = jobs
        .iter()
        .find(|j| j.started != NEVER && j.started < j.enqueued)
    {
        bail!(
            "the server stamped job {} started {} µs before its submit (a job starts after it is submitted)",
            j.origin,
            (j.enqueued - j.started) / 1_000
        );
    }
    Ok(())
}

/// The server's promise, checked stamp by stamp: a job starts again only
/// after it was handed back, and is finished once.
struct Promise {
    /// Each job's starts, hand-backs and accepted finishes so far.
    seen: Vec<(u32, u32, u32)>,
}

impl Promise {
    fn new(jobs: usize) -> Promise {
        Promise {
            seen: vec![(0, 0, 0); jobs],
        }
    }

    fn started(&mut self, i: usize, job: u32) -> Result<()> {
        let s = &mut self.seen[i];
        s.0 += 1;
        if s.0 > s.1 + 1 {
            bail!(
                "the server started job {job} again while a worker held its lease \
                 (a job starts again only after it is handed back)"
            );
        }
        Ok(())
    }

    fn handed_back(&mut self, i: usize) {
        self.seen[i].1 += 1;
    }

    fn finished(&mut self, i: usize, job: u32) -> Result<()> {
        self.seen[i].2 += 1;
        if self.seen[i].2 > 1 {
            bail!("the server accepted two finishes of job {job} (a job counts once)");
        }
        Ok(())
    }
}

/// A run rebuilt from the server's stamps.
pub struct Rebuilt {
    pub jobs: Vec<JobRecord>,
    /// Whether each job found a worker idle.
    pub found_idle: Vec<bool>,
    /// The run's last stamp, lab time.
    pub end: Nanos,
    /// Leases run out and finishes refused (the lease and the faults
    /// injected are the coordinator's to fill in).
    pub faults: FaultFigures,
    /// The jobs whose lease ran out, once for each time.
    pub redelivered: Vec<u32>,
    /// The jobs two workers ran to their end.
    pub ran_twice: Vec<u32>,
}

/// The run's records from its attempts (the plan's, then any retries) and
/// the server's stamps, each naming an attempt by the number `index` turns
/// into its place in `jobs`; with each attempt's found-idle mark and the
/// run's end, in lab time from `t0_us` on the server's clock. A job started
/// more than once (its lease ran out) keeps its last start, the one that
/// finished it, and is no dispatch-floor sample. A job whose client stopped
/// waiting is cancelled when it never started, wasted when it ran unread.
///
/// The server's promise is checked on the way: a job has at most one
/// accepted finish, and starts again only after it was handed back (its
/// lease ran out); a server that breaks either fails the run, naming the
/// job. So does one that stamps a job started before its submit (the
/// stamps are one clock's, so its wait would be negative). (PostgreSQL
/// keeps a job's last start and its counts, which say no more than that;
/// Redis logs every event in order.)
pub fn records(
    mut jobs: Vec<JobRecord>,
    index: impl Fn(u32) -> Option<usize>,
    stamps: &[Stamp],
    t0_us: u64,
) -> Result<Rebuilt> {
    let mut found_idle = vec![false; jobs.len()];
    let mut refused_finish = vec![false; jobs.len()];
    let mut abandoned = vec![false; jobs.len()];
    let mut faults = FaultFigures::default();
    let mut redelivered = Vec::new();
    let mut end: Nanos = 0;
    let mut promise = Promise::new(jobs.len());
    for stamp in stamps {
        let (job, us) = stamp.job_us();
        let at: Nanos = us.saturating_sub(t0_us) * 1_000;
        let i = index(job)
            .filter(|&i| i < jobs.len())
            .ok_or_else(|| anyhow!("the server names job {job}, which was not sent"))?;
        let j = &mut jobs[i];
        end = end.max(at);
        match *stamp {
            Stamp::Enqueued { woke, .. } => {
                j.enqueued = at;
                found_idle[i] = woke;
            }
            Stamp::Started { .. } => {
                promise.started(i, job)?;
                j.started = at;
            }
            Stamp::Finished { .. } => {
                promise.finished(i, job)?;
                j.finished = at;
                j.fate = if abandoned[i] {
                    Fate::Wasted
                } else {
                    Fate::Ran
                };
            }
            Stamp::Abandoned { .. } => {
                // Cancelled unless it starts after all (then wasted).
                abandoned[i] = true;
                j.finished = at;
                j.fate = Fate::Cancelled;
            }
            Stamp::Refused { .. } => {
                j.enqueued = at;
                j.fate = Fate::Refused(Refusal::Limit);
            }
            Stamp::Redelivered { .. } => {
                promise.handed_back(i);
                redelivered.push(i as u32);
            }
            Stamp::LateFinish { .. } => {
                faults.late_finishes_refused += 1;
                refused_finish[i] = true;
            }
        }
    }
    starts_after_submits(&jobs)?;
    // A job whose lease ran out waited for its last start behind a fault,
    // not behind the dispatch path: not a dispatch-floor sample.
    for &job in &redelivered {
        found_idle[job as usize] = false;
    }
    faults.redelivered = redelivered.len() as u64;
    let ran_twice = ran_twice(&jobs, &refused_finish)?;
    faults.ran_twice = ran_twice.len() as u64;
    Ok(Rebuilt {
        jobs,
        found_idle,
        end,
        faults,
        redelivered,
        ran_twice,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two jobs of tenant 0 and the server's log of them (µs from 1,000).
    fn rebuilt(log: &[(char, u32, u64)]) -> Result<Rebuilt> {
        let jobs = vec![JobRecord::planned(0, 0, 1_000_000); 2];
        let stamps: Vec<Stamp> = log
            .iter()
            .map(|&(kind, job, us)| {
                let us = 1_000 + us;
                match kind {
                    'e' => Stamp::Enqueued {
                        job,
                        us,
                        woke: false,
                    },
                    's' => Stamp::Started { job, us },
                    'f' => Stamp::Finished { job, us },
                    'l' => Stamp::Redelivered { job, us },
                    'x' => Stamp::LateFinish { job, us },
                    other => panic!("no stamp {other}"),
                }
            })
            .collect();
        records(jobs, |j| Some(j as usize), &stamps, 1_000)
    }

    #[test]
    fn a_job_handed_back_and_run_again_counts_once_with_its_refused_finish() {
        let r = rebuilt(&[
            ('e', 0, 0),
            ('e', 1, 0),
            ('s', 0, 10),
            ('l', 0, 400),
            ('s', 0, 400),
            ('x', 0, 1_010),
            ('s', 1, 1_010),
            ('f', 0, 1_400),
            ('f', 1, 2_010),
        ])
        .unwrap();
        assert_eq!(r.redelivered, [0]);
        assert_eq!(r.ran_twice, [0]);
        assert_eq!(
            (r.faults.redelivered, r.faults.late_finishes_refused),
            (1, 1)
        );
        // The last start, the one its finish belongs to.
        assert_eq!(
            (r.jobs[0].started, r.jobs[0].finished),
            (400_000, 1_400_000)
        );
        assert_eq!(r.end, 2_010_000);
    }

    #[test]
    fn a_second_accepted_finish_a_start_without_a_hand_back_or_one_before_its_submit_fails_the_run()
    {
        let twice = rebuilt(&[
            ('e', 0, 0),
            ('e', 1, 0),
            ('s', 0, 10),
            ('s', 1, 10),
            ('f', 0, 1_010),
            ('f', 1, 1_010),
            ('f', 0, 1_020),
        ]);
        assert_eq!(
            twice.err().map(|e| e.to_string()).as_deref(),
            Some("the server accepted two finishes of job 0 (a job counts once)")
        );
        let again = rebuilt(&[
            ('e', 0, 0),
            ('e', 1, 0),
            ('s', 0, 10),
            ('s', 0, 20),
            ('s', 1, 20),
            ('f', 0, 1_020),
            ('f', 1, 1_020),
        ]);
        assert!(
            again
                .err()
                .is_some_and(|e| e.to_string().starts_with("the server started job 0 again")),
        );
        let early = rebuilt(&[('e', 0, 100), ('s', 0, 40), ('f', 0, 1_040)]);
        assert_eq!(
            early.err().map(|e| e.to_string()).as_deref(),
            Some(
                "the server stamped job 0 started 60 µs before its submit (a job starts after it is submitted)"
            )
        );
    }
}
