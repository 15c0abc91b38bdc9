//! The multi-process crash harness of "Runs fenced in the database": real `pattern serve`
//! processes over one database (PostgreSQL: 3 processes; SQLite: 1) are killed and restarted
//! hundreds of times while clients send turns through all of them, and what clients were told is
//! checked against what the database holds.
//!
//! Clients (tokio tasks) send turns on 20 agents, each message with a unique marker: JSON and
//! SSE; some with an `Idempotency-Key` they repeat (on another instance, or on the same one after
//! it restarted) expecting the first turn back; some SSE clients drop the connection after k
//! events and resume on another instance with `Last-Event-ID: k`; a failed turn's batch is
//! sometimes retried. Memory clients store and delete archival passages on any instance and
//! search for each right after (on another instance when there are several). A chaos loop
//! SIGKILLs (mostly) or SIGTERMs (sometimes) a random process every few hundred ms and restarts
//! it on the same port. A sampler reads the database every 100 ms: never two open batches of one
//! agent, and every open batch of a SIGKILLed process leaves `open` within lease + 10 s. At the
//! end (chaos stopped, servers settled), the checks:
//! no acknowledged message lost or stored twice (a retried batch and its retry are one lineage;
//! unacknowledged messages at most once), no unpaired request reached the model, no turn told
//! it failed whose batch completed (nor told done whose batch did not), every resumed stream
//! dense and ended, every repeated key answered with the first turn, no request hung, every
//! search that answered agreed with the archival write acknowledged before it, and at the end
//! every acknowledged passage (not sent a delete) is found by its marker and no deleted one is.
//!
//! `PATTERN_CLUSTER_KILLS` sets how many processes are stopped (the quick form CI runs: 100 on
//! PostgreSQL, 60 on SQLite, about 160 s together; e.g. 2000 for a long run);
//! `PATTERN_CLUSTER_SEED` replays the clients' and the chaos loop's choices (timing still
//! varies). This harness must never run beside the other
//! heavy tests ([`crate::deploy::exclusive`]), never leave a process behind (the servers die
//! with their [`ServerSet`]), and never decide a check by sleeping: every wait polls a condition
//! with a bound.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pattern_db::Backend;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};

use crate::block_on;
use crate::deploy::{Plan, deploy, exclusive};
use crate::harness::client::{Answer, Api, Final, Message};
use crate::harness::model::{ModelOptions, Pace};
use crate::harness::probe::Probe;
use crate::harness::servers::{ServerSet, Stop};
use crate::harness::stored::Stored;

/// `--run-lease-secs` given to every process.
const LEASE: Duration = Duration::from_secs(5);
/// `--drain-secs` given to every process.
const DRAIN: Duration = Duration::from_secs(3);
/// How long a SIGTERMed process may take to exit: what `pattern serve` allows itself after the
/// drain (up to 10 s for the turns it cancelled to store their last events, up to 10 s more for
/// runs with no request left, up to 5 s for the embedding worker to finish what it holds) and a
/// margin. Drain + 10 s was tighter than that; on an overloaded two-core machine (load 6) a
/// process twice took longer (it was then killed: how much longer is not known).
const TERM_GRACE: Duration = Duration::from_secs(DRAIN.as_secs() + 10 + 10 + 5 + 5);
/// A dead run's open batches must leave `open` within this.
const ABANDON_LIMIT: Duration = Duration::from_secs(5 + 10);
/// Longest one request may wait for its answer (or a stream for its end) before it counts as
/// hung.
const ANSWER_LIMIT: Duration = Duration::from_secs(60);
/// How long a client keeps resuming a stream, or repeating a key, across instances.
const RETRY_LIMIT: Duration = Duration::from_secs(60);
/// How many examples of each violation are printed.
const EXAMPLES: usize = 10;

struct Params {
    name: &'static str,
    backend: Backend,
    slots: usize,
    agents: usize,
    clients: usize,
    kills: usize,
    /// Milliseconds between two kills (uniform).
    kill_gap: std::ops::RangeInclusive<u64>,
    /// Longest wait of the model before each chunk of an answer.
    model_pace: Duration,
}

