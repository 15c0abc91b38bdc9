//! One module per command group; [`run`] dispatches a parsed command to it. Commands print data
//! through `crate::output` and return typed CLI errors; they must never print errors themselves
//! or exit the process (a turn that fails inside `chat` is a note of the session, on stderr,
//! not an error of the command).

mod agent;
mod approvals;
mod archival;
mod batches;
mod chat;
mod demo;
mod init;
mod keys;
mod legacy;
mod letta;
pub(crate) mod mcp;
mod meeting;
mod memory;
mod ops;
mod retention;
mod schedule;
mod search;
mod serve;
mod session;
mod setup;
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
        Command::Import(args) if args.legacy => legacy::import(env, args).await,
        Command::Import(args) if args.letta => letta::import(env, args).await,
        Command::Import(args) => transfer::import(env, args).await,
        Command::Session(c) => session::run(env, c).await,
        Command::Chat(args) => chat::chat(env, args).await,
        Command::Send(args) => chat::send(env, args).await,
        Command::Demo(args) => demo::run(env, args).await,
        Command::Archival(c) => archival::run(env, c).await,
        Command::Search(args) => search::search(env, args).await,
        Command::Reindex => search::reindex(env).await,
        Command::Embed(args) => search::embed(env, args).await,
        Command::Retention(args) => retention::run(env, args).await,
        Command::Meeting(c) => meeting::run(env, c).await,
        Command::Serve(args) => serve::run(env, args).await,
        Command::Setup(args) => setup::run(env, args).await,
        Command::Schedule(c) => schedule::run(env, c).await,
        Command::Org(c) => keys::org(env, c).await,
        Command::Key(c) => keys::key(env, c).await,
        Command::Approvals(c) => approvals::run(env, c).await,
        Command::Mcp(c) => mcp::run(env, c).await,
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal); the one progress display
/// of every long command.
pub(crate) fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// Progress of work whose size is not known beforehand: a spinner with the elapsed time, on
/// stderr (hidden when stderr is not a terminal).
pub(crate) fn spinner(what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{msg:>10} {spinner} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}
