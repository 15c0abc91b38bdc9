//! Running child processes: echo the command line, run it with inherited
//! stdio, and turn a non-zero exit into an error. It must never run anything
//! through a shell and never write to stdout (stdout is reserved for values
//! scripts capture, such as the PostgreSQL URL).

use std::ffi::OsStr;
use std::process::{Command, Output};

use anyhow::{Context, Result, bail};

/// A printable rendering of a command line.
pub(crate) fn render(cmd: &Command) -> String {
    let mut parts = Vec::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            parts.push(format!("{}={}", key.to_string_lossy(), quote(value)));
        }
    }
    parts.push(quote(cmd.get_program()));
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

fn quote(s: &OsStr) -> String {
    let s = redact(&s.to_string_lossy());
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
    {
        s
    } else {
        shell_quote(&s)
    }
}

/// Hide the password of a URL such as `postgres://user:secret@host/db`.
fn redact(s: &str) -> String {
    let Some(scheme_end) = s.find("://") else {
        return s.to_owned();
    };
    let rest = &s[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return s.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &s[..scheme_end + 3],
            &rest[..colon],
            &rest[at..]
        ),
        None => s.to_owned(),
    }
}

/// Quote `s` for a POSIX shell (single quotes).
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Run `cmd` with inherited stdio; error if it cannot start or exits non-zero.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let line = render(cmd);
    eprintln!("$ {line}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Run `cmd` quietly and capture its output; error only if it cannot start.
pub(crate) fn output(cmd: &mut Command) -> Result<Output> {
    let line = render(cmd);
    cmd.output()
        .with_context(|| format!("could not start `{line}`"))
}

/// Run `cmd` quietly; true when it started and exited zero.
pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

/// True when running as root (`id -u` prints 0).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    //! Command-line rendering.

    use super::*;

    #[test]
    fn renders_with_quotes() {
        let mut cmd = Command::new("pg_ctl");
        cmd.args(["-o", "-p 1 -k /x"]).env("A", "b c");
        assert_eq!(render(&cmd), "A='b c' pg_ctl -o '-p 1 -k /x'");
    }

    #[test]
    fn hides_passwords() {
        assert_eq!(
            redact("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:1/p"),
            "postgres://postgres@127.0.0.1:1/p"
        );
        assert_eq!(redact("sqlite:///a/b.db"), "sqlite:///a/b.db");
        assert_eq!(redact("--check"), "--check");
    }

    #[test]
    fn shell_quotes_single_quote() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
