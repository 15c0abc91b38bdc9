//! `cargo xtask bench --goals`: runs `pattern_db`'s `goals` bench (issue 17's storage goals on
//! SQLite, and on the throwaway PostgreSQL it starts) and writes its table into
//! `docs/performance.md` between the two marker lines, from criterion's `estimates.json` files
//! and the bench's `goals-side.json` and `goals-pg.json`. It must never change the
//! document outside the markers, and never write a table from figures of an earlier run (it
//! removes the previous run's estimates first).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::cmd;
use crate::guard::PgGuard;

/// The line after which the table goes.
pub(crate) const BEGIN: &str = "<!-- goals:begin (written by `cargo xtask bench --goals`) -->";
/// The line before which the table ends.
pub(crate) const END: &str = "<!-- goals:end -->";

/// Where criterion writes: `CRITERION_HOME`, else `<target>/criterion`.
fn criterion_home(root: &Path) -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("criterion")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Runs the bench and writes the table.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let home = criterion_home(root);
    // Figures of an earlier run must not end up in this run's table.
    let _ = std::fs::remove_dir_all(home.join("goals"));
    let _ = std::fs::remove_file(home.join("goals-side.json"));
    let _ = std::fs::remove_file(home.join("goals-pg.json"));
    let _ = std::fs::remove_file(home.join("goals-next-search.json"));
    let guard = PgGuard::start(root)?;
    let before = load_average();
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut bench = std::process::Command::new(program);
    bench
        .current_dir(root)
        .env("CRITERION_HOME", &home)
        .env(crate::ci::TEST_PG_URL_ENV, guard.url())
        .args(["bench", "-p", "pattern_db", "--bench", "goals"]);
    if !args.is_empty() {
        bench.arg("--").args(args);
    }
    let ran = cmd::run(&mut bench);
    let after = load_average();
    guard.stop()?;
    ran?;
    let quick = std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let command = format!(
        "{}cargo xtask bench --goals{}",
        if quick { "PATTERN_BENCH_QUICK=1 " } else { "" },
        if args.is_empty() {
            String::new()
        } else {
            format!(" -- {}", args.join(" "))
        }
    );
    let table = table(
        &home,
        &Run {
            date: today(),
            load: format!("{before} / {after}"),
            command,
        },
    )?;
    let doc = root.join("docs/performance.md");
    let text =
        std::fs::read_to_string(&doc).with_context(|| format!("reading {}", doc.display()))?;
    let replaced = replace_between(&text, &table)?;
    std::fs::write(&doc, replaced).with_context(|| format!("writing {}", doc.display()))?;
    println!("{table}");
    println!("goals: table written into {}", doc.display());
    Ok(())
}

/// The date and machine state of one run.
struct Run {
    date: String,
    load: String,
    command: String,
}

/// Criterion's estimate of one benchmark: (median, mean) in nanoseconds.
fn estimate(home: &Path, name: &str) -> Option<(f64, f64)> {
    let path = home.join("goals").join(name).join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    let median = v.get("median")?.get("point_estimate")?.as_f64()?;
    let mean = v.get("mean")?.get("point_estimate")?.as_f64()?;
    Some((median, mean))
}

fn ms(ns: f64) -> String {
    format!("{:.3} ms", ns / 1e6)
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "not met" }
}

/// A message count as the table names it: `100k`, or the number below a thousand.
fn count_label(messages: f64) -> String {
    if messages >= 1000.0 {
        format!("{:.0}k", messages / 1000.0)
    } else {
        format!("{messages:.0}")
    }
}

