//! The rules of a scenario that serde cannot express. Each failure names
//! the key and says what was found and what is allowed.

use super::limits::{Budget, Clients, Provider, RateLimit, Retry, RetryAfter};
use super::{BackendSpec, Dist, Group, JOB_RECORD_BYTES, MAX_JOBS_PER_RUN, Scenario};

/// The offending key and why.
type Failure = (String, String);

fn fail(key: &str, msg: String) -> Result<(), Failure> {
    Err((key.to_owned(), msg))
}

impl Scenario {
    pub(super) fn check(&self) -> Result<(), Failure> {
        if self.name.trim().is_empty() {
            return fail("name", "must not be empty".into());
        }
        if self.runs == 0 {
            return fail("runs", "must be at least 1, found 0".into());
        }
        if self.workers == 0 {
            return fail("workers", "must be at least 1, found 0".into());
        }
        if self.job_ms.fixed_value() == Some(0.0) {
            return fail("job_ms", "must be at least 1 ms, found 0".into());
        }
        check_dist("job_ms", &self.job_ms, true)?;
        check_dist_opt("tokens_in", &self.tokens_in, false)?;
        check_dist_opt("tokens_out", &self.tokens_out, false)?;
        positive_seconds("traffic_s", self.traffic_s)?;
        if let Some(a) = self.alert_p95_ms
            && !(a.is_finite() && a >= 0.0)
        {
            return fail(
                "alert_p95_ms",
                format!("must be 0 or more milliseconds, found {a}"),
            );
        }
        if self.normal.is_some() {
            self.check_group("normal", &self.groups()[0])?;
        }
        for (i, g) in self.tenants.iter().enumerate() {
            self.check_group(&format!("tenants[{i}]"), g)?;
        }
        self.check_traces()?;
        self.check_bursts()?;
        self.check_class_names()?;
        if self.normal.is_some() && self.normal_jobs_per_run() == 0 {
            return fail(
                "normal",
                "no normal jobs would be sent before traffic_s, so there is no wait to measure; \
                 raise normal.tenants, normal.rate_per_s or traffic_s"
                    .into(),
            );
        }
        if self.jobs_per_run() == 0 {
            return fail(
                "",
                "no jobs would be sent: add [normal], [[tenants]] with a rate, a [[trace]] or a [[burst]]"
                    .into(),
            );
        }
        self.check_strategies()?;
        self.check_limits()?;
        if let Some(b) = &self.backend {
            check_backend(b)?;
        }
        if let Some(l) = self.lease_s {
            positive_seconds("lease_s", l)?;
        }
        for (i, f) in self.fault.iter().enumerate() {
            f.check().map_err(|m| (format!("fault[{i}]"), m))?;
        }
        self.check_fault_overlaps()?;
        let jobs = self.jobs_per_run();
        if jobs > MAX_JOBS_PER_RUN {
            return fail(
                "",
                format!(
                    "one run would plan {jobs} jobs (about {} MiB of job records); at most {MAX_JOBS_PER_RUN} are allowed",
                    jobs * JOB_RECORD_BYTES / (1 << 20)
                ),
            );
        }
        Ok(())
    }

    /// A group's rules; `key` is `normal` or `tenants[i]`.
    fn check_group(&self, key: &str, g: &Group) -> Result<(), Failure> {
        // `[normal]` names its count `tenants`.
        let count_key = if key == "normal" { "tenants" } else { "count" };
        if key != "normal" {
            if g.name.trim().is_empty() {
                return fail(&format!("{key}.name"), "must not be empty".into());
            }
            if g.count == 0 {
                return fail(
                    &format!("{key}.{count_key}"),
                    "must be at least 1, found 0".into(),
                );
            }
        }
        if !(g.rate_per_s.is_finite() && g.rate_per_s >= 0.0) {
            return fail(
                &format!("{key}.rate_per_s"),
                format!(
                    "must be a rate of 0 or more jobs per second, found {}",
                    g.rate_per_s
                ),
            );
        }
        if g.count > 0 && g.rate_per_s > 1e9 {
            return fail(
                &format!("{key}.rate_per_s"),
                format!(
                    "at most 1e9 jobs per second per tenant, found {}",
                    g.rate_per_s
                ),
            );
        }
        if !(g.from_s.is_finite() && g.from_s >= 0.0) {
            return fail(
                &format!("{key}.from_s"),
                format!("must be 0 or more seconds, found {}", g.from_s),
            );
        }
        if let Some(until) = g.until_s
            && !(until.is_finite() && until >= g.from_s)
        {
            return fail(
                &format!("{key}.until_s"),
                format!(
                    "must be a time of from_s ({} s) or later, found {until}",
                    g.from_s
                ),
            );
        }
        if g.keys == Some(0) {
            return fail(
                &format!("{key}.keys"),
                "must be at least 1 (leave it out for one), found 0".into(),
            );
        }
        if !(g.weight.is_finite() && g.weight > 0.0) {
            return fail(
                &format!("{key}.weight"),
                format!("must be a number above 0, found {}", g.weight),
            );
        }
        check_dist_opt(&format!("{key}.job_ms"), &g.job_ms, true)?;
        check_dist_opt(&format!("{key}.tokens_in"), &g.tokens_in, false)?;
        check_dist_opt(&format!("{key}.tokens_out"), &g.tokens_out, false)?;
        check_front(
            key,
            g.rate_limit.as_ref(),
            g.budget.as_ref(),
            g.clients.as_ref(),
        )
    }

