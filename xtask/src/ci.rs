//! `cargo xtask ci`, `test` and `bench`: the pipeline CI runs, and the parts
//! of it a developer runs by hand. It must never leave behind a PostgreSQL
//! cluster it started (see [`crate::guard`]), and never go on after a failed
//! step.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::guard::PgGuard;
use crate::{cmd, setup, tidy, workspace};

/// Environment variable giving tests and benches the PostgreSQL URL.
pub(crate) const TEST_PG_URL_ENV: &str = "PATTERN_TEST_PG_URL";

/// The full pipeline; prints a summary table at the end.
pub(crate) fn ci(root: &Path) -> Result<()> {
    let members = workspace::members(root)?;
    let mut plan = vec![
        "fmt".to_owned(),
        "clippy".to_owned(),
        "tidy".to_owned(),
        "setup".to_owned(),
        "sqlx check".to_owned(),
        "pg start".to_owned(),
    ];
    plan.extend(members.iter().map(|m| format!("test {}", m.name)));
    plan.extend([
        "main job".to_owned(),
        "doc".to_owned(),
        "pg stop".to_owned(),
    ]);

    let mut steps = Steps::default();
    let result = pipeline(root, &members, &mut steps);
    steps.summary(&plan);
    result
}

fn pipeline(root: &Path, members: &[workspace::Member], steps: &mut Steps) -> Result<()> {
    steps.run("fmt", || {
        cmd::run(cargo(root).args(["fmt", "--all", "--", "--check"]))
    })?;
    steps.run("clippy", || {
        cmd::run(cargo(root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    steps.run("tidy", || tidy::run(root))?;
    steps.run("setup", || setup::run(root))?;
    // After setup: it starts a PostgreSQL cluster of its own, from the installed binaries.
    steps.run("sqlx check", || {
        crate::sqlx::run(root, crate::sqlx::Action::Check)
    })?;
    let mut guard = None;
    steps.run("pg start", || {
        guard = Some(PgGuard::start(root)?);
        Ok(())
    })?;
    let Some(guard) = guard else {
        bail!("pg start did not return a cluster");
    };
    for member in members {
        steps.run(&format!("test {}", member.name), || {
            cmd::run(&mut cargo_test(root, &member.name, guard.url(), &[]))
        })?;
    }
    steps.run("main job", || {
        // README's first command (`cargo xtask demo`) is the same conversation built in
        // release mode; CI runs the debug build the tests already compiled.
        let data = workspace::cache_dir(root).join("ci-demo");
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        crate::demo::judge(
            cargo(root)
                .args(["run", "--quiet", "-p", "pattern_cli", "--", "--data-dir"])
                .arg(&data)
                .arg("demo"),
        )
    })?;
    steps.run("doc", || {
        cmd::run(cargo(root).env("RUSTDOCFLAGS", "-D warnings").args([
            "doc",
            "--workspace",
            "--no-deps",
        ]))
    })?;
    steps.run("pg stop", || guard.stop())
}

/// Tests of one crate (or every crate, then xtask) against a throwaway cluster.
pub(crate) fn test(root: &Path, krate: Option<&str>, args: &[String]) -> Result<()> {
    let names = match krate {
        Some(name) => vec![name.to_owned()],
        None => workspace::members(root)?
            .into_iter()
            .map(|m| m.name)
            .collect(),
    };
    let guard = PgGuard::start(root)?;
    let mut steps = Steps::default();
    for name in &names {
        steps.run(&format!("test {name}"), || {
            cmd::run(&mut cargo_test(root, name, guard.url(), args))
        })?;
    }
    guard.stop()
}

/// Benches of one crate (or every crate with a `benches/` folder).
pub(crate) fn bench(root: &Path, krate: Option<&str>, args: &[String]) -> Result<()> {
    let names = match krate {
        Some(name) => vec![name.to_owned()],
        None => workspace::members(root)?
            .into_iter()
            .filter(|m| m.dir.join("benches").is_dir())
            .map(|m| m.name)
            .collect(),
    };
    if names.is_empty() {
        eprintln!("bench: no crate has a benches/ folder");
        return Ok(());
    }
    let guard = PgGuard::start(root)?;
    let mut steps = Steps::default();
    for name in &names {
        steps.run(&format!("bench {name}"), || {
            let mut cmd = cargo(root);
            cmd.env(TEST_PG_URL_ENV, guard.url())
                .args(["bench", "-p", name]);
            if !args.is_empty() {
                cmd.arg("--").args(args);
            }
            cmd::run(&mut cmd)
        })?;
    }
    guard.stop()
}

/// `cargo` (the one running us, when known), in the workspace root.
fn cargo(root: &Path) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.current_dir(root);
    cmd
}

/// `cargo test -p NAME ARGS...` with the PostgreSQL URL in the environment.
fn cargo_test(root: &Path, name: &str, url: &str, args: &[String]) -> Command {
    let mut cmd = cargo(root);
    cmd.env(TEST_PG_URL_ENV, url)
        .args(["test", "-p", name])
        .args(args);
    cmd
}

/// Timed steps and their results.
#[derive(Debug, Default)]
struct Steps {
    done: Vec<(String, bool, Duration)>,
}

impl Steps {
    /// Run one step, printing `== name: Ns` when it ends.
    fn run(&mut self, name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
        eprintln!("== {name}");
        let started = Instant::now();
        let result = f();
        let took = started.elapsed();
        let status = if result.is_ok() { "" } else { " FAILED" };
        eprintln!("== {name}: {:.1}s{status}", took.as_secs_f64());
        self.done.push((name.to_owned(), result.is_ok(), took));
        result
    }

    /// A table of every planned step: ok, FAILED or skipped, with its time.
    fn summary(&self, plan: &[String]) {
        let width = plan.iter().map(String::len).max().unwrap_or(4).max(4);
        eprintln!();
        eprintln!("{:<width$}  {:<7}  {:>8}", "step", "result", "time");
        let mut total = Duration::ZERO;
        for name in plan {
            match self.done.iter().find(|(n, _, _)| n == name) {
                Some((_, ok, took)) => {
                    total += *took;
                    let result = if *ok { "ok" } else { "FAILED" };
                    eprintln!("{name:<width$}  {result:<7}  {:>7.1}s", took.as_secs_f64());
                }
                None => eprintln!("{name:<width$}  {:<7}  {:>8}", "skipped", "-"),
            }
        }
        eprintln!(
            "{:<width$}  {:<7}  {:>7.1}s",
            "total",
            "",
            total.as_secs_f64()
        );
    }
}
