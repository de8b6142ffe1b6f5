//! noisylab: a lab harness that measures how multi-tenant job schedulers
//! treat their tenants.
//!
//! The pipeline: a [`scenario`] is parsed and checked; the [`lab`] runs each
//! of its strategies on the [`engine`] (load generator, worker pool, the two
//! clocks) with a queue discipline from [`sched`]; the figures land in one
//! [`results`] type, which [`store`] saves and reads back, [`validate`]
//! judges against the post's [`reference`](mod@reference) figures, and [`report`] prints in
//! every format. [`cli`] parses options into typed plans and dispatches.
//!
//! # Layout
//!
//! Layers, bottom first. A module may use the modules of the layers below
//! its own and nothing above it, and the modules of one layer do not use
//! each other, so the `use crate::…` graph has no cycle; inside a module,
//! its files use each other without a circle either. The test
//! `src/tests/layout.rs` reads this list and checks every `crate::` and
//! `super::` path in `src/` against it, and holds every file outside the
//! tests to 700 lines and every function to 80.
//!
//! 1. `units`, `stats`, `fsio`, `machine`: leaves: number formatting,
//!    percentiles, Jain's index and the histogram codec, reading a file,
//!    the host's facts.
//! 2. `scenario`: TOML scenarios, parsed and validated, and the backends a
//!    lab can run on, each declared once by what it carries.
//! 3. `sched`: the queue disciplines behind one trait.
//! 4. `engine`: the arrival plan, the event loop, the two clocks.
//! 5. `calibrate`, `output`: the timers' own error; progress bars and the
//!    warning type.
//! 6. `results`: the data model of a lab's figures.
//! 7. `backend`: where a run's queue lives: the engine in this process, or
//!    a queue server (functions inside Redis, SQL functions over a
//!    PostgreSQL job table) with workers in other processes, or a team's
//!    own queue over HTTP.
//! 8. `lab`, `store`, `reference`: running a lab and summarising it; results
//!    files on disk; the post's figures.
//! 9. `validate`: the post's claims checked against results.
//! 10. `report`: every output format, the report site, validation rendered.
//! 11. `cli`: options, plans, one function per command.

pub mod backend;
pub mod calibrate;
pub mod cli;
pub mod engine;
pub mod fsio;
pub mod lab;
pub mod machine;
pub mod output;
pub mod reference;
pub mod report;
pub mod results;
pub mod scenario;
pub mod sched;
pub mod stats;
pub mod store;
pub mod units;
pub mod validate;