    fn check_traces(&self) -> Result<(), Failure> {
        for (i, t) in self.trace.iter().enumerate() {
            let key = |k: &str| format!("trace[{i}].{k}");
            if t.class.trim().is_empty() {
                return fail(&key("class"), "must not be empty".into());
            }
            let has_tenants = !t.data.tenant_names.is_empty();
            match t.tenants {
                Some(0) => return fail(&key("tenants"), "must be at least 1, found 0".into()),
                None if !has_tenants && !t.data.rows.is_empty() => {
                    return fail(
                        &key("tenants"),
                        "missing: this trace has no tenant column, so say how many tenants to spread it over"
                            .into(),
                    );
                }
                _ => {}
            }
            if !(t.zipf.is_finite() && t.zipf >= 0.0) {
                return fail(&key("zipf"), format!("must be 0 or more, found {}", t.zipf));
            }
            if !(t.from_s.is_finite() && t.from_s >= 0.0) {
                return fail(
                    &key("from_s"),
                    format!("must be 0 or more seconds, found {}", t.from_s),
                );
            }
            if !(t.speed.is_finite() && t.speed > 0.0) {
                return fail(
                    &key("speed"),
                    format!("must be a number above 0, found {}", t.speed),
                );
            }
            if let Some(limit) = t.limit_s {
                positive_seconds(&key("limit_s"), limit)?;
            }
            check_dist_opt(&key("job_ms"), &t.job_ms, true)?;
        }
        Ok(())
    }

