//! Meetings run by agents: [`MeetingDriver`] turns a protocol meeting (`pattern_protocol`) into
//! a conversation between LLM agents, one run of the speaking agent per turn.
//!
//! The meeting's event log is the source of truth; the driver keeps nothing a restart needs.
//!
//! - **The plan** (topic, rounds, end phrase, policy, the agents in join order) is stored in the
//!   `meeting_created` event, so any process can resume the meeting from its id.
//! - **A turn** is identified by the sequence number of the `turn_passed` event that gave it to
//!   its speaker. The speaker's run is submitted with the idempotency key
//!   `meeting:{id}:turn:{seq}:{attempt}`: a driver that resumes after a crash finds the same run
//!   (finished: its answer is read from its turn log; still queued or running: followed), never
//!   a second one. A run that failed or was interrupted is tried once more (attempt 2), then the
//!   turn is passed.
//! - **The speech** is the run's final answer (the text after its last tool result), stored
//!   with `speak_in_turn`, which the protocol refuses unless the same turn is still the current
//!   one: whatever the crashes and however many drivers race, a turn is spoken at most once, by
//!   its speaker, in order. An empty answer passes the turn.
//! - **The turn's time**: with a turn duration, a run still going at the turn's deadline is
//!   cancelled (its batch abandoned, nothing half-stored) and the protocol records
//!   `agent_timed_out` and hands the turn on.
//! - **The end**: when the next speaker would start a turn past the planned rounds, when a
//!   speech contains the end phrase (case-insensitive), when the host calls `meeting_end`, or
//!   when everyone left. The driver ends it as the host.
//!
//! Policies ([`Policy`]): round-robin in join order (the protocol's own order); selector (the
//! protocol hands the turn back to the host after every other speaker and on to whom the host
//! chose with `meeting_choose`); broadcast (round-robin hand-over where each answerer is told
//! only the host's prompt, and the host's next turn decides). An agent passes or leaves by its
//! tools (`crate::tool::meeting`). This module must never store a speech for an agent, or
//! outside the turn it belongs to; it only relays what the agent's own run answered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use pattern_db::{
    AgentId, BatchType, ContentBlock, Idempotency, MeetingId, NewProtocolMessage, Role,
};
use pattern_protocol::{MeetingEvent, MeetingEventType, MeetingStatus, Protocol};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::db_agent::{DatabaseAgent, TurnOptions};
use crate::error::{Error, Result};
use crate::{IncomingMessage, ResponseEvent};

/// Most rounds a plan may ask for.
pub const MAX_ROUNDS: u32 = 100;
/// Most characters of a topic.
pub const MAX_TOPIC_CHARS: usize = 4000;
/// How long the driver waits for a cancelled run to wind down before it moves on.
const CANCEL_GRACE: Duration = Duration::from_secs(30);
/// Events read per page of a meeting's log.
const EVENT_PAGE: u32 = 1000;

/// How the next speaker is chosen (`docs/multi-agent.md` has each policy's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Policy {
    /// Everyone present, in join order, wrapping around; `rounds` turns each.
    #[default]
    RoundRobin,
    /// The host moderates: it speaks `rounds` times and after each of its turns the participant
    /// it chose with `meeting_choose` speaks (in join order when it chose nobody present); the
    /// turn then comes back to the host.
    Selector,
    /// Every round the host poses a prompt, each other participant answers it without seeing
    /// the others' answers of the round, and the host's next turn decides; after `rounds`
    /// rounds the host's last turn gives the final decision.
    Broadcast,
}

impl Policy {
    /// The protocol's hand-over for this policy.
    pub fn protocol(self) -> pattern_protocol::MeetingPolicy {
        match self {
            Policy::RoundRobin => pattern_protocol::MeetingPolicy::RoundRobin,
            Policy::Selector => pattern_protocol::MeetingPolicy::Selector,
            Policy::Broadcast => pattern_protocol::MeetingPolicy::Broadcast,
        }
    }

    /// Parses `round-robin`, `selector` or `broadcast`.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "round-robin" | "round_robin" => Ok(Policy::RoundRobin),
            "selector" => Ok(Policy::Selector),
            "broadcast" => Ok(Policy::Broadcast),
            other => Err(Error::InvalidMeeting(format!(
                "unknown policy `{other}` (round-robin, selector, broadcast)"
            ))),
        }
    }

    /// Whether the turn that would begin now is past the plan: `own` is how many turns the
    /// speaker has had counting this one, `host` whether it hosts.
    fn past_the_end(self, rounds: u32, own: u32, host: bool) -> bool {
        match self {
            Policy::RoundRobin | Policy::Selector => own > rounds,
            // The host's extra turn is the final decision.
            Policy::Broadcast if host => own > rounds + 1,
            Policy::Broadcast => own > rounds,
        }
    }
}

