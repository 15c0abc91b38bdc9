//! One module per command group; [`run`] dispatches a parsed command to it. Commands print data
//! through `crate::output` and return typed CLI errors; they must never print errors themselves
//! or exit the process.

mod agent;
mod batches;
mod chat;
mod demo;
mod init;
mod memory;
mod ops;
mod session;
mod transfer;

use crate::cli::Command;
use crate::env::Env;
use crate::error::Result;

/// Runs one command.
pub(crate) async fn run(env: &Env, command: Command) -> Result<()> {
    match command {
        Command::Init => init::run(env).await,
        Command::Agent(c) => agent::run(env, c).await,
        Command::Memory(c) => memory::run(env, c).await,
        Command::Batches(c) => batches::run(env, c).await,
        Command::Recover(args) => ops::recover(env, args).await,
        Command::Migrate(c) => ops::migrate(env, c).await,
        Command::Export(args) => transfer::export(env, args).await,
        Command::Import(args) => transfer::import(env, args).await,
        Command::Session(c) => session::run(env, c).await,
        Command::Chat(args) => chat::chat(env, args).await,
        Command::Send(args) => chat::send(env, args).await,
        Command::Demo(args) => demo::run(env, args).await,
    }
}
