//! `pattern-db`: the operator's tool for a Pattern database (SQLite file or PostgreSQL server).
//!
//! ```text
//! pattern-db migrate <up|down|reset|status> --url URL [--to VERSION]
//! pattern-db recover --url URL [--all-open]
//! pattern-db version --url URL
//! ```
//!
//! - `migrate status` lists every migration shipped in this build and whether it is applied;
//!   `up` applies the pending ones; `down` reverts all of them (or down to `--to VERSION`, which is
//!   kept); `reset` reverts all and applies them again. `down` and `reset` destroy stored history.
//! - `recover` abandons open batches whose run lease has expired (with `--all-open`: every open
//!   batch, only when no Pattern process uses the database) and lists their triggers for retry.
//! - `version` prints the engine's version and the machine id this process leased.
//!
//! Errors go to stderr as one line, `error: ...`, with exit status 1; usage errors print the usage
//! and exit with status 2.
//!
//! This tool is a thin shell over the `pattern_db` API: it must never run SQL of its own, never
//! print a password from a URL, and never abandon or revert anything the operator did not ask for
//! on the command line.

use std::process::ExitCode;

use pattern_db::{Database, DbConfig, MachineId, MigrationStatus, RecoveryScope};

const USAGE: &str = "\
usage: pattern-db migrate <up|down|reset|status> --url URL [--to VERSION]
       pattern-db recover --url URL [--all-open]
       pattern-db version --url URL

  migrate status   list shipped migrations and whether each is applied
  migrate up       apply pending migrations
  migrate down     revert migrations down to VERSION (kept; default 0: all). Destroys data
  migrate reset    revert all migrations, then apply them again. Destroys data
  recover          abandon open batches whose run lease expired and list their triggers;
                   --all-open abandons every open batch (only when no Pattern process is running)
  version          print the engine version and this process's machine id

  URL is sqlite://PATH or postgres://USER@HOST:PORT/DB";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Migrate(MigrateAction),
    Recover { all_open: bool },
    Version,
    Help,
}

/// The `migrate` sub-actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MigrateAction {
    Up,
    Down { to: i64 },
    Reset,
    Status,
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Invocation {
    command: Command,
    url: String,
}