/// How a meeting is run; stored in its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeetingPlan {
    /// What the meeting is about (1 to [`MAX_TOPIC_CHARS`] characters).
    pub topic: String,
    /// Turns each participant gets (1 to [`MAX_ROUNDS`]).
    pub rounds: u32,
    /// A phrase that ends the meeting when a speech contains it.
    #[serde(default)]
    pub end_phrase: Option<String>,
    /// How the next speaker is chosen.
    #[serde(default)]
    pub policy: Policy,
    /// The agents, in join order; the first hosts.
    pub agents: Vec<AgentId>,
}

impl MeetingPlan {
    /// Checks the plan: typed errors, nothing stored.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::InvalidMeeting(m));
        let topic = self.topic.trim();
        if topic.is_empty() || self.topic.chars().count() > MAX_TOPIC_CHARS {
            return invalid(format!("`topic` must be 1 to {MAX_TOPIC_CHARS} characters"));
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            return invalid(format!(
                "`rounds` must be 1 to {MAX_ROUNDS}, got {}",
                self.rounds
            ));
        }
        if self
            .end_phrase
            .as_deref()
            .is_some_and(|p| p.trim().is_empty())
        {
            return invalid("`end_phrase` must not be empty".into());
        }
        if self.agents.len() < 2 {
            return invalid(format!(
                "a meeting needs at least two agents, got {}",
                self.agents.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self.agents.iter().find(|a| !seen.insert(**a)) {
            return invalid(format!("agent {dup} is named twice"));
        }
        Ok(())
    }
}

/// What a running meeting does, as it happens (for a live view).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MeetingProgress {
    /// A turn began (or is resumed).
    TurnStarted {
        /// The speaker.
        speaker: AgentId,
        /// Its name.
        name: String,
        /// Its turn number (1 = its first).
        round: u32,
        /// When the turn times out.
        deadline: Option<DateTime<Utc>>,
    },
    /// Output of the speaker's run (text, tool calls and results, errors), as it streams.
    Output {
        /// The speaker.
        speaker: AgentId,
        /// The event.
        event: ResponseEvent,
    },
    /// The speaker's speech was stored.
    Spoke {
        /// The speaker.
        speaker: AgentId,
        /// What it said.
        text: String,
    },
    /// The turn passed without a speech.
    Passed {
        /// The speaker.
        speaker: AgentId,
        /// Why: `empty_answer`, `failed: CAUSE`, `by_tool` (passed, left or ended by a tool
        /// meanwhile), `timed_out`.
        reason: String,
    },
    /// The meeting ended.
    Ended {
        /// Why (from its `meeting_ended` event).
        reason: String,
    },
}

/// A meeting's outcome: its transcript (speaker name, text) in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MeetingOutcome {
    /// The meeting.
    pub meeting: MeetingId,
    /// Every speech, in order.
    pub transcript: Vec<(String, String)>,
    /// Why it ended.
    pub ended_because: String,
}

/// Runs meetings of the agents it was given.
pub struct MeetingDriver {
    protocol: Protocol,
    agents: HashMap<AgentId, Arc<DatabaseAgent>>,
}

impl std::fmt::Debug for MeetingDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeetingDriver")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where one turn stands.
struct Turn {
    seq: u64,
    speaker: AgentId,
    started: DateTime<Utc>,
    deadline: Option<DateTime<Utc>>,
    round: u32,
}

/// How the speaker's run ended.
enum RunEnd {
    Answer(String),
    Failed(String),
    TimedOut,
}

impl MeetingDriver {
    /// A driver for meetings of `agents` (each one's runtime should carry the meeting tools:
    /// [`crate::tool::meeting::registry`]).
    pub fn new(protocol: Protocol, agents: Vec<Arc<DatabaseAgent>>) -> Self {
        let agents = agents
            .into_iter()
            .map(|a| (a.runtime_arc().agent_id(), a))
            .collect();
        Self { protocol, agents }
    }