    /// Class labels (groups, trace classes, bursting tenants) are unique.
    fn check_class_names(&self) -> Result<(), Failure> {
        let mut seen: Vec<(String, String)> = Vec::new();
        let has_normal = usize::from(self.normal.is_some());
        let named: Vec<(String, String)> = self
            .groups()
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let key = if i < has_normal {
                    "normal".to_string()
                } else {
                    format!("tenants[{}].name", i - has_normal)
                };
                (key, g.name)
            })
            .collect();
        let traces = self
            .trace
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("trace[{i}].class"), t.class.clone()));
        for (key, name) in named.into_iter().chain(traces) {
            if let Some((other, _)) = seen.iter().find(|(_, n)| *n == name) {
                return fail(
                    &key,
                    format!(
                        "duplicate class name {name:?} (also {other}); group names and trace classes must be unique"
                    ),
                );
            }
            seen.push((key, name));
        }
        for (i, b) in self.burst.iter().enumerate() {
            if let Some((other, _)) = seen.iter().find(|(_, n)| *n == b.tenant) {
                return fail(
                    &format!("burst[{i}].tenant"),
                    format!(
                        "{:?} is also {other}; a bursting tenant is a class of its own, so its name must differ",
                        b.tenant
                    ),
                );
            }
        }
        Ok(())
    }

    fn check_bursts(&self) -> Result<(), Failure> {
        for (i, b) in self.burst.iter().enumerate() {
            if b.tenant.trim().is_empty() {
                return fail(&format!("burst[{i}].tenant"), "must not be empty".into());
            }
            if !(b.at_s.is_finite() && b.at_s >= 0.0) {
                return fail(
                    &format!("burst[{i}].at_s"),
                    format!("must be 0 or more seconds, found {}", b.at_s),
                );
            }
            if b.at_s >= self.traffic_s {
                return fail(
                    &format!("burst[{i}].at_s"),
                    format!(
                        "{} s is not before traffic_s = {} s, so no normal job would run beside the burst; \
                         move the burst earlier or raise traffic_s",
                        b.at_s, self.traffic_s
                    ),
                );
            }
            if b.jobs == 0 {
                return fail(
                    &format!("burst[{i}].jobs"),
                    "must be at least 1, found 0".into(),
                );
            }
            if b.keys == Some(0) {
                return fail(
                    &format!("burst[{i}].keys"),
                    "must be at least 1 (leave it out for one), found 0".into(),
                );
            }
            check_dist_opt(&format!("burst[{i}].job_ms"), &b.job_ms, true)?;
            check_dist_opt(&format!("burst[{i}].tokens_in"), &b.tokens_in, false)?;
            check_dist_opt(&format!("burst[{i}].tokens_out"), &b.tokens_out, false)?;
            if let Some(over) = b.over_s
                && !(over.is_finite() && over >= 0.0)
            {
                return fail(
                    &format!("burst[{i}].over_s"),
                    format!("must be 0 or more seconds, found {over}"),
                );
            }
            check_front(
                &format!("burst[{i}]"),
                b.rate_limit.as_ref(),
                b.budget.as_ref(),
                b.clients.as_ref(),
            )?;
        }
        Ok(())
    }

    /// `[provider]`, `[clients]`, and the strategies' `retry_after`.
    fn check_limits(&self) -> Result<(), Failure> {
        if let Some(c) = &self.clients {
            check_clients("clients", c)?;
        }
        if let Some(p) = &self.provider {
            self.check_provider(p)?;
        }
        for (i, s) in self.strategy.iter().enumerate() {
            if let Some(c) = &s.clients {
                check_clients(&format!("strategy[{i}].clients"), c)?;
            }
            let Some(r) = s.retry_after else { continue };
            let key = format!("strategy[{i}].retry_after");
            if s.limit.is_none() {
                return fail(
                    &key,
                    "is what a queue limit's refusal says, so it needs a limit (set limit = N)"
                        .into(),
                );
            }
            if let RetryAfter::Fixed { fixed_s } = r {
                positive_seconds(&format!("{key}.fixed_s"), fixed_s)?;
            }
        }
        Ok(())
    }

    fn check_provider(&self, p: &Provider) -> Result<(), Failure> {
        check_per_minute("provider", [p.rpm, p.input_tpm, p.output_tpm])?;
        if let Some(b) = p.burst {
            if p.rpm.is_none() {
                return fail(
                    "provider.burst",
                    "is the request bucket's size, so it needs rpm".into(),
                );
            }
            if !(b.is_finite() && b >= 1.0) {
                return fail(
                    "provider.burst",
                    format!("must be at least 1 request, found {b}"),
                );
            }
        }
        if let Some(w) = p.window_s {
            positive_seconds("provider.window_s", w)?;
        }
        if !(p.reject_ms.is_finite() && p.reject_ms >= 0.0) {
            return fail(
                "provider.reject_ms",
                format!("must be 0 or more milliseconds, found {}", p.reject_ms),
            );
        }
        let classes = self.population().classes;
        let mut seen: Vec<(&str, usize)> = Vec::new();
        for (i, w) in p.workspace.iter().enumerate() {
            let key = |k: &str| format!("provider.workspace[{i}].{k}");
            if w.name.trim().is_empty() {
                return fail(&key("name"), "must not be empty".into());
            }
            check_per_minute(
                &format!("provider.workspace[{i}]"),
                [w.rpm, w.input_tpm, w.output_tpm],
            )?;
            if w.groups.is_empty() {
                return fail(&key("groups"), "must name at least one class".into());
            }
            for g in &w.groups {
                if !classes.iter().any(|c| c.name == *g) {
                    let known: Vec<String> =
                        classes.iter().map(|c| format!("{:?}", c.name)).collect();
                    return fail(
                        &key("groups"),
                        format!("no class {g:?}; classes: {}", known.join(", ")),
                    );
                }
                if let Some((_, j)) = seen.iter().find(|(n, _)| *n == g.as_str()) {
                    return fail(
                        &key("groups"),
                        format!(
                            "{g:?} is in provider.workspace[{j}] already; a class is in one workspace at most"
                        ),
                    );
                }
                seen.push((g, i));
            }
        }
        Ok(())
    }

    /// A worker process is struck by one fault at a time: a kill or a
    /// stop may not begin while another has it down (until its
    /// replacement or continue; an instant counts as down).
    fn check_fault_overlaps(&self) -> Result<(), (String, String)> {
        let strikes: Vec<(usize, &super::Fault)> = self
            .fault
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                matches!(
                    f.kind,
                    super::FaultKind::KillWorker | super::FaultKind::PauseWorker
                )
            })
            .collect();
        for &(i, a) in &strikes {
            for &(j, b) in &strikes {
                let end = a.at_s + a.duration();
                if i != j
                    && a.process() == b.process()
                    && (a.at_s..=end).contains(&b.at_s)
                    && (a.at_s, i) <= (b.at_s, j)
                {
                    return fail(
                        &format!("fault[{j}]"),
                        format!(
                            "it strikes worker process {} at {} s, while fault[{i}] has it down from {} s to {end} s; one fault at a time on a process",
                            b.process() + 1,
                            b.at_s,
                            a.at_s
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    fn check_strategies(&self) -> Result<(), Failure> {
        if self.strategy.is_empty() {
            return fail(
                "strategy",
                "at least one [[strategy]] is needed (queue = \"fifo\" or \"fair\")".into(),
            );
        }
        for (i, s) in self.strategy.iter().enumerate() {
            if s.name.trim().is_empty() {
                return fail(&format!("strategy[{i}].name"), "must not be empty".into());
            }
            if let Some(j) = self.strategy[..i].iter().position(|o| o.name == s.name) {
                return fail(
                    &format!("strategy[{i}].name"),
                    format!(
                        "duplicate strategy name {:?} (also strategy[{j}]); names must be unique",
                        s.name
                    ),
                );
            }
            if s.cap == Some(0) {
                return fail(
                    &format!("strategy[{i}].cap"),
                    "must be at least 1 (leave it out for no cap), found 0".into(),
                );
            }
            if s.limit == Some(0) {
                return fail(
                    &format!("strategy[{i}].limit"),
                    "must be at least 1 (leave it out for no limit), found 0".into(),
                );
            }
            if s.reserve.is_some() && s.cap.is_none() {
                return fail(
                    &format!("strategy[{i}].reserve"),
                    "lends a cap's idle workers, so it needs a cap (set cap = N)".into(),
                );
            }
            if s.cost.is_some() && s.queue != super::Queue::Vtc {
                return fail(
                    &format!("strategy[{i}].cost"),
                    "applies to queue = \"vtc\" only (fifo and fair count jobs)".into(),
                );
            }
            for (k, v) in [("cost_in", s.cost_in), ("cost_out", s.cost_out)] {
                let Some(v) = v else { continue };
                if s.cost != Some(super::Cost::Tokens) {
                    return fail(
                        &format!("strategy[{i}].{k}"),
                        "applies to cost = \"tokens\" only".into(),
                    );
                }
                if !(v.is_finite() && v >= 0.0) {
                    return fail(
                        &format!("strategy[{i}].{k}"),
                        format!("must be a price of 0 or more a token, found {v}"),
                    );
                }
            }
        }
        Ok(())
    }
}

/// `[backend]`: a backend noisylab knows, processes only for a queue
/// server, and each server option only for a server of the lab's own that
/// takes it (as each backend declares).
fn check_backend(b: &BackendSpec) -> Result<(), Failure> {
    let (declared, url) =
        super::backends::parse(&b.url).map_err(|e| ("backend.url".to_string(), e))?;
    let servers = || {
        let names: Vec<String> = super::backends::BACKENDS
            .iter()
            .filter(|d| d.is_server())
            .map(|d| format!("\"{}\"", d.name))
            .collect();
        names.join(", ")
    };
    if !declared.is_server() && b.processes.is_some() {
        return fail(
            "backend.processes",
            format!("goes with a queue server (url = {} or a URL)", servers()),
        );
    }
    for (option, set) in [
        ("fsync", b.fsync),
        ("synchronous_commit", b.synchronous_commit),
        ("append_only", b.append_only),
    ] {
        if set.is_none() || (url.is_none() && declared.own_options.contains(&option)) {
            continue;
        }
        let owner = super::backends::BACKENDS
            .iter()
            .find(|d| d.own_options.contains(&option))
            .expect("an option some backend takes");
        return fail(
            &format!("backend.{option}"),
            format!(
                "goes with a {} server of the lab's own (url = \"{}\")",
                owner.title, owner.name
            ),
        );
    }
    Ok(())
}

fn check_dist(key: &str, d: &Dist, tokens_ok: bool) -> Result<(), Failure> {
    d.check(tokens_ok).map_err(|m| (key.to_owned(), m))
}

fn check_dist_opt(key: &str, d: &Option<Dist>, tokens_ok: bool) -> Result<(), Failure> {
    d.as_ref().map_or(Ok(()), |d| check_dist(key, d, tokens_ok))
}

/// A group's or burst's `rate_limit`, `budget` and `clients`.
fn check_front(
    key: &str,
    rate: Option<&RateLimit>,
    budget: Option<&Budget>,
    clients: Option<&Clients>,
) -> Result<(), Failure> {
    if let Some(r) = rate {
        if !(r.per_s.is_finite() && r.per_s > 0.0) {
            return fail(
                &format!("{key}.rate_limit.per_s"),
                format!(
                    "must be a rate above 0 requests a second, found {}",
                    r.per_s
                ),
            );
        }
        if let Some(b) = r.burst
            && !(b.is_finite() && b >= 1.0)
        {
            return fail(
                &format!("{key}.rate_limit.burst"),
                format!("must be at least 1 request, found {b}"),
            );
        }
    }
    if let Some(b) = budget {
        if !(b.tokens.is_finite() && b.tokens > 0.0) {
            return fail(
                &format!("{key}.budget.tokens"),
                format!("must be more than 0 tokens, found {}", b.tokens),
            );
        }
        if !(b.per_s.is_finite() && b.per_s >= 0.0) {
            return fail(
                &format!("{key}.budget.per_s"),
                format!("must be 0 or more tokens a second, found {}", b.per_s),
            );
        }
    }
    clients.map_or(Ok(()), |c| check_clients(&format!("{key}.clients"), c))
}

fn check_clients(key: &str, c: &Clients) -> Result<(), Failure> {
    let k = |name: &str| format!("{key}.{name}");
    if c.retry == Retry::None {
        for (name, set) in [
            ("max_attempts", c.max_attempts.is_some()),
            ("base_ms", c.base_ms.is_some()),
            ("cap_ms", c.cap_ms.is_some()),
            ("retry_budget", c.retry_budget.is_some()),
        ] {
            if set {
                return fail(
                    &k(name),
                    "applies to retrying clients only (set retry = \"after\" or \"backoff\")"
                        .into(),
                );
            }
        }
    }
    if c.jitter != super::Jitter::None && c.retry != Retry::Backoff {
        return fail(&k("jitter"), "applies to retry = \"backoff\" only".into());
    }
    if c.max_attempts == Some(0) {
        return fail(&k("max_attempts"), "must be at least 1, found 0".into());
    }
    for (name, v) in [("base_ms", c.base_ms), ("cap_ms", c.cap_ms)] {
        if let Some(v) = v
            && !(v.is_finite() && v > 0.0)
        {
            return fail(
                &k(name),
                format!("must be more than 0 milliseconds, found {v}"),
            );
        }
    }
    let base = c.base_ms.unwrap_or(Clients::DEFAULT_BASE_MS);
    if let Some(cap) = c.cap_ms
        && cap < base
    {
        return fail(
            &k("cap_ms"),
            format!("must be at least base_ms ({base} ms), found {cap}"),
        );
    }
    if let Some(t) = c.timeout_s {
        positive_seconds(&k("timeout_s"), t)?;
    }
    if let Some(b) = c.retry_budget
        && !(b.is_finite() && b >= 0.0)
    {
        return fail(
            &k("retry_budget"),
            format!(
                "must be a share of 0 or more (0.2: retries up to 20 % of first attempts), found {b}"
            ),
        );
    }
    Ok(())
}

/// At least one of requests, input and output tokens per minute, each above 0.
fn check_per_minute(key: &str, limits: [Option<f64>; 3]) -> Result<(), Failure> {
    if limits.iter().all(Option::is_none) {
        return fail(
            key,
            "sets no limit: give rpm, input_tpm or output_tpm (per minute)".into(),
        );
    }
    for (name, v) in ["rpm", "input_tpm", "output_tpm"].iter().zip(limits) {
        if let Some(v) = v
            && !(v.is_finite() && v > 0.0)
        {
            return fail(
                &format!("{key}.{name}"),
                format!("must be more than 0 a minute, found {v}"),
            );
        }
    }
    Ok(())
}

fn positive_seconds(key: &str, v: f64) -> Result<(), Failure> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        fail(key, format!("must be more than 0 seconds, found {v}"))
    }
}
