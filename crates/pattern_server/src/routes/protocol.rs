//! The agent-to-agent protocol over HTTP: one-to-one sessions (sync: strict turns; async:
//! inboxes), inboxes, and meetings with a server-sent event stream per meeting, resumable by
//! cursor (`Last-Event-ID` or `?after=`).
//!
//! Participants are named by their agent ids: the protocol's participants are the agents
//! themselves (one identity, decision 0014), so the CLI and the API see the same ones. A session or meeting is visible only when its participants (a meeting: its
//! host) belong to the caller's organization, and only the organization's agents can act in it;
//! anything else answers 404 `not_found`. This module must never act for an agent of another
//! organization.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use pattern::core::meeting_stream::{MeetingCursor, MeetingItem};
use pattern::db::Error as DbError;
use pattern::db::protocol::{
    MeetingId, NewProtocolMessage, ProtocolMessage, ProtocolMessageId, Session, SessionId,
    SessionType,
};
use pattern::db::{Agent, AgentId};
use pattern::protocol::{Meeting, MeetingEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::routes::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

type ErrorBody = crate::error::ErrorBody;

/// `session` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionView {
    /// Its id.
    pub id: String,
    /// One participant (agent id).
    pub agent_a: String,
    /// The other participant (agent id).
    pub agent_b: String,
    /// `sync` or `async`.
    pub session_type: String,
    /// `active`, `waiting` or `ended`.
    pub status: String,
    /// Who holds the turn (sync sessions).
    pub turn: Option<String>,
    /// `inbox` or `agents` (the agents answer themselves).
    pub delivery: String,
    /// It ends after this many messages.
    pub message_limit: Option<u64>,
    /// Messages sent so far.
    pub messages_sent: u64,
    /// When it was opened.
    pub created_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
}

/// `protocol_message` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProtocolMessageView {
    /// Its id.
    pub id: String,
    /// Its session, if any.
    pub session: Option<String>,
    /// Its meeting, if any.
    pub meeting: Option<String>,
    /// The sender (agent id).
    pub from: String,
    /// The recipient (agent id), for session messages.
    pub to: Option<String>,
    /// Its type.
    pub message_type: String,
    /// Its content.
    #[schema(value_type = Object)]
    pub content: Value,
    /// When the recipient read it.
    pub read_at: Option<DateTime<Utc>>,
    /// Arrival order.
    pub seq: String,
    /// When it was sent.
    pub created_at: DateTime<Utc>,
}

/// `participant` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ParticipantView {
    /// The agent (agent id).
    pub agent: String,
    /// `invited`, `joined` or `left`.
    pub status: String,
    /// Place in the speaking order.
    pub join_order: Option<u64>,
}

/// `meeting` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MeetingView {
    /// Its id.
    pub id: String,
    /// The host (agent id).
    pub host: String,
    /// `open`, `active` or `ended`.
    pub status: String,
    /// Who may speak now (agent id).
    pub speaker: Option<String>,
    /// Longest a turn lasts before it passes on, in milliseconds.
    pub turn_duration_ms: Option<u64>,
    /// When the current turn passes on.
    pub turn_deadline: Option<DateTime<Utc>>,
    /// The cursor of the newest event.
    pub last_event_seq: u64,
    /// The participants in join order.
    pub participants: Vec<ParticipantView>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// `meeting_event` shape (the data of a meeting's SSE events; the SSE id is `seq`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MeetingEventView {
    /// Dense sequence number: the cursor.
    pub seq: u64,
    /// What happened.
    pub event_type: String,
    /// Who it concerns (agent id).
    pub agent: Option<String>,
    /// Facts of the event.
    #[schema(value_type = Option<Object>)]
    pub data: Option<Value>,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /v1/sessions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OpenSession {
    /// The opener (agent id); holds the first turn of a sync session.
    from: String,
    /// The other agent (agent id).
    to: String,
    /// `sync` (strict turns) or `async` (inboxes).
    session_type: String,
    /// `inbox` (the default: clients read the inbox) or `agents` (each message becomes the
    /// recipient agent's turn; in a sync session its final answer is the reply; decision 0020).
    #[serde(default)]
    delivery: Option<String>,
    /// End the session after this many messages (1 to 10000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    message_limit: Option<u64>,
    /// The opener's first message (any JSON; a string for plain text), sent in the same write.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    message: Option<serde_json::Value>,
}

