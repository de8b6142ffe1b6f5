//! Who the tenants are: a scenario's groups, traces and bursting tenants laid
//! out as tenant ids, each range a class of the results.
//!
//! Ids run `[normal]` first, then `[[tenants]]` groups, then the traces'
//! tenants, then the bursting tenants in order of first appearance; ids below
//! [`Population::non_burst`] are the "normal" tenants of the post's figures.

use super::{Dist, Scenario, Trace};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassKind {
    Group,
    Trace,
    Burst,
}

/// One class: a contiguous range of tenant ids.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRange {
    pub name: String,
    pub kind: ClassKind,
    pub first: u32,
    pub count: u32,
    /// Each tenant's share for weighted strategies.
    pub weight: f64,
    /// The mean duration of the class's jobs, in milliseconds.
    pub mean_job_ms: f64,
    /// Tenant names where the trace gave them (else `name-1`, `name-2`, …).
    pub tenant_names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Population {
    pub classes: Vec<ClassRange>,
    /// Tenants `0..non_burst` are not bursting.
    pub non_burst: u32,
    /// Each tenant's class index.
    pub class_of: Vec<u16>,
    /// Each tenant's first API key, numbered across tenants (a tenant of
    /// `k` keys owns `first..first + k`); the last entry is the total.
    pub key_first: Vec<u32>,
}

impl Population {
    pub fn of(scenario: &Scenario) -> Population {
        let mut classes: Vec<ClassRange> = Vec::new();
        let add = |classes: &mut Vec<ClassRange>,
                   name: &str,
                   kind,
                   count: u32,
                   weight,
                   mean_job_ms,
                   tenant_names| {
            let first = classes.last().map_or(0, |c: &ClassRange| c.first + c.count);
            classes.push(ClassRange {
                name: name.to_string(),
                kind,
                first,
                count,
                weight,
                mean_job_ms,
                tenant_names,
            });
        };
        let mean = |job: Option<&Dist>, out: Option<&Dist>| {
            let out = out
                .or(scenario.tokens_out.as_ref())
                .map_or(0.0, |d| d.mean(0.0));
            job.unwrap_or(&scenario.job_ms).mean(out)
        };
        for g in scenario.groups() {
            let m = mean(g.job_ms.as_ref(), g.tokens_out.as_ref());
            add(
                &mut classes,
                &g.name,
                ClassKind::Group,
                g.count,
                g.weight,
                m,
                Vec::new(),
            );
        }
        for t in &scenario.trace {
            let names = t.data.tenant_names.clone();
            add(
                &mut classes,
                &t.class,
                ClassKind::Trace,
                trace_tenants(t),
                1.0,
                trace_mean_ms(t, scenario),
                names,
            );
        }
        let non_burst: u32 = classes.iter().map(|c| c.count).sum();
        for b in scenario.first_bursts() {
            let m = mean(b.job_ms.as_ref(), b.tokens_out.as_ref());
            add(
                &mut classes,
                &b.tenant,
                ClassKind::Burst,
                1,
                1.0,
                m,
                Vec::new(),
            );
        }
        let mut class_of = Vec::new();
        for (i, c) in classes.iter().enumerate() {
            class_of.extend(std::iter::repeat_n(i as u16, c.count as usize));
        }
        let key_first = key_numbers(scenario, &class_of);
        Population {
            classes,
            non_burst,
            class_of,
            key_first,
        }
    }

    pub fn tenants(&self) -> usize {
        self.class_of.len()
    }

    /// API keys, all tenants together.
    pub fn keys(&self) -> usize {
        self.key_first.last().copied().unwrap_or(0) as usize
    }

    /// The tenant each key belongs to, by key.
    pub fn key_owner(&self) -> Vec<u32> {
        (0..self.tenants())
            .flat_map(|t| {
                std::iter::repeat_n(
                    t as u32,
                    (self.key_first[t + 1] - self.key_first[t]) as usize,
                )
            })
            .collect()
    }

    /// The class of a tenant.
    pub fn class(&self, tenant: u32) -> &ClassRange {
        &self.classes[self.class_of[tenant as usize] as usize]
    }

