//! `archival`, `search`, `reindex`, `embed`, `retention` and `meeting` through the real binary,
//! with the offline embedding model from the workspace's `.cache` (`cargo xtask setup`), and
//! without it (a model folder that does not exist).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::{CONFLICT, Home, NOT_FOUND, REFUSED, USAGE, finish, interrupt};

fn with_agent() -> Home {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    home
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn archival_insert_list_search_delete() {
    let home = with_agent();
    let cat = home.json(&[
        "archival",
        "insert",
        "--agent",
        "ada",
        "the cat sat on the mat",
        "--tag",
        "pets",
    ]);
    assert_eq!(cat["tags"][0], "pets");
    let cat_id = cat["id"].as_str().unwrap().to_owned();
    home.json(&[
        "archival",
        "insert",
        "--agent",
        "ada",
        "quarterly revenue grew by ten percent",
        "--key",
        "rev",
    ]);
    // Same key: the stored passage comes back, nothing new is stored.
    let again = home.json(&[
        "archival",
        "insert",
        "--agent",
        "ada",
        "other text",
        "--key",
        "rev",
    ]);
    assert_eq!(again["content"], "quarterly revenue grew by ten percent");
    assert_eq!(
        home.json(&["archival", "list", "--agent", "ada"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        ids(&home.json(&["archival", "list", "--agent", "ada", "--tag", "pets"])),
        vec![cat_id.clone()]
    );

    // A paraphrase with no shared word is found by meaning (vector / hybrid).
    let hits = home.json(&[
        "archival",
        "search",
        "--agent",
        "ada",
        "a kitten resting on a rug",
    ]);
    assert_eq!(ids(&hits)[0], cat_id);
    let hits = home.json(&[
        "search",
        "--mode",
        "vector",
        "kitten on a rug",
        "--limit",
        "1",
    ]);
    assert_eq!(hits[0]["id"], cat_id.as_str());
    assert_eq!(hits[0]["content_type"], "archival");
    let hits = home.json(&["search", "--mode", "fts", "revenue", "--type", "archival"]);
    assert_eq!(hits.as_array().unwrap().len(), 1);
    assert_eq!(
        home.json(&["search", "--mode", "fts", "revenue", "--type", "block"]),
        serde_json::json!([])
    );

    let status = home.json(&["embed", "--status"]);
    assert_eq!(status["enabled"], true);
    assert_eq!(status["pending_jobs"], 0);
    assert_eq!(status["indexed"], 2);

    home.json(&["archival", "delete", "--agent", "ada", &cat_id]);
    home.fails(
        &["archival", "delete", "--agent", "ada", &cat_id],
        NOT_FOUND,
    );
    home.fails(&["archival", "delete", "--agent", "ada", "nope"], USAGE);
    let hits = home.json(&["search", "--mode", "vector", "kitten on a rug"]);
    assert!(
        !ids(&hits).contains(&cat_id),
        "deleted passage found: {hits}"
    );
    home.fails(&["archival", "list", "--agent", "nobody"], NOT_FOUND);
    home.fails(&["archival", "list"], USAGE);
    home.fails(&["search", "   "], USAGE);
}

#[test]
fn import_reports_bad_lines_keeps_good_ones_and_is_idempotent() {
    let home = with_agent();
    let file = home.path("passages.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"text\": \"alpha passage\", \"tags\": [\"a\"]}\n",
            "not json\n",
            "\n",
            "{\"text\": \"beta passage\", \"key\": \"b\", \"metadata\": {\"source\": \"x\"}}\n",
            "{\"text\": \"\"}\n",
            "{\"text\": \"gamma passage\", \"tags\": [\"t\", \"t\"]}\n",
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = home.run(&[
        "--json", "archival", "import", "--agent", "ada", "--jsonl", file,
    ]);
    assert_eq!(out.status.code(), Some(REFUSED));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["imported"], 2);
    assert_eq!(report["skipped"], 0);
    let bad: Vec<i64> = report["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["line"].as_i64().unwrap())
        .collect();
    assert_eq!(bad, vec![2, 5, 6]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(&format!("{file}:2:")), "{stderr}");
    assert!(stderr.contains(&format!("{file}:6:")), "{stderr}");

    // Re-run: nothing new.
    let out = home.run(&[
        "--json", "archival", "import", "--agent", "ada", "--jsonl", file,
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["imported"].as_i64(), report["skipped"].as_i64()),
        (Some(0), Some(2))
    );
    let list = home.json(&["archival", "list", "--agent", "ada"]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let beta = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["content"] == "beta passage")
        .unwrap();
    assert_eq!(beta["key"], "b");
    assert_eq!(beta["metadata"]["source"], "x");

    // All good: exit 0.
    let good = home.path("good.jsonl");
    std::fs::write(&good, "{\"text\": \"delta passage\"}\n").unwrap();
    let report = home.json(&[
        "archival",
        "import",
        "--agent",
        "ada",
        "--jsonl",
        good.to_str().unwrap(),
    ]);
    assert_eq!(report["imported"], 1);
    assert_eq!(report["bad"], serde_json::json!([]));
    home.fails(
        &[
            "archival",
            "import",
            "--agent",
            "ada",
            "--jsonl",
            "/nonexistent.jsonl",
        ],
        NOT_FOUND,
    );
}

/// Documents of each text kind, a bad one among them: the good ones are stored whole with their
/// sections, the import waits for their embeddings (vector search finds them at once), the bad
/// one is reported with its reason and stores nothing, and a re-run stores nothing new.
/// Passages carrying `occurred_at` are found by the dates a query names and by `--since` /
/// `--until`; a malformed time is a bad line; bad flags are usage errors.
#[test]
fn archival_search_by_dates() {
    let home = with_agent();
    let file = home.path("dated.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"text\": \"the ferry was cancelled by the storm\", \"metadata\": {\"occurred_at\": \"2023-01-14T09:00:00Z\"}}\n",
            "{\"text\": \"the ferry left on time\", \"metadata\": {\"occurred_at\": \"2023-02-20T09:00:00Z\"}}\n",
            "{\"text\": \"the ferry sailed at dawn\", \"metadata\": {\"occurred_at\": \"14 March\"}}\n",
        ),
    )
    .unwrap();
    let out = home.run(&[
        "--json",
        "archival",
        "import",
        "--agent",
        "ada",
        "--jsonl",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(REFUSED));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["imported"], 2);
    assert_eq!(report["bad"][0]["line"], 3);
    let texts = |v: serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| h["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let hits = home.json(&[
        "archival",
        "search",
        "--agent",
        "ada",
        "ferry on 14 January 2023",
    ]);
    assert_eq!(texts(hits), ["the ferry was cancelled by the storm"]);
    let hits = home.json(&[
        "archival",
        "search",
        "--agent",
        "ada",
        "ferry",
        "--since",
        "2023-02-01",
    ]);
    assert_eq!(texts(hits), ["the ferry left on time"]);
    let hits = home.json(&[
        "archival",
        "search",
        "--agent",
        "ada",
        "ferry",
        "--until",
        "2023-01-14T12:00:00+00:00",
    ]);
    assert_eq!(texts(hits), ["the ferry was cancelled by the storm"]);
    let hits = home.json(&[
        "archival",
        "search",
        "--agent",
        "ada",
        "ferry on 14 January 2023",
        "--no-dates",
    ]);
    assert_eq!(texts(hits).len(), 2);
    // A bad time is clap's usage error (exit 2), naming the value.
    let out = home.run(&[
        "archival",
        "search",
        "--agent",
        "ada",
        "ferry",
        "--since",
        "yesterday",
    ]);
    assert_eq!(out.status.code(), Some(USAGE));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("`yesterday` is not a date"), "{stderr}");
    home.fails(
        &[
            "archival",
            "search",
            "--agent",
            "ada",
            "ferry",
            "--since",
            "2023-03-01",
            "--until",
            "2023-02-01",
        ],
        USAGE,
    );
}

#[test]
fn archival_import_takes_documents_waits_for_embeddings_and_is_idempotent() {
    let home = with_agent();
    let md = home.path("garden.md");
    std::fs::write(
        &md,
        "# Garden\n\n## Tomatoes\n\nTomatoes want full sun and deep watering twice a week.\n\n\
         ## Beans\n\nRunner beans climb any pole you give them.\n",
    )
    .unwrap();
    let html = home.path("trip.html");
    std::fs::write(
        &html,
        "<html><head><title>Lake trip</title><script>nope()</script></head><body>\
         <h1>Day one</h1><p>The ferry to the island leaves at nine.</p></body></html>",
    )
    .unwrap();
    let txt = home.path("notes.txt");
    std::fs::write(
        &txt,
        "The boiler was serviced in March.\n\nCall the plumber in May.\n",
    )
    .unwrap();
    let binary = home.path("photo.txt");
    std::fs::write(&binary, [0x89u8, b'P', b'N', b'G', 0, 0, 1, 2]).unwrap();
    let args = |paths: &[&std::path::Path]| {
        let mut a: Vec<String> = [
            "--json", "archival", "import", "--agent", "ada", "--tag", "docs",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        a.extend(paths.iter().map(|p| p.to_str().unwrap().to_owned()));
        a
    };
    let run = |paths: &[&std::path::Path]| {
        let a = args(paths);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        home.run(&refs)
    };
    let out = run(&[&md, &html, &txt, &binary]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(USAGE), "{stderr}");
    assert!(stderr.contains("photo.txt is not UTF-8 text"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Two sections of the Markdown, one of the HTML; the text's two short paragraphs share one.
    assert_eq!(report["imported"], 4, "{report}");
    assert_eq!(report["skipped"], 0);
    assert_eq!(report["documents"].as_array().unwrap().len(), 3);
    assert_eq!(report["documents"][1]["title"], "Lake trip");
    assert_eq!(report["failed"].as_array().unwrap().len(), 1);
    assert_eq!(report["embeddings"]["enabled"], true);
    assert_eq!(report["embeddings"]["waited"], true);
    assert_eq!(report["embeddings"]["pending"], 0);
    assert_eq!(report["embeddings"]["embedded"], 4);
    // Embedded before the import returned: a vector search finds a document passage.
    let hits = home.json(&[
        "search",
        "--mode",
        "vector",
        "--agent",
        "ada",
        "when does the boat depart",
    ]);
    assert_eq!(hits[0]["text"], "The ferry to the island leaves at nine.");
    let list = home.json(&["archival", "list", "--agent", "ada", "--tag", "docs"]);
    let beans = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["content"].as_str().unwrap().contains("Runner beans"))
        .unwrap();
    assert_eq!(beans["metadata"]["section"], "Garden > Beans");
    assert_eq!(beans["metadata"]["title"], "Garden");
    assert_eq!(beans["metadata"]["position"], 1);
    // Re-run of the good ones: nothing new, everything reported skipped, exit 0.
    let out = run(&[&md, &html, &txt]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["imported"].as_i64(), report["skipped"].as_i64()),
        (Some(0), Some(4))
    );
    assert_eq!(list.as_array().unwrap().len(), 4);
    // One missing document: its own class (not found).
    let err = home.fails(
        &[
            "archival",
            "import",
            "--agent",
            "ada",
            home.path("gone.md").to_str().unwrap(),
        ],
        NOT_FOUND,
    );
    assert!(err.contains("gone.md"), "{err}");
}

/// Repeated identical lines are all stored (keyed by text and occurrence) and reported as
/// repeated; a re-run stores nothing; `--no-wait` says how many embeddings are pending and how to
/// finish, and `embed --backfill` then reports truthfully what it did.
#[test]
fn repeated_lines_are_kept_and_no_wait_says_how_to_finish() {
    let home = with_agent();
    let file = home.path("turns.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"text\": \"ok\"}\n",
            "{\"text\": \"sounds good\"}\n",
            "{\"text\": \"ok\"}\n",
            "{\"text\": \"ok\"}\n",
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = home.run(&[
        "--json",
        "archival",
        "import",
        "--agent",
        "ada",
        "--no-wait",
        file,
    ]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["imported"], 4);
    assert_eq!(report["repeated"], 2);
    assert_eq!(report["embeddings"]["waited"], false);
    // The worker may embed some while the import runs; whatever is left is said, with the way
    // to finish.
    let pending = report["embeddings"]["pending"].as_u64().unwrap();
    assert!(pending <= 4);
    if pending > 0 {
        assert!(
            stderr.contains(&format!(
                "{pending} embedding job(s) still pending: run `pattern embed --backfill`"
            )),
            "{stderr}"
        );
    }
    let out = home.run(&[
        "--json",
        "archival",
        "import",
        "--agent",
        "ada",
        "--no-wait",
        file,
    ]);
    assert!(out.status.success());
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            again["imported"].as_i64(),
            again["skipped"].as_i64(),
            again["repeated"].as_i64()
        ),
        (Some(0), Some(4), Some(2))
    );
    let left = again["embeddings"]["pending"].as_u64().unwrap();
    let text = home.ok(&["archival", "import", "--agent", "ada", "--no-wait", file]);
    assert!(
        text.contains("imported 0, skipped 4 (already stored), 2 repeated line(s)"),
        "{text}"
    );
    assert_eq!(
        home.json(&["archival", "list", "--agent", "ada"])
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // Nothing runs in between: the backfill finds exactly what was left, and embeds it.
    let done = home.json(&["embed", "--backfill"]);
    assert!(done["already_pending"].as_u64().unwrap() <= left, "{done}");
    assert_eq!(done["queued"], 0);
    assert_eq!(done["embedded"], done["already_pending"]);
    assert_eq!(done["pending"], 0);
    assert_eq!(home.json(&["embed", "--status"])["pending_jobs"], 0);
}

#[test]
fn import_reports_a_line_that_is_not_utf8_and_imports_the_others() {
    let home = with_agent();
    let file = home.path("latin1.jsonl");
    let mut bytes = b"{\"text\": \"first passage\"}\r\n".to_vec();
    // "café" in Latin-1: one byte that is not UTF-8.
    bytes.extend_from_slice(b"{\"text\": \"caf\xe9 passage\"}\n");
    bytes.extend_from_slice(b"{\"text\": \"third passage\"}");
    std::fs::write(&file, bytes).unwrap();
    let file = file.to_str().unwrap();
    let out = home.run(&[
        "--json", "archival", "import", "--agent", "ada", "--jsonl", file,
    ]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(REFUSED), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["imported"], 2);
    assert_eq!(report["bad"][0]["line"], 2);
    assert_eq!(report["bad"].as_array().unwrap().len(), 1);
    let error = report["bad"][0]["error"].as_str().unwrap();
    assert_eq!(error, "not UTF-8: invalid byte at column 14");
    assert!(stderr.contains(&format!("{file}:2: {error}")), "{stderr}");
    let mut stored: Vec<String> = home
        .json(&["archival", "list", "--agent", "ada"])
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["content"].as_str().unwrap().to_owned())
        .collect();
    stored.sort();
    assert_eq!(stored, ["first passage", "third passage"]);
}

#[test]
fn without_the_model_vector_fails_and_auto_falls_back_to_full_text() {
    let mut home = with_agent();
    home.set_env(vec![
        (
            "PATTERN_MODEL_DIR".to_owned(),
            PathBuf::from("/nonexistent/model"),
        ),
        (
            "PATTERN_ORT_LIBRARY".to_owned(),
            PathBuf::from("/nonexistent/lib.so"),
        ),
    ]);
    home.ok(&[
        "archival",
        "insert",
        "--agent",
        "ada",
        "the cat sat on the mat",
    ]);
    for mode in ["vector", "hybrid"] {
        let err = home.fails(&["search", "--mode", mode, "cat"], 1);
        assert!(err.contains("pattern setup"), "{err}");
    }
    let err = home.fails(&["embed", "--backfill"], 1);
    assert!(err.contains("pattern setup"), "{err}");
    let out = home.run(&["--json", "search", "cat"]);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("full-text only"), "{stderr}");
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["text"], "the cat sat on the mat");
    assert_eq!(
        home.json(&["search", "--mode", "fts", "mat"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        home.json(&["reindex"])["documents"]
            .as_u64()
            .map(|d| d >= 1),
        Some(true)
    );
    assert_eq!(home.json(&["embed", "--status"])["enabled"], false);

    // With the model back, the passage stored without it is embedded by a backfill.
    home.set_env(crate::model_env());
    let report = home.json(&["embed", "--backfill"]);
    assert_eq!(report["queued"], 1);
    let hits = home.json(&["search", "--mode", "vector", "kitten on a rug"]);
    assert_eq!(hits[0]["text"], "the cat sat on the mat");
    home.json(&["embed", "--reembed"]);
    assert_eq!(home.json(&["embed", "--status"])["indexed"], 1);
}

#[test]
fn embeddings_disabled_in_config() {
    let home = with_agent();
    let config = home.data_dir().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("enabled = true", "enabled = false")).unwrap();
    let err = home.fails(&["search", "--mode", "vector", "cat"], USAGE);
    assert!(err.contains("[embedding]"), "{err}");
    home.json(&["search", "--mode", "auto", "cat"]);
    assert_eq!(home.run(&["embed"]).status.code(), Some(USAGE));
}