/// Body of `POST /v1/sessions/{session_id}/messages` and meeting `speak`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendProtocolMessage {
    /// The sender (agent id).
    from: String,
    /// Any JSON (a string for plain text).
    #[schema(value_type = Object)]
    content: Value,
    /// Its type (default `text`).
    #[serde(default)]
    message_type: Option<String>,
}

/// Body of `POST /v1/sessions/{session_id}/end`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActAs {
    /// The acting agent (agent id).
    agent: String,
}

/// Body of `POST /v1/agents/{agent_id}/inbox/read`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MarkRead {
    /// Message ids to mark read.
    messages: Vec<String>,
}

/// Body of `POST /v1/meetings`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateMeeting {
    /// The host (agent id).
    host: String,
    /// Longest a turn lasts before it passes on, in milliseconds (1 to 604800000: a week).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800000)]
    turn_duration_ms: Option<u64>,
}

/// Body of `POST /v1/meetings/run`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunMeeting {
    /// What the meeting is about.
    topic: String,
    /// The agents (agent ids) in speaking order; the first hosts. At least two, all of the
    /// caller's organization.
    agents: Vec<String>,
    /// Turns each agent gets (1 to 100; default 1).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    rounds: Option<u32>,
    /// Longest a speaker's run may take, in milliseconds, before it is cancelled and the turn
    /// passes on (1 to 604800000: a week).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800000)]
    turn_duration_ms: Option<u64>,
    /// A phrase that ends the meeting when a speech contains it.
    #[serde(default)]
    end_phrase: Option<String>,
    /// `round-robin` (the default), `selector` (the first agent moderates and chooses each next
    /// speaker) or `broadcast` (everyone answers the first agent's prompt; it decides).
    #[serde(default)]
    policy: Option<String>,
}

/// Body of `POST /v1/meetings/{meeting_id}/{action}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeetingAction {
    /// The acting agent (agent id): the host for `invite`, `start` and `end`.
    agent: String,
    /// `invite`: the agent invited (agent id).
    #[serde(default)]
    invitee: Option<String>,
    /// `speak`: what is said (any JSON).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    content: Option<Value>,
    /// `speak`: its type (default `text`).
    #[serde(default)]
    message_type: Option<String>,
}

/// Filters and paging of `GET /v1/sessions` and `GET /v1/meetings`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct Listing {
    /// `live` (not ended), `ended`, or `all` (the default).
    status: Option<String>,
    /// Only those created before this id (the last id of the previous page).
    before: Option<String>,
    /// Most items, 1 to 100 (default 50), newest first.
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
}

impl Listing {
    /// The page asked for; 400 on a bad status, cursor or limit.
    fn page<Id>(
        &self,
        what: &str,
        id: impl Fn(Uuid) -> Id,
    ) -> Result<pattern::protocol::ListPage<Id>, ApiError> {
        use pattern::protocol::Liveness;
        let limit = crate::limits::PROTOCOL_PAGE.check(self.limit, 50)?;
        let liveness = match self.status.as_deref().unwrap_or("all") {
            "all" => Liveness::All,
            "live" => Liveness::Live,
            "ended" => Liveness::Ended,
            other => {
                return Err(ApiError::invalid(format!(
                    "`status` is `live`, `ended` or `all`, not `{other}`"
                )));
            }
        };
        let before = match self.before.as_deref() {
            None => None,
            Some(text) => Some(id(Uuid::parse_str(text).map_err(|_| {
                ApiError::invalid(format!("`before` must be a {what} id (UUID), not `{text}`"))
            })?)),
        };
        Ok(pattern::protocol::ListPage {
            liveness,
            before,
            limit,
        })
    }
}

/// Where to resume a meeting's event stream.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cursor {
    /// Events after this cursor (`Last-Event-ID` takes precedence); 0 from the start.
    after: Option<u64>,
}

