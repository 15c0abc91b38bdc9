//! Crash safety: a child process appends steps in a loop and is killed with SIGKILL at random
//! moments. After every kill, every acknowledged step is stored whole, no step is stored in part,
//! and recovery abandons exactly the batches that were open.
//!
//! The child is this same test binary, re-run with `PATTERN_CRASH_CHILD` set; it prints a line
//! for every acknowledgement only after the store returned it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pattern_db::testkit::TestDb;
use pattern_db::{
    BatchState, BeginBatch, ContentBlock, Database, DbConfig, MachineId, NewAgent, NewMessage,
    RecoveryScope, Role,
};
use rand::Rng;

const STEP_SIZE: usize = 3;

/// Entry point of the child; a no-op in a normal test run.
#[test]
fn crash_child() {
    let (Ok(url), Ok(agent)) = (
        std::env::var("PATTERN_CRASH_CHILD"),
        std::env::var("PATTERN_CRASH_AGENT"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut config = DbConfig::new(url);
        config.machine_id = MachineId::Fixed(1);
        let db = Database::open(config).await.unwrap();
        let store = db.messages(agent.parse().unwrap());
        let mut out = std::io::stdout().lock();
        writeln!(out, "@@READY").unwrap();
        out.flush().unwrap();
        for round in 0u64.. {
            let b = store
                .begin_batch(
                    NewMessage::user(format!("round {round}")),
                    BeginBatch::default(),
                )
                .await
                .unwrap();
            writeln!(out, "@@BEGIN {}", b.batch_id).unwrap();
            out.flush().unwrap();
            for step in 0..3 {
                let call = format!("c{round}-{step}");
                let messages = vec![
                    NewMessage::new(
                        Role::Assistant,
                        vec![
                            ContentBlock::text(format!("step {round}.{step} part 0")),
                            ContentBlock::tool_use(&call, "work", serde_json::json!({})),
                        ],
                    ),
                    NewMessage::new(
                        Role::Tool,
                        vec![ContentBlock::tool_result(
                            &call,
                            format!("step {round}.{step} part 1"),
                            false,
                        )],
                    ),
                    NewMessage::assistant(format!("step {round}.{step} part 2")),
                ];
                store.append_step(b.batch_id, messages).await.unwrap();
                writeln!(out, "@@STEP {} {round}.{step}", b.batch_id).unwrap();
                out.flush().unwrap();
            }
            store.complete_batch(b.batch_id).await.unwrap();
            writeln!(out, "@@COMPLETE {}", b.batch_id).unwrap();
            out.flush().unwrap();
        }
    });
}

/// Kills the child if the parent fails before it means to, so no child outlives the test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Default, Debug)]
struct Acked {
    begun: BTreeSet<i64>,
    steps: BTreeSet<(i64, String)>,
    completed: BTreeSet<i64>,
    kills_mid_batch: usize,
}

fn run_child_and_kill(url: &str, agent: &str, kill_after: Duration) -> Acked {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "crash::crash_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PATTERN_CRASH_CHILD", url)
        .env("PATTERN_CRASH_AGENT", agent)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may print `test name ... ` on the same line: keep what follows the marker.
            let Some((_, line)) = line.split_once("@@") else {
                continue;
            };
            if tx.send(line.to_owned()).is_err() {
                break;
            }
        }
    });
    // Wait until the child is ready, then let it run for the random interval and kill it.
    let started = Instant::now();
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == "READY" => break,
            Ok(line) => lines.push(line),
            Err(e) => panic!(
                "child never became ready: {e} after {:?}",
                started.elapsed()
            ),
        }
    }
    std::thread::sleep(kill_after);
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let mut acked = Acked::default();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["BEGIN", b] => {
                acked.begun.insert(b.parse().unwrap());
            }
            ["STEP", b, s] => {
                acked.steps.insert((b.parse().unwrap(), (*s).to_owned()));
            }
            ["COMPLETE", b] => {
                acked.completed.insert(b.parse().unwrap());
            }
            _ => {}
        }
    }
    acked
}

async fn check_after_kill(
    db: &Database,
    agent: pattern_db::AgentId,
    acked: &Acked,
    all_acked: &mut Acked,
) {
    let store = db.messages(agent);
    let batches = store.get_recent(100_000).await.unwrap();
    let open_before: BTreeSet<i64> = batches
        .iter()
        .filter(|b| b.info.state == BatchState::Open)
        .map(|b| b.info.id.get())
        .collect();
    let stored: BTreeMap<i64, &pattern_db::StoredBatch> =
        batches.iter().map(|b| (b.info.id.get(), b)).collect();

    for b in &acked.begun {
        assert!(stored.contains_key(b), "acknowledged batch {b} is missing");
    }
    for (b, step) in &acked.steps {
        let batch = stored
            .get(b)
            .unwrap_or_else(|| panic!("batch {b} of acknowledged step {step} missing"));
        let parts = batch.messages.iter().filter(|m| m.text().starts_with(&format!("step {step} part"))
            || m.content.iter().any(|c| matches!(c, ContentBlock::ToolResult { content, .. } if content.starts_with(&format!("step {step} part")))))
            .count();
        assert_eq!(parts, STEP_SIZE, "acknowledged step {step} is not whole");
    }
    for b in &acked.completed {
        assert_eq!(
            stored[b].info.state,
            BatchState::Complete,
            "acknowledged completion of {b} lost"
        );
    }
    // No partial step anywhere: every batch holds the trigger plus whole steps.
    for batch in stored.values() {
        assert_eq!(
            (batch.messages.len() - 1) % STEP_SIZE,
            0,
            "batch {} holds a partial step",
            batch.info.id
        );
        assert!(
            batch
                .messages
                .windows(2)
                .all(|w| w[0].sequence_num + 1 == w[1].sequence_num)
        );
    }
    // At most the batch of this run can be open; recovery abandons exactly the open ones.
    assert!(open_before.len() <= 1, "{open_before:?}");
    if !open_before.is_empty() {
        all_acked.kills_mid_batch += 1;
    }
    let recovered: BTreeSet<i64> = store
        .recover_scope(RecoveryScope::AllOpen)
        .await
        .unwrap()
        .iter()
        .map(|a| a.batch.id.get())
        .collect();
    assert_eq!(recovered, open_before);
    for b in &recovered {
        assert!(!acked.completed.contains(b));
    }
    all_acked.begun.extend(acked.begun.iter().copied());
    all_acked.steps.extend(acked.steps.iter().cloned());
    all_acked.completed.extend(acked.completed.iter().copied());
}

