//! Every backend a lab can run on, declared once: its name (`--backend`,
//! `[backend] url`), the URL of a server of your own, the `[backend]`
//! options a server of the lab's own takes, and what it carries beyond the
//! core (a run's plan in, its record out). The scenario check, the command
//! line's help and every refusal of what a backend does not carry read
//! this list; the `backend` module maps each server's name to the code
//! that runs it.

use super::faults::FaultKind;

/// What a backend may carry beyond the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Runs noisylab's queue disciplines itself (fifo, fair, vtc, caps,
    /// limits, lending). A backend without it only carries jobs: the
    /// discipline is someone else's.
    Discipline,
    /// Stamps every event on the server's own clock.
    ServerClock,
    /// A take leases its job: a job whose worker is lost goes back to its
    /// queue, and a finish after the lease is refused.
    Leases,
    /// Clients that retry, that stop waiting, and fixed retry-afters.
    Clients,
    /// Clients that cancel a job they stopped waiting for
    /// (`on_timeout = "cancel"`): the queue drops it unrun.
    Cancel,
    /// `fair_by = "tenant"` over tenants split into API keys: the keys take
    /// turns within a tenant's turn.
    KeyTurns,
    /// Rate limits, budgets and the provider's limits in front of the queue.
    FrontDoor,
    /// Faults of this kind.
    Fault(FaultKind),
}

impl Capability {
    /// What it is, as a refusal names it.
    pub fn describe(self) -> String {
        match self {
            Capability::Discipline => "noisylab's queue disciplines".into(),
            Capability::ServerClock => "a server's clock".into(),
            Capability::Leases => "leases".into(),
            Capability::Clients => {
                "retrying clients, clients that stop waiting and fixed retry-afters".into()
            }
            Capability::Cancel => {
                "clients that cancel a job they stopped waiting for (on_timeout = \"cancel\")"
                    .into()
            }
            Capability::KeyTurns => "fair_by = \"tenant\" over tenants split into API keys (keys \
                                     taking turns within a tenant's turn)"
                .into(),
            Capability::FrontDoor => "rate limits, budgets and the provider's limits".into(),
            Capability::Fault(kind) => format!("a {} fault", kind.name()),
        }
    }
}

/// Every fault kind.
const FAULTS: [Capability; 5] = [
    Capability::Fault(FaultKind::KillWorker),
    Capability::Fault(FaultKind::PauseWorker),
    Capability::Fault(FaultKind::DropConnections),
    Capability::Fault(FaultKind::RestartServer),
    Capability::Fault(FaultKind::SlowLink),
];

/// One backend, as a lab sees it.
#[derive(Debug, PartialEq, Eq)]
pub struct Declared {
    /// As `--backend` and `[backend] url` name it (for a server: one the lab
    /// starts), and as the results file does.
    pub name: &'static str,
    /// As a sentence names it.
    pub title: &'static str,
    /// The URL schemes of a server of your own; none: it has no server.
    pub schemes: &'static [&'static str],
    /// The URL's form, as help and errors show it.
    pub url_form: Option<&'static str>,
    /// What its name gives, as help says it.
    pub own: &'static str,
    /// What a URL gives, as help says it.
    pub yours: &'static str,
    /// `[backend]` options a server of the lab's own takes.
    pub own_options: &'static [&'static str],
    /// A queue server the lab starts worker processes for (`--processes`,
    /// `noisylab worker`); otherwise its workers are its own or someone
    /// else's.
    pub server: bool,
    /// What it carries on real timers.
    pub carries: &'static [Capability],
    /// What it carries on the virtual clock (the model); empty: it runs on
    /// real timers only.
    pub on_the_model: &'static [Capability],
}

impl Declared {
    /// Whether it carries `what`, on the virtual clock or on real timers.
    pub fn carries(&self, what: Capability, on_the_model: bool) -> bool {
        let list = if on_the_model {
            self.on_the_model
        } else {
            self.carries
        };
        list.contains(&what)
    }