/// A turn duration in milliseconds, checked against [`crate::limits::TURN_DURATION_MS`].
fn turn_duration(ms: Option<u64>) -> Result<Option<Duration>, ApiError> {
    Ok(ms
        .map(|ms| crate::limits::TURN_DURATION_MS.check(Some(ms), ms))
        .transpose()?
        .map(Duration::from_millis))
}

/// Protocol identities of one request, resolved to and from agent ids, scoped to the caller.
struct Ids {
    state: AppState,
    caller: Caller,
    names: HashMap<AgentId, String>,
}

impl Ids {
    fn new(state: &AppState, caller: Caller) -> Self {
        Self {
            state: state.clone(),
            caller,
            names: HashMap::new(),
        }
    }

    /// The organization's agent `agent_id` (anything else is 404).
    async fn participant(&mut self, agent_id: &str) -> Result<Agent, ApiError> {
        let agent = self.caller.agent(&self.state, agent_id).await?;
        self.names.insert(agent.id, agent.id.to_string());
        Ok(agent)
    }

    /// The id of agent `id` when it belongs to the caller's organization; `None` otherwise.
    async fn agent_of(&mut self, id: AgentId) -> Result<Option<String>, ApiError> {
        if let Some(name) = self.names.get(&id) {
            return Ok(Some(name.clone()));
        }
        let agent = match self.state.pattern().db().agent(id).await {
            Ok(agent) => agent,
            Err(DbError::Agent(pattern::db::AgentError::NotFound(_))) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if agent.organization != self.caller.org {
            return Ok(None);
        }
        let name = agent.id.to_string();
        self.names.insert(id, name.clone());
        Ok(Some(name))
    }

    async fn visible(&mut self, id: AgentId) -> Result<String, ApiError> {
        self.agent_of(id)
            .await?
            .ok_or_else(|| ApiError::not_found("not visible to this organization"))
    }

    async fn session(&mut self, s: &Session) -> Result<SessionView, ApiError> {
        let turn = match s.turn {
            Some(t) => Some(self.visible(t).await?),
            None => None,
        };
        Ok(SessionView {
            id: s.id.to_string(),
            agent_a: self.visible(s.agent_a).await?,
            agent_b: self.visible(s.agent_b).await?,
            session_type: s.session_type.as_str().to_owned(),
            status: enum_text(&s.status),
            turn,
            delivery: s.delivery.as_str().to_owned(),
            message_limit: s.message_limit,
            messages_sent: s.messages_sent,
            created_at: s.created_at,
            ended_at: s.ended_at,
        })
    }

    async fn message(&mut self, m: &ProtocolMessage) -> Result<ProtocolMessageView, ApiError> {
        let to = match m.recipient {
            Some(r) => Some(self.visible(r).await?),
            None => None,
        };
        Ok(ProtocolMessageView {
            id: m.id.to_string(),
            session: m.session.map(|s| s.to_string()),
            meeting: m.meeting.map(|s| s.to_string()),
            from: self.visible(m.sender).await?,
            to,
            message_type: m.message_type.clone(),
            content: m.content.clone(),
            read_at: m.read_at,
            seq: m.seq.to_string(),
            created_at: m.created_at,
        })
    }

    async fn messages(
        &mut self,
        list: &[ProtocolMessage],
    ) -> Result<Vec<ProtocolMessageView>, ApiError> {
        let mut out = Vec::with_capacity(list.len());
        for m in list {
            out.push(self.message(m).await?);
        }
        Ok(out)
    }

    /// The session `id` when both its participants are the caller's.
    async fn find_session(&mut self, id: &str) -> Result<Session, ApiError> {
        let missing = || ApiError::not_found(format!("no session `{id}`"));
        let uuid = Uuid::parse_str(id).map_err(|_| missing())?;
        let session = match self
            .state
            .pattern()
            .protocol()
            .session(SessionId(uuid))
            .await
        {
            Ok(s) => s,
            Err(e) if e.class() == pattern::ErrorClass::NotFound => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        if self.agent_of(session.agent_a).await?.is_none()
            || self.agent_of(session.agent_b).await?.is_none()
        {
            return Err(missing());
        }
        Ok(session)
    }

    /// The meeting `id` when its host is the caller's.
    async fn find_meeting(&mut self, id: &str) -> Result<Meeting, ApiError> {
        let missing = || ApiError::not_found(format!("no meeting `{id}`"));
        let uuid = Uuid::parse_str(id).map_err(|_| missing())?;
        let meeting = match self
            .state
            .pattern()
            .protocol()
            .meeting(MeetingId(uuid))
            .await
        {
            Ok(m) => m,
            Err(e) if e.class() == pattern::ErrorClass::NotFound => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        if self.agent_of(meeting.host).await?.is_none() {
            return Err(missing());
        }
        Ok(meeting)
    }

    async fn meeting(&mut self, m: &Meeting) -> Result<MeetingView, ApiError> {
        let mut participants = Vec::new();
        for p in self.state.pattern().protocol().participants(m.id).await? {
            participants.push(ParticipantView {
                agent: self.visible(p.agent).await?,
                status: enum_text(&p.status),
                join_order: p.join_order,
            });
        }
        let speaker = match m.speaker {
            Some(s) => Some(self.visible(s).await?),
            None => None,
        };
        Ok(MeetingView {
            id: m.id.to_string(),
            host: self.visible(m.host).await?,
            status: enum_text(&m.status),
            speaker,
            turn_duration_ms: m
                .turn_duration
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            turn_deadline: m.turn_deadline,
            last_event_seq: m.last_event_seq,
            participants,
            created_at: m.created_at,
        })
    }

    async fn event(&mut self, e: &MeetingEvent) -> Result<MeetingEventView, ApiError> {
        let agent = match e.agent {
            Some(a) => Some(self.visible(a).await?),
            None => None,
        };
        Ok(MeetingEventView {
            seq: e.seq,
            event_type: enum_text(&e.event_type),
            agent,
            data: e.data.clone(),
            created_at: e.created_at,
        })
    }
}

/// A snake_case enum's serialised name.
fn enum_text<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(text)) => text,
        other => format!("{other:?}"),
    }
}

