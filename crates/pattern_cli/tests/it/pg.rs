//! One smoke test on PostgreSQL through `--database-url`, with a private server from
//! `pattern_db`'s testkit (or `PATTERN_TEST_PG_URL`).

use pattern_db::Backend;
use pattern_db::testkit::TestDb;

use crate::{CONFLICT, Home, block_on};

#[test]
fn the_cli_runs_on_postgres() {
    let tdb = block_on(TestDb::fresh(Backend::Postgres)).unwrap();
    let url = tdb.config().url;
    let home = Home::with_url(url);
    let init = home.json(&["init"]);
    assert_eq!(init["backend"], "postgres");
    assert!(!home.data_dir().join("pattern.db").exists());
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    home.ok(&[
        "memory", "block", "create", "notes", "--limit", "20", "--agent", "ada",
    ]);
    home.ok(&[
        "memory", "block", "append", "notes", "pg works", "--agent", "ada",
    ]);
    home.fails(
        &[
            "memory",
            "block",
            "set",
            "notes",
            "x",
            "--expect-version",
            "1",
            "--agent",
            "ada",
        ],
        CONFLICT,
    );
    let s = home.json(&["session", "create", "ada", "bob", "--sync"]);
    let id = s["id"].as_str().unwrap();
    home.ok(&["session", "send", id, "--from", "ada", "hi"]);
    let file = home.path("ada.jsonl");
    home.ok(&["export", "ada", file.to_str().unwrap()]);
    home.ok(&["import", file.to_str().unwrap(), "--rename", "ada2"]);
    let block = home.json(&["memory", "block", "show", "notes", "--agent", "ada2"]);
    assert_eq!(block["value"], "pg works");
    assert_eq!(block["version"], 2);
    assert!(
        home.json(&["migrate", "status"])
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["applied"] == true)
    );
    block_on(tdb.cleanup()).unwrap();
}