/// Parses the arguments after the program name. `Err` holds a one-line reason for the usage error.
fn parse(args: &[String]) -> Result<Invocation, String> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Invocation {
            command: Command::Help,
            url: String::new(),
        });
    }
    let mut positional: Vec<&str> = Vec::new();
    let mut url: Option<String> = None;
    let mut to: Option<i64> = None;
    let mut all_open = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| match inline.clone() {
            Some(v) => Ok(v),
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value")),
        };
        match flag {
            "--url" => {
                if url.replace(value("--url")?).is_some() {
                    return Err("--url given twice".into());
                }
            }
            "--to" => {
                let text = value("--to")?;
                let version = text
                    .parse::<i64>()
                    .ok()
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| {
                        format!("--to needs a migration version (0 or more), not `{text}`")
                    })?;
                if to.replace(version).is_some() {
                    return Err("--to given twice".into());
                }
            }
            "--all-open" if inline.is_none() => all_open = true,
            other if other.starts_with('-') => return Err(format!("unknown option `{arg}`")),
            _ => positional.push(arg),
        }
    }
    let command = match positional.as_slice() {
        ["migrate", action] => Command::Migrate(match *action {
            "up" => MigrateAction::Up,
            "down" => MigrateAction::Down {
                to: to.unwrap_or(0),
            },
            "reset" => MigrateAction::Reset,
            "status" => MigrateAction::Status,
            other => return Err(format!("unknown migrate action `{other}`")),
        }),
        ["migrate"] => return Err("migrate needs an action: up, down, reset or status".into()),
        ["recover"] => Command::Recover { all_open },
        ["version"] => Command::Version,
        [] => return Err("no command given".into()),
        [cmd, extra @ ..] if matches!(*cmd, "migrate" | "recover" | "version") => {
            return Err(format!("unexpected argument `{}`", extra.join(" ")));
        }
        [cmd, ..] => return Err(format!("unknown command `{cmd}`")),
    };
    if to.is_some() && !matches!(command, Command::Migrate(MigrateAction::Down { .. })) {
        return Err("--to is only for `migrate down`".into());
    }
    if all_open && !matches!(command, Command::Recover { .. }) {
        return Err("--all-open is only for `recover`".into());
    }
    let url = url.ok_or("--url URL is required")?;
    Ok(Invocation { command, url })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let invocation = match parse(&args) {
        Ok(inv) => inv,
        Err(reason) => {
            eprintln!("error: {reason}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if invocation.command == Command::Help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(invocation)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(invocation: Invocation) -> pattern_db::Result<()> {
    // Opening applies pending migrations, so `migrate up` is done once this returns.
    let mut config = DbConfig::new(invocation.url);
    if matches!(invocation.command, Command::Migrate(_)) {
        // Inspect and migrate exactly as asked: no automatic migration on open. Migrations write
        // no snowflake ids, so the machine id is a fixed one and no lease is taken.
        config.migrate_on_open = false;
        config.machine_id = MachineId::Fixed(pattern_db::id::MAX_MACHINE_ID);
    }
    let db = Database::open(config).await?;
    let result = execute(&db, invocation.command).await;
    db.close().await;
    result
}

async fn execute(db: &Database, command: Command) -> pattern_db::Result<()> {
    match command {
        Command::Migrate(action) => {
            match action {
                MigrateAction::Up => db.migrate_up().await?,
                MigrateAction::Down { to } => db.migrate_down(to).await?,
                MigrateAction::Reset => {
                    db.migrate_down(0).await?;
                    db.migrate_up().await?;
                }
                MigrateAction::Status => {}
            }
            print_status(&db.migration_status().await?);
        }
        Command::Recover { all_open } => {
            let scope = if all_open {
                RecoveryScope::AllOpen
            } else {
                RecoveryScope::ExpiredLeases
            };
            let abandoned = db.recover_all(scope).await?;
            for a in &abandoned {
                println!(
                    "abandoned batch {} of agent {}: {}",
                    a.batch.id,
                    a.batch.agent_id,
                    one_line(&a.trigger.text())
                );
            }
            let noun = if abandoned.len() == 1 {
                "batch"
            } else {
                "batches"
            };
            println!("{} {noun} abandoned", abandoned.len());
        }
        Command::Version => {
            println!(
                "engine: {} {}",
                db.backend().name(),
                db.engine_version().await?
            );
            println!("machine id: {}", db.machine_id());
        }
        Command::Help => println!("{USAGE}"),
    }
    Ok(())
}

/// One line per migration: `0001 message store  applied`.
fn print_status(list: &[MigrationStatus]) {
    let width = list
        .iter()
        .map(|m| m.description.chars().count())
        .max()
        .unwrap_or(0);
    for m in list {
        let state = if m.applied { "applied" } else { "pending" };
        println!("{:04} {:<width$}  {state}", m.version, m.description);
    }
}

/// Trigger text on one line: newlines shown as `\n`, so each abandoned batch stays one line.
fn one_line(text: &str) -> String {
    text.replace('\r', "\\r").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_commands() {
        let inv = parse(&args("migrate down --url sqlite:///x.db --to 1")).unwrap();
        assert_eq!(inv.command, Command::Migrate(MigrateAction::Down { to: 1 }));
        assert_eq!(inv.url, "sqlite:///x.db");
        let inv = parse(&args("migrate down --url=sqlite:///x.db")).unwrap();
        assert_eq!(inv.command, Command::Migrate(MigrateAction::Down { to: 0 }));
        let inv = parse(&args("--url sqlite:///x.db recover --all-open")).unwrap();
        assert_eq!(inv.command, Command::Recover { all_open: true });
        assert_eq!(
            parse(&args("version --url u")).unwrap().command,
            Command::Version
        );
        assert_eq!(parse(&args("migrate -h")).unwrap().command, Command::Help);
    }

    #[test]
    fn refuses_bad_lines() {
        for bad in [
            "",
            "migrate",
            "migrate sideways --url u",
            "migrate status",
            "migrate up --url u --to 1",
            "migrate down --url u --to -1",
            "migrate down --url u --to x",
            "migrate down --url",
            "version --url u --all-open",
            "version --url u extra",
            "frobnicate --url u",
            "version --url u --verbose",
            "version --url a --url b",
        ] {
            assert!(parse(&args(bad)).is_err(), "`{bad}` should be refused");
        }
    }
}
