//! Fairness beyond round robin on the virtual clock: the Virtual Token
//! Counter's weights, its service figures, and FIFO as the negative control.

use std::path::Path;

use noisylab::engine::JobRecord;
use noisylab::lab;
use noisylab::scenario::Scenario;

fn tiers() -> Scenario {
    Scenario::load(Path::new("lab/tiers.toml")).unwrap()
}

/// Jobs each tier started in the traffic window, while all four had work
/// waiting (each asks five times the pool).
fn started_per_tier(s: &Scenario, name: &str) -> [f64; 4] {
    let def = s.strategy.iter().find(|d| d.name == name).unwrap();
    let (jobs, _) = lab::run_virtual(s, def, s.seed);
    let traffic_ns = (s.traffic_s * 1e9) as u64;
    let mut out = [0.0; 4];
    for j in jobs
        .iter()
        .filter(|j: &&JobRecord| j.started < traffic_ns && j.tenant < 4)
    {
        out[j.tenant as usize] += 1.0;
    }
    out
}

#[test]
fn weighted_vtc_serves_the_tiers_in_proportion_to_their_weights() {
    let s = tiers();
    let weighted = started_per_tier(&s, "VTC, jobs, weighted");
    for (i, n) in weighted.iter().enumerate() {
        let ratio = n / weighted[0];
        let expected = (i + 1) as f64;
        assert!(
            (ratio / expected - 1.0).abs() <= 0.05,
            "tier {}: {ratio} against {expected} ({weighted:?})",
            i + 1
        );
    }
    let unweighted = started_per_tier(&s, "VTC, jobs, unweighted");
    for n in unweighted {
        assert!((n / unweighted[0] - 1.0).abs() <= 0.05, "{unweighted:?}");
    }
    // Jain's index over service ÷ weight among the backlogged tenants, per window.
    let r = lab::virtual_lab(s);
    for name in ["VTC, jobs, weighted", "VTC, jobs, unweighted", "Fair queue"] {
        let f = &r
            .strategies
            .iter()
            .find(|x| x.name == name)
            .unwrap()
            .median
            .fairness;
        assert!(f.jain >= 0.99, "{name}: {f:?}");
    }
    let weighted = &r.strategies[2].median;
    assert_eq!(weighted.fairness.unit, "jobs");
    // The light tenants still start at once or nearly: the lift puts a
    // returning tenant at the lowest counter, not behind the tiers' backlog.
    assert!(
        weighted.classes["light"].wait_ms.p95 < 100.0,
        "{:?}",
        weighted.classes["light"]
    );
}

#[test]
fn fifo_is_the_negative_control_of_the_fairness_figures() {
    let s = Scenario::load(Path::new("lab/article.toml")).unwrap();
    let r = lab::virtual_lab(s);
    let fifo = &r.strategies[0].median.fairness;
    let fair = &r.strategies[3].median.fairness;
    // During the burst FIFO gives the noisy tenant every worker while the
    // backlogged neighbours get nothing: 20 workers × 1 s apart.
    assert!(fifo.jain < 0.5, "{fifo:?}");
    assert_eq!(fifo.max_service_diff, 20_000.0);
    assert_eq!(fifo.unit, "worker-ms");
    assert!(fair.jain >= 0.99, "{fair:?}");
}