fn message_body(content: Value, message_type: Option<String>) -> NewProtocolMessage {
    NewProtocolMessage::new(message_type.unwrap_or_else(|| "text".into()), content)
}

/// Opens a session between two of the organization's agents (the live one if it exists).
#[utoipa::path(post, path = "/v1/sessions", tag = "protocol", security(("api_key" = [])),
    request_body = OpenSession,
    responses((status = 200, body = SessionView), (status = 404, body = ErrorBody)))]
pub(crate) async fn open_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<OpenSession>,
) -> Result<ApiJson<SessionView>, ApiError> {
    let session_type = match body.session_type.as_str() {
        "sync" => SessionType::Sync,
        "async" => SessionType::Async,
        other => {
            return Err(ApiError::invalid(format!(
                "`session_type` must be sync or async, not `{other}`"
            )));
        }
    };
    let delivery = match body.delivery.as_deref() {
        None | Some("inbox") => pattern::protocol::Delivery::Inbox,
        Some("agents") => pattern::protocol::Delivery::Agents,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "`delivery` must be inbox or agents, not `{other}`"
            )));
        }
    };
    let mut ids = Ids::new(&state, caller);
    let from = ids.participant(&body.from).await?;
    let to = ids.participant(&body.to).await?;
    let first = body.message.map(|content| message_body(content, None));
    let options = pattern::protocol::SessionOptions {
        delivery,
        message_limit: body
            .message_limit
            .map(|n| crate::limits::SESSION_MESSAGES.check(Some(n), n))
            .transpose()?,
    };
    let (session, _) = state
        .pattern()
        .protocol()
        .open_session_with(from.id, to.id, session_type, options, first)
        .await?;
    Ok(ApiJson(ids.session(&session).await?))
}

/// The organization's sessions (both agents its own), newest first.
#[utoipa::path(get, path = "/v1/sessions", tag = "protocol", security(("api_key" = [])),
    params(Listing),
    responses((status = 200, body = Vec<SessionView>)))]
