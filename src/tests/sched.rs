//! The fast disciplines against the naive scans: same job order, same
//! rejections, on random push / take / finish sequences.

use noisylab::sched::naive::{NaiveFair, NaiveFifo, NaiveQueues, NaiveVtc};
use noisylab::sched::{AnyScheduler, Fair, Fifo, Limits, Scheduler, Vtc};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Push(u32),
    Take,
    /// Start a job over the cap (lending on).
    TakeOver,
    /// Finish the running job at this index (mod the number running).
    Finish(usize),
}

fn ops(tenants: u32) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0..tenants).prop_map(Op::Push),
            2 => Just(Op::Take),
            1 => Just(Op::TakeOver),
            2 => any::<usize>().prop_map(Op::Finish),
        ],
        0..400,
    )
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        prop_oneof![Just(u32::MAX), 1u32..5],
        prop_oneof![Just(u32::MAX), 1u32..8],
    )
        .prop_map(|(cap, limit)| Limits { cap, limit })
}

/// Replay `ops` on both and compare every answer.
fn same_answers(
    mut fast: impl Scheduler,
    mut naive: impl Scheduler,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    replay(&mut fast, &mut naive, ops, false)
}

/// The same with lending on: `take_over_cap` compared too.
fn same_answers_lending(
    mut fast: impl Scheduler,
    mut naive: impl Scheduler,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    replay(&mut fast, &mut naive, ops, true)
}

