//! Turns per second and acknowledgement latency of whole `pattern serve` processes under load:
//! 50 clients on 10 agents, alternating JSON and SSE turns, a fake OpenAI-compatible model that
//! answers instantly (one tool call, then text: two model requests per turn), over 1 and 3
//! server processes on one PostgreSQL database, and 1 process on SQLite.
//!
//! The acknowledgement is the first answer byte of a streamed turn (its `received` or `queued`
//! event: the message is committed); JSON turns count in turns per second only (their first
//! byte is the whole answer).
//!
//! `soak`: one server for 30 minutes (3 with `PATTERN_BENCH_QUICK=1`) whose work moves on to a
//! new set of 10 agents every 2 minutes (20 s) while meetings are created, followed and ended,
//! sampling the server's resident memory: idle agents are unloaded and wake-up channels nobody
//! holds are dropped, so it must stay flat once the first agents go idle.
//!
//! `PATTERN_BENCH_QUICK=1` runs 5 s per load scenario instead of 20;
//! `PATTERN_BENCH_BIN` names another `pattern` binary to measure (an older build, for
//! comparison; flags it lacks are left out); `PATTERN_BENCH_SCENARIOS=pg1,pg3,sqlite,soak` picks
//! scenarios (default: all). Figures are printed, never asserted; they go to docs/performance.md. It must never
//! leave a server process or a database behind.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/it/harness/mod.rs"]
mod harness;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::client::{Api, Final};
use harness::load::{LoadConfig, run};
use harness::model::{ModelOptions, PairingModel};
use harness::servers::{ServeSpec, ServerSet};
use pattern_db::Backend;
use pattern_db::testkit::TestDb;

fn binary() -> PathBuf {
    std::env::var_os("PATTERN_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pattern")))
}

struct Deployment {
    _dir: tempfile::TempDir,
    _tdb: Option<TestDb>,
    servers: ServerSet,
    secret: String,
    agents: Vec<String>,
    model: PairingModel,
}

fn command(data: &std::path::Path, url: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("--data-dir").arg(data);
    if let Some(url) = url {
        cmd.arg("--database-url").arg(url);
    }
    cmd.args(args)
        .env_remove("PATTERN_DATA_DIR")
        .env_remove("PATTERN_DATABASE_URL")
        .env_remove("RUST_LOG")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .env("NO_COLOR", "1");
    cmd
}

fn ok(data: &std::path::Path, url: Option<&str>, args: &[&str]) -> String {
    let out = command(data, url, args).output().unwrap();
    assert!(
        out.status.success(),
        "pattern {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn deploy(backend: Backend, slots: usize, agents: usize) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tdb = match backend {
        Backend::Postgres => Some(TestDb::fresh(Backend::Postgres).await.unwrap()),
        _ => None,
    };
    let url = tdb.as_ref().map(|t| t.url.clone());
    let url = url.as_deref();
    ok(&data, url, &["init"]);
    let model = PairingModel::start(ModelOptions::default()).unwrap();
    let config = data.join("config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap().replace(
        "# provider = \"llamacpp\"",
        &format!(
            "provider = \"llamacpp\"\n[model.llamacpp]\nbase_url = \"{}\"\nmodel = \"fake\"",
            model.base_url
        ),
    );
    text = text.replace("enabled = true", "enabled = false");
    std::fs::write(&config, text).unwrap();
    ok(&data, url, &["org", "create", "bench"]);
    let secret = ok(&data, url, &["key", "create", "--org", "bench"])
        .trim()
        .to_owned();
    let spec = ServeSpec::from_command(&command(&data, url, &["serve"]), &[]);
    let servers = ServerSet::start(spec, slots).await.unwrap();
    let api = Api::new(&secret, false);
    let mut ids = Vec::new();
    for i in 0..agents {
        ids.push(
            api.create_agent(&servers.base(i % slots), &format!("bench{i:02}"))
                .await
                .unwrap(),
        );
    }
    Deployment {
        _dir: dir,
        _tdb: tdb,
        servers,
        secret,
        agents: ids,
        model,
    }
}