pub(crate) async fn list_sessions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(listing): ApiQuery<Listing>,
) -> Result<ApiJson<Vec<SessionView>>, ApiError> {
    let page = listing.page("session", SessionId)?;
    let found = state
        .pattern()
        .protocol()
        .org_sessions(caller.org, page)
        .await?;
    let mut ids = Ids::new(&state, caller);
    let mut out = Vec::with_capacity(found.len());
    for session in &found {
        out.push(ids.session(session).await?);
    }
    Ok(ApiJson(out))
}

/// The organization's meetings (hosted by its agents), newest first.
#[utoipa::path(get, path = "/v1/meetings", tag = "protocol", security(("api_key" = [])),
    params(Listing),
    responses((status = 200, body = Vec<MeetingView>)))]
pub(crate) async fn list_meetings(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(listing): ApiQuery<Listing>,
) -> Result<ApiJson<Vec<MeetingView>>, ApiError> {
    let page = listing.page("meeting", MeetingId)?;
    let found = state
        .pattern()
        .protocol()
        .org_meetings(caller.org, page)
        .await?;
    let mut ids = Ids::new(&state, caller);
    let mut out = Vec::with_capacity(found.len());
    for meeting in &found {
        out.push(ids.meeting(meeting).await?);
    }
    Ok(ApiJson(out))
}

/// The first `limit` events of the organization's meeting `meeting_id` (404 otherwise), for the
/// console's pages that work without JavaScript (they cannot follow the event stream).
pub(crate) async fn meeting_event_log(
    state: &AppState,
    caller: Caller,
    meeting_id: &str,
    limit: u32,
) -> Result<Vec<MeetingEventView>, ApiError> {
    let mut ids = Ids::new(state, caller);
    let meeting = ids.find_meeting(meeting_id).await?;
    let events = state
        .pattern()
        .protocol()
        .events_after(meeting.id, 0, limit)
        .await?;
    let mut out = Vec::with_capacity(events.len());
    for event in &events {
        out.push(ids.event(event).await?);
    }
    Ok(out)
}

/// One session.
#[utoipa::path(get, path = "/v1/sessions/{session_id}", tag = "protocol",
    security(("api_key" = [])), params(("session_id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 404, body = ErrorBody)))]
pub(crate) async fn show_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<ApiJson<SessionView>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let session = ids.find_session(&session_id).await?;
    Ok(ApiJson(ids.session(&session).await?))
}

/// Sends a message in a session (sync: only by the agent holding the turn, else 409).
#[utoipa::path(post, path = "/v1/sessions/{session_id}/messages", tag = "protocol",
    security(("api_key" = [])), params(("session_id" = String, Path)),
    request_body = SendProtocolMessage,
    responses((status = 201, body = ProtocolMessageView), (status = 404, body = ErrorBody),
        (status = 409, description = "out of turn, or the session ended", body = ErrorBody)))]
pub(crate) async fn send_session_message(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(body): ApiJson<SendProtocolMessage>,
) -> Result<(StatusCode, ApiJson<ProtocolMessageView>), ApiError> {
    let mut ids = Ids::new(&state, caller);
    let session = ids.find_session(&session_id).await?;
    let sender = ids.participant(&body.from).await?;
    let stored = state
        .pattern()
        .protocol()
        .send(
            session.id,
            sender.id,
            message_body(body.content, body.message_type),
        )
        .await?;
    Ok((StatusCode::CREATED, ApiJson(ids.message(&stored).await?)))
}

/// A session's messages in order.
#[utoipa::path(get, path = "/v1/sessions/{session_id}/messages", tag = "protocol",
    security(("api_key" = [])), params(("session_id" = String, Path)),
    responses((status = 200, body = Vec<ProtocolMessageView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn session_messages(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<ApiJson<Vec<ProtocolMessageView>>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let session = ids.find_session(&session_id).await?;
    let list = state
        .pattern()
        .protocol()
        .session_messages(session.id)
        .await?;
    Ok(ApiJson(ids.messages(&list).await?))
}

/// Ends a session.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/end", tag = "protocol",
    security(("api_key" = [])), params(("session_id" = String, Path)), request_body = ActAs,
    responses((status = 200, body = SessionView), (status = 404, body = ErrorBody)))]