#[test]
fn retention_dry_run_and_apply() {
    let home = with_agent();
    home.ok(&["agent", "create", "bob"]);
    let s = home.json(&["session", "create", "ada", "bob"]);
    home.json(&["session", "end", s["id"].as_str().unwrap(), "--by", "ada"]);
    // Age zero is refused, nothing changed.
    let err = home.fails(&["retention", "--apply", "--older-than-days", "0"], USAGE);
    assert!(err.contains("invalid retention policy"), "{err}");
    home.json(&["session", "show", s["id"].as_str().unwrap()]);
    // Two days later (backdated), a day's age finds the ended session.
    crate::backdate(&home.sqlite_url(), 2);
    let dry = home.json(&["retention", "--dry-run", "--older-than-days", "1"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted_sessions"].as_array().unwrap().len(), 1);
    // Nothing changed.
    home.json(&["session", "show", s["id"].as_str().unwrap()]);
    let applied = home.json(&["retention", "--apply", "--older-than-days", "1"]);
    assert_eq!(applied["deleted_sessions"].as_array().unwrap().len(), 1);
    home.fails(&["session", "show", s["id"].as_str().unwrap()], NOT_FOUND);
    assert_eq!(home.run(&["retention"]).status.code(), Some(USAGE));
    assert_eq!(
        home.run(&["retention", "--dry-run", "--apply"])
            .status
            .code(),
        Some(USAGE)
    );
    let kept = home.json(&["retention", "--dry-run"]);
    assert_eq!(kept["deleted_sessions"], serde_json::json!([]));
}

/// Per-agent retention through the binary: block versions beyond the kept ones go on `--apply`
/// only (the dry run reports the same count), the other agent is untouched, the current value
/// stays, and a zero age or zero versions is a usage error that changes nothing.
#[test]
fn retention_of_agents_data() {
    let home = with_agent();
    home.ok(&["agent", "create", "bob"]);
    for agent in ["ada", "bob"] {
        home.ok(&[
            "memory", "block", "create", "--agent", agent, "notes", "--limit", "100", "--value",
            "v1",
        ]);
        for i in 2..=6 {
            home.ok(&[
                "memory",
                "block",
                "set",
                "--agent",
                agent,
                "notes",
                &format!("v{i}"),
            ]);
        }
    }
    let args = |mode: &str| {
        vec![
            "retention".to_owned(),
            mode.to_owned(),
            "--agent".to_owned(),
            "ada".to_owned(),
            "--keep-block-versions".to_owned(),
            "2".to_owned(),
            "--batches-older-than-days".to_owned(),
            "30".to_owned(),
        ]
    };
    let run = |mode: &str| {
        let a = args(mode);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        home.json(&refs)
    };
    // All six versions were written today: beyond the last two, today's last is among them.
    let dry = run("--dry-run");
    assert_eq!(dry["agents"][0]["name"], "ada");
    assert_eq!(dry["agents"][0]["deleted_block_versions"], 4, "{dry}");
    assert_eq!(dry["agents"][0]["dry_run"], true);
    let applied = run("--apply");
    assert_eq!(applied["agents"][0]["deleted_block_versions"], 4);
    assert_eq!(applied["agents"].as_array().unwrap().len(), 1);
    let again = run("--apply");
    assert_eq!(again["agents"][0]["deleted_block_versions"], 0);
    let history = |agent: &str| {
        home.json(&["memory", "block", "history", "--agent", agent, "notes"])
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(history("ada"), 2);
    assert_eq!(history("bob"), 6);
    for flag in [
        "--keep-block-versions",
        "--batches-older-than-days",
        "--activity-older-than-days",
    ] {
        let err = home.fails(&["retention", "--apply", flag, "0"], USAGE);
        assert!(err.contains("invalid retention policy"), "{err}");
    }
    assert_eq!(history("bob"), 6);
}

/// Stored policies through the binary: set, shown, refused with a zero, applied by a plain
/// `retention --apply` (only agents with a policy); with `--archive` the old abandoned batch is
/// written to the agent's archive file (the export's batch lines) before it is deleted, a dry
/// run writes nothing, a second apply finds nothing; cleared, the policy is gone.
#[test]
fn retention_policies_are_stored_and_applied() {
    let home = with_agent();
    home.ok(&["agent", "create", "bob"]);
    let url = home.sqlite_url();
    let ada = crate::seed_history(&url, "ada");
    crate::seed_history(&url, "bob");
    crate::backdate(&url, 3);
    let set = home.json(&[
        "retention",
        "policy",
        "set",
        "--agent",
        "ada",
        "--batches-older-than-days",
        "1",
        "--archive",
        "--keep-block-versions",
        "3",
    ]);
    assert_eq!(set["batches_older_than_days"], 1, "{set}");
    assert_eq!(set["batch_disposal"], "archive");
    let shown = home.json(&["retention", "policy", "show", "--agent", "ada"]);
    assert_eq!(shown, set);
    assert_eq!(
        home.json(&["retention", "policy", "show", "--agent", "bob"]),
        serde_json::Value::Null
    );
    let err = home.fails(
        &[
            "retention",
            "policy",
            "set",
            "--agent",
            "ada",
            "--batches-older-than-days",
            "0",
        ],
        USAGE,
    );
    assert!(err.contains("invalid retention policy"), "{err}");
    let err = home.fails(&["retention", "policy", "set", "--agent", "ada"], USAGE);
    assert!(err.contains("keeps everything"), "{err}");
    assert_eq!(
        home.json(&["retention", "policy", "show", "--agent", "ada"]),
        set
    );

    let archive = home.data_dir().join("archive");
    let dry = home.json(&["retention", "--dry-run"]);
    let agents = dry["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1, "only agents with a policy: {dry}");
    assert_eq!(agents[0]["name"], "ada");
    // seed_history's last batch was abandoned: old, so it goes; the complete ones are live.
    let abandoned = *ada.last().unwrap();
    assert_eq!(agents[0]["deleted_batches"], serde_json::json!([abandoned]));
    assert!(!archive.exists(), "a dry run writes no archive");
    let applied = home.json(&["retention", "--apply"]);
    assert_eq!(
        applied["agents"][0]["deleted_batches"],
        serde_json::json!([abandoned])
    );
    let file = PathBuf::from(applied["agents"][0]["archive_file"].as_str().unwrap());
    assert!(file.starts_with(&archive), "{}", file.display());
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["section"], "batch");
    assert_eq!(lines[0]["data"]["id"], abandoned);
    assert_eq!(lines[0]["data"]["state"], "abandoned");
    assert!(!lines[0]["data"]["messages"].as_array().unwrap().is_empty());
    let again = home.json(&["retention", "--apply"]);
    assert_eq!(again["agents"][0]["deleted_batches"], serde_json::json!([]));
    assert!(again["agents"][0]["archive_file"].is_null());
    // Flags override for one run, for every agent (bob's abandoned batch, deleted).
    let flagged = home.json(&["retention", "--apply", "--batches-older-than-days", "1"]);
    assert_eq!(flagged["agents"].as_array().unwrap().len(), 2, "{flagged}");
    let cleared = home.json(&["retention", "policy", "clear", "--agent", "ada"]);
    assert_eq!(cleared["cleared"], true);
    assert_eq!(
        home.json(&["retention", "policy", "show", "--agent", "ada"]),
        serde_json::Value::Null
    );
    assert_eq!(
        home.json(&["retention", "--dry-run"])["agents"],
        serde_json::json!([])
    );
}

/// `meeting events --follow` prints each event as another process causes it (one JSON object
/// a line), from its cursor, and exits 0 once the meeting ends; Ctrl-C also leaves with 0.
#[test]
fn meeting_events_follow_until_the_meeting_ends() {
    let home = with_agent();
    home.ok(&["agent", "create", "bob"]);
    let m = home.json(&["meeting", "create", "ada"]);
    let id = m["meeting"]["id"].as_str().unwrap().to_owned();
    let created = m["events"].as_array().unwrap().len();
    let follower = home
        .command(&["--json", "meeting", "events", &id, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    home.json(&["meeting", "invite", &id, "--by", "ada", "bob"]);
    home.json(&["meeting", "join", &id, "bob"]);
    let started = home.json(&["meeting", "start", &id, "--by", "ada"]);
    let speaker = started["meeting"]["speaker"].as_str().unwrap().to_owned();
    home.json(&["meeting", "speak", &id, "--from", &speaker, "hello all"]);
    home.json(&["meeting", "end", &id, "--by", "ada"]);
    let out = finish(follower, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let followed: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let all = home.json(&["meeting", "events", &id]);
    assert_eq!(&followed, all.as_array().unwrap());
    assert!(followed.len() > created, "{followed:?}");
    assert_eq!(
        followed.last().unwrap()["event_type"],
        "meeting_ended",
        "{followed:?}"
    );

    // From a cursor, on a live meeting: only what follows it; Ctrl-C leaves cleanly.
    let live = home.json(&["meeting", "create", "bob"]);
    let live_id = live["meeting"]["id"].as_str().unwrap().to_owned();
    let cursor = live["meeting"]["last_event_seq"].to_string();
    let follower = home
        .command(&[
            "meeting", "events", &live_id, "--follow", "--after", &cursor,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    home.json(&["meeting", "invite", &live_id, "--by", "bob", "ada"]);
    std::thread::sleep(Duration::from_secs(2));
    interrupt(&follower);
    let out = finish(follower, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("ada"), "{text}");
    // An unknown meeting is not waited for; --limit makes no sense with --follow.
    home.fails(
        &[
            "meeting",
            "events",
            "00000000-0000-7000-8000-000000000000",
            "--follow",
        ],
        NOT_FOUND,
    );
    let both = home.run(&["meeting", "events", &id, "--follow", "--limit", "5"]);
    assert_eq!(both.status.code(), Some(USAGE));
}

#[test]
fn meeting_turns_and_event_log() {
    let home = with_agent();
    home.ok(&["agent", "create", "bob"]);
    home.ok(&["agent", "create", "cy"]);
    let m = home.json(&["meeting", "create", "ada"]);
    let id = m["meeting"]["id"].as_str().unwrap().to_owned();
    assert_eq!(m["meeting"]["host"], "ada");
    home.fails(&["meeting", "invite", &id, "--by", "bob", "cy"], CONFLICT);
    home.json(&["meeting", "invite", &id, "--by", "ada", "bob"]);
    home.json(&["meeting", "join", &id, "bob"]);
    let started = home.json(&["meeting", "start", &id, "--by", "ada"]);
    let speaker = started["meeting"]["speaker"].as_str().unwrap().to_owned();
    let other = if speaker == "ada" { "bob" } else { "ada" };
    home.fails(
        &["meeting", "speak", &id, "--from", other, "me first"],
        CONFLICT,
    );
    let spoke = home.json(&["meeting", "speak", &id, "--from", &speaker, "hello all"]);
    assert_eq!(spoke["meeting"]["speaker"], other);
    home.json(&["meeting", "pass", &id, other]);

    let all = home.json(&["meeting", "events", &id]);
    let seqs: Vec<u64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let cursor = seqs[1].to_string();
    let tail = home.json(&["meeting", "events", &id, "--after", &cursor]);
    assert_eq!(tail.as_array().unwrap().len(), seqs.len() - 2);

    let show = home.json(&["meeting", "show", &id]);
    assert_eq!(show["participants"].as_array().unwrap().len(), 2);
    assert_eq!(show["messages"][0]["content"], "hello all");
    home.json(&["meeting", "leave", &id, "bob"]);
    let ended = home.json(&["meeting", "end", &id, "--by", "ada"]);
    assert_eq!(ended["meeting"]["status"], "ended");
    home.fails(
        &["meeting", "speak", &id, "--from", "ada", "late"],
        CONFLICT,
    );
    home.fails(&["meeting", "show", "nope"], USAGE);
    home.fails(
        &["meeting", "show", "00000000-0000-7000-8000-000000000000"],
        NOT_FOUND,
    );
}
