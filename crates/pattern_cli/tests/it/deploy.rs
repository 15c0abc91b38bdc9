//! A deployment for the crash harness and the load test: a throwaway database (a temporary
//! SQLite data directory, or a fresh PostgreSQL database from `pattern_db::testkit`) set up
//! through the binary (`pattern init`, `org create`, `key create`), the validating fake model in
//! `config.toml` (embeddings off: no model loads in every restarted process), `pattern serve`
//! processes on fixed loopback ports, and agents created over HTTP.
//!
//! The heavy tests that use it run one at a time ([`exclusive`]): they measure latencies on a
//! small machine. This module must never touch the user's data directory or a real model, and
//! never leave a server process or a database behind on the normal path.

use std::sync::{Mutex, MutexGuard};

use pattern_db::Backend;
use pattern_db::testkit::TestDb;

use crate::Home;
use crate::harness::client::Api;
use crate::harness::model::{ModelOptions, PairingModel};
use crate::harness::servers::{ServeSpec, ServerSet};

static HEAVY: Mutex<()> = Mutex::new(());

/// Holds off the other heavy tests of this binary while it lives.
pub fn exclusive() -> MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What to deploy.
pub struct Plan {
    pub backend: Backend,
    /// Server processes (SQLite: 1).
    pub slots: usize,
    pub agents: usize,
    pub model: ModelOptions,
    /// `pattern serve` flags after `--listen ADDR` that the binary must know, e.g.
    /// `["--run-lease-secs", "5"]`: a flag it does not list in `serve --help` is left out (with
    /// its value) and reported in [`Deployment::missing_flags`].
    pub serve_flags: Vec<(String, String)>,
    /// Environment variables of the `pattern serve` processes.
    pub serve_env: Vec<(String, String)>,
}

/// A running deployment. Dropping it kills the servers; [`Deployment::finish`] also drops the
/// PostgreSQL database.
pub struct Deployment {
    /// The data directory (config.toml; the SQLite database): kept while the deployment lives.
    _home: Home,
    tdb: Option<TestDb>,
    /// The database URL (for the probe).
    pub url: String,
    pub model: PairingModel,
    pub secret: String,
    pub servers: ServerSet,
    /// Agent ids.
    pub agents: Vec<String>,
    /// Flags of the plan that `pattern serve` does not have.
    pub missing_flags: Vec<String>,
}

/// Sets everything up; panics with the cause when something cannot start.
pub async fn deploy(plan: Plan) -> Deployment {
    let (mut home, tdb) = match plan.backend {
        Backend::Postgres => {
            let tdb = TestDb::fresh(Backend::Postgres).await.unwrap();
            let home = Home::with_url(tdb.url.clone());
            (home, Some(tdb))
        }
        _ => (Home::empty(), None),
    };
    // No embedding model: every restarted process would load it.
    home.set_env(Vec::new());
    home.ok(&["init"]);
    let url = match &tdb {
        Some(tdb) => tdb.url.clone(),
        None => home.sqlite_url(),
    };
    let model = PairingModel::start(plan.model).unwrap();
    home.use_model(&model.base_url);
    let config = home.data_dir().join("config.toml");
    let mut section = String::new();
    let text: Vec<String> = std::fs::read_to_string(&config)
        .unwrap()
        .lines()
        .map(|line| {
            if line.starts_with('[') {
                section = line.to_owned();
            }
            if section == "[embedding]" && line.trim() == "enabled = true" {
                "enabled = false".to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect();
    let text = text.join("\n");
    assert!(
        text.contains("enabled = false"),
        "embeddings not turned off: {text}"
    );
    std::fs::write(&config, text).unwrap();
    home.ok(&["org", "create", "acme"]);
    let secret = home
        .ok(&["key", "create", "--org", "acme"])
        .trim()
        .to_owned();

    let help = home.ok(&["serve", "--help"]);
    let mut extra = Vec::new();
    let mut missing_flags = Vec::new();
    for (flag, value) in &plan.serve_flags {
        if help.contains(flag.as_str()) {
            extra.push(flag.clone());
            extra.push(value.clone());
        } else {
            missing_flags.push(flag.clone());
        }
    }
    let mut command = home.command(&["serve"]);
    command.envs(plan.serve_env.iter().map(|(k, v)| (k, v)));
    let spec = ServeSpec::from_command(&command, &extra);
    let servers = ServerSet::start(spec, plan.slots)
        .await
        .unwrap_or_else(|e| panic!("the servers did not start: {e}"));
    let api = Api::new(&secret, false);
    let mut agents = Vec::new();
    for i in 0..plan.agents {
        let base = servers.base(i % plan.slots);
        agents.push(api.create_agent(&base, &format!("a{i:02}")).await.unwrap());
    }
    Deployment {
        _home: home,
        tdb,
        url,
        model,
        secret,
        servers,
        agents,
        missing_flags,
    }
}

impl Deployment {
    /// Drops the PostgreSQL database (the servers must be stopped already).
    pub async fn finish(self) {
        let Self { tdb, servers, .. } = self;
        drop(servers);
        if let Some(tdb) = tdb {
            tdb.cleanup().await.unwrap();
        }
    }
}