pub(crate) async fn end_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(body): ApiJson<ActAs>,
) -> Result<ApiJson<SessionView>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let session = ids.find_session(&session_id).await?;
    let agent = ids.participant(&body.agent).await?;
    let ended = state
        .pattern()
        .protocol()
        .end_session(session.id, agent.id)
        .await?;
    Ok(ApiJson(ids.session(&ended).await?))
}

/// The agent's unread messages in arrival order.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/inbox", tag = "protocol",
    security(("api_key" = [])), params(("agent_id" = String, Path)),
    responses((status = 200, body = Vec<ProtocolMessageView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn inbox(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<Vec<ProtocolMessageView>>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let me = ids.participant(&agent_id).await?;
    let list = state.pattern().protocol().unread(me.id).await?;
    Ok(ApiJson(ids.messages(&list).await?))
}

/// Marks messages of the agent's inbox read (idempotent); answers how many changed.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/inbox/read", tag = "protocol",
    security(("api_key" = [])), params(("agent_id" = String, Path)), request_body = MarkRead,
    responses((status = 200, body = u64), (status = 404, body = ErrorBody)))]
pub(crate) async fn mark_read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<MarkRead>,
) -> Result<ApiJson<u64>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let me = ids.participant(&agent_id).await?;
    let messages = body
        .messages
        .iter()
        .map(|m| {
            Uuid::parse_str(m)
                .map(ProtocolMessageId)
                .map_err(|_| ApiError::invalid(format!("`{m}` is not a message id")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let changed = state
        .pattern()
        .protocol()
        .mark_read(me.id, &messages)
        .await?;
    Ok(ApiJson(changed))
}

/// Creates a meeting hosted by one of the organization's agents.
#[utoipa::path(post, path = "/v1/meetings", tag = "protocol", security(("api_key" = [])),
    request_body = CreateMeeting,
    responses((status = 201, body = MeetingView), (status = 404, body = ErrorBody)))]
pub(crate) async fn create_meeting(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateMeeting>,
) -> Result<(StatusCode, ApiJson<MeetingView>), ApiError> {
    let mut ids = Ids::new(&state, caller);
    let host = ids.participant(&body.host).await?;
    let update = state
        .pattern()
        .protocol()
        .create_meeting(host.id, turn_duration(body.turn_duration_ms)?)
        .await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(ids.meeting(&update.meeting).await?),
    ))
}

/// Creates a meeting of the organization's agents and lets them hold it: this server drives
/// it (each speaker's turn is a run of that agent; its answer is its speech) and any server
/// sharing the database resumes it if this one stops. Follow it with
/// `GET /v1/meetings/{id}/events`.
#[utoipa::path(post, path = "/v1/meetings/run", tag = "protocol", security(("api_key" = [])),
    request_body = RunMeeting,
    responses((status = 201, body = MeetingView), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn run_meeting(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RunMeeting>,
) -> Result<(StatusCode, ApiJson<MeetingView>), ApiError> {
    if state.is_closing() {
        return Err(ApiError::new(
            crate::error::ErrorCode::Unavailable,
            "the server is shutting down",
        ));
    }
    let policy = match body.policy.as_deref() {
        None => pattern::core::meeting::Policy::RoundRobin,
        Some(text) => pattern::core::meeting::Policy::parse(text)
            .map_err(|e| ApiError::invalid(format!("`policy`: {e}")))?,
    };
    let turn_duration = turn_duration(body.turn_duration_ms)?;
    let rounds = crate::limits::MEETING_ROUNDS.check(body.rounds, 1)?;
    let mut ids = Ids::new(&state, caller);
    let mut agents = Vec::new();
    for agent in &body.agents {
        agents.push(ids.participant(agent).await?.id);
    }
    let plan = pattern::core::meeting::MeetingPlan {
        topic: body.topic,
        rounds,
        end_phrase: body.end_phrase,
        policy,
        agents,
    };
    plan.validate()?;
    let id = state.run_meeting(&plan, turn_duration).await?;
    let meeting = state.pattern().protocol().meeting(id).await?;
    Ok((StatusCode::CREATED, ApiJson(ids.meeting(&meeting).await?)))
}

/// One meeting with its participants.
#[utoipa::path(get, path = "/v1/meetings/{meeting_id}", tag = "protocol",
    security(("api_key" = [])), params(("meeting_id" = String, Path)),
    responses((status = 200, body = MeetingView), (status = 404, body = ErrorBody)))]