fn kills_from_env(default: usize) -> usize {
    std::env::var("PATTERN_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn cluster_pg() {
    cluster(Params {
        name: "cluster_pg",
        backend: Backend::Postgres,
        slots: 3,
        agents: 20,
        clients: 12,
        kills: kills_from_env(100),
        kill_gap: 300..=900,
        model_pace: Duration::from_millis(120),
    });
}

#[test]
fn cluster_sqlite() {
    cluster(Params {
        name: "cluster_sqlite",
        backend: Backend::Sqlite,
        slots: 1,
        agents: 20,
        clients: 8,
        kills: kills_from_env(60),
        kill_gap: 400..=900,
        // One process killed about every 0.65 s: shorter turns, so many finish between kills.
        model_pace: Duration::from_millis(40),
    });
}

/// What clients sent and were told about one marker.
struct Sent {
    agent: String,
    /// Sent with an `Idempotency-Key` (and repeated).
    keyed: bool,
    acked: bool,
    log: Vec<String>,
}

/// A stream that was resumed.
struct Resumed {
    marker: String,
    turn: String,
    deliberate: bool,
    legs: Vec<String>,
    problem: Option<String>,
}

/// A repeated idempotency key.
struct Repeat {
    marker: String,
    key: String,
    first: String,
    first_turn: Option<String>,
    after_restart: bool,
    answer: Option<Answer>,
    tries: Vec<String>,
}

/// What the memory clients stored, deleted and saw (archival passages through the API).
#[derive(Default)]
struct Memory {
    /// Every acknowledged insert: marker -> (agent, passage id).
    stored: BTreeMap<String, (String, String)>,
    /// Passages a delete was sent for, answered or not (a kill can hide its outcome).
    going: HashSet<String>,
    /// Acknowledged deletes: (agent, marker).
    deleted: Vec<(String, String)>,
    /// Searches right after an acknowledged write that did not agree with it.
    disagreed: Vec<String>,
    /// Searches that answered.
    searches: usize,
}

#[derive(Default)]
struct Ledger {
    sent: BTreeMap<String, Sent>,
    /// `(marker, what the client was told, where)`.
    told: Vec<(String, Final, String)>,
    resumed: Vec<Resumed>,
    /// Streams (not resumed) whose ids were not 1, 2, ...
    disordered: Vec<String>,
    repeats: Vec<Repeat>,
    hung: Vec<String>,
    outcomes: BTreeMap<String, usize>,
    retries: usize,
    sigkills: usize,
    sigterms: usize,
    restarts: usize,
    term_problems: Vec<String>,
    /// Processes that exited on their own.
    died: Vec<String>,
    fatal: Vec<String>,
    memory: Memory,
}

struct Run {
    api: Api,
    servers: ServerSet,
    agents: Vec<String>,
    stopping: AtomicBool,
    ledger: Mutex<Ledger>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn summary(a: &Answer) -> String {
    let outcome = match &a.outcome {
        Some(Final::Done { batch }) => format!("done batch {batch:?}"),
        Some(Final::Failed {
            code,
            status,
            batch,
            saved,
            ..
        }) => format!("{code} ({status}) batch {batch:?} saved {saved:?}"),
        None => "no outcome".to_owned(),
    };
    format!(
        "status {:?}, turn {:?}{}, {} events, {outcome}{}",
        a.status,
        a.turn_id,
        if a.replayed { " (replayed)" } else { "" },
        a.events.len(),
        a.broke
            .as_ref()
            .map(|b| format!(", broke: {b}"))
            .unwrap_or_default()
    )
}

fn is_hung(a: &Answer) -> bool {
    a.broke.as_ref().is_some_and(|b| b.contains("within"))
}

/// Whether `ids` are 1, 2, ..., n.
fn dense(ids: &[u64]) -> bool {
    ids.iter().enumerate().all(|(i, id)| *id == i as u64 + 1)
}

impl Run {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    fn base(&self, slot: usize) -> String {
        self.servers.base(slot)
    }

    fn sent(&self, marker: &str, agent: &str, keyed: bool) {
        lock(&self.ledger).sent.insert(
            marker.to_owned(),
            Sent {
                agent: agent.to_owned(),
                keyed,
                acked: false,
                log: Vec::new(),
            },
        );
    }

    /// Records an answer about `marker`'s message: acknowledgement, outcome, hang.
    fn answered(&self, marker: &str, what: &str, slot: usize, a: &Answer) {
        let line = format!("{what} on slot {slot}: {}", summary(a));
        let mut l = lock(&self.ledger);
        if is_hung(a) {
            l.hung.push(format!("{marker}: {line}"));
        }
        if let Some(outcome) = &a.outcome {
            let label = match outcome {
                Final::Done { .. } => "ok".to_owned(),
                Final::Failed { code, .. } => code.clone(),
            };
            *l.outcomes.entry(label).or_default() += 1;
            l.told
                .push((marker.to_owned(), outcome.clone(), line.clone()));
        } else if a.status.is_none() {
            *l.outcomes.entry("no answer".to_owned()).or_default() += 1;
        }
        if let Some(s) = l.sent.get_mut(marker) {
            s.acked |= a.acked;
            s.log.push(line);
        }
    }

    fn note(&self, marker: &str, line: String) {
        if let Some(s) = lock(&self.ledger).sent.get_mut(marker) {
            s.log.push(line);
        }
    }

    /// Searches for `marker` on an instance other than `wrote` when there is one: when the
    /// search answers, it must find exactly `expected` (the passage just stored) or nothing
    /// (just deleted).
    async fn search_agrees(
        &self,
        rng: &mut StdRng,
        wrote: usize,
        agent: &str,
        marker: &str,
        expected: Option<&str>,
    ) {
        let slot = self.pick(rng, &[wrote]).await;
        let Ok(ids) = self
            .api
            .search_ids(&self.base(slot), agent, marker, ANSWER_LIMIT)
            .await
        else {
            return;
        };
        let mut l = lock(&self.ledger);
        l.memory.searches += 1;
        if ids.iter().map(String::as_str).ne(expected) {
            l.memory.disagreed.push(format!(
                "{marker}: written on slot {wrote}, searched on slot {slot}: found {ids:?}, \
                 expected {expected:?}"
            ));
        }
    }

    /// Waits until `slot` restarted after `generation`, at most `limit`, and not once the run
    /// is stopping (no more restarts come then).
    async fn wait_restart(&self, slot: usize, generation: u64, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit && !self.stopping() {
            let slice = Duration::from_millis(500).min(limit.saturating_sub(started.elapsed()));
            if self.servers.wait_restart(slot, generation, slice).await {
                return true;
            }
        }
        false
    }

    /// A random slot that is up and not in `avoid` (when several slots exist; the first of
    /// `avoid` is never given, the others only when nothing else is up), waiting while there is
    /// none (at most 30 s, then any slot).
    async fn pick(&self, rng: &mut StdRng, avoid: &[usize]) -> usize {
        let started = Instant::now();
        loop {
            let up = self.servers.up();
            let choice: Vec<usize> = if self.servers.len() == 1 {
                up
            } else {
                let strict: Vec<usize> =
                    up.iter().copied().filter(|s| !avoid.contains(s)).collect();
                if strict.is_empty() {
                    up.into_iter()
                        .filter(|s| avoid.first() != Some(s))
                        .collect()
                } else {
                    strict
                }
            };
            if !choice.is_empty() {
                return choice[rng.random_range(0..choice.len())];
            }
            if started.elapsed() > Duration::from_secs(30) {
                return rng.random_range(0..self.servers.len());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Adds a violation: how many `list` holds, and the first examples.
pub fn add(violations: &mut Vec<String>, what: impl std::fmt::Display, list: Vec<String>) {
    if !list.is_empty() {
        violations.push(format!(
            "{} {what}, e.g.:\n    {}",
            list.len(),
            list.iter()
                .take(EXAMPLES)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n    ")
        ));
    }
}

/// The mean of some durations, in seconds.
fn mean(all: &[Duration]) -> f64 {
    all.iter().map(Duration::as_secs_f64).sum::<f64>() / all.len().max(1) as f64
}

/// Log lines joined with ` | `, runs of equal lines shown once with their count.
fn squeeze(lines: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let run = lines[i..].iter().take_while(|l| **l == lines[i]).count();
        out.push(if run > 1 {
            format!("{} (x{run})", lines[i])
        } else {
            lines[i].clone()
        });
        i += run;
    }
    out.join(" | ")
}

fn marker() -> String {
    format!("mk{}", uuid::Uuid::new_v4().simple())
}

/// One client: turns until the run stops.
async fn client(run: Arc<Run>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !run.stopping() {
        let agent = run.agents[rng.random_range(0..run.agents.len())].clone();
        match rng.random_range(0..100) {
            0..30 => plain(&run, &mut rng, &agent, false, None).await,
            30..55 => plain(&run, &mut rng, &agent, true, None).await,
            55..75 => {
                let k = rng.random_range(1..=8);
                plain(&run, &mut rng, &agent, true, Some(k)).await;
            }
            _ => {
                let stream = rng.random_bool(0.5);
                keyed(&run, &mut rng, &agent, stream).await;
            }
        }
        let pause = rng.random_range(0..100);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Memory clients running beside the turns' clients.
const MEMORY_CLIENTS: usize = 2;

/// A memory client: archival passages stored, deleted and searched for through any instance
/// while processes die. Every search that answers must agree with the write acknowledged just
/// before it (on another instance when there are several).
async fn memory_client(run: Arc<Run>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut mine: Vec<(String, String, String)> = Vec::new();
    while !run.stopping() {
        let slot = run.pick(&mut rng, &[]).await;
        let base = run.base(slot);
        if mine.is_empty() || rng.random_bool(0.7) {
            let agent = run.agents[rng.random_range(0..run.agents.len())].clone();
            let m = marker();
            let text = format!("memory passage {m}");
            // Not acknowledged (an error or no answer): its outcome is unknown, nothing checked.
            if let Ok((201, body)) = run
                .api
                .insert_archival(&base, &agent, &text, ANSWER_LIMIT)
                .await
            {
                let Some(id) = body["id"].as_str().map(str::to_owned) else {
                    lock(&run.ledger).fatal.push(format!(
                        "an archival insert answered 201 without an id: {body}"
                    ));
                    continue;
                };
                lock(&run.ledger)
                    .memory
                    .stored
                    .insert(m.clone(), (agent.clone(), id.clone()));
                run.search_agrees(&mut rng, slot, &agent, &m, Some(&id))
                    .await;
                mine.push((m, agent, id));
            }
        } else {
            let (m, agent, id) = mine.swap_remove(rng.random_range(0..mine.len()));
            lock(&run.ledger).memory.going.insert(id.clone());
            if let Ok(200..=299) = run
                .api
                .delete_archival(&base, &agent, &id, ANSWER_LIMIT)
                .await
            {
                lock(&run.ledger)
                    .memory
                    .deleted
                    .push((agent.clone(), m.clone()));
                run.search_agrees(&mut rng, slot, &agent, &m, None).await;
            }
        }
        let pause = rng.random_range(50..250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// A turn without a key; SSE ones are followed to their end (resumed elsewhere when they break,
/// or on purpose after `drop_after` events); a failed one's batch is sometimes retried.
async fn plain(run: &Run, rng: &mut StdRng, agent: &str, stream: bool, drop_after: Option<usize>) {
    let m = marker();
    run.sent(&m, agent, false);
    let slot = run.pick(rng, &[]).await;
    let generation = run.servers.generation(slot);
    let what = match (stream, drop_after) {
        (false, _) => "JSON".to_owned(),
        (true, None) => "SSE".to_owned(),
        (true, Some(k)) => format!("SSE dropped after {k}"),
    };
    let a = run
        .api
        .send(
            &run.base(slot),
            &Message {
                stream,
                drop_after,
                ..Message::new(agent, &format!("note {m}"))
            },
            ANSWER_LIMIT,
        )
        .await;
    run.answered(&m, &what, slot, &a);
    let mut outcome = a.outcome.clone();
    if stream && outcome.is_none() && a.status == Some(200) {
        if let Some(turn) = a.turn_id.clone() {
            if run.servers.len() == 1 && drop_after.is_some() && rng.random_bool(0.5) {
                // One instance: resume once it restarted.
                let restarted = run
                    .wait_restart(slot, generation, Duration::from_secs(15))
                    .await;
                run.note(&m, format!("waited for a restart: {restarted}"));
            }
            outcome = follow(run, rng, &m, agent, &turn, &a, slot, drop_after.is_some()).await;
        }
    } else if stream && !a.events.is_empty() {
        let ids: Vec<u64> = a.events.iter().filter_map(|e| e.id).collect();
        if !dense(&ids) || ids.len() != a.events.len() {
            lock(&run.ledger)
                .disordered
                .push(format!("{m} turn {:?}: event ids {ids:?}", a.turn_id));
        }
    }
    if let Some(Final::Failed {
        saved: Some(true),
        batch: Some(batch),
        ..
    }) = outcome
        && rng.random_bool(0.3)
    {
        let slot = run.pick(rng, &[]).await;
        let r = run
            .api
            .retry(&run.base(slot), agent, batch, ANSWER_LIMIT)
            .await;
        lock(&run.ledger).retries += 1;
        run.answered(&m, &format!("retry of batch {batch}"), slot, &r);
    }
}

/// Resumes a turn's stream after the events `first` holds, on other instances, until it ends;
/// records the whole sequence of ids. Returns the outcome it saw.
#[allow(clippy::too_many_arguments)]
async fn follow(
    run: &Run,
    rng: &mut StdRng,
    m: &str,
    agent: &str,
    turn: &str,
    first: &Answer,
    slot: usize,
    deliberate: bool,
) -> Option<Final> {
    let mut ids: Vec<u64> = first.events.iter().filter_map(|e| e.id).collect();
    let mut problem =
        (ids.len() != first.events.len()).then(|| "an event without a numeric id".to_owned());
    let mut last = first.events.last().map(|e| e.name.clone());
    let mut legs = vec![format!("slot {slot}: {}", summary(first))];
    // Never the instance the stream started on (when there are others), nor the one that just
    // failed.
    let mut avoid = vec![slot];
    let mut outcome = None;
    let started = Instant::now();
    while problem.is_none() {
        let left = RETRY_LIMIT.saturating_sub(started.elapsed());
        if left.is_zero() {
            problem = Some(format!("not over after resuming for {RETRY_LIMIT:?}"));
            break;
        }
        let target = run.pick(rng, &avoid).await;
        let after = ids.last().copied().unwrap_or(0);
        let a = run
            .api
            .resume(&run.base(target), agent, turn, after, left)
            .await;
        legs.push(format!("slot {target} after {after}: {}", summary(&a)));
        if a.status == Some(200) {
            // Events of the turn are answer bytes too: the message is stored.
            run.answered(m, &format!("resumed after {after}"), target, &a);
        }
        for e in &a.events {
            match e.id {
                Some(id) => ids.push(id),
                None => problem = Some("an event without a numeric id".to_owned()),
            }
            last = Some(e.name.clone());
        }
        match a.status {
            None => {
                // Not reachable (killed, restarting): another instance.
                avoid.truncate(1);
                avoid.push(target);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some(200) if a.outcome.is_some() => {
                outcome = a.outcome.clone();
                break;
            }
            Some(200) => {
                avoid.truncate(1);
                avoid.push(target);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(s) if s >= 500 => tokio::time::sleep(Duration::from_millis(200)).await,
            Some(s) => {
                problem = Some(format!(
                    "resume after {after} on slot {target} answered {s}: {}",
                    a.body.as_deref().unwrap_or("")
                ));
            }
        }
    }
    if problem.is_none() && !dense(&ids) {
        problem = Some(format!("event ids are not 1, 2, ...: {ids:?}"));
    }
    if problem.is_none() && !matches!(last.as_deref(), Some("done" | "error")) {
        problem = Some(format!("the stream's last event is {last:?}"));
    }
    lock(&run.ledger).resumed.push(Resumed {
        marker: m.to_owned(),
        turn: turn.to_owned(),
        deliberate,
        legs,
        problem,
    });
    outcome
}

/// A turn with an `Idempotency-Key`, then the same request again: on another instance at once,
/// or on the same one after it restarted (a streamed first attempt is sometimes left after its
/// first event, so the repeat finds the turn running). The repeat is JSON and is sent again
/// while no instance answers it.
async fn keyed(run: &Run, rng: &mut StdRng, agent: &str, stream: bool) {
    let m = marker();
    let key = format!("key-{}", uuid::Uuid::new_v4().simple());
    run.sent(&m, agent, true);
    let content = format!("note {m}");
    let slot = run.pick(rng, &[]).await;
    let generation = run.servers.generation(slot);
    // Half the streamed ones are left after their first event: the repeat then finds the turn
    // still running.
    let drop_after = (stream && rng.random_bool(0.5)).then_some(1);
    let first = run
        .api
        .send(
            &run.base(slot),
            &Message {
                stream,
                key: Some(&key),
                drop_after,
                ..Message::new(agent, &content)
            },
            ANSWER_LIMIT,
        )
        .await;
    let what = match (stream, drop_after) {
        (false, _) => "keyed JSON",
        (true, None) => "keyed SSE",
        (true, Some(_)) => "keyed SSE left after 1 event",
    };
    run.answered(&m, what, slot, &first);
    let after_restart = rng.random_bool(0.4);
    let mut tries = Vec::new();
    if after_restart {
        let restarted = run
            .wait_restart(slot, generation, Duration::from_secs(20))
            .await;
        tries.push(format!("slot {slot} restarted: {restarted}"));
    }
    let started = Instant::now();
    let mut answer = None;
    while started.elapsed() < RETRY_LIMIT {
        let target = if after_restart {
            if !run.servers.is_up(slot) {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            slot
        } else {
            run.pick(rng, &[slot]).await
        };
        let a = run
            .api
            .send(
                &run.base(target),
                &Message {
                    key: Some(&key),
                    ..Message::new(agent, &content)
                },
                ANSWER_LIMIT,
            )
            .await;
        run.answered(&m, "key repeat", target, &a);
        tries.push(format!("slot {target}: {}", summary(&a)));
        let retry = match a.status {
            None => true,
            Some(s) => s >= 500 && a.turn_id.is_none(),
        };
        if !retry {
            answer = Some(a);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    lock(&run.ledger).repeats.push(Repeat {
        marker: m,
        key,
        first: format!("slot {slot}: {}", summary(&first)),
        first_turn: first.acked.then(|| first.turn_id.clone()).flatten(),
        after_restart,
        answer,
        tries,
    });
}

/// Stops a random process every few hundred ms (SIGKILL mostly, SIGTERM sometimes) and starts
/// it again on its port, until `kills` processes were SIGKILLed. Their pids go to `killed`.
async fn chaos(
    run: Arc<Run>,
    kills: usize,
    gap: std::ops::RangeInclusive<u64>,
    seed: u64,
    killed: mpsc::UnboundedSender<(u32, Instant)>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let slots = run.servers.len();
    let mut tasks = Vec::new();
    let mut sigkills = 0;
    while sigkills < kills && lock(&run.ledger).fatal.is_empty() {
        let pause = rng.random_range(gap.clone());
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let up = run.servers.up();
        // Keep at least one process serving while another restarts.
        if up.is_empty() || (slots > 1 && up.len() < 2) {
            continue;
        }
        let slot = up[rng.random_range(0..up.len())];
        let how = if rng.random_bool(0.85) {
            Stop::Kill
        } else {
            Stop::Term(TERM_GRACE)
        };
        sigkills += usize::from(how == Stop::Kill);
        let run = run.clone();
        let killed = killed.clone();
        tasks.push(tokio::spawn(async move {
            let Some(s) = run.servers.stop(slot, how).await else {
                return;
            };
            if s.died_before {
                lock(&run.ledger).died.push(format!(
                    "slot {slot} pid {} had exited ({:?}) before it was stopped; its stderr \
                     ends: {}",
                    s.pid,
                    s.status,
                    run.servers.tail(slot).join(" / ")
                ));
            }
            match how {
                Stop::Kill => {
                    lock(&run.ledger).sigkills += 1;
                    let _ = killed.send((s.pid, s.signalled_at));
                }
                Stop::Term(grace) => {
                    let mut l = lock(&run.ledger);
                    l.sigterms += 1;
                    if s.forced {
                        l.term_problems.push(format!(
                            "slot {slot} pid {} did not exit within {grace:?} of SIGTERM; its \
                             stderr ends: {}",
                            s.pid,
                            run.servers.tail(slot).join(" / ")
                        ));
                    } else if !s.status.is_some_and(|st| st.success()) {
                        l.term_problems.push(format!(
                            "slot {slot} pid {} exited with {:?} after SIGTERM",
                            s.pid, s.status
                        ));
                    }
                }
            }
            match run.servers.launch(slot).await {
                Ok(_) => lock(&run.ledger).restarts += 1,
                Err(e) => lock(&run.ledger).fatal.push(format!("restart failed: {e}")),
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

#[derive(Default)]
struct Sampled {
    samples: usize,
    /// Samples that saw an agent with two open batches, and examples.
    doubles: usize,
    double_examples: Vec<String>,
    /// `(latency, pid, batches)` of every SIGKILL that left open batches.
    abandoned: Vec<(Duration, u32, usize)>,
    late: Vec<String>,
    kills_without_open: usize,
    errors: Vec<String>,
}

struct Watch {
    pid: u32,
    at: Instant,
    /// Open batches of the pid at the first sample after its death: id -> agent.
    batches: Option<BTreeMap<i64, String>>,
}

/// Reads open batches every 100 ms until told to stop and every dead run is judged.
async fn sampler(
    probe: Arc<Probe>,
    mut killed: mpsc::UnboundedReceiver<(u32, Instant)>,
    stop: watch::Receiver<bool>,
) -> Sampled {
    let mut out = Sampled::default();
    let mut watches: Vec<Watch> = Vec::new();
    let mut seen_doubles: HashSet<Vec<i64>> = HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        while let Ok((pid, at)) = killed.try_recv() {
            watches.push(Watch {
                pid,
                at,
                batches: None,
            });
        }
        let open = match probe.open_batches().await {
            Ok(open) => open,
            Err(e) => {
                out.errors.push(e);
                if out.errors.len() > 50 {
                    break;
                }
                continue;
            }
        };
        let now = Instant::now();
        out.samples += 1;
        let mut by_agent: HashMap<&str, Vec<i64>> = HashMap::new();
        for b in &open {
            by_agent.entry(b.agent.as_str()).or_default().push(b.id);
        }
        let mut doubled = false;
        for (agent, mut ids) in by_agent {
            if ids.len() > 1 {
                doubled = true;
                ids.sort_unstable();
                if out.double_examples.len() < EXAMPLES && seen_doubles.insert(ids.clone()) {
                    let owners: Vec<String> = open
                        .iter()
                        .filter(|b| ids.contains(&b.id))
                        .map(|b| format!("{} by {}", b.id, b.owner))
                        .collect();
                    out.double_examples
                        .push(format!("agent {agent}: open batches {owners:?}"));
                }
            }
        }
        out.doubles += usize::from(doubled);
        let open_ids: HashSet<i64> = open.iter().map(|b| b.id).collect();
        watches.retain_mut(|w| {
            let prefix = format!("pid{}-", w.pid);
            let batches = w.batches.get_or_insert_with(|| {
                open.iter()
                    .filter(|b| b.owner.starts_with(&prefix))
                    .map(|b| (b.id, b.agent.clone()))
                    .collect()
            });
            if batches.is_empty() {
                out.kills_without_open += 1;
                return false;
            }
            let still: Vec<i64> = batches
                .keys()
                .copied()
                .filter(|id| open_ids.contains(id))
                .collect();
            let waited = now.duration_since(w.at);
            if still.is_empty() {
                out.abandoned.push((waited, w.pid, batches.len()));
                return false;
            }
            if waited > ABANDON_LIMIT {
                out.abandoned.push((waited, w.pid, batches.len()));
                out.late.push(format!(
                    "pid {} SIGKILLed {:.1} s ago: batches {still:?} still open (of {:?})",
                    w.pid,
                    waited.as_secs_f64(),
                    batches.keys().collect::<Vec<_>>()
                ));
                return false;
            }
            true
        });
        if *stop.borrow() && watches.is_empty() {
            break;
        }
    }
    out
}

fn cluster(p: Params) {
    let _heavy = exclusive();
    let seed: u64 = std::env::var("PATTERN_CLUSTER_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!(
        "{}: seed {seed} (PATTERN_CLUSTER_SEED), {} kills (PATTERN_CLUSTER_KILLS)",
        p.name, p.kills
    );
    block_on(async move {
        let wall = Instant::now();
        let d = deploy(Plan {
            backend: p.backend,
            slots: p.slots,
            agents: p.agents,
            model: ModelOptions {
                pace: Pace::RandomUpTo(p.model_pace),
                ..ModelOptions::default()
            },
            serve_flags: vec![
                ("--run-lease-secs".to_owned(), LEASE.as_secs().to_string()),
                ("--drain-secs".to_owned(), DRAIN.as_secs().to_string()),
            ],
            serve_env: Vec::new(),
        })
        .await;
        let setup = wall.elapsed();
        let probe = Arc::new(Probe::open(&d.url).await.unwrap());
        let run = Arc::new(Run {
            api: Api::new(&d.secret, false),
            servers: d.servers.clone(),
            agents: d.agents.clone(),
            stopping: AtomicBool::new(false),
            ledger: Mutex::new(Ledger::default()),
        });

        let (killed_tx, killed_rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = watch::channel(false);
        let sampler = tokio::spawn(sampler(probe.clone(), killed_rx, stop_rx));
        let clients: Vec<_> = (0..p.clients)
            .map(|i| tokio::spawn(client(run.clone(), seed.wrapping_add(1 + i as u64))))
            .chain((0..MEMORY_CLIENTS).map(|i| {
                let seed = seed.wrapping_add(1_000 + i as u64);
                tokio::spawn(memory_client(run.clone(), seed))
            }))
            .collect();
        let chaos_started = Instant::now();
        chaos(run.clone(), p.kills, p.kill_gap.clone(), seed, killed_tx).await;
        let chaos_time = chaos_started.elapsed();

        // Wind down: clients finish what they are doing; every slot serves; the servers settle.
        run.stopping.store(true, Ordering::Relaxed);
        let stragglers = AtomicUsize::new(0);
        for c in clients {
            let limit = RETRY_LIMIT + ANSWER_LIMIT + Duration::from_secs(30);
            if tokio::time::timeout(limit, c).await.is_err() {
                stragglers.fetch_add(1, Ordering::Relaxed);
            }
        }
        for slot in 0..run.servers.len() {
            if !run.servers.is_up(slot)
                && let Err(e) = run.servers.launch(slot).await
            {
                lock(&run.ledger)
                    .fatal
                    .push(format!("final restart failed: {e}"));
            }
        }
        let quiet = probe
            .wait_quiet(
                ABANDON_LIMIT + Duration::from_secs(30),
                Duration::from_secs(180),
            )
            .await;
        // Every passage acknowledged (and not sent a delete) is found by its marker, alone; no
        // passage whose delete was acknowledged is.
        let memory_final = {
            let memory = std::mem::take(&mut lock(&run.ledger).memory);
            let mut wrong = Vec::new();
            let mut search = async |agent: &str, marker: &str, expected: Option<&str>| {
                let found = run
                    .api
                    .search_ids(&run.base(0), agent, marker, ANSWER_LIMIT)
                    .await;
                match found {
                    Ok(ids) if ids.iter().map(String::as_str).eq(expected) => {}
                    other => wrong.push(format!("{marker}: {other:?}, expected {expected:?}")),
                }
            };
            for (m, (agent, id)) in &memory.stored {
                if !memory.going.contains(id) {
                    search(agent, m, Some(id)).await;
                }
            }
            for (agent, m) in &memory.deleted {
                search(agent, m, None).await;
            }
            (memory, wrong)
        };
        let _ = stop_tx.send(true);
        let sampled = sampler.await.unwrap_or_default();
        let shutdown = run.servers.shutdown(DRAIN + Duration::from_secs(10)).await;
        let stored = Stored::read(&probe).await.unwrap();

        let l = std::mem::take(&mut *lock(&run.ledger));
        let stats = d.model.stats().clone();
        let mut violations: Vec<String> = Vec::new();
        let v = &mut violations;
        add(
            v,
            "`pattern serve` flags are missing (the harness ran without them)".to_owned(),
            d.missing_flags.clone(),
        );
        add(v, "fatal harness errors".to_owned(), l.fatal.clone());
        let (memory, memory_wrong) = memory_final;
        add(
            v,
            "searches right after an acknowledged archival write disagreed with it".to_owned(),
            memory.disagreed.clone(),
        );
        add(
            v,
            "final searches disagreed with the acknowledged archival writes".to_owned(),
            memory_wrong,
        );

        // No acknowledged message lost or stored twice; none stored twice at all.
        let mut lost = Vec::new();
        let mut twice = Vec::new();
        for (m, s) in &l.sent {
            let n = stored.lineages(m);
            let evidence = || {
                format!(
                    "{m} (agent {}, acknowledged {}): stored {n} times: {}; client: {}",
                    s.agent,
                    s.acked,
                    stored.describe(m),
                    squeeze(&s.log)
                )
            };
            if s.acked && n < 1 {
                lost.push(evidence());
            } else if n > 1 {
                twice.push((s.keyed, evidence()));
            }
        }
        add(v, "acknowledged messages are lost".to_owned(), lost);
        // Messages sent once (no key) first: no client repeated those.
        twice.sort_by_key(|(keyed, _)| *keyed);
        let unkeyed = twice.iter().filter(|(keyed, _)| !keyed).count();
        add(
            v,
            format!(
                "messages are stored more than once ({unkeyed} sent once without a key, {} sent \
                 again with their key)",
                twice.len() - unkeyed
            ),
            twice.into_iter().map(|(_, e)| e).collect(),
        );

        if stats.violations() > 0 {
            v.push(format!(
                "{} requests to the model broke tool pairing, e.g.:\n    {}",
                stats.violations(),
                stats.examples().join("\n    ")
            ));
        }

        // By kind of answer; the examples show a few of each kind first.
        let mut by_kind: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (m, told, line) in &l.told {
            let Err(e) = stored.check(m, told) else {
                continue;
            };
            let kind = match told {
                Final::Done { .. } => "done".to_owned(),
                Final::Failed {
                    code,
                    batch: Some(_),
                    ..
                } => format!("`{code}` naming its batch"),
                Final::Failed { code, .. } => format!("`{code}` naming no batch"),
            };
            by_kind
                .entry(kind)
                .or_default()
                .push(format!("{m}: {e}; the answer: {line}"));
        }
        let counts: BTreeMap<&str, usize> =
            by_kind.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
        let mut misreported: Vec<String> = by_kind
            .values()
            .flat_map(|v| v.iter().take(3).cloned())
            .collect();
        misreported.extend(by_kind.values().flat_map(|v| v.iter().skip(3).cloned()));
        add(
            v,
            format!(
                "answers contradict their batch (failed but complete, or done but not): {counts:?}"
            ),
            misreported,
        );

        let broken: Vec<String> = l
            .resumed
            .iter()
            .filter_map(|r| {
                r.problem.as_ref().map(|p| {
                    format!(
                        "{} turn {} ({}): {p}; legs: {}",
                        r.marker,
                        r.turn,
                        if r.deliberate {
                            "dropped on purpose"
                        } else {
                            "broke"
                        },
                        squeeze(&r.legs)
                    )
                })
            })
            .collect();
        add(
            v,
            "resumed streams are incomplete or out of order".to_owned(),
            broken,
        );
        add(
            v,
            "streams have ids other than 1, 2, ...".to_owned(),
            l.disordered.clone(),
        );

        let bad_repeats: Vec<String> =
            l.repeats
                .iter()
                .filter_map(|r| {
                    let first = r.first_turn.as_ref()?;
                    let ok = r.answer.as_ref().is_some_and(|a| {
                        a.replayed && a.turn_id.as_deref() == Some(first.as_str())
                    });
                    (!ok).then(|| {
                        format!(
                            "{} key {} ({}): first {}; repeats: {}; stored: {}",
                            r.marker,
                            r.key,
                            if r.after_restart {
                                "after a restart"
                            } else {
                                "on another instance"
                            },
                            r.first,
                            squeeze(&r.tries),
                            stored.describe(&r.marker)
                        )
                    })
                })
                .collect();
        add(
            v,
            "repeated keys were not answered with the first turn".to_owned(),
            bad_repeats,
        );

        add(
            v,
            format!("dead runs kept batches open longer than {ABANDON_LIMIT:?}"),
            sampled.late.clone(),
        );
        if sampled.doubles > 0 {
            add(
                v,
                format!(
                    "agents had two open batches at once (in {} of {} samples)",
                    sampled.doubles, sampled.samples
                ),
                sampled.double_examples.clone(),
            );
        }
        add(v, "requests hung".to_owned(), l.hung.clone());
        add(
            v,
            "SIGTERM did not drain and exit cleanly".to_owned(),
            l.term_problems.clone(),
        );
        let final_stops: Vec<String> = shutdown
            .iter()
            .filter(|s| s.forced || !s.status.is_some_and(|st| st.success()))
            .map(|s| {
                format!(
                    "slot {} pid {}: {:?}, forced {}",
                    s.slot, s.pid, s.status, s.forced
                )
            })
            .collect();
        add(
            v,
            "servers did not stop cleanly at the end".to_owned(),
            final_stops,
        );
        let mut died = l.died.clone();
        died.extend(shutdown.iter().filter(|s| s.died_before).map(|s| {
            format!(
                "slot {} pid {} had exited ({:?}) before the final SIGTERM",
                s.slot, s.pid, s.status
            )
        }));
        add(v, "servers exited on their own (crashed)".to_owned(), died);
        if let Err(e) = &quiet {
            v.push(format!("the servers did not settle: {e}"));
        }
        if !sampled.errors.is_empty() {
            add(
                v,
                "database samples failed".to_owned(),
                sampled.errors.clone(),
            );
        }
        if stragglers.load(Ordering::Relaxed) > 0 {
            v.push(format!(
                "{} clients did not finish their last turn",
                stragglers.load(Ordering::Relaxed)
            ));
        }
        let stops = l.sigkills + l.sigterms;
        if l.sigkills < p.kills {
            v.push(format!(
                "only {} of {} SIGKILLs happened",
                l.sigkills, p.kills
            ));
        }
        if l.sigkills >= 10 && sampled.abandoned.is_empty() {
            v.push(format!(
                "none of {} SIGKILLed processes had an open batch owned by `pid{{PID}}-...`: \
                 the run_owner format may have changed, so the abandonment check checked nothing",
                l.sigkills
            ));
        }

        let worst = sampled.abandoned.iter().max_by_key(|a| a.0);
        let launches = run.servers.launch_times();
        let resumed_on_purpose = l.resumed.iter().filter(|r| r.deliberate).count();
        let acked = l.sent.values().filter(|s| s.acked).count();
        println!(
            "{}: {} messages ({} acknowledged); outcomes {:?}; retries {}; kills {} (SIGKILL {}, \
             SIGTERM {}), restarts {}; resumed streams {} ({} dropped on purpose); key repeats {} \
             ({} of acknowledged first turns); worst abandonment {} ({} SIGKILLs left open \
             batches, {} none); {} samples; model requests {} (tool calls {}, texts {}, \
             unpaired {}); server panics {}; process start mean {:.2} s, max {:.2} s; setup {:.1} s, \
             chaos {:.1} s, wall {:.1} s",
            p.name,
            l.sent.len(),
            acked,
            l.outcomes,
            l.retries,
            stops,
            l.sigkills,
            l.sigterms,
            l.restarts,
            l.resumed.len(),
            resumed_on_purpose,
            l.repeats.len(),
            l.repeats.iter().filter(|r| r.first_turn.is_some()).count(),
            worst.map_or("none".to_owned(), |w| format!(
                "{:.1} s (pid {}, {} batches)",
                w.0.as_secs_f64(),
                w.1,
                w.2
            )),
            sampled.abandoned.len(),
            sampled.kills_without_open,
            sampled.samples,
            stats.requests(),
            stats.tool_calls(),
            stats.texts(),
            stats.violations(),
            run.servers.panics().len(),
            mean(&launches),
            launches
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64(),
            setup.as_secs_f64(),
            chaos_time.as_secs_f64(),
            wall.elapsed().as_secs_f64(),
        );
        println!(
            "{}: memory: {} archival passages acknowledged, {} deletes acknowledged, {} searches \
             right after them answered",
            p.name,
            memory.stored.len(),
            memory.deleted.len(),
            memory.searches,
        );
        for panic in run.servers.panics().iter().take(EXAMPLES) {
            println!("  server panic: {panic}");
        }
        drop(run);
        if let Ok(probe) = Arc::try_unwrap(probe) {
            probe.close().await;
        }
        d.finish().await;
        assert!(
            violations.is_empty(),
            "{}: {} check(s) failed (seed {seed}):\n{}",
            p.name,
            violations.len(),
            violations.join("\n")
        );
    });
}