/// `application_name` of the child's PostgreSQL sessions.
const CHILD_APP: &str = "pattern_crash_child";

/// Waits until no session of the killed child is left on the server (at most 30 s).
async fn wait_for_child_sessions_to_end(url: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let started = Instant::now();
    loop {
        let (left,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(CHILD_APP)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the killed child's sessions never ended"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    conn.close().await.unwrap();
}

async fn crash_loop(tdb: &TestDb, kills: usize) {
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("crashy")).await.unwrap();
    let mut all = Acked::default();
    let mut rng = rand::rng();
    for round in 0..kills {
        // While no step has been acknowledged yet (a loaded machine runs the child slowly), the
        // interval widens, so the loop still proves something about acknowledged steps.
        let widen = if all.steps.is_empty() {
            round as u64 * 20
        } else {
            0
        };
        let kill_after = Duration::from_millis(rng.random_range(0..40) + widen);
        let postgres = db.backend() == pattern_db::Backend::Postgres;
        // On PostgreSQL the child's sessions are named, so the parent can wait until the server
        // has finished with them: a COMMIT the child sent just before it died is still applied.
        let url = if postgres {
            format!("{}?application_name={CHILD_APP}", tdb.url)
        } else {
            tdb.url.clone()
        };
        let agent_s = agent.id.to_string();
        let acked =
            tokio::task::spawn_blocking(move || run_child_and_kill(&url, &agent_s, kill_after))
                .await
                .unwrap();
        if postgres {
            wait_for_child_sessions_to_end(&tdb.url).await;
        }
        check_after_kill(&db, agent.id, &acked, &mut all).await;
    }
    // Everything acknowledged in any run is still there at the end.
    let store = db.messages(agent.id);
    let stored: BTreeSet<i64> = store
        .get_recent(100_000)
        .await
        .unwrap()
        .iter()
        .map(|b| b.info.id.get())
        .collect();
    assert!(all.begun.is_subset(&stored));
    assert!(
        !all.steps.is_empty(),
        "the child never acknowledged a step: the kill intervals are too short"
    );
    // Many kills must land inside a batch, or the test would prove little (a quarter leaves room
    // for a loaded machine, where the child starts slowly).
    assert!(
        all.kills_mid_batch * 4 >= kills,
        "only {} of {kills} kills hit an open batch",
        all.kills_mid_batch
    );
    eprintln!(
        "{kills} kills: {} inside an open batch, {} batches and {} steps acknowledged in all",
        all.kills_mid_batch,
        all.begun.len(),
        all.steps.len()
    );
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_sqlite_200_times() {
    let tdb = TestDb::sqlite().unwrap();
    crash_loop(&tdb, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_postgres_30_times() {
    let tdb = TestDb::postgres().await.unwrap();
    crash_loop(&tdb, 30).await;
    tdb.cleanup().await.unwrap();
}

/// Entry point of the migrating child: opens (and so migrates) the database, then waits to be
/// killed. A no-op in a normal test run.
#[test]
fn migrate_child() {
    let Ok(url) = std::env::var("PATTERN_MIGRATE_CHILD") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let db = Database::open(DbConfig::new(url)).await.unwrap();
        println!("@@MIGRATED {}", db.machine_id());
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

/// A process killed while it migrates a fresh database (each migration is one transaction)
/// leaves it either without that migration or with it whole: the next open migrates the rest,
/// and the database works.
async fn killed_while_migrating(kind: crate::Kind, rounds: usize) {
    let mut rng = rand::rng();
    let mut killed_before_done = 0;
    for _ in 0..rounds {
        let tdb = crate::fresh(kind).await;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "crash::migrate_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PATTERN_MIGRATE_CHILD", &tdb.url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(20..400)));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
        if !out.contains("@@MIGRATED") {
            killed_before_done += 1;
        }
        // A killed PostgreSQL session rolls back; its migration lock goes with it.
        let db = tdb.open().await.unwrap();
        assert!(
            db.migration_status()
                .await
                .unwrap()
                .iter()
                .all(|m| m.applied),
            "every migration applied after the kill"
        );
        let agent = db.create_agent(NewAgent::named("after")).await.unwrap();
        db.messages(agent.id)
            .begin_batch(NewMessage::user("works"), BeginBatch::default())
            .await
            .unwrap();
        db.close().await;
        tdb.cleanup().await.unwrap();
    }
    eprintln!(
        "killed while migrating: {killed_before_done} of {rounds} kills came before the migrations were done"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_migrating_sqlite() {
    killed_while_migrating(crate::Kind::Sqlite, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_migrating_postgres() {
    killed_while_migrating(crate::Kind::Postgres, 8).await;
}
