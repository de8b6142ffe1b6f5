//! Ctrl-C during a lab: the first sets a flag the lab watches (it stops the
//! run in progress and saves what completed); a second exits at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, bail};

use super::EXIT_INTERRUPTED;
use crate::engine::clock::{Drivers, runtime};

/// Install the handler and return the flag the first Ctrl-C sets.
pub fn watch_ctrl_c() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let runtime = runtime(Drivers::TimersAndSignals)?;
    // Register the handler before the lab starts, then wait on its own thread.
    let mut sigint = {
        let _context = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?
    };
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let _ = sigint.recv().await;
            flag.store(true, Ordering::Relaxed);
            eprintln!("\nnoisylab: stopping after saving the completed runs (Ctrl-C again to quit at once)");
            let _ = sigint.recv().await;
            std::process::exit(EXIT_INTERRUPTED);
        });
    });
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted before the lab started");
    }
    Ok(stop)
}
