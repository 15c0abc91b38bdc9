//! `memory block ...`: every subcommand, version conflicts, limits, unknown blocks.

use crate::{CONFLICT, Home, NOT_FOUND, REFUSED, USAGE};

#[test]
fn block_life_cycle_with_history_and_undo() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let a = ["--agent", "ada"];
    let created = home.json(
        &[
            &["memory", "block", "create", "persona", "--limit", "40"][..],
            &["--description", "who I am", "--value", "I am Ada."],
            &a,
        ]
        .concat(),
    );
    assert_eq!(created["version"], 1);
    assert_eq!(created["block"]["label"], "persona");
    assert_eq!(created["block"]["char_limit"], 40);
    assert_eq!(created["block"]["chars"], 9);
    assert_eq!(created["block"]["block_type"], "core");
    assert_eq!(created["block"]["permission"], "admin");

    let appended = home.json(
        &[
            &["memory", "block", "append", "persona", "I like engines."][..],
            &a,
        ]
        .concat(),
    );
    assert_eq!(appended["version"], 2);
    assert_eq!(appended["block"]["value"], "I am Ada.\nI like engines.");
    let set = home.json(&[&["memory", "block", "set", "persona", "Ada."][..], &a].concat());
    assert_eq!(set["version"], 3);
    let undone = home.json(&[&["memory", "block", "undo", "persona"][..], &a].concat());
    assert_eq!(undone["version"], 4);
    assert_eq!(undone["block"]["value"], "I am Ada.\nI like engines.");

    let show = home.json(&[&["memory", "block", "show", "persona"][..], &a].concat());
    assert_eq!(show["value"], "I am Ada.\nI like engines.");
    assert_eq!(show["description"], "who I am");
    assert!(
        home.ok(&[&["memory", "block", "show", "persona"][..], &a].concat())
            .contains("I like engines.")
    );

    let history = home.json(&[&["memory", "block", "history", "persona"][..], &a].concat());
    let changes: Vec<(i64, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_i64().unwrap(),
                v["change"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [(4, "undo"), (3, "replace"), (2, "append"), (1, "create")]
    );
    assert_eq!(history[3]["value"], "I am Ada.");

    let list = home.json(&[&["memory", "block", "list"][..], &a].concat());
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(
        home.ok(&[&["memory", "block", "list"][..], &a].concat())
            .contains("persona")
    );
}

#[test]
fn conflicts_limits_and_unknown_blocks_are_clear_errors() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let a = ["--agent", "ada"];
    home.ok(&[
        &["memory", "block", "create", "notes", "--limit", "10"][..],
        &a,
    ]
    .concat());

    // Over the limit: refused, nothing stored.
    let err = home.fails(
        &[
            &["memory", "block", "set", "notes", "this is far too long"][..],
            &a,
        ]
        .concat(),
        REFUSED,
    );
    assert!(
        err.contains("at most 10 characters") && err.contains("has 20"),
        "{err}"
    );
    // A stale expected version: conflict, nothing stored.
    home.ok(&[&["memory", "block", "set", "notes", "one"][..], &a].concat());
    let err = home.fails(
        &[
            &[
                "memory",
                "block",
                "set",
                "notes",
                "two",
                "--expect-version",
                "1",
            ][..],
            &a,
        ]
        .concat(),
        CONFLICT,
    );
    assert!(err.contains("version 2, not 1"), "{err}");
    let show = home.json(&[&["memory", "block", "show", "notes"][..], &a].concat());
    assert_eq!(show["value"], "one");
    assert_eq!(show["version"], 2);
    home.json(
        &[
            &[
                "memory",
                "block",
                "append",
                "notes",
                "x",
                "--expect-version",
                "2",
            ][..],
            &a,
        ]
        .concat(),
    );

    home.fails(
        &[&["memory", "block", "show", "nope"][..], &a].concat(),
        NOT_FOUND,
    );
    home.fails(
        &[&["memory", "block", "set", "nope", "v"][..], &a].concat(),
        NOT_FOUND,
    );
    home.fails(
        &[
            &["memory", "block", "create", "notes", "--limit", "5"][..],
            &a,
        ]
        .concat(),
        CONFLICT,
    );
    home.fails(
        &[
            &["memory", "block", "create", "Bad Label", "--limit", "5"][..],
            &a,
        ]
        .concat(),
        USAGE,
    );
    home.fails(
        &[
            &[
                "memory", "block", "create", "t", "--limit", "5", "--type", "weird",
            ][..],
            &a,
        ]
        .concat(),
        USAGE,
    );
    home.ok(&[
        &["memory", "block", "create", "fresh", "--limit", "5"][..],
        &a,
    ]
    .concat());
    let err = home.fails(
        &[&["memory", "block", "undo", "fresh"][..], &a].concat(),
        CONFLICT,
    );
    assert!(err.contains("nothing to undo"), "{err}");
    home.fails(&["memory", "block", "list", "--agent", "nobody"], NOT_FOUND);
}
