//! noisylab: a lab harness that measures how multi-tenant job schedulers
//! treat their tenants.
//!
//! The pipeline, one module a stage:
//!
//! - [`scenario`]: parse and validate a TOML scenario (`lab/*.toml`).
//! - [`engine`]: the load generator, the worker pool's event loop and the
//!   two clocks (real timers, or a deterministic virtual clock).
//! - [`sched`]: the queue disciplines, one file each behind one trait.
//! - [`lab`]: every strategy of a scenario, `runs` times each.
//! - [`results`]: one serializable type for the figures, units in the names.
//! - [`report`]: one exporter per format; [`validate`] checks a machine's
//!   results against the post; [`store`] reads and writes results files.
//! - [`output`]: progress bars and typed warnings.
//! - [`cli`]: options parsed into a typed plan, then run.

pub mod calibrate;
pub mod cli;
pub mod engine;
pub mod lab;
pub mod machine;
pub mod output;
pub mod reference;
pub mod report;
pub mod results;
pub mod scenario;
pub mod sched;
pub mod store;
pub mod validate;