    fn agent(&self, id: AgentId) -> Result<&Arc<DatabaseAgent>> {
        self.agents
            .get(&id)
            .ok_or_else(|| Error::InvalidMeeting(format!("agent {id} is not driven here")))
    }

    fn name(&self, id: AgentId) -> String {
        self.agents.get(&id).map_or_else(
            || id.to_string(),
            |a| a.runtime_arc().agent_name().to_owned(),
        )
    }

    /// Creates the meeting of `plan` (the first agent hosts; the others join in order) and
    /// starts it. Bad plans, agents of another organization and unknown agents are refused
    /// before anything is stored.
    pub async fn create(
        &self,
        plan: &MeetingPlan,
        turn_duration: Option<Duration>,
    ) -> Result<MeetingId> {
        plan.validate()?;
        if turn_duration.is_some_and(|d| d.is_zero()) {
            return Err(Error::InvalidMeeting(
                "`turn_duration` must be more than zero".into(),
            ));
        }
        let host = self.agent(plan.agents[0])?;
        let org = host
            .runtime_arc()
            .database()
            .agent(plan.agents[0])
            .await?
            .organization;
        for id in &plan.agents {
            self.agent(*id)?;
            let agent = host.runtime_arc().database().agent(*id).await?;
            if agent.organization != org {
                return Err(
                    pattern_db::Error::Agent(pattern_db::AgentError::OtherOrganization {
                        agent: plan.agents[0],
                        other: *id,
                    })
                    .into(),
                );
            }
        }
        let value = serde_json::to_value(plan)
            .map_err(|e| Error::InvalidMeeting(format!("the plan does not encode: {e}")))?;
        let created = self
            .protocol
            .create_meeting_with_plan(plan.agents[0], turn_duration, plan.policy.protocol(), value)
            .await?;
        let id = created.meeting.id;
        self.prepare(id, plan).await?;
        Ok(id)
    }

