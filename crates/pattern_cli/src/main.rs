//! `pattern`: the command line of Pattern.
//!
//! Parses the command line, sets up logging (tracing to stderr; `-v`/`-vv`/`-vvv` or
//! `RUST_LOG`), runs the command, and turns a failure into one line on stderr (`error: ...`) and
//! the exit code of its kind (see `error.rs` and `docs/cli.md`). Data goes to stdout, as text or,
//! with `--json`, as the documented JSON shapes. This file must never hold a command's logic, and
//! nothing but data may ever be printed to stdout.

mod archive;
mod cli;
mod commands;
mod env;
mod error;
mod interrupt;
mod logging;
mod output;
mod search_db;
mod transfer;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::env::Env;

// mimalloc: about 3 % less CPU than glibc's allocator on an import (decision 0025, "Stop 50");
// the libraries never choose an allocator, their users do.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors print the usage and exit 2.
            let code = if e.use_stderr() {
                error::Kind::Usage.code()
            } else {
                0
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    env::set_organization(cli.global.org.clone());
    let diagnostics = logging::init(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(error::Kind::Other.code());
        }
    };
    let result = runtime.block_on(async {
        let env = Env::resolve(&cli.global)?;
        commands::run(&env, cli.command).await
    });
    diagnostics.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}