fn replay(
    fast: &mut impl Scheduler,
    naive: &mut impl Scheduler,
    ops: &[Op],
    lending: bool,
) -> Result<(), TestCaseError> {
    let mut running: Vec<u32> = Vec::new();
    let mut next_job = 0u32;
    for op in ops {
        match *op {
            Op::Push(t) => {
                let a = fast.push(t, next_job);
                let b = naive.push(t, next_job);
                prop_assert_eq!(a, b, "push of job {} for tenant {}", next_job, t);
                next_job += 1;
            }
            Op::Take => {
                let a = fast.take();
                prop_assert_eq!(a, naive.take());
                if let Some((t, _)) = a {
                    running.push(t);
                }
            }
            // Without lending the fast disciplines never start over the cap.
            Op::TakeOver if !lending => prop_assert_eq!(fast.take_over_cap(), None),
            Op::TakeOver => {
                let a = fast.take_over_cap();
                prop_assert_eq!(a, naive.take_over_cap());
                if let Some((t, _)) = a {
                    running.push(t);
                }
            }
            Op::Finish(i) if !running.is_empty() => {
                let t = running.swap_remove(i % running.len());
                fast.finished(t);
                naive.finished(t);
            }
            Op::Finish(_) => {}
        }
        prop_assert_eq!(fast.queued(), naive.queued());
    }
    // Drain: the rest must come out in the same order too.
    loop {
        let a = fast.take();
        prop_assert_eq!(a, naive.take());
        match a {
            Some((t, _)) => {
                fast.finished(t);
                naive.finished(t);
            }
            None if running.is_empty() => break,
            None => {
                let t = running.pop().unwrap();
                fast.finished(t);
                naive.finished(t);
            }
        }
    }
    prop_assert_eq!(fast.queued(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fair_matches_its_naive_scan((tenants, ops) in (1u32..12).prop_flat_map(|t| (Just(t), ops(t))), limits in limits()) {
        same_answers(Fair::new(tenants as usize, limits), NaiveFair::new(tenants as usize, limits), &ops)?;
    }

    #[test]
    fn lending_matches_the_naive_scans((tenants, ops) in (1u32..12).prop_flat_map(|t| (Just(t), ops(t))), limits in limits()) {
        let mut fair = Fair::new(tenants as usize, limits);
        fair.lend();
        same_answers_lending(fair, NaiveFair::new(tenants as usize, limits), &ops)?;
        let mut fifo = Fifo::new(tenants as usize, limits);
        fifo.lend();
        same_answers_lending(fifo, NaiveFifo::new(tenants as usize, limits), &ops)?;
        let w = vec![1.0; tenants as usize];
        let c: Vec<f64> = (0..400).map(|i| f64::from(i % 7 + 1)).collect();
        let mut vtc = Vtc::new(tenants as usize, limits, w.clone(), c.clone());
        vtc.lend();
        same_answers_lending(vtc, NaiveVtc::new(tenants as usize, limits, w, c), &ops)?;
    }

    #[test]
    fn vtc_matches_its_naive_scan(
        (tenants, ops) in (1u32..12).prop_flat_map(|t| (Just(t), ops(t))),
        limits in limits(),
        weights in prop::collection::vec(1u32..5, 12),
        costs in prop::collection::vec(1u32..10, 400),
    ) {
        let w: Vec<f64> = weights[..tenants as usize].iter().map(|&w| f64::from(w)).collect();
        let c: Vec<f64> = costs.iter().map(|&c| f64::from(c)).collect();
        same_answers(
            Vtc::new(tenants as usize, limits, w.clone(), c.clone()),
            NaiveVtc::new(tenants as usize, limits, w, c),
            &ops,
        )?;
    }

    #[test]
    fn fifo_matches_its_naive_scan((tenants, ops) in (1u32..12).prop_flat_map(|t| (Just(t), ops(t))), limits in limits()) {
        same_answers(Fifo::new(tenants as usize, limits), NaiveFifo::new(tenants as usize, limits), &ops)?;
    }
}

#[test]
fn fifo_without_cap_is_arrival_order() {
    let mut s = Fifo::new(
        3,
        Limits {
            cap: u32::MAX,
            limit: u32::MAX,
        },
    );
    for (job, tenant) in [2, 0, 2, 1].into_iter().enumerate() {
        s.push(tenant, job as u32).unwrap();
    }
    let order: Vec<u32> = std::iter::from_fn(|| s.take().map(|(_, j)| j)).collect();
    assert_eq!(order, vec![0, 1, 2, 3]);
}

#[test]
fn fair_serves_a_tenant_with_one_job_before_a_backlogged_one() {
    let mut s = Fair::new(
        2,
        Limits {
            cap: u32::MAX,
            limit: u32::MAX,
        },
    );
    for job in 0..5 {
        s.push(0, job).unwrap();
    }
    assert_eq!(s.take(), Some((0, 0)));
    s.push(1, 5).unwrap();
    assert_eq!(s.take(), Some((1, 5)), "the fresh tenant goes first");
    assert_eq!(s.take(), Some((0, 1)));
}

#[test]
fn a_capped_tenant_is_skipped_until_a_job_finishes() {
    let limits = Limits {
        cap: 1,
        limit: u32::MAX,
    };
    let mut s = Fifo::new(2, limits);
    s.push(0, 0).unwrap();
    s.push(0, 1).unwrap();
    s.push(1, 2).unwrap();
    assert_eq!(s.take(), Some((0, 0)));
    assert_eq!(
        s.take(),
        Some((1, 2)),
        "tenant 0 is at its cap; job 2 goes ahead of job 1"
    );
    assert_eq!(s.take(), None);
    s.finished(0);
    assert_eq!(s.take(), Some((0, 1)));
}

#[test]
fn a_full_queue_rejects_and_says_how_many_wait() {
    let mut s = Fair::new(1, Limits { cap: 1, limit: 2 });
    s.push(0, 0).unwrap();
    s.take().unwrap();
    s.push(0, 1).unwrap();
    s.push(0, 2).unwrap();
    assert_eq!(s.push(0, 3), Err(noisylab::sched::Rejected { waiting: 2 }));
    assert_eq!(s.queued(), 2);
}

/// Heap bytes this thread holds, as the test binary's allocator counts them
/// (per thread, so the tests running beside it do not count).
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static HELD: Cell<i64> = const { Cell::new(0) };
    }

    fn add(bytes: i64) {
        HELD.with(|h| h.set(h.get() + bytes));
    }

    pub fn held() -> i64 {
        HELD.with(Cell::get)
    }

    pub struct Counting;

    // SAFETY: every call is passed to the system allocator unchanged; the
    // counter is a const-initialised thread-local, which never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as i64);
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as i64);
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as i64));
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
            add(new as i64 - layout.size() as i64);
            unsafe { System.realloc(ptr, layout, new) }
        }
    }
}

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

