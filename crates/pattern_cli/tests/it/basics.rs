//! `init`, `agent`, `migrate`, usage errors and exit codes.

use crate::{CONFLICT, Home, NOT_FOUND, USAGE};

#[test]
fn init_creates_data_dir_database_and_commented_config_and_is_idempotent() {
    let home = Home::empty();
    let first = home.json(&["init"]);
    assert_eq!(first["already_initialised"], false);
    assert_eq!(first["backend"], "sqlite");
    assert!(home.data_dir().join("pattern.db").exists());
    let config = std::fs::read_to_string(home.data_dir().join("config.toml")).unwrap();
    for section in [
        "[agent]",
        "[database]",
        "[embedding]",
        "enabled = true",
        "[model.llamacpp]",
        "[model.anthropic]",
        "[model.openai]",
        "[model.gemini]",
    ] {
        assert!(config.contains(section), "config lacks {section}");
    }
    // A second run keeps the (edited) config and says so.
    std::fs::write(
        home.data_dir().join("config.toml"),
        "[agent]\ndefault = \"ada\"\n",
    )
    .unwrap();
    let again = home.ok(&["init"]);
    assert!(again.starts_with("already initialised"), "{again}");
    assert_eq!(
        std::fs::read_to_string(home.data_dir().join("config.toml")).unwrap(),
        "[agent]\ndefault = \"ada\"\n"
    );
    assert_eq!(home.json(&["init"])["already_initialised"], true);
}

#[test]
fn commands_refuse_a_data_dir_that_was_never_initialised() {
    let home = Home::empty();
    let err = home.fails(&["agent", "list"], NOT_FOUND);
    assert!(err.contains("pattern init"), "{err}");
    assert!(!home.data_dir().exists(), "no stray directory is created");
}

#[test]
fn usage_errors_exit_2() {
    let home = Home::init();
    let out = home.run(&["agent", "frobnicate"]);
    assert_eq!(out.status.code(), Some(USAGE));
    let out = home.run(&["memory", "block", "create", "x"]);
    assert_eq!(out.status.code(), Some(USAGE), "--limit is required");
    let out = home.run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: pattern"));
    std::fs::write(home.data_dir().join("config.toml"), "[agent\n").unwrap();
    let err = home.fails(&["agent", "list"], USAGE);
    assert!(err.contains("config.toml"), "{err}");
}

#[test]
fn agent_create_list_show_delete() {
    let home = Home::init();
    assert_eq!(home.json(&["agent", "list"]), serde_json::json!([]));
    let ada = home.json(&["agent", "create", "ada", "--instructions", "Be brief."]);
    assert_eq!(ada["name"], "ada");
    assert_eq!(ada["instructions"], "Be brief.");
    assert!(ada["id"].as_str().unwrap().len() == 36);
    assert!(ada["created_at"].is_string());
    home.ok(&["agent", "create", "bob"]);
    let err = home.fails(&["agent", "create", "ada"], CONFLICT);
    assert!(err.contains("exists already"), "{err}");

    let list = home.json(&["agent", "list"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ada", "bob"]);
    assert!(home.ok(&["agent", "list"]).contains("ada"));

    let show = home.json(&["agent", "show", "ada"]);
    assert_eq!(show["id"], ada["id"]);
    assert_eq!(show["blocks"], serde_json::json!([]));
    assert_eq!(show["live_messages"], 0);
    assert!(show["current_batch"].is_null());
    home.fails(&["agent", "show", "nobody"], NOT_FOUND);

    let err = home.fails(&["agent", "delete", "ada"], USAGE);
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(home.json(&["agent", "list"]).as_array().unwrap().len(), 2);
    let deleted = home.json(&["agent", "delete", "ada", "--yes"]);
    assert_eq!(deleted["deleted"]["name"], "ada");
    home.fails(&["agent", "show", "ada"], NOT_FOUND);
    home.fails(&["agent", "delete", "ada", "--yes"], NOT_FOUND);
}

#[test]
fn migrate_status_down_up() {
    let home = Home::init();
    let status = home.json(&["migrate", "status"]);
    let all = status.as_array().unwrap();
    assert!(all.len() >= 3);
    assert!(
        all.iter()
            .all(|m| m["applied"] == true && m["version"].is_i64())
    );
    home.fails(&["migrate", "down", "--to", "1"], USAGE);
    let down = home.json(&["migrate", "down", "--to", "1", "--yes"]);
    let applied: Vec<bool> = down
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["applied"].as_bool().unwrap())
        .collect();
    assert!(applied[0]);
    assert!(applied[1..].iter().all(|a| !a), "{down}");
    let up = home.json(&["migrate", "up"]);
    assert!(up.as_array().unwrap().iter().all(|m| m["applied"] == true));
    assert!(home.ok(&["migrate", "status"]).contains("applied"));
}

#[test]
fn the_default_agent_comes_from_the_config_file() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let err = home.fails(&["memory", "block", "list"], USAGE);
    assert!(err.contains("--agent"), "{err}");
    let path = home.data_dir().join("config.toml");
    let config = std::fs::read_to_string(&path)
        .unwrap()
        .replace("# default = \"ada\"", "default = \"ada\"");
    std::fs::write(&path, config).unwrap();
    assert_eq!(
        home.json(&["memory", "block", "list"]),
        serde_json::json!([])
    );
    // --agent wins over the default.
    home.fails(&["memory", "block", "list", "--agent", "bob"], NOT_FOUND);
}

#[test]
fn the_data_dir_defaults_to_xdg_and_follows_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |envs: &[(&str, &std::path::Path)], args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_pattern"));
        cmd.args(args)
            .env_remove("PATTERN_DATA_DIR")
            .env_remove("PATTERN_DATABASE_URL")
            .env_remove("RUST_LOG");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let xdg = tmp.path().join("xdg");
    let report = run(&[("XDG_DATA_HOME", &xdg)], &["--json", "init"]);
    assert_eq!(
        report["data_dir"],
        xdg.join("pattern").display().to_string()
    );
    assert!(xdg.join("pattern/pattern.db").exists());

    let env_dir = tmp.path().join("from-env");
    run(&[("PATTERN_DATA_DIR", &env_dir)], &["--json", "init"]);
    assert!(env_dir.join("config.toml").exists());
    let agents = run(
        &[("PATTERN_DATA_DIR", &env_dir)],
        &["--json", "agent", "list"],
    );
    assert_eq!(agents, serde_json::json!([]));
}

#[test]
fn verbose_logs_go_to_stderr_and_keep_stdout_clean() {
    let home = Home::init();
    let out = home.run(&["-vv", "--json", "agent", "list"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("database open"), "{stderr}");
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed, serde_json::json!([]));
    let quiet = home.run(&["--json", "agent", "list"]);
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
}