pub(crate) async fn show_meeting(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(meeting_id): ApiPath<String>,
) -> Result<ApiJson<MeetingView>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let meeting = ids.find_meeting(&meeting_id).await?;
    Ok(ApiJson(ids.meeting(&meeting).await?))
}

/// A meeting's messages in order.
#[utoipa::path(get, path = "/v1/meetings/{meeting_id}/messages", tag = "protocol",
    security(("api_key" = [])), params(("meeting_id" = String, Path)),
    responses((status = 200, body = Vec<ProtocolMessageView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn meeting_messages(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(meeting_id): ApiPath<String>,
) -> Result<ApiJson<Vec<ProtocolMessageView>>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let meeting = ids.find_meeting(&meeting_id).await?;
    let list = state
        .pattern()
        .protocol()
        .meeting_messages(meeting.id)
        .await?;
    Ok(ApiJson(ids.messages(&list).await?))
}

/// Acts in a meeting: `invite` (host; `invitee`), `join`, `start` (host), `speak` (the speaker;
/// `content`), `pass`, `leave`, `end` (host). Answers the meeting after the change.
#[utoipa::path(post, path = "/v1/meetings/{meeting_id}/{action}", tag = "protocol",
    security(("api_key" = [])),
    params(("meeting_id" = String, Path),
        ("action" = String, Path, description = "invite, join, start, speak, pass, leave or end")),
    request_body = MeetingAction,
    responses((status = 200, body = MeetingView), (status = 404, body = ErrorBody),
        (status = 409, description = "not the host, not the speaker, ended", body = ErrorBody)))]
pub(crate) async fn meeting_action(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((meeting_id, action)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<MeetingAction>,
) -> Result<ApiJson<MeetingView>, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let meeting = ids.find_meeting(&meeting_id).await?;
    let agent = ids.participant(&body.agent).await?;
    let protocol = state.pattern().protocol();
    let update = match action.as_str() {
        "invite" => {
            let invitee = body
                .invitee
                .as_deref()
                .ok_or_else(|| ApiError::invalid("`invite` needs `invitee`"))?;
            let invitee = ids.participant(invitee).await?;
            protocol.invite(meeting.id, agent.id, invitee.id).await?
        }
        "join" => protocol.join_meeting(meeting.id, agent.id).await?,
        "start" => protocol.start_meeting(meeting.id, agent.id).await?,
        "speak" => {
            let content = body
                .content
                .ok_or_else(|| ApiError::invalid("`speak` needs `content`"))?;
            protocol
                .speak(
                    meeting.id,
                    agent.id,
                    message_body(content, body.message_type),
                )
                .await?
        }
        "pass" => protocol.pass_turn(meeting.id, agent.id).await?,
        "leave" => protocol.leave_meeting(meeting.id, agent.id).await?,
        "end" => protocol.end_meeting(meeting.id, agent.id).await?,
        other => {
            return Err(ApiError::new(
                ErrorCode::UnknownRoute,
                format!("no meeting action `{other}`"),
            ));
        }
    };
    Ok(ApiJson(ids.meeting(&update.meeting).await?))
}

/// The `error` event that ends a meeting's stream: data `{"error": {code, message}}` with a
/// stable code and a generic message; the cause goes to the server log.
fn stream_error(code: ErrorCode, cause: &str) -> Event {
    tracing::warn!(?code, %cause, "a meeting's event stream failed");
    let body = crate::error::ErrorBody {
        error: crate::error::ErrorDetail {
            code,
            message: "the meeting's events could not be read; resume from the last event id".into(),
            details: None,
        },
    };
    Event::default()
        .event("error")
        .json_data(&body)
        .unwrap_or_else(|_| Event::default().event("error").data("{}"))
}