    /// Joins whoever of the plan has not joined, and starts the meeting if it has not started
    /// (each step refused harmlessly when another process did it first).
    async fn prepare(&self, id: MeetingId, plan: &MeetingPlan) -> Result<()> {
        let joined: Vec<AgentId> = self
            .protocol
            .participants(id)
            .await?
            .into_iter()
            .filter(|p| p.join_order.is_some())
            .map(|p| p.agent)
            .collect();
        let meeting = self.protocol.meeting(id).await?;
        if meeting.status == MeetingStatus::Ended || meeting.status == MeetingStatus::Active {
            return Ok(());
        }
        for agent in plan.agents.iter().skip(1) {
            if joined.contains(agent) {
                continue;
            }
            match self.protocol.join_meeting(id, *agent).await {
                Ok(_)
                | Err(pattern_protocol::Error::Protocol(
                    pattern_protocol::ProtocolError::AlreadyParticipant { .. },
                )) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match self.protocol.start_meeting(id, plan.agents[0]).await {
            Ok(_)
            | Err(pattern_protocol::Error::Protocol(
                pattern_protocol::ProtocolError::MeetingState { .. },
            ))
            | Err(pattern_protocol::Error::Protocol(
                pattern_protocol::ProtocolError::MeetingEnded(_),
            )) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The plan stored with meeting `id` (refused when it has none: not a driven meeting).
    pub async fn plan(&self, id: MeetingId) -> Result<MeetingPlan> {
        let first = self.protocol.events_after(id, 0, 1).await?;
        let plan = first
            .first()
            .filter(|e| e.event_type == MeetingEventType::MeetingCreated)
            .and_then(|e| e.data.as_ref())
            .and_then(|d| d.get("plan"))
            .cloned()
            .ok_or_else(|| {
                Error::InvalidMeeting(format!("meeting {id} was not created with a plan"))
            })?;
        serde_json::from_value(plan)
            .map_err(|e| Error::InvalidMeeting(format!("meeting {id}'s plan does not decode: {e}")))
    }

    /// Appends to `log` the meeting's events after its last one (the log is append-only with
    /// dense sequence numbers, so each step reads only what is new).
    async fn read_new(&self, id: MeetingId, log: &mut Vec<MeetingEvent>) -> Result<()> {
        loop {
            let after = log.last().map_or(0, |e| e.seq);
            let page = self.protocol.events_after(id, after, EVENT_PAGE).await?;
            let done = page.len() < EVENT_PAGE as usize;
            log.extend(page);
            if done {
                return Ok(());
            }
        }
    }

    /// Runs meeting `id` to its end from wherever its log stands (a new meeting, or one a
    /// crashed process left), sending progress to `progress` (a closed receiver is ignored).
    pub async fn run(
        &self,
        id: MeetingId,
        progress: mpsc::Sender<MeetingProgress>,
    ) -> Result<MeetingOutcome> {
        let plan = self.plan(id).await?;
        for agent in &plan.agents {
            self.agent(*agent)?;
        }
        self.prepare(id, &plan).await?;
        // Runs a crashed process left open are abandoned (their turns interrupted) so a resumed
        // turn follows to an end instead of waiting for a dead run.
        for agent in &plan.agents {
            self.agent(*agent)?.recover().await?;
        }
        let host = plan.agents[0];
        let mut log: Vec<MeetingEvent> = Vec::new();
        loop {
            let meeting = self.protocol.meeting(id).await?;
            self.read_new(id, &mut log).await?;
            let events = &log;
            if meeting.status == MeetingStatus::Ended {
                let reason = events
                    .iter()
                    .rev()
                    .find(|e| e.event_type == MeetingEventType::MeetingEnded)
                    .and_then(|e| e.data.as_ref())
                    .and_then(|d| d.get("reason"))
                    .and_then(|r| r.as_str())
                    .unwrap_or("ended")
                    .to_owned();
                let _ = progress
                    .send(MeetingProgress::Ended {
                        reason: reason.clone(),
                    })
                    .await;
                return Ok(MeetingOutcome {
                    meeting: id,
                    transcript: self.transcript(id).await?,
                    ended_because: reason,
                });
            }
            let (Some(speaker), Some(started)) = (meeting.speaker, meeting.turn_started_at) else {
                // Not active yet (another process is preparing it): look again shortly.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let Some(turn_event) = events
                .iter()
                .rev()
                .find(|e| e.event_type == MeetingEventType::TurnPassed)
            else {
                return Err(Error::InvalidMeeting(format!(
                    "meeting {id} is active without a turn_passed event"
                )));
            };
            let round = events
                .iter()
                .filter(|e| {
                    e.event_type == MeetingEventType::TurnPassed && e.agent == Some(speaker)
                })
                .count() as u32;
            if plan
                .policy
                .past_the_end(plan.rounds, round, speaker == host)
            {
                self.end(id, host).await?;
                continue;
            }
            let turn = Turn {
                seq: turn_event.seq,
                speaker,
                started,
                deadline: meeting.turn_deadline,
                round,
            };
            let _ = progress
                .send(MeetingProgress::TurnStarted {
                    speaker,
                    name: self.name(speaker),
                    round,
                    deadline: turn.deadline,
                })
                .await;
            let trigger = self.trigger(id, &plan, events, &turn).await?;
            let end = self.run_turn(id, &turn, trigger, &progress).await?;
            self.finish_turn(id, &plan, &turn, end, &progress).await?;
        }
    }

    /// Ends the meeting as its host (already ended: nothing to do).
    async fn end(&self, id: MeetingId, host: AgentId) -> Result<()> {
        match self.protocol.end_meeting(id, host).await {
            Ok(_)
            | Err(pattern_protocol::Error::Protocol(
                pattern_protocol::ProtocolError::MeetingEnded(_),
            )) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// What the speaker is told: the topic, the round, and what happened since its last turn.
    async fn trigger(
        &self,
        id: MeetingId,
        plan: &MeetingPlan,
        events: &[MeetingEvent],
        turn: &Turn,
    ) -> Result<String> {
        let since = events
            .iter()
            .filter(|e| {
                e.seq < turn.seq
                    && e.event_type == MeetingEventType::TurnPassed
                    && e.agent == Some(turn.speaker)
            })
            .map(|e| e.seq)
            .next_back()
            .unwrap_or(0);
        let messages: HashMap<String, String> = self
            .protocol
            .meeting_messages(id)
            .await?
            .into_iter()
            .map(|m| (m.id.to_string(), pattern_db::content_text(&m.content)))
            .collect();
        let host = plan.agents[0];
        let hosting = turn.speaker == host;
        // In a broadcast round an answerer hears the host's prompt, never the other answers.
        let hears =
            |e: &MeetingEvent| plan.policy != Policy::Broadcast || hosting || e.agent == Some(host);
        let mut lines = Vec::new();
        for e in events
            .iter()
            .filter(|e| e.seq > since && e.seq < turn.seq && hears(e))
        {
            let who = e.agent.map(|a| self.name(a)).unwrap_or_default();
            match e.event_type {
                MeetingEventType::AgentSpoke => {
                    let text = e
                        .data
                        .as_ref()
                        .and_then(|d| d.get("message"))
                        .and_then(|m| m.as_str())
                        .and_then(|m| messages.get(m))
                        .cloned()
                        .unwrap_or_default();
                    lines.push(format!("- {who}: {text}"));
                }
                MeetingEventType::TurnPassed => {
                    let reason = e
                        .data
                        .as_ref()
                        .and_then(|d| d.get("reason"))
                        .and_then(|r| r.as_str());
                    if reason == Some("passed") {
                        let from = e
                            .data
                            .as_ref()
                            .and_then(|d| d.get("from"))
                            .and_then(|f| f.as_str())
                            .and_then(|f| f.parse::<uuid::Uuid>().ok())
                            .map(|f| self.name(AgentId(f)))
                            .unwrap_or_default();
                        lines.push(format!("- ({from} passed)"));
                    }
                }
                MeetingEventType::AgentLeft => lines.push(format!("- ({who} left)")),
                MeetingEventType::AgentTimedOut => {
                    lines.push(format!("- ({who} ran out of time)"));
                }
                _ => {}
            }
        }
        let names: Vec<String> = plan.agents.iter().map(|a| self.name(*a)).collect();
        let me = self.name(turn.speaker);
        let mut text = format!(
            "[meeting {id}, round {} of {}] Topic: {}\nIn speaking order: {} (the first hosts).\n",
            turn.round,
            plan.rounds,
            plan.topic,
            names.join(", ")
        );
        if lines.is_empty() {
            text.push_str("Nobody has spoken yet.\n");
        } else {
            text.push_str("Said since your last turn:\n");
            text.push_str(&lines.join("\n"));
            text.push('\n');
        }
        let mut tools = "meeting_pass passes, meeting_leave leaves".to_owned();
        if hosting {
            tools.push_str(", meeting_end ends the meeting");
            if plan.policy == Policy::Selector {
                tools.push_str(", meeting_choose names who speaks after you");
            }
        }
        if let Some(phrase) = &plan.end_phrase {
            tools.push_str(&format!("; saying \"{phrase}\" ends it"));
        }
        let ask = match (plan.policy, hosting) {
            (Policy::Broadcast, true) if turn.round == 1 => {
                "pose the question every participant will answer".to_owned()
            }
            (Policy::Broadcast, true) if turn.round > plan.rounds => {
                "weigh the answers and give the meeting's final decision".to_owned()
            }
            (Policy::Broadcast, true) => {
                "weigh the answers, say what you decide, and pose the next question".to_owned()
            }
            (Policy::Broadcast, false) => {
                "answer the host's question in your own words (you do not see the others' \
                 answers)"
                    .to_owned()
            }
            (Policy::Selector, true) => {
                "moderate: respond briefly and choose who speaks next with meeting_choose"
                    .to_owned()
            }
            _ => "reply with your own short contribution to the topic".to_owned(),
        };
        text.push_str(&format!("({tools}.)\nIt is your turn, {me}: {ask}."));
        Ok(text)
    }

    /// Runs the speaker's turn (at most two attempts), relaying its output.
    async fn run_turn(
        &self,
        id: MeetingId,
        turn: &Turn,
        trigger: String,
        progress: &mpsc::Sender<MeetingProgress>,
    ) -> Result<RunEnd> {
        let agent = self.agent(turn.speaker)?.clone();
        let mut last = RunEnd::Failed("not run".into());
        for attempt in 1..=2u32 {
            let key = crate::meeting_stream::turn_key(id, turn.seq, attempt);
            let message = IncomingMessage {
                batch_type: BatchType::AgentToAgent,
                role: Role::User,
                content: vec![ContentBlock::text(trigger.clone())],
                source: format!("meeting:{id}"),
                retry_of: None,
            };
            let options = TurnOptions {
                idempotency: Some(Idempotency {
                    fingerprint: key.clone(),
                    key,
                }),
                detached: true,
                ..TurnOptions::default()
            };
            let submission = agent.clone().submit(message, options).await?;
            let turn_id = submission.turn.id;
            let mut events = submission.events;
            let mut answer = String::new();
            let mut failed = None;
            let mut ended = false;
            let deadline = turn.deadline.map(|d| {
                let left = (d - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                tokio::time::Instant::now() + left
            });
            loop {
                let next = match deadline {
                    Some(at) => match tokio::time::timeout_at(at, events.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            // Out of time: stop the run (its batch is abandoned, nothing half
                            // stored) and let it wind down.
                            let _ = agent.cancel_turn(turn_id).await;
                            let _ = tokio::time::timeout(CANCEL_GRACE, async {
                                while events.next().await.is_some() {}
                            })
                            .await;
                            return Ok(RunEnd::TimedOut);
                        }
                    },
                    None => events.next().await,
                };
                let Some(event) = next else { break };
                match &event {
                    ResponseEvent::TextDelta { text } => answer.push_str(text),
                    ResponseEvent::ToolResult { .. } => answer.clear(),
                    ResponseEvent::Error { message, .. } => failed = Some(message.clone()),
                    ResponseEvent::Done { .. } => ended = true,
                    _ => {}
                }
                let _ = progress
                    .send(MeetingProgress::Output {
                        speaker: turn.speaker,
                        event,
                    })
                    .await;
            }
            match failed {
                None if ended => return Ok(RunEnd::Answer(answer.trim().to_owned())),
                None => last = RunEnd::Failed("the run's events ended early".into()),
                Some(m) => last = RunEnd::Failed(m),
            }
        }
        Ok(last)
    }

    /// Stores what the turn came to, if the turn is still the current one.
    async fn finish_turn(
        &self,
        id: MeetingId,
        plan: &MeetingPlan,
        turn: &Turn,
        end: RunEnd,
        progress: &mpsc::Sender<MeetingProgress>,
    ) -> Result<()> {
        let now = self.protocol.meeting(id).await?;
        let still_mine = now.status == MeetingStatus::Active
            && now.speaker == Some(turn.speaker)
            && now.turn_started_at == Some(turn.started);
        if !still_mine {
            // The agent passed, left or ended it by a tool, or the turn timed out meanwhile.
            let _ = progress
                .send(MeetingProgress::Passed {
                    speaker: turn.speaker,
                    reason: "by_tool".into(),
                })
                .await;
            return Ok(());
        }
        let (message, reason): (Option<String>, Option<String>) = match end {
            RunEnd::TimedOut => {
                // The protocol applies the deadline (and records `agent_timed_out`).
                self.protocol.sweep_timeouts().await?;
                let _ = progress
                    .send(MeetingProgress::Passed {
                        speaker: turn.speaker,
                        reason: "timed_out".into(),
                    })
                    .await;
                return Ok(());
            }
            RunEnd::Answer(text) if !text.is_empty() => (Some(text), None),
            RunEnd::Answer(_) => (None, Some("empty_answer".into())),
            RunEnd::Failed(why) => (None, Some(format!("failed: {why}"))),
        };
        let speech = message
            .as_ref()
            .map(|text| NewProtocolMessage::new("text", serde_json::json!({ "text": text })));
        let result = self
            .protocol
            .speak_in_turn(id, turn.speaker, turn.started, speech)
            .await;
        match result {
            Ok(_) => {}
            // Another driver finished this turn first.
            Err(pattern_protocol::Error::Protocol(
                pattern_protocol::ProtocolError::NotSpeaker { .. },
            ))
            | Err(pattern_protocol::Error::Protocol(
                pattern_protocol::ProtocolError::MeetingEnded(_),
            )) => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        match (message, reason) {
            (Some(text), _) => {
                let ends = plan
                    .end_phrase
                    .as_deref()
                    .is_some_and(|p| text.to_lowercase().contains(&p.to_lowercase()));
                let _ = progress
                    .send(MeetingProgress::Spoke {
                        speaker: turn.speaker,
                        text,
                    })
                    .await;
                if ends {
                    self.end(id, plan.agents[0]).await?;
                }
            }
            (None, reason) => {
                let _ = progress
                    .send(MeetingProgress::Passed {
                        speaker: turn.speaker,
                        reason: reason.unwrap_or_else(|| "passed".into()),
                    })
                    .await;
            }
        }
        Ok(())
    }

    /// Every speech of the meeting, in order, with the speaker's name.
    pub async fn transcript(&self, id: MeetingId) -> Result<Vec<(String, String)>> {
        Ok(self
            .protocol
            .meeting_messages(id)
            .await?
            .into_iter()
            .map(|m| (self.name(m.sender), pattern_db::content_text(&m.content)))
            .collect())
    }
}