    /// A tenant's name in results: a bursting tenant's own, a trace's
    /// tenant column, else `class-k` (k from 1).
    pub fn tenant_name(&self, tenant: u32) -> String {
        let c = self.class(tenant);
        let k = tenant - c.first;
        match c.kind {
            ClassKind::Burst => c.name.clone(),
            _ => match c.tenant_names.get(k as usize) {
                Some(name) => name.clone(),
                None => format!("{}-{}", c.name, k + 1),
            },
        }
    }

    /// Each tenant's mean job duration, in nanoseconds.
    pub fn mean_job_ns(&self) -> Vec<u64> {
        self.class_of
            .iter()
            .map(|&c| (self.classes[c as usize].mean_job_ms * 1e6).round() as u64)
            .collect()
    }

    /// Each tenant's weight as a strategy sees it: the groups' weights for a
    /// weighted `vtc`, 1 for the rest.
    pub fn weights_for(&self, strategy: &super::Strategy) -> Vec<f64> {
        if strategy.uses_weights() {
            self.weights()
        } else {
            vec![1.0; self.tenants()]
        }
    }

    /// Whether the strategy's scheduler sees API keys rather than tenants:
    /// where some tenant splits itself and the strategy counts keys.
    pub fn by_key(&self, strategy: &super::Strategy) -> bool {
        self.keys() != self.tenants() && strategy.fair_by != Some(super::FairBy::Tenant)
    }

    /// Whether the strategy is two-level: it counts tenants while some
    /// tenant splits itself over keys, so within a tenant the keys take
    /// turns.
    pub fn turns_keys(&self, strategy: &super::Strategy) -> bool {
        self.keys() != self.tenants() && strategy.fair_by == Some(super::FairBy::Tenant)
    }

    /// The weight of each queue the strategy's scheduler sees (tenants, or
    /// keys with their tenant's weight: [`Population::by_key`]).
    pub fn queue_weights(&self, strategy: &super::Strategy) -> Vec<f64> {
        let weights = self.weights_for(strategy);
        if !self.by_key(strategy) {
            return weights;
        }
        self.key_owner()
            .iter()
            .map(|&t| weights[t as usize])
            .collect()
    }

    /// Each tenant's weight.
    pub fn weights(&self) -> Vec<f64> {
        self.class_of
            .iter()
            .map(|&c| self.classes[c as usize].weight)
            .collect()
    }
}

/// Each tenant's first API key, numbered across tenants, and the total last:
/// a group's tenants and a burst's tenant may split themselves over keys.
fn key_numbers(scenario: &Scenario, class_of: &[u16]) -> Vec<u32> {
    let mut keys_per_class: Vec<u32> = scenario
        .groups()
        .iter()
        .map(|g| g.keys.unwrap_or(1))
        .collect();
    keys_per_class.extend(scenario.trace.iter().map(|_| 1));
    keys_per_class.extend(scenario.first_bursts().iter().map(|b| b.keys.unwrap_or(1)));
    let mut key_first = Vec::with_capacity(class_of.len() + 1);
    let mut next = 0u32;
    for &c in class_of {
        key_first.push(next);
        next += keys_per_class[c as usize];
    }
    key_first.push(next);
    key_first
}

/// The mean duration of a trace's replayed jobs, in milliseconds.
fn trace_mean_ms(t: &Trace, scenario: &Scenario) -> f64 {
    let rows = t.rows();
    if rows.is_empty() {
        return 0.0;
    }
    let job = t.job_ms.as_ref().unwrap_or(&scenario.job_ms);
    let total: f64 = rows
        .iter()
        .map(|r| {
            r.job_ms
                .unwrap_or_else(|| job.mean(f64::from(r.tokens_out)))
        })
        .sum();
    total / rows.len() as f64
}

/// Tenants a trace's rows are spread over.
pub fn trace_tenants(t: &Trace) -> u32 {
    if t.data.tenant_names.is_empty() {
        t.tenants.unwrap_or(1)
    } else {
        t.data.tenant_names.len() as u32
    }
}