/// Most heap bytes a queued job may cost the fair queue: its 4-byte id in
/// its tenant's queue, up to twice that while the queue's buffer grows.
const MAX_BYTES_PER_QUEUED_JOB: f64 = 8.0;

/// Ten million queued jobs over 1,000 tenants fit in
/// [`MAX_BYTES_PER_QUEUED_JOB`] each, measured by the allocator (40 MB of ids,
/// at most 80 MB held), and still come out in turn.
#[test]
fn ten_million_queued_jobs_cost_at_most_8_bytes_each() {
    let before = heap::held();
    let mut s = Fair::new(
        1000,
        Limits {
            cap: u32::MAX,
            limit: u32::MAX,
        },
    );
    for job in 0..10_000_000u32 {
        s.push(job % 1000, job).unwrap();
    }
    let per_job = (heap::held() - before) as f64 / 1e7;
    assert_eq!(s.queued(), 10_000_000);
    eprintln!("{per_job:.2} heap bytes per queued job");
    assert!(
        (4.0..=MAX_BYTES_PER_QUEUED_JOB).contains(&per_job),
        "{per_job:.2} bytes per queued job"
    );
    let first: Vec<(u32, u32)> = (0..3).map(|_| s.take().unwrap()).collect();
    assert_eq!(first, vec![(0, 0), (1, 1), (2, 2)]);
}

#[test]
fn the_benchmarks_preloaded_naive_state_is_the_one_pushes_and_takes_make() {
    let limits = Limits {
        cap: 1,
        limit: u32::MAX,
    };
    let n = 50;
    let mut built = NaiveFair::new(n, limits);
    for job in 0..2 * n as u32 {
        built.push(job % n as u32, job).unwrap();
    }
    for _ in 0..n {
        built.take().unwrap();
    }
    let mut pre = NaiveFair::one_running_one_waiting(n, limits);
    for t in [7u32, 3, 49, 0] {
        built.finished(t);
        pre.finished(t);
        assert_eq!(built.take(), pre.take());
        assert_eq!(built.take(), None);
        assert_eq!(pre.take(), None);
    }
}