    /// Whether it runs on the virtual clock.
    pub fn models(&self) -> bool {
        !self.on_the_model.is_empty()
    }

    /// Whether it is a queue server (with worker processes).
    pub fn is_server(&self) -> bool {
        self.server
    }

    /// Whether its name alone runs it (else it needs a URL).
    pub fn runs_by_name(&self) -> bool {
        !self.own.is_empty()
    }
}

/// The engine in this process: the reference, and on the virtual clock the
/// model every other backend is validated against.
pub const IN_PROCESS: Declared = Declared {
    name: "in-process",
    title: "in-process",
    schemes: &[],
    url_form: None,
    own: "this process's engine (on the virtual clock: the model)",
    yours: "",
    own_options: &[],
    server: false,
    carries: &[
        Capability::Discipline,
        Capability::Clients,
        Capability::Cancel,
        Capability::KeyTurns,
        Capability::FrontDoor,
    ],
    on_the_model: &[
        Capability::Discipline,
        Capability::Clients,
        Capability::Cancel,
        Capability::KeyTurns,
        Capability::FrontDoor,
        Capability::Leases,
        FAULTS[0],
        FAULTS[1],
        FAULTS[2],
        FAULTS[3],
        FAULTS[4],
    ],
};

/// The disciplines as functions inside a Redis server.
pub const REDIS: Declared = Declared {
    name: "redis",
    title: "Redis",
    schemes: &["redis://"],
    url_form: Some("redis://HOST:PORT[/DB]"),
    own: "a Redis server the lab starts and stops",
    yours: "an existing server; the lab's keys are deleted at the end",
    own_options: &["append_only"],
    server: true,
    carries: &[
        Capability::Discipline,
        Capability::ServerClock,
        Capability::Leases,
        Capability::Clients,
        Capability::Cancel,
        Capability::KeyTurns,
        FAULTS[0],
        FAULTS[1],
        FAULTS[2],
        FAULTS[3],
        FAULTS[4],
    ],
    on_the_model: &[],
};

/// The disciplines as SQL functions over a PostgreSQL job table.
pub const POSTGRES: Declared = Declared {
    name: "postgres",
    title: "PostgreSQL",
    schemes: &["postgres://", "postgresql://"],
    url_form: Some("postgres://USER@HOST:PORT/DB"),
    own: "a PostgreSQL cluster the lab makes, starts and stops",
    yours: "an existing database; the lab's schema is dropped at the end",
    own_options: &["fsync", "synchronous_commit"],
    server: true,
    carries: &[
        Capability::Discipline,
        Capability::ServerClock,
        Capability::Leases,
        FAULTS[0],
        FAULTS[1],
        FAULTS[2],
        FAULTS[3],
        FAULTS[4],
    ],
    on_the_model: &[],
};

/// A team's own queue, reached over HTTP: noisylab plays the arrivals and
/// posts each job to the queue's enqueue endpoint; the queue's own workers
/// run it and report its start and end to the run's collector
/// (docs/your-queue.md). Its discipline is the queue's own: it carries
/// nothing beyond the core.
pub const HTTP: Declared = Declared {
    name: "http",
    title: "HTTP",
    schemes: &["http://"],
    url_form: Some("http://HOST:PORT/PATH"),
    own: "",
    yours: "your queue's enqueue endpoint: noisylab posts each job there, your workers \
            report its start and end (docs/your-queue.md)",
    own_options: &[],
    server: false,
    carries: &[Capability::Clients],
    on_the_model: &[],
};

/// Every backend, in the order help lists them.
pub const BACKENDS: [&Declared; 4] = [&IN_PROCESS, &REDIS, &POSTGRES, &HTTP];

