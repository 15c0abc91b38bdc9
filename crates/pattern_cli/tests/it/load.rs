//! The load test of one `pattern serve` process per backend: 50 concurrent clients on 10 agents
//! for 20 s (mixed JSON and SSE turns, each a tool call and an answer from an instant fake
//! model). It checks that no turn is misreported (a success names its complete batch, a failure
//! a batch that did not complete), that no answer is a server error (an HTTP status 5xx, or a
//! stream's `error` event whose code answers 5xx as JSON), that every turn is answered, that
//! every acknowledged message is stored exactly once, and that the model never received an
//! unpaired tool call; it reports turns per second and acknowledgement latency (time to the
//! first answer byte) p50/p99.
//!
//! `PATTERN_LOAD_SECS` overrides the duration. It must never run beside the other heavy tests
//! (it takes [`crate::deploy::exclusive`]) and never leave a process behind.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pattern_db::Backend;

use crate::block_on;
use crate::cluster::add;
use crate::deploy::{Plan, deploy, exclusive};
use crate::harness::client::Final;
use crate::harness::load::{LoadConfig, run};
use crate::harness::model::{ModelOptions, Pace};
use crate::harness::probe::Probe;
use crate::harness::stored::Stored;

/// Error codes whose JSON answer has a 5xx status (docs/server.md).
pub const SERVER_ERROR_CODES: &[&str] = &[
    "provider_failed",
    "storage_failed",
    "unavailable",
    "internal",
    "timeout",
];

#[test]
fn load_pg() {
    load(Backend::Postgres, "load_pg");
}

#[test]
fn load_sqlite() {
    load(Backend::Sqlite, "load_sqlite");
}

fn load(backend: Backend, name: &str) {
    let _heavy = exclusive();
    let secs = std::env::var("PATTERN_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    block_on(async {
        let wall = Instant::now();
        let d = deploy(Plan {
            backend,
            slots: 1,
            agents: 10,
            model: ModelOptions {
                pace: Pace::Instant,
                ..ModelOptions::default()
            },
            serve_flags: Vec::new(),
            serve_env: Vec::new(),
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

        let mut violations: Vec<String> = Vec::new();
        let probe = Probe::open(&d.url).await.unwrap();
        if let Err(e) = probe
            .wait_quiet(Duration::from_secs(30), Duration::from_secs(60))
            .await
        {
            violations.push(format!("the servers did not settle: {e}"));
        }
        let stored = Stored::read(&probe).await.unwrap();
        probe.close().await;

        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        let mut server_errors = Vec::new();
        let mut misreported = Vec::new();
        let mut misreported_kinds: BTreeMap<String, usize> = BTreeMap::new();
        let mut unanswered = Vec::new();
        let mut lost_or_twice = Vec::new();
        for t in &report.turns {
            let a = &t.answer;
            let label = match &a.outcome {
                Some(Final::Done { .. }) => "ok".to_owned(),
                Some(Final::Failed { code, .. }) => code.clone(),
                None => "no outcome".to_owned(),
            };
            *outcomes.entry(label).or_default() += 1;
            let what = format!(
                "{} {} turn {:?} on {}",
                t.marker,
                if t.stream { "SSE" } else { "JSON" },
                a.turn_id,
                t.agent
            );
            if a.status.is_some_and(|s| s >= 500) {
                server_errors.push(format!("{what}: HTTP {:?} {:?}", a.status, a.body));
            }
            if let Some(Final::Failed {
                code,
                status,
                message,
                ..
            }) = &a.outcome
                && *status == 200
                && SERVER_ERROR_CODES.contains(&code.as_str())
            {
                server_errors.push(format!("{what}: stream ended with `{code}`: {message}"));
            }
            match &a.outcome {
                Some(told) => {
                    if let Err(e) = stored.check(&t.marker, told) {
                        let kind = match told {
                            Final::Done { .. } => "done".to_owned(),
                            Final::Failed { code, .. } => format!("`{code}`"),
                        };
                        *misreported_kinds.entry(kind).or_default() += 1;
                        misreported.push(format!("{what}: {e}"));
                    }
                }
                None => unanswered.push(format!(
                    "{what}: status {:?}, {:?}, {} events",
                    a.status,
                    a.broke,
                    a.events.len()
                )),
            }
            let n = stored.lineages(&t.marker);
            if (a.acked && n != 1) || n > 1 {
                lost_or_twice.push(format!(
                    "{what}: acknowledged {}, stored {n} times: {}",
                    a.acked,
                    stored.describe(&t.marker)
                ));
            }
        }
        let stats = d.model.stats().clone();
        let p50 = report.ack_percentile(50.0);
        let p99 = report.ack_percentile(99.0);
        println!(
            "{name}: {} turns in {:.1} s = {:.1} turns/s; outcomes {outcomes:?}; ack latency p50 \
             {p50:?} p99 {p99:?}; model requests {} (unpaired {}); wall {:.1} s",
            report.turns.len(),
            report.elapsed.as_secs_f64(),
            report.turns_per_second(),
            stats.requests(),
            stats.violations(),
            wall.elapsed().as_secs_f64()
        );
        let v = &mut violations;
        add(v, "answers were server errors", server_errors);
        add(
            v,
            format!("turns were misreported (told {misreported_kinds:?})"),
            misreported,
        );
        add(v, "turns got no outcome", unanswered);
        add(v, "messages were lost or stored twice", lost_or_twice);
        if stats.violations() > 0 {
            violations.push(format!(
                "{} requests to the model broke tool pairing, e.g.:\n    {}",
                stats.violations(),
                stats.examples().join("\n    ")
            ));
        }
        if report.failed_clients > 0 {
            violations.push(format!("{} client tasks died", report.failed_clients));
        }
        if report.turns.is_empty() {
            violations.push("no turn was sent".to_owned());
        }
        let stopped = d.servers.shutdown(Duration::from_secs(15)).await;
        for s in stopped.iter().filter(|s| s.forced) {
            violations.push(format!("pid {} ignored SIGTERM for 15 s", s.pid));
        }
        let tail = d.servers.tail(0);
        d.finish().await;
        assert!(
            violations.is_empty(),
            "{name}: {} check(s) failed:\n{}\nserver stderr ends:\n    {}",
            violations.len(),
            violations.join("\n"),
            tail.join("\n    ")
        );
    });
}