/// Ops whose pushes name API keys (key `k` belongs to tenant `k % tenants`)
/// as the scheduler sees them (pushes by tenant), each job's key by job id,
/// and each key's tenant.
fn by_tenant(ops: &[Op], tenants: u32, keys: u32) -> (Vec<Op>, Vec<u32>, Vec<u32>) {
    let mut key_of = Vec::new();
    let ops = ops
        .iter()
        .map(|op| match *op {
            Op::Push(k) => {
                key_of.push(k);
                Op::Push(k % tenants)
            }
            ref other => other.clone(),
        })
        .collect();
    let owner = (0..keys).map(|k| k % tenants).collect();
    (ops, key_of, owner)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Two-level fairness (`fair_by = "tenant"`): the rings and counters
    /// pick the tenant, the tenant's keys take turns; job for job as the scans.
    #[test]
    fn key_turns_match_the_naive_scans(
        (tenants, keys, ops) in (1u32..6).prop_flat_map(|t| (Just(t), t..3 * t + 1))
            .prop_flat_map(|(t, k)| (Just(t), Just(k), ops(k))),
        limits in limits(),
        lending in any::<bool>(),
    ) {
        let (ops, key_of, owner) = by_tenant(&ops, tenants, keys);
        let n = tenants as usize;
        let queues = || NaiveQueues::by_key(n, owner.clone(), key_of.clone());
        let mut fair = Fair::new(n, limits);
        fair.turn_keys(key_of.clone());
        let w = vec![1.0; n];
        let c: Vec<f64> = (0..400).map(|i| f64::from(i % 5 + 1)).collect();
        let mut vtc = Vtc::new(n, limits, w.clone(), c.clone());
        vtc.turn_keys(key_of.clone());
        if lending {
            fair.lend();
            vtc.lend();
        }
        replay(&mut fair, &mut NaiveFair::with_queues(queues(), limits), &ops, lending)?;
        replay(&mut vtc, &mut NaiveVtc::with_queues(queues(), limits, w, c), &ops, lending)?;
    }

    /// The VTC bound: with no cap, at every step the counters of any two
    /// tenants with work waiting differ by at most the largest job cost ÷
    /// weight, whatever the tenants, weights, costs and order of events.
    #[test]
    fn vtc_counters_of_backlogged_tenants_stay_within_one_job(
        (tenants, ops) in (2u32..10).prop_flat_map(|t| (Just(t), ops(t))),
        weights in prop::collection::vec(1u32..6, 10),
        costs in prop::collection::vec(1u32..50, 400),
    ) {
        let n = tenants as usize;
        let w: Vec<f64> = weights[..n].iter().map(|&w| f64::from(w)).collect();
        let c: Vec<f64> = costs.iter().map(|&c| f64::from(c)).collect();
        let bound = c.iter().map(|c| c / w.iter().cloned().fold(f64::INFINITY, f64::min)).fold(0.0, f64::max);
        let unlimited = Limits { cap: u32::MAX, limit: u32::MAX };
        let mut s = Vtc::new(n, unlimited, w, c);
        let mut waiting = vec![0u32; n];
        let mut running: Vec<u32> = Vec::new();
        let mut next_job = 0;
        for op in &ops {
            match *op {
                Op::Push(t) => {
                    s.push(t, next_job).unwrap();
                    next_job += 1;
                    waiting[t as usize] += 1;
                }
                Op::Take | Op::TakeOver => {
                    if let Some((t, _)) = s.take() {
                        waiting[t as usize] -= 1;
                        running.push(t);
                    }
                }
                Op::Finish(i) if !running.is_empty() => {
                    s.finished(running.swap_remove(i % running.len()));
                }
                Op::Finish(_) => {}
            }
            let backlogged: Vec<f64> = (0..tenants).filter(|&t| waiting[t as usize] > 0).map(|t| s.counter(t)).collect();
            let spread = backlogged.iter().cloned().fold(f64::MIN, f64::max) - backlogged.iter().cloned().fold(f64::MAX, f64::min);
            prop_assert!(backlogged.len() < 2 || spread <= bound * (1.0 + 1e-12), "counters {:?} spread {} over the bound {}", backlogged, spread, bound);
        }
    }
}

#[test]
fn a_tenants_keys_take_turns_under_two_level_fairness() {
    let unlimited = Limits {
        cap: u32::MAX,
        limit: u32::MAX,
    };
    // Tenant 0 sends jobs 0..4 with key 0, then job 4 with key 1.
    let key_of = vec![0, 0, 0, 0, 1];
    let mut s = Fair::new(1, unlimited);
    s.turn_keys(key_of);
    for job in 0..5 {
        s.push(0, job).unwrap();
    }
    let order: Vec<u32> = std::iter::from_fn(|| s.take().map(|(_, j)| j)).collect();
    assert_eq!(order, vec![0, 4, 1, 2, 3], "key 1's job goes second");
}

#[test]
fn a_vtc_newcomer_into_an_empty_backlog_is_lifted_to_the_last_leaver() {
    let unlimited = Limits {
        cap: u32::MAX,
        limit: u32::MAX,
    };
    // Tenant 0's job 0 costs 10; the rest cost 1.
    let mut costs = vec![1.0; 10];
    costs[0] = 10.0;
    let mut s = Vtc::new(2, unlimited, vec![1.0, 1.0], costs);
    s.push(0, 0).unwrap();
    assert_eq!(s.take(), Some((0, 0)));
    assert_eq!(s.counter(0), 10.0);
    // Nobody waits now; tenant 1 arrives and is lifted to tenant 0's 10,
    // so it banks no credit from the time it was away.
    s.push(1, 1).unwrap();
    assert_eq!(s.counter(1), 10.0);
    s.push(0, 2).unwrap();
    s.push(1, 3).unwrap();
    s.push(0, 4).unwrap();
    let order: Vec<u32> = std::iter::from_fn(|| s.take().map(|(t, _)| t)).collect();
    assert_eq!(order, vec![0, 1, 0, 1], "equal counters alternate");
}

