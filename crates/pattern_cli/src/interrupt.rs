//! Ctrl-C for the commands that run turns (`chat`, `send`, `demo`): one interrupt stream, held
//! for the whole command, so that a Ctrl-C that arrives while nobody waits for it is kept until
//! the next wait instead of being lost, and so that every wait (during a turn, at the prompt)
//! sees it.
//!
//! Once a command has created [`Interrupts`], Ctrl-C no longer ends the process by itself: the
//! command decides what it means. This module must never decide that (it only reports a
//! Ctrl-C) and must never be used by commands that do not wait for it.

use crate::error::{CliError, Result};

/// The Ctrl-C signals of this process, from creation on.
pub(crate) struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
    #[cfg(windows)]
    signal: tokio::signal::windows::CtrlC,
    /// The stream ended (the runtime is going away): no Ctrl-C will be reported any more.
    closed: bool,
}

impl Interrupts {
    /// Starts listening for Ctrl-C (SIGINT on Unix).
    pub(crate) fn new() -> Result<Self> {
        let failed = |e: std::io::Error| CliError::other(format!("cannot listen for Ctrl-C: {e}"));
        #[cfg(unix)]
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(failed)?;
        #[cfg(windows)]
        let signal = tokio::signal::windows::ctrl_c().map_err(failed)?;
        #[cfg(not(any(unix, windows)))]
        let _ = failed;
        Ok(Self {
            #[cfg(any(unix, windows))]
            signal,
            closed: false,
        })
    }

    /// Completes at the next Ctrl-C (at once when one came since the last call); never
    /// completes when Ctrl-C cannot be received any more.
    pub(crate) async fn recv(&mut self) {
        if !self.closed {
            #[cfg(any(unix, windows))]
            if self.signal.recv().await.is_some() {
                return;
            }
            self.closed = true;
        }
        std::future::pending::<()>().await;
    }
}