/// The markdown table of one run.
fn table(home: &Path, run: &Run) -> Result<String> {
    let side: Option<Value> = std::fs::read_to_string(home.join("goals-side.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let messages = side
        .as_ref()
        .and_then(|s| s.get("messages")?.as_f64())
        .unwrap_or(100_000.0);
    let scale = count_label(messages);
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut measured_any = false;
    if let Some((median, _)) = estimate(home, "ack_p50") {
        measured_any = true;
        rows.push([
            "one durable acknowledgement, p50 (`synchronous=FULL`)".into(),
            "<= 0.45 ms".into(),
            ms(median),
            met(median <= 0.45e6).into(),
        ]);
    }
    if let Some((median, _)) = estimate(home, "ack_p50_normal") {
        // The peer's acknowledgement at NORMAL measured 0.25-0.37 ms (issue 17): met at or under
        // its best figure, "within the peer's range" up to its worst.
        rows.push([
            "one acknowledgement, p50 (`synchronous=NORMAL`)".into(),
            "<= the peer's 0.25-0.37 ms".into(),
            ms(median),
            if median <= 0.25e6 {
                "met".into()
            } else if median <= 0.37e6 {
                "within the peer's range".into()
            } else {
                "not met".into()
            },
        ]);
    }
    if let Some((median, _)) = estimate(home, "bare_insert") {
        rows.push([
            "bare single-row autocommit `INSERT`, same file (reference)".into(),
            "-".into(),
            ms(median),
            "-".into(),
        ]);
    }
    if let Some((_, mean)) = estimate(home, "acks_100_writers") {
        let per_s = 1e9 / mean;
        rows.push([
            "100 writers, acknowledgements per second".into(),
            ">= 20 k/s".into(),
            format!("{:.1} k/s", per_s / 1e3),
            met(per_s >= 20_000.0).into(),
        ]);
    }
    if let Some((median, _)) = estimate(home, "import_100k") {
        let per_s = messages / (median / 1e9);
        rows.push([
            format!("import ({scale} messages, `import_legacy`)"),
            ">= 100 k/s".into(),
            format!("{:.1} k/s", per_s / 1e3),
            met(per_s >= 100_000.0).into(),
        ]);
    }
    if let Some(bytes) = side
        .as_ref()
        .and_then(|s| s.get("bytes_per_message")?.as_f64())
    {
        let db = side
            .as_ref()
            .and_then(|s| s.get("db_bytes")?.as_f64())
            .unwrap_or(0.0);
        let index = side
            .as_ref()
            .and_then(|s| s.get("index_bytes")?.as_f64())
            .unwrap_or(0.0);
        rows.push([
            "bytes per 387-byte message of an imported history, indexes and full-text index included".into(),
            "<= 600".into(),
            format!(
                "{bytes:.0} ({:.0} database + {:.0} full-text index)",
                db / messages,
                index / messages
            ),
            met(bytes <= 600.0).into(),
        ]);
    }
    let side_f64 = |key: &str| side.as_ref().and_then(|s| s.get(key)?.as_f64());
    if let Some(bytes) = side_f64("plain_bytes_per_message") {
        // The same history stored as acknowledgements store it (nothing compressed until it is
        // archived); a reference beside the goal above.
        rows.push([
            "bytes per message of a history stored as acknowledged (reference)".into(),
            "-".into(),
            format!("{bytes:.0}"),
            "-".into(),
        ]);
    }
    if let Some(bytes) = side_f64("archived_bytes_per_message") {
        // The same history once all but its newest 25 batches are archived (out of the
        // context: stored compressed, out of full text); a reference beside the goal above.
        rows.push([
            "bytes per message once archived (all but the newest 25 batches; reference)".into(),
            "-".into(),
            format!(
                "{bytes:.0} ({:.0} database + {:.0} full-text index; archiving took {:.2} s)",
                side_f64("archived_db_bytes").unwrap_or(0.0) / messages,
                side_f64("archived_index_bytes").unwrap_or(0.0) / messages,
                side_f64("archive_s").unwrap_or(0.0)
            ),
            "-".into(),
        ]);
    }
    if let Some((median, _)) = estimate(home, "newest_50_uncached") {
        rows.push([
            format!("newest 50 messages at {scale}, read cache bypassed"),
            "<= 0.3 ms".into(),
            ms(median),
            met(median <= 0.3e6).into(),
        ]);
    }
    let search = estimate(home, "search").map(|(median, _)| median);
    if let Some(s) = search {
        rows.push([
            format!("full-text search of one agent's {scale} messages, p50 (reference)"),
            "-".into(),
            ms(s),
            "-".into(),
        ]);
    }
    if let Some((median, _)) = estimate(home, "first_search_after_import") {
        // The next search of the same agent right after it searches the same index; the
        // reference search above ran before the samples' imports grew it.
        let next = std::fs::read_to_string(home.join("goals-next-search.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.get("next_search_p50_ms")?.as_f64());
        rows.push(match next {
            Some(next) => [
                format!("first search after a {scale} import, p50"),
                "as fast as any other (<= 2x the next search on the same index)".into(),
                format!("{} (the next search {next:.3} ms)", ms(median)),
                met(median <= 2.0 * next * 1e6).into(),
            ],
            None => [
                format!("first search after a {scale} import, p50"),
                "as fast as any other (<= 2x the search p50)".into(),
                ms(median),
                met(search.is_some_and(|s| median <= 2.0 * s)).into(),
            ],
        });
    }
    let pg: Option<Value> = std::fs::read_to_string(home.join("goals-pg.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    if let Some((median, _)) = estimate(home, "pg_ack_p50") {
        rows.push([
            "PostgreSQL: one acknowledgement, p50 (`synchronous_commit=on`)".into(),
            "<= 0.6 ms".into(),
            ms(median),
            met(median <= 0.6e6).into(),
        ]);
    }
    if let Some(pg) = &pg {
        let figure = |key: &str| pg.get(key).and_then(Value::as_f64);
        if let (Some(p50), Some(p95)) = (figure("search_p50_ms"), figure("search_p95_ms")) {
            let pg_scale = figure("messages").map_or_else(|| scale.clone(), count_label);
            rows.push([
                format!("PostgreSQL: full-text search of one agent's {pg_scale} messages, p95"),
                "<= 10 ms".into(),
                format!("{p95:.3} ms (p50 {p50:.3} ms)"),
                met(p95 <= 10.0).into(),
            ]);
        }
    }
    if !measured_any && rows.is_empty() {
        bail!(
            "no goals figures under {}: did the bench run (a name filter may have left them out)?",
            home.display()
        );
    }
    let mut out = String::new();
    out.push_str("| goal | target | measured | met | date | load (before / after) |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for [goal, target, measured, ok] in rows {
        out.push_str(&format!(
            "| {goal} | {target} | {measured} | {ok} | {} | {} |\n",
            run.date, run.load
        ));
    }
    out.push_str(&format!("\nCommand: `{}`\n", run.command));
    Ok(out)
}

/// `text` with everything between the marker lines replaced by `table`.
fn replace_between(text: &str, table: &str) -> Result<String> {
    let Some(start) = text.find(BEGIN) else {
        bail!("docs/performance.md has no line {BEGIN}");
    };
    let body = start + BEGIN.len();
    let Some(end) = text[body..].find(END).map(|i| body + i) else {
        bail!("docs/performance.md has no line {END} after {BEGIN}");
    };
    Ok(format!("{}\n{}{}", &text[..body], table, &text[end..]))
}

/// Today's date (UTC) as `YYYY-MM-DD`.
fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_418), (2025, 11, 26));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn replaces_only_between_markers() {
        let text = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        let out = replace_between(&text, "new\n").unwrap();
        assert_eq!(out, format!("a\n{BEGIN}\nnew\n{END}\nb\n"));
        assert!(replace_between("no markers", "x").is_err());
    }

    #[test]
    fn table_from_estimates() {
        let dir = std::env::temp_dir().join(format!("xtask-goals-{}", std::process::id()));
        let est = |name: &str, median: f64| {
            let d = dir.join("goals").join(name).join("new");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("estimates.json"),
                format!(
                    r#"{{"mean":{{"point_estimate":{median}}},"median":{{"point_estimate":{median}}}}}"#
                ),
            )
            .unwrap();
        };
        est("ack_p50", 400_000.0);
        est("ack_p50_normal", 300_000.0);
        est("acks_100_writers", 100_000.0);
        est("pg_ack_p50", 550_000.0);
        est("search", 1_000_000.0);
        est("first_search_after_import", 3_000_000.0);
        std::fs::write(
            dir.join("goals-next-search.json"),
            r#"{"samples":10,"next_search_p50_ms":2.0}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("goals-pg.json"),
            r#"{"messages":100000,"searches":200,"search_p50_ms":4.5,"search_p95_ms":12.25}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("goals-side.json"),
            r#"{"messages":100000,"bytes_per_message":700.0,"db_bytes":60000000,"index_bytes":10000000,"archived_db_bytes":40000000,"archived_index_bytes":500000,"archived_bytes_per_message":405.0,"archive_s":1.25,"plain_bytes_per_message":650.0}"#,
        )
        .unwrap();
        let t = table(
            &dir,
            &Run {
                date: "2026-11-26".into(),
                load: "1.0 / 1.2".into(),
                command: "cargo xtask bench --goals".into(),
            },
        )
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(t.contains("| 0.400 ms | met |"), "{t}");
        assert!(t.contains("| 10.0 k/s | not met |"), "{t}");
        assert!(
            t.contains("(`synchronous=NORMAL`) | <= the peer's 0.25-0.37 ms | 0.300 ms | within the peer's range |"),
            "{t}"
        );
        assert!(
            t.contains("700 (600 database + 100 full-text index) | not met"),
            "{t}"
        );
        assert!(
            t.contains("| 405 (400 database + 5 full-text index; archiving took 1.25 s) | - |"),
            "{t}"
        );
        assert!(
            t.contains("stored as acknowledged (reference) | - | 650 | - |"),
            "{t}"
        );
        assert!(
            t.contains(
                "acknowledgement, p50 (`synchronous_commit=on`) | <= 0.6 ms | 0.550 ms | met |"
            ),
            "{t}"
        );
        assert!(
            t.contains("100k messages, p95 | <= 10 ms | 12.250 ms (p50 4.500 ms) | not met |"),
            "{t}"
        );
        // Against the next search on the same index (2 ms), not the earlier reference (1 ms).
        assert!(
            t.contains("on the same index) | 3.000 ms (the next search 2.000 ms) | met |"),
            "{t}"
        );
    }
}
