//! One smoke test on PostgreSQL through `--database-url`, with a private server from
//! `pattern_db`'s testkit (or `PATTERN_TEST_PG_URL`).

use pattern_db::Backend;
use pattern_db::testkit::TestDb;

use crate::{CONFLICT, Home, USAGE, block_on};

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

#[test]
fn archival_search_meetings_and_retention_run_on_postgres() {
    let tdb = block_on(TestDb::fresh(Backend::Postgres)).unwrap();
    let url = tdb.config().url;
    let home = Home::with_url(url.clone());
    home.ok(&["init"]);
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    let cat = home.json(&[
        "archival",
        "insert",
        "--agent",
        "ada",
        "the cat sat on the mat",
    ]);
    let file = home.path("p.jsonl");
    std::fs::write(&file, "{\"text\": \"quarterly revenue grew\"}\n").unwrap();
    let report = home.json(&[
        "archival",
        "import",
        "--agent",
        "ada",
        "--jsonl",
        file.to_str().unwrap(),
    ]);
    assert_eq!(report["imported"], 1);
    let hits = home.json(&["search", "--mode", "fts", "revenue"]);
    assert_eq!(hits[0]["text"], "quarterly revenue grew");
    let hits = home.json(&[
        "search",
        "--mode",
        "vector",
        "kitten on a rug",
        "--limit",
        "1",
    ]);
    assert_eq!(hits[0]["id"], cat["id"]);
    // This process's own index (decision 0028), built from the database: both passages at least.
    assert_eq!(
        home.json(&["reindex"])["documents"]
            .as_u64()
            .map(|d| d >= 2),
        Some(true)
    );
    let m = home.json(&["meeting", "create", "ada"]);
    let id = m["meeting"]["id"].as_str().unwrap();
    home.json(&["meeting", "invite", id, "--by", "ada", "bob"]);
    home.json(&["meeting", "join", id, "bob"]);
    home.json(&["meeting", "start", id, "--by", "ada"]);
    home.json(&["meeting", "end", id, "--by", "ada"]);
    home.fails(&["retention", "--dry-run", "--older-than-days", "0"], USAGE);
    crate::backdate(&url, 2);
    let dry = home.json(&["retention", "--dry-run", "--older-than-days", "1"]);
    assert_eq!(dry["deleted_meetings"].as_array().unwrap().len(), 1);
    block_on(tdb.cleanup()).unwrap();
}
