//! A load driver: `clients` concurrent clients send turns for `duration`, client `i` always to
//! agent `i % agents`, alternating JSON and SSE, spread over the given base URLs (1 or more
//! server processes). Each turn carries a unique marker (`mk` + 32 hex digits) so its stored
//! message can be found. The report holds every turn's answer and derives turns per second and
//! acknowledgement latency percentiles (time to the first answer byte).
//!
//! It must never judge the answers (callers check them against the database) and never send a
//! turn after its deadline (turns already sent finish, bounded by `turn_limit`).

use std::time::{Duration, Instant};

use crate::harness::client::{Answer, Api, Message};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `http://HOST:PORT` of each server process; clients spread over them.
    pub bases: Vec<String>,
    /// An organization's API key.
    pub secret: String,
    /// Agent ids.
    pub agents: Vec<String>,
    /// Concurrent clients.
    pub clients: usize,
    /// How long turns are started.
    pub duration: Duration,
    /// Longest one turn may take.
    pub turn_limit: Duration,
}

/// One turn.
#[derive(Debug, Clone)]
pub struct LoadTurn {
    /// Which client sent it.
    pub client: usize,
    /// The agent id.
    pub agent: String,
    /// The marker in its message.
    pub marker: String,
    /// SSE or JSON.
    pub stream: bool,
    /// Where it went.
    pub base: String,
    /// What came back.
    pub answer: Answer,
}

/// Every turn of a run.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// In completion order per client, clients one after another.
    pub turns: Vec<LoadTurn>,
    /// From the first turn's start to the last turn's end.
    pub elapsed: Duration,
    /// Clients whose task died (their turns are missing).
    pub failed_clients: usize,
}

impl LoadReport {
    /// Turns that got an outcome, per second of the run.
    pub fn turns_per_second(&self) -> f64 {
        let finished = self
            .turns
            .iter()
            .filter(|t| t.answer.outcome.is_some())
            .count();
        finished as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `p`-th percentile (0..=100) of acknowledgement latencies.
    pub fn ack_percentile(&self, p: f64) -> Option<Duration> {
        let mut all: Vec<Duration> = self
            .turns
            .iter()
            .filter_map(|t| t.answer.ack_latency)
            .collect();
        if all.is_empty() {
            return None;
        }
        all.sort();
        let rank = ((p / 100.0) * (all.len() - 1) as f64).round() as usize;
        all.get(rank.min(all.len() - 1)).copied()
    }
}

/// Runs the load; returns when every client's last turn ended.
pub async fn run(config: LoadConfig) -> LoadReport {
    let api = Api::new(&config.secret, true);
    let started = Instant::now();
    let deadline = started + config.duration;
    let clients = (0..config.clients).map(|client| {
        let api = api.clone();
        let config = config.clone();
        tokio::spawn(async move {
            let agent = config.agents[client % config.agents.len()].clone();
            let mut turns = Vec::new();
            let mut n = 0usize;
            while Instant::now() < deadline {
                let stream = (client + n).is_multiple_of(2);
                let base = config.bases[(client + n) % config.bases.len()].clone();
                let marker = format!("mk{}", uuid::Uuid::new_v4().simple());
                let answer = api
                    .send(
                        &base,
                        &Message {
                            stream,
                            ..Message::new(&agent, &format!("load {marker}"))
                        },
                        config.turn_limit,
                    )
                    .await;
                turns.push(LoadTurn {
                    client,
                    agent: agent.clone(),
                    marker,
                    stream,
                    base,
                    answer,
                });
                n += 1;
            }
            turns
        })
    });
    let mut turns = Vec::new();
    let mut failed_clients = 0;
    for done in futures::future::join_all(clients).await {
        match done {
            Ok(t) => turns.extend(t),
            Err(_) => failed_clients += 1,
        }
    }
    LoadReport {
        turns,
        elapsed: started.elapsed(),
        failed_clients,
    }
}
