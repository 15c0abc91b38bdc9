//! A guard that stops the throwaway PostgreSQL cluster when a command that
//! started it ends: on return, on error, on panic (Drop) and on Ctrl-C or
//! SIGTERM (a signal thread). It must never stop a cluster that was already
//! running before the command started, and never stop it twice.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

use anyhow::Result;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::pg;

/// Root of the workspace whose cluster must be stopped, while one is owned.
static OWNED: Mutex<Option<PathBuf>> = Mutex::new(None);
static SIGNALS: Once = Once::new();

/// Owns a running cluster; stops it when dropped if it started it.
#[derive(Debug)]
pub(crate) struct PgGuard {
    url: String,
}

impl PgGuard {
    /// Start the cluster (or reuse a running one, which is then left running).
    pub(crate) fn start(root: &Path) -> Result<Self> {
        install_signal_handler();
        let was_running = pg::is_running(root)?;
        if !was_running {
            // Own it before starting, so an interrupt during start cleans up too.
            *OWNED.lock().unwrap_or_else(PoisonError::into_inner) = Some(root.to_path_buf());
        }
        let url = pg::start(root)?;
        Ok(Self { url })
    }

    /// The cluster's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Stop now (if this guard started it), reporting errors.
    /// Dropping `self` afterwards finds nothing left to stop.
    pub(crate) fn stop(self) -> Result<()> {
        stop_owned()
    }
}

impl Drop for PgGuard {
    fn drop(&mut self) {
        if let Err(err) = stop_owned() {
            eprintln!("xtask: could not stop PostgreSQL: {err:#}");
        }
    }
}

/// Stop the owned cluster, if any, and disown it.
fn stop_owned() -> Result<()> {
    let owned = OWNED.lock().unwrap_or_else(PoisonError::into_inner).take();
    match owned {
        Some(root) => pg::stop(&root),
        None => Ok(()),
    }
}

/// On SIGINT/SIGTERM: stop the owned cluster, then exit 128+signal.
fn install_signal_handler() {
    SIGNALS.call_once(|| match Signals::new([SIGINT, SIGTERM]) {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    eprintln!("xtask: interrupted; stopping PostgreSQL if this command started it");
                    if let Err(err) = stop_owned() {
                        eprintln!("xtask: could not stop PostgreSQL: {err:#}");
                    }
                    std::process::exit(128 + signal);
                }
            });
        }
        Err(err) => eprintln!("xtask: cannot watch for Ctrl-C ({err}); stop PostgreSQL by hand"),
    });
}