/// One item of a meeting's stream as an SSE event: a log event under its type, or a speaker's
/// run output as `output`; the id is the cursor that resumes after it.
async fn sse_item(
    ids: &mut Ids,
    cursor: MeetingCursor,
    item: MeetingItem,
) -> Result<Event, ApiError> {
    let event = match item {
        MeetingItem::Event { event } => {
            let view = ids.event(&event).await?;
            Event::default()
                .event(view.event_type.clone())
                .json_data(&view)
        }
        MeetingItem::Output {
            speaker,
            turn,
            attempt,
            event,
        } => {
            let view = MeetingOutputView {
                speaker: ids.visible(speaker).await?,
                turn,
                attempt,
                event,
            };
            Event::default().event("output").json_data(&view)
        }
    };
    Ok(event
        .map(|e| e.id(cursor.to_string()))
        .unwrap_or_else(|_| Event::default().comment("unserialisable event")))
}

/// `output` event of a meeting's stream: what a speaker's run produced during its turn.
#[derive(Debug, Serialize, ToSchema)]
pub struct MeetingOutputView {
    /// The speaker (agent id).
    pub speaker: String,
    /// The sequence number of the `turn_passed` event that began the turn.
    pub turn: u64,
    /// The run's attempt (1, or 2 after a failed first run).
    pub attempt: u32,
    /// The run's event (a text delta, a tool call or result, an error, the end).
    #[schema(value_type = Object)]
    pub event: pattern::core::ResponseEvent,
}

/// A meeting as server-sent events, live until it ends: each log event under its type
/// (`MeetingEventView`), and between a `turn_passed` and the next event the speaker's run output
/// as `output` events (`MeetingOutputView`: text deltas, tool calls and results). Each id is a
/// cursor (`SEQ`, or `SEQ:ATTEMPT:N` inside a turn's output); resume from `Last-Event-ID` (or
/// `?after=SEQ`).
#[utoipa::path(get, path = "/v1/meetings/{meeting_id}/events", tag = "protocol",
    security(("api_key" = [])),
    params(("meeting_id" = String, Path),
        ("Last-Event-ID" = Option<String>, Header, description = "the last cursor seen"), Cursor),
    responses((status = 200, description = "`text/event-stream` of MeetingEventView and MeetingOutputView"),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn meeting_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(meeting_id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(cursor): ApiQuery<Cursor>,
) -> Result<Response, ApiError> {
    let mut ids = Ids::new(&state, caller);
    let meeting = ids.find_meeting(&meeting_id).await?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.parse::<MeetingCursor>().ok())
            .ok_or_else(|| {
                ApiError::invalid("`Last-Event-ID` must be a cursor (`SEQ` or `SEQ:ATTEMPT:N`)")
            })?,
        None => MeetingCursor {
            seq: cursor.after.unwrap_or(0),
            output: None,
        },
    };
    let items = pattern::core::meeting_stream::follow(
        state.pattern().protocol().clone(),
        meeting.id,
        after,
    );
    let keep_alive = state.config().keep_alive;
    let closing = state.closing();
    // One resolver for the whole stream: each agent id is looked up once. The stream ends after
    // `meeting_ended` and the last turn's output, or after reporting the first error (the client
    // resumes from the last id it saw).
    let events = futures::stream::unfold(Some((Box::pin(items), ids)), |next| async move {
        let (mut items, mut ids) = next?;
        let (event, more) = match items.next().await {
            Some(Ok((cursor, item))) => match sse_item(&mut ids, cursor, item).await {
                Ok(event) => (event, true),
                Err(err) => (stream_error(err.code, &err.message), false),
            },
            None => return None,
            Some(Err(err)) => (
                stream_error(
                    ErrorCode::from_class(err.class()),
                    &crate::error::one_line(&err),
                ),
                false,
            ),
        };
        Some((Ok::<_, Infallible>(event), more.then_some((items, ids))))
    })
    .take_until(closing);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response())
}