async fn scenario(name: &str, backend: Backend, slots: usize, secs: u64) {
    let d = deploy(backend, slots, 10).await;
    // Warm up connections, agents and the database's caches.
    let _ = run(LoadConfig {
        bases: d.servers.bases(),
        secret: d.secret.clone(),
        agents: d.agents.clone(),
        clients: 50,
        duration: Duration::from_secs(2),
        turn_limit: Duration::from_secs(60),
    })
    .await;
    let report = run(LoadConfig {
        bases: d.servers.bases(),
        secret: d.secret.clone(),
        agents: d.agents.clone(),
        clients: 50,
        duration: Duration::from_secs(secs),
        turn_limit: Duration::from_secs(60),
    })
    .await;
    let mut acks: Vec<Duration> = report
        .turns
        .iter()
        .filter(|t| t.stream)
        .filter_map(|t| t.answer.ack_latency)
        .collect();
    acks.sort();
    let pct = |p: f64| -> f64 {
        if acks.is_empty() {
            return f64::NAN;
        }
        let i = ((p / 100.0) * (acks.len() - 1) as f64).round() as usize;
        acks[i.min(acks.len() - 1)].as_secs_f64() * 1000.0
    };
    let failed = report
        .turns
        .iter()
        .filter(|t| {
            matches!(t.answer.outcome, Some(Final::Failed { .. })) || t.answer.outcome.is_none()
        })
        .count();
    let server_errors = report
        .turns
        .iter()
        .filter(|t| t.answer.status.is_some_and(|s| s >= 500))
        .count();
    println!(
        "cluster/{name}: {:.1} turns/s ({} turns in {:.1} s, {failed} not ok, {server_errors} 5xx); \
         streamed ack p50 {:.1} ms, p99 {:.1} ms ({} streamed); model requests {}",
        report.turns_per_second(),
        report.turns.len(),
        report.elapsed.as_secs_f64(),
        pct(50.0),
        pct(99.0),
        acks.len(),
        d.model.stats().requests(),
    );
    drop(d.servers);
}

/// The resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

async fn soak(minutes: u64, round: Duration) {
    let mut d = deploy(Backend::Sqlite, 1, 0).await;
    let base = d.servers.base(0);
    let pid = d.servers.pid(0).unwrap();
    let api = Api::new(&d.secret, true);
    let http = reqwest::Client::new();
    let started = Instant::now();
    let end = started + Duration::from_secs(minutes * 60);
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut turns = 0usize;
    let mut meetings = 0usize;
    let mut n = 0usize;
    while Instant::now() < end {
        let mut agents = Vec::new();
        for i in 0..10 {
            agents.push(
                api.create_agent(&base, &format!("soak{n:03}-{i}"))
                    .await
                    .unwrap(),
            );
        }
        n += 1;
        d.agents = agents.clone();
        let report = run(LoadConfig {
            bases: vec![base.clone()],
            secret: d.secret.clone(),
            agents: agents.clone(),
            clients: 10,
            duration: round,
            turn_limit: Duration::from_secs(60),
        })
        .await;
        turns += report.turns.len();
        // Meetings: created, followed for a moment, ended (their wake-up channels go with them).
        for host in agents.iter().take(3) {
            let created: serde_json::Value = http
                .post(format!("{base}/v1/meetings"))
                .bearer_auth(&d.secret)
                .json(&serde_json::json!({"host": host}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let Some(id) = created["id"].as_str() else {
                continue;
            };
            let follow = http
                .get(format!("{base}/v1/meetings/{id}/events"))
                .bearer_auth(&d.secret)
                .send();
            let _ = tokio::time::timeout(Duration::from_millis(300), follow).await;
            let _ = http
                .post(format!("{base}/v1/meetings/{id}/end"))
                .bearer_auth(&d.secret)
                .json(&serde_json::json!({"agent": host}))
                .send()
                .await;
            meetings += 1;
        }
        if let Some(rss) = rss_mib(pid) {
            samples.push((started.elapsed().as_secs_f64() / 60.0, rss));
        }
    }
    let line: Vec<String> = samples
        .iter()
        .map(|(m, r)| format!("{m:.1} min {r:.1} MiB"))
        .collect();
    let half = samples.len() / 2;
    let max_first = samples[..half.max(1)]
        .iter()
        .map(|s| s.1)
        .fold(0.0, f64::max);
    let max_second = samples[half..].iter().map(|s| s.1).fold(0.0, f64::max);
    println!(
        "cluster/soak: {minutes} min, {n} agent sets of 10, {turns} turns, {meetings} meetings; \
         server RSS max first half {max_first:.1} MiB, second half {max_second:.1} MiB; samples: {}",
        line.join(", ")
    );
    drop(d.servers);
}

fn main() {
    // `cargo bench` passes `--bench`; a test run of benches (`cargo test --benches`) must not
    // start servers.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let quick = std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| v == "1");
    let secs = if quick { 5 } else { 20 };
    let picked = std::env::var("PATTERN_BENCH_SCENARIOS")
        .unwrap_or_else(|_| "pg1,pg3,sqlite,soak".to_owned());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for s in picked.split(',') {
            match s.trim() {
                "pg1" => scenario("pg1", Backend::Postgres, 1, secs).await,
                "pg3" => scenario("pg3", Backend::Postgres, 3, secs).await,
                "sqlite" => scenario("sqlite", Backend::Sqlite, 1, secs).await,
                "soak" if quick => soak(3, Duration::from_secs(20)).await,
                "soak" => soak(30, Duration::from_secs(120)).await,
                other => eprintln!("unknown scenario `{other}`"),
            }
        }
    });
}
