//! A scenario's limits and clients as one strategy's runs use them
//! ([`crate::engine::traffic::TrafficPlan`]): each class's rate limit,
//! budget, clients and workspace, the provider's limits, and the strategy's
//! choice of front-door layers and queue-limit retry-after.

use std::sync::Arc;

use crate::engine::Nanos;
use crate::engine::limiter::Limiter;
use crate::engine::traffic::{ClientPlan, LimitSet, TrafficPlan};
use crate::scenario::{
    Budget, Clients, Layer, Provider, RateLimit, RetryAfter, Scenario, Strategy,
};

/// Each class's front door and clients, in the population's class order.
struct ClassLimits {
    name: String,
    rate: Option<RateLimit>,
    budget: Option<Budget>,
    clients: Option<Clients>,
}

fn classes(scenario: &Scenario) -> Vec<ClassLimits> {
    let groups = scenario.groups().into_iter().map(|g| ClassLimits {
        name: g.name,
        rate: g.rate_limit,
        budget: g.budget,
        clients: g.clients,
    });
    let traces = scenario.trace.iter().map(|t| ClassLimits {
        name: t.class.clone(),
        rate: None,
        budget: None,
        clients: None,
    });
    let bursts = scenario.first_bursts().into_iter().map(|b| ClassLimits {
        name: b.tenant.clone(),
        rate: b.rate_limit,
        budget: b.budget,
        clients: b.clients,
    });
    groups.chain(traces).chain(bursts).collect()
}

/// Each class's clients, in the population's class order: its own, else
/// the strategy's, else the scenario's `[clients]`, else the post's (send
/// once, wait forever).
pub fn class_clients(scenario: &Scenario, strategy: &Strategy) -> Vec<Clients> {
    classes(scenario)
        .iter()
        .map(|c| {
            c.clients
                .or(strategy.clients)
                .or(scenario.clients)
                .unwrap_or_default()
        })
        .collect()
}

/// The plan, or `None` where the scenario and strategy add nothing to the
/// post's lab (no limit, every client sends once and waits).
pub fn traffic_plan(scenario: &Scenario, strategy: &Strategy) -> Option<Arc<TrafficPlan>> {
    let on = |l: Layer| strategy.layers.as_ref().is_none_or(|ls| ls.contains(&l));
    let classes = classes(scenario);
    let clients = class_clients(scenario, strategy);
    let rate: Vec<Option<(f64, f64)>> = classes
        .iter()
        .map(|c| {
            c.rate
                .filter(|_| on(Layer::RateLimit))
                .map(|r| (r.burst.unwrap_or(r.per_s.max(1.0)), r.per_s))
        })
        .collect();
    let budget: Vec<Option<(f64, f64)>> = classes
        .iter()
        .map(|c| {
            c.budget
                .filter(|_| on(Layer::Budget))
                .map(|b| (b.tokens, b.per_s))
        })
        .collect();
    let provider = scenario.provider.as_ref();
    let workspaces: Vec<_> = provider
        .filter(|_| on(Layer::Workspace))
        .map_or(&[][..], |p| &p.workspace[..])
        .iter()
        .collect();
    let workspace: Vec<Option<usize>> = classes
        .iter()
        .map(|c| workspaces.iter().position(|w| w.groups.contains(&c.name)))
        .collect();
    let limit_retry_after_ns = match strategy.retry_after {
        Some(RetryAfter::Fixed { fixed_s }) => Some((fixed_s * 1e9).round() as Nanos),
        _ => None,
    };
    let plain = provider.is_none()
        && rate.iter().all(Option::is_none)
        && budget.iter().all(Option::is_none)
        && clients.iter().all(Clients::is_plain)
        && limit_retry_after_ns.is_none();
    if plain {
        return None;
    }
    let burst = provider.and_then(|p| p.burst);
    let window = provider.and_then(|p| p.window_s);
    let set = |rpm: Option<f64>, input: Option<f64>, output: Option<f64>| {
        // The request bucket holds `burst` (else a minute); the token
        // buckets the same share of their minute.
        let share = match (burst, rpm) {
            (Some(b), Some(r)) => b / r,
            _ => 1.0,
        };
        let limiter =
            |per_min: Option<f64>| per_min.map(|m| Limiter::per_minute(m, m * share, window));
        LimitSet {
            requests: limiter(rpm),
            input: limiter(input),
            output: limiter(output),
        }
    };
    Some(Arc::new(TrafficPlan {
        class_of: scenario.population().class_of,
        rate,
        budget,
        clients: clients.iter().map(ClientPlan::of).collect(),
        workspace,
        org: provider.map(|p: &Provider| set(p.rpm, p.input_tpm, p.output_tpm)),
        workspaces: workspaces
            .iter()
            .map(|w| set(w.rpm, w.input_tpm, w.output_tpm))
            .collect(),
        reserve_output: provider.is_some_and(|p| p.reserve_output),
        reject_ns: provider.map_or(0, |p| (p.reject_ms * 1e6).round() as Nanos),
        limit_retry_after_ns,
        strategy: strategy.clone(),
    }))
}