/// The names and URL forms `--backend` and `[backend] url` take.
pub fn allowed() -> String {
    BACKENDS
        .iter()
        .flat_map(|b| {
            let name = b.runs_by_name().then_some(b.name);
            name.into_iter().chain(b.url_form)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The backend `text` names, with the URL where it is a server of your
/// own; or the one-line reason it names none.
pub fn parse(text: &str) -> Result<(&'static Declared, Option<&str>), String> {
    for b in BACKENDS {
        if text == b.name && !b.runs_by_name() {
            let form = b.url_form.unwrap_or_default();
            return Err(format!(
                "backend {text:?} needs a URL: {form} ({})",
                b.yours
            ));
        }
        if text == b.name {
            return Ok((b, None));
        }
        if b.schemes.iter().any(|s| text.starts_with(s)) {
            return Ok((b, Some(text)));
        }
    }
    Err(format!("unknown backend {text:?}; allowed: {}", allowed()))
}

/// Every backend as `--backend`'s help lists it: what its name and its URL
/// give, and what it does not carry.
pub fn help() -> String {
    let every = [
        Capability::Discipline,
        Capability::Clients,
        Capability::Cancel,
        Capability::KeyTurns,
        Capability::FrontDoor,
        Capability::Leases,
    ];
    let mut out = String::from("Where the queue lives:");
    for b in BACKENDS {
        match (b.runs_by_name(), b.url_form) {
            (true, Some(form)) => {
                out.push_str(&format!("\n- {}: {}; {form}: {}", b.name, b.own, b.yours))
            }
            (true, None) => out.push_str(&format!("\n- {}: {}", b.name, b.own)),
            (false, form) => out.push_str(&format!("\n- {}: {}", form.unwrap_or(b.name), b.yours)),
        }
        let missing: Vec<String> = every
            .iter()
            .chain(&FAULTS)
            .filter(|&&c| !b.carries(c, false) && !b.carries(c, true))
            .map(|c| c.describe())
            .collect();
        if !missing.is_empty() {
            out.push_str(&format!(". Does not carry: {}", missing.join("; ")));
        }
        if !b.models() {
            out.push_str(". Real timers only");
        }
    }
    out.push_str("\n[default: the scenario's [backend], else in-process]");
    out
}

/// The backends that carry `what`, as a refusal lists them.
pub fn carried_by(what: Capability) -> String {
    let mut out = Vec::new();
    for b in BACKENDS {
        if b.carries(what, false) {
            out.push(b.name.to_string());
        } else if b.carries(what, true) {
            out.push(format!("{} on the virtual clock", b.name));
        }
    }
    if out.is_empty() {
        "no backend".into()
    } else {
        out.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls_name_their_backend_and_nothing_else_does() {
        assert_eq!(parse("redis"), Ok((&REDIS, None)));
        assert_eq!(
            parse("postgresql://u@h:1/d"),
            Ok((&POSTGRES, Some("postgresql://u@h:1/d")))
        );
        assert_eq!(parse("in-process"), Ok((&IN_PROCESS, None)));
        assert_eq!(
            parse("rabbit").unwrap_err(),
            "unknown backend \"rabbit\"; allowed: in-process, redis, redis://HOST:PORT[/DB], \
             postgres, postgres://USER@HOST:PORT/DB, http://HOST:PORT/PATH"
        );
        assert!(
            parse("http").unwrap_err().starts_with(
                "backend \"http\" needs a URL: http://HOST:PORT/PATH (your queue's enqueue"
            ),
            "a team's queue is reached by its URL only"
        );
        assert_eq!(
            parse("http://127.0.0.1:8000/jobs"),
            Ok((&HTTP, Some("http://127.0.0.1:8000/jobs")))
        );
        assert_eq!(
            carried_by(Capability::KeyTurns),
            "in-process, redis",
            "read from the declarations"
        );
        assert_eq!(
            carried_by(Capability::Leases),
            "in-process on the virtual clock, redis, postgres"
        );
    }
}