/// One step of the hand-back test.
#[derive(Debug, Clone)]
enum BackOp {
    Push(u32),
    Take,
    /// With lending: start a job over the cap.
    TakeOver,
    /// Finish the running job at this index (mod the number running).
    Finish(usize),
    /// Hand the running job at this index back, as a lease running out
    /// does on a queue server.
    Back(usize),
}

fn back_ops(tenants: u32) -> impl Strategy<Value = Vec<BackOp>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0..tenants).prop_map(BackOp::Push),
            3 => Just(BackOp::Take),
            1 => Just(BackOp::TakeOver),
            2 => any::<usize>().prop_map(BackOp::Finish),
            1 => any::<usize>().prop_map(BackOp::Back),
        ],
        0..300,
    )
}

/// What the hand-back test follows of a scheduler's jobs.
#[derive(Default)]
struct Ledger {
    /// Each tenant's accepted jobs never started, oldest first.
    fresh: Vec<std::collections::VecDeque<u32>>,
    /// Each tenant's jobs handed back and not started again.
    back: Vec<std::collections::BTreeSet<u32>>,
    running: Vec<(u32, u32)>,
    per_tenant: Vec<u32>,
    finished: std::collections::BTreeMap<u32, u32>,
    accepted: u32,
    backs: u32,
}

impl Ledger {
    /// A take's answer: a never-started job only in its tenant's order, a
    /// started one only if it was handed back; never over the cap unless
    /// lent.
    fn started(&mut self, (t, job): (u32, u32), cap: u32, over: bool) -> Result<(), TestCaseError> {
        let ti = t as usize;
        if !self.back[ti].remove(&job) {
            prop_assert_eq!(
                self.fresh[ti].pop_front(),
                Some(job),
                "tenant {}'s order",
                t
            );
        }
        prop_assert!(
            over || self.per_tenant[ti] < cap,
            "tenant {} over its cap",
            t
        );
        self.per_tenant[ti] += 1;
        self.running.push((t, job));
        Ok(())
    }
}

fn take_one(
    s: &mut AnyScheduler,
    l: &mut Ledger,
    cap: u32,
    over: bool,
) -> Result<bool, TestCaseError> {
    let got = if over { s.take_over_cap() } else { s.take() };
    match got {
        Some(started) => l.started(started, cap, over).map(|_| true),
        None => Ok(false),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Jobs handed back start again once, each tenant's other jobs keep
    /// their order, no tenant passes its cap but by lending, and once the
    /// queue drains every accepted job finished exactly once.
    #[test]
    fn handed_back_jobs_start_again_once_and_caps_hold(
        (tenants, ops) in (1u32..8).prop_flat_map(|t| (Just(t), back_ops(t))),
        limits in limits(),
        which in 0u8..3,
        lend in any::<bool>(),
    ) {
        let n = tenants as usize;
        let mut s = match which {
            0 => AnyScheduler::Fifo(Fifo::new(n, limits)),
            1 => AnyScheduler::Fair(Fair::new(n, limits)),
            _ => AnyScheduler::Vtc(Vtc::new(n, limits, vec![1.0; n], vec![1.0; 400])),
        };
        if lend {
            s.lend();
        }
        let mut l = Ledger {
            fresh: vec![Default::default(); n],
            back: vec![Default::default(); n],
            per_tenant: vec![0; n],
            ..Ledger::default()
        };
        for (job, op) in ops.iter().enumerate() {
            match *op {
                BackOp::Push(t) if s.push(t, job as u32).is_ok() => {
                    l.fresh[t as usize].push_back(job as u32);
                    l.accepted += 1;
                }
                BackOp::Take => { take_one(&mut s, &mut l, limits.cap, false)?; }
                BackOp::TakeOver if lend => { take_one(&mut s, &mut l, limits.cap, true)?; }
                BackOp::Finish(i) if !l.running.is_empty() => {
                    let (t, job) = l.running.remove(i % l.running.len());
                    s.finished(t);
                    l.per_tenant[t as usize] -= 1;
                    *l.finished.entry(job).or_default() += 1;
                }
                BackOp::Back(i) if !l.running.is_empty() => {
                    let (t, job) = l.running.remove(i % l.running.len());
                    s.requeue(t, job);
                    l.per_tenant[t as usize] -= 1;
                    l.back[t as usize].insert(job);
                    l.backs += 1;
                }
                _ => {}
            }
        }
        // Drain: finish what runs, start what waits, until nothing moves.
        loop {
            for (t, job) in std::mem::take(&mut l.running) {
                s.finished(t);
                l.per_tenant[t as usize] -= 1;
                *l.finished.entry(job).or_default() += 1;
            }
            let mut moved = false;
            while take_one(&mut s, &mut l, limits.cap, false)? {
                moved = true;
            }
            while lend && take_one(&mut s, &mut l, limits.cap, true)? {
                moved = true;
            }
            if !moved {
                break;
            }
        }
        prop_assert_eq!(s.queued(), 0);
        prop_assert_eq!(l.finished.len() as u32, l.accepted, "every accepted job finished");
        prop_assert!(l.finished.values().all(|&k| k == 1), "each once: {:?}", l.finished);
    }
}

#[test]
fn a_job_handed_back_goes_first_and_frees_its_cap_slot() {
    // Fair, cap 1: tenant 0's job 0 runs, job 1 waits, tenant 1's job 2 runs.
    let mut s = AnyScheduler::Fair(Fair::new(
        2,
        Limits {
            cap: 1,
            limit: u32::MAX,
        },
    ));
    for (t, job) in [(0, 0), (0, 1), (1, 2)] {
        s.push(t, job).unwrap();
    }
    assert_eq!(s.take(), Some((0, 0)));
    assert_eq!(s.take(), Some((1, 2)));
    assert_eq!(s.take(), None, "tenant 0 at its cap");
    // Job 0's lease runs out: tenant 0 is below its cap again and job 0,
    // not job 1, is its next.
    s.requeue(0, 0);
    assert_eq!(s.take(), Some((0, 0)));
    s.finished(0);
    assert_eq!(s.take(), Some((0, 1)));
    // vtc refunds: tenant 0 charged for jobs 0 and 1 once each.
    let mut v = Vtc::new(
        1,
        Limits {
            cap: u32::MAX,
            limit: u32::MAX,
        },
        vec![2.0],
        vec![3.0; 2],
    );
    v.push(0, 0).unwrap();
    assert_eq!(v.take(), Some((0, 0)));
    assert_eq!(v.counter(0), 1.5);
    v.requeue(0, 0);
    assert_eq!(v.counter(0), 0.0, "the lost start's charge refunded");
    assert_eq!(v.take(), Some((0, 0)));
    assert_eq!(v.counter(0), 1.5);
}

#[test]
fn a_vtc_counter_refunded_below_zero_orders_below_zero() {
    // Tenant 1 (weight 3) is charged 3.9397… ÷ 3 and 1 ÷ 3, then both are
    // refunded: a rounding error below zero. Tenant 0, charged 1 and
    // refunded, is at exactly zero. The lower number goes first, as on the
    // servers, not the lower id.
    let unlimited = Limits {
        cap: u32::MAX,
        limit: u32::MAX,
    };
    let mut v = Vtc::new(
        3,
        unlimited,
        vec![1.0, 3.0, 1.0],
        vec![1.0, 3.939709701895592, 1.0, 1.0],
    );
    v.push(2, 0).unwrap(); // holds the lift's floor at zero
    v.push(0, 3).unwrap();
    assert_eq!(v.take(), Some((0, 3)));
    v.push(1, 1).unwrap();
    assert_eq!(v.take(), Some((1, 1)));
    v.push(1, 2).unwrap();
    assert_eq!(v.take(), Some((2, 0)));
    assert_eq!(v.take(), Some((1, 2)));
    v.requeue(0, 3);
    v.requeue(1, 1);
    v.requeue(1, 2);
    assert_eq!(v.counter(0), 0.0);
    assert_eq!(v.counter(1), -5.551115123125783e-17);
    assert_eq!(v.take(), Some((1, 1)));
    assert_eq!(v.take(), Some((0, 3)));
}
