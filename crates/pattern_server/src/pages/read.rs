//! The read-only pages: each calls the `/v1` route handlers with the session's organization (so
//! it is scoped exactly like the API) and writes what they answer as text. An error of theirs
//! (another organization's id: 404) becomes an error page with the same status and message.

use std::collections::HashMap;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::html::{Href, Html};
use super::{PageCaller, error_page, page};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath, ApiQuery, agents, approvals, batches, context, mcp, memory};
use crate::routes::{protocol, schedules};
use crate::state::AppState;
use crate::views::AgentView;

/// A page's answer: the page, or the error its failure shows as a page.
type PageResult = Result<Response, PageError>;

/// A failure of a page: the API's error, answered as an error page.
#[derive(Debug)]
pub(crate) struct PageError(ApiError);

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> Self {
        Self(error)
    }
}

impl axum::response::IntoResponse for PageError {
    fn into_response(self) -> Response {
        error_page(&self.0)
    }
}

/// What a handler answered, or its error.
fn data<T>(answer: Result<ApiJson<T>, ApiError>) -> Result<T, PageError> {
    answer.map(|ApiJson(value)| value).map_err(PageError)
}

/// A query string (or none) as the handler's query struct; a bad one is a 400 page.
fn query<T: DeserializeOwned>(raw: Option<String>, defaults: Value) -> Result<T, PageError> {
    let mut fields: HashMap<String, String> =
        serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
            .map_err(|e| PageError(ApiError::invalid(format!("a bad query string: {e}"))))?;
    let mut object = match defaults {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    for (name, value) in fields.drain() {
        let value = match value.parse::<u64>() {
            Ok(n) if name == "limit" => json!(n),
            _ => json!(value),
        };
        object.insert(name, value);
    }
    serde_json::from_value(Value::Object(object))
        .map_err(|e| PageError(ApiError::invalid(format!("a bad query string: {e}"))))
}

/// Path parameters, or a 400 page.
fn path<T>(extracted: Result<Path<T>, PathRejection>) -> Result<T, PageError> {
    extracted
        .map(|Path(value)| value)
        .map_err(|e| PageError(ApiError::from(e)))
}

fn when(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn agent_href(id: &str) -> Href {
    Href::new("/console/agents").seg(id)
}

/// The organization's agents by id, to name participants.
async fn names(state: &AppState, caller: Caller) -> Result<HashMap<String, String>, PageError> {
    let list = data(agents::list(State(state.clone()), caller).await)?;
    Ok(list.into_iter().map(|a| (a.id, a.name)).collect())
}

fn name_of<'a>(names: &'a HashMap<String, String>, id: &'a str) -> &'a str {
    names.get(id).map_or(id, String::as_str)
}

/// `GET /console/agents`.
pub(crate) async fn agents(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
) -> PageResult {
    let list = data(agents::list(State(state), caller).await)?;
    let mut body = Html::default();
    if list.is_empty() {
        body.raw("<p class=\"muted\">No agents yet.</p>");
    } else {
        body.raw("<table>")
            .head(&["Name", "Id", "Model", "Created"])
            .raw("<tbody>");
        for agent in &list {
            body.raw("<tr>")
                .td_link(&agent_href(&agent.id), &agent.name)
                .raw("<td class=\"mono\">")
                .text(&agent.id)
                .raw("</td>")
                .td(&model_text(agent))
                .td(&when(&agent.created_at))
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
    }
    Ok(page(StatusCode::OK, "Agents", true, body))
}

fn model_text(agent: &AgentView) -> String {
    match agent.metadata.get("model") {
        Some(Value::Object(model)) => {
            let field = |k: &str| model.get(k).and_then(Value::as_str).unwrap_or("?");
            format!("{} / {}", field("provider"), field("model"))
        }
        _ => "server default".to_owned(),
    }
}

fn agent_nav(body: &mut Html, id: &str) {
    body.raw("<nav class=\"subnav\" aria-label=\"Agent\">")
        .link(&agent_href(id), "Overview")
        .link(&agent_href(id).part("/batches"), "Batches")
        .link(&agent_href(id).part("/blocks"), "Memory blocks")
        .link(&agent_href(id).part("/archival"), "Archival")
        .link(&agent_href(id).part("/context"), "Context")
        .raw("</nav>");
}

/// `GET /console/agents/{agent_id}`: the agent, its schedules and MCP servers.
pub(crate) async fn agent(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
) -> PageResult {
    let id = path(id)?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let schedules = data(schedules::list(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let servers = data(mcp::get(State(state), caller, ApiPath(id)).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    body.raw("<dl><dt>Name</dt>")
        .el("<dd>", &agent.name, "</dd>")
        .raw("<dt>Id</dt>")
        .el("<dd class=\"mono\">", &agent.id, "</dd>")
        .raw("<dt>Model</dt>")
        .el("<dd>", &model_text(&agent), "</dd>")
        .raw("<dt>Instructions</dt>")
        .el(
            "<dd><pre>",
            agent.instructions.as_deref().unwrap_or("(default)"),
            "</pre></dd>",
        )
        .raw("</dl><h2>Schedules</h2>");
    if schedules.is_empty() {
        body.raw("<p class=\"muted\">No schedules.</p>");
    } else {
        body.raw("<table>")
            .head(&["Name", "When", "Next", "Deliveries", "Message"])
            .raw("<tbody>");
        for s in &schedules {
            let timing = match &s.cron {
                Some(cron) => format!("{} {cron} ({})", s.kind, s.tz),
                None => s.kind.clone(),
            };
            body.raw("<tr>")
                .td(s.name.as_deref().unwrap_or(&s.id))
                .td(&timing)
                .td(&when(&s.next_at))
                .td(&s.deliveries.to_string())
                .td(&s.message)
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
    }
    body.raw("<h2>MCP servers</h2>");
    let servers = serde_json::to_value(&servers).unwrap_or(Value::Null);
    match servers.get("servers").and_then(Value::as_object) {
        Some(map) if !map.is_empty() => {
            body.raw("<table>")
                .head(&["Name", "Configuration"])
                .raw("<tbody>");
            for (name, config) in map {
                body.raw("<tr>")
                    .td(name)
                    .el("<td><pre>", &pretty(config), "</pre></td>")
                    .raw("</tr>");
            }
            body.raw("</tbody></table>");
        }
        _ => {
            body.raw("<p class=\"muted\">No MCP servers.</p>");
        }
    }
    Ok(page(StatusCode::OK, &agent.name, true, body))
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `GET /console/agents/{agent_id}/batches`: the batch timeline, newest first.
pub(crate) async fn batches(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> PageResult {
    let id = path(id)?;
    let paging: batches::Page = query(raw.clone(), json!({}))?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let list = data(batches::list(State(state), caller, ApiPath(id), ApiQuery(paging)).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    if list.is_empty() {
        body.raw("<p class=\"muted\">No batches.</p>");
    } else {
        body.raw("<table>")
            .head(&["Batch", "Type", "State", "Started", "Duration", "Messages"])
            .raw("<tbody>");
        for b in &list {
            let state = match b.retried_at {
                Some(at) => format!("{} (retried {})", b.state, when(&at)),
                None => b.state.clone(),
            };
            body.raw("<tr>")
                .td_link(&agent_href(&agent.id).part("/batches").seg(&b.id), &b.id)
                .td(&b.batch_type)
                .td(&state)
                .td(&when(&b.started_at))
                .td(&b
                    .duration_ms
                    .map_or("—".to_owned(), |ms| format!("{ms} ms")))
                .td(&b.message_count.to_string())
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
        let base = format!("/console/agents/{}/batches", agent.id);
        older_link(
            &mut body,
            &base,
            raw,
            list.len(),
            list.last().map(|l| l.id.as_str()),
        );
    }
    Ok(page(
        StatusCode::OK,
        &format!("Batches of {}", agent.name),
        true,
        body,
    ))
}

/// After a full page (as many items as the query's `limit`, default 50), a link to the next
/// one: the same query with `before` the last item's id. The path is built from ids the server
/// gave (UUIDs, numbers).
fn older_link(body: &mut Html, base: &str, raw: Option<String>, shown: usize, last: Option<&str>) {
    let Some(last) = last else {
        return;
    };
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.as_deref().unwrap_or("")).unwrap_or_default();
    let limit = pairs
        .iter()
        .find(|(name, _)| name == "limit")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(50);
    if shown < limit {
        return;
    }
    pairs.retain(|(name, _)| name != "before");
    pairs.push(("before".to_owned(), last.to_owned()));
    let href = format!(
        "{base}?{}",
        serde_urlencoded::to_string(&pairs).unwrap_or_default()
    );
    body.raw("<p><a href=\"")
        .text(&href)
        .raw("\">Older</a></p>");
}

/// `GET /console/agents/{agent_id}/batches/{batch_id}`: messages and tool pairs.
pub(crate) async fn batch(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    ids: Result<Path<(String, String)>, PathRejection>,
) -> PageResult {
    let (id, batch_id) = path(ids)?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let detail = data(batches::show(State(state), caller, ApiPath((id, batch_id))).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    let b = &detail.batch;
    body.raw("<p>")
        .text(&format!(
            "{} batch, {}; started {}; {} messages.",
            b.batch_type,
            b.state,
            when(&b.started_at),
            b.message_count
        ))
        .raw("</p><h2>Messages</h2><ol class=\"transcript\">");
    for m in &detail.messages {
        body.raw("<li>")
            .el("<span class=\"who\">", &m.role, "</span>");
        if m.text.is_empty() {
            let content = serde_json::to_value(&m.content).unwrap_or(Value::Null);
            body.el("<pre>", &pretty(&content), "</pre>");
        } else {
            body.text(&m.text);
        }
        body.raw("</li>");
    }
    body.raw("</ol><h2>Tool pairs</h2>");
    if detail.tool_pairs.is_empty() {
        body.raw("<p class=\"muted\">No tool calls.</p>");
    } else {
        body.raw("<table>")
            .head(&["Tool", "Call id", "Call", "Result", "Error"])
            .raw("<tbody>");
        for p in &detail.tool_pairs {
            body.raw("<tr>")
                .td(&p.name)
                .td(&p.tool_use_id)
                .td(&p.call_sequence.to_string())
                .td(&p
                    .result_sequence
                    .map_or("none".to_owned(), |n| n.to_string()))
                .td(match p.is_error {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "—",
                })
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
    }
    Ok(page(StatusCode::OK, &format!("Batch {}", b.id), true, body))
}

/// `GET /console/agents/{agent_id}/blocks`: blocks with usage against their limit.
pub(crate) async fn blocks(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
) -> PageResult {
    let id = path(id)?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let list = data(memory::list_blocks(State(state), caller, ApiPath(id)).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    if list.is_empty() {
        body.raw("<p class=\"muted\">No memory blocks.</p>");
    }
    for block in &list {
        body.raw("<section class=\"card\"><h2>")
            .link(
                &agent_href(&agent.id).part("/blocks").seg(&block.label),
                &block.label,
            )
            .raw("</h2><p>")
            .text(&format!(
                "{} of {} characters · {} · {} · version {}",
                block.chars, block.char_limit, block.block_type, block.permission, block.version
            ))
            .raw("</p>")
            .el("<pre>", &block.value, "</pre>")
            .raw("</section>");
    }
    Ok(page(
        StatusCode::OK,
        &format!("Memory of {}", agent.name),
        true,
        body,
    ))
}

/// `GET /console/agents/{agent_id}/blocks/{label}`: a block and every version, newest first.
pub(crate) async fn block(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    ids: Result<Path<(String, String)>, PathRejection>,
) -> PageResult {
    let (id, label) = path(ids)?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let current = data(
        memory::show_block(
            State(state.clone()),
            caller,
            ApiPath((id.clone(), label.clone())),
        )
        .await,
    )?;
    let names = names(&state, caller).await?;
    let history = data(memory::block_history(State(state), caller, ApiPath((id, label))).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    body.raw("<p>")
        .text(&format!(
            "{} of {} characters · version {} · updated {}",
            current.chars,
            current.char_limit,
            current.version,
            when(&current.updated_at)
        ))
        .raw("</p>")
        .el("<pre>", &current.value, "</pre>")
        .raw("<h2>History</h2><table>")
        .head(&[
            "Version",
            "Change",
            "By",
            "When",
            "Against the version before",
        ])
        .raw("<tbody>");
    for (at, v) in history.iter().enumerate() {
        body.raw("<tr>")
            .td(&v.version.to_string())
            .td(&v.change)
            .td(name_of(&names, &v.changed_by))
            .td(&when(&v.created_at))
            .raw("<td><pre class=\"diff\">");
        // Newest first: the version before is the next one.
        let before = history.get(at + 1).map_or("", |p| p.value.as_str());
        for line in super::diff::lines(before, &v.value) {
            match line {
                super::diff::Line::Same(text) => body.text(text).raw("\n"),
                super::diff::Line::Removed(text) => body.el("<del>", text, "</del>\n"),
                super::diff::Line::Added(text) => body.el("<ins>", text, "</ins>\n"),
            };
        }
        body.raw("</pre></td></tr>");
    }
    body.raw("</tbody></table>");
    Ok(page(
        StatusCode::OK,
        &format!("Block {}", current.label),
        true,
        body,
    ))
}

/// `GET /console/agents/{agent_id}/archival`: the newest passages.
pub(crate) async fn archival(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> PageResult {
    let id = path(id)?;
    // `q` and `mode` ask for a search (a read: a GET form); the rest pages the passages.
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.as_deref().unwrap_or("")).unwrap_or_default();
    let asked = |name: &str, pairs: &[(String, String)]| {
        pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let search = asked("q", &pairs).filter(|q| !q.trim().is_empty());
    let mode = asked("mode", &pairs).unwrap_or_else(|| "auto".to_owned());
    pairs.retain(|(n, _)| n != "q" && n != "mode");
    let raw = (!pairs.is_empty()).then(|| serde_urlencoded::to_string(&pairs).unwrap_or_default());
    let paging: memory::ArchivalPage = query(raw.clone(), json!({}))?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let hits = match &search {
        Some(q) => {
            let request = serde_json::from_value(json!({"query": q, "mode": mode}))
                .map_err(|e| PageError(ApiError::invalid(e.to_string())))?;
            Some(data(
                memory::search(
                    State(state.clone()),
                    caller,
                    ApiPath(id.clone()),
                    ApiJson(request),
                )
                .await,
            )?)
        }
        None => None,
    };
    let list =
        data(memory::list_archival(State(state), caller, ApiPath(id), ApiQuery(paging)).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    body.raw("<form class=\"inline\" method=\"get\" id=\"search\">")
        .raw("<label>Search <input name=\"q\" value=\"")
        .text(search.as_deref().unwrap_or(""))
        .raw("\"></label><label>Mode <select name=\"mode\">");
    for m in ["auto", "fts", "vector", "hybrid"] {
        body.raw("<option");
        if m == mode {
            body.raw(" selected");
        }
        body.raw(">").text(m).raw("</option>");
    }
    body.raw("</select></label><button type=\"submit\">Search</button></form>");
    if let Some(hits) = &hits {
        body.raw("<h2>Hits</h2>");
        if hits.is_empty() {
            body.raw("<p class=\"muted\">Nothing found.</p>");
        } else {
            body.raw("<table>")
                .head(&["Score", "Kind", "Text", "When"])
                .raw("<tbody>");
            for hit in hits {
                body.raw("<tr>")
                    .td(&format!("{:.4}", hit.score))
                    .td(&hit.content_type)
                    .el("<td><pre>", &hit.text, "</pre></td>")
                    .td(&when(&hit.created_at))
                    .raw("</tr>");
            }
            body.raw("</tbody></table>");
        }
        body.raw("<h2>Passages</h2>");
    }
    if list.is_empty() {
        body.raw("<p class=\"muted\">No passages.</p>");
    } else {
        body.raw("<table>")
            .head(&["Passage", "Tags", "Stored"])
            .raw("<tbody>");
        for p in &list {
            body.raw("<tr>")
                .el("<td><pre>", &p.content, "</pre></td>")
                .td(&p.tags.join(", "))
                .td(&when(&p.created_at))
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
        let base = format!("/console/agents/{}/archival", agent.id);
        older_link(
            &mut body,
            &base,
            raw,
            list.len(),
            list.last().map(|l| l.id.as_str()),
        );
    }
    Ok(page(
        StatusCode::OK,
        &format!("Archival of {}", agent.name),
        true,
        body,
    ))
}

fn status_filter(body: &mut Html, base: &'static str) {
    body.raw("<nav class=\"subnav\" aria-label=\"Filter\">")
        .link(&Href::new(base), "All")
        .link(&Href::new(base).part("?status=live"), "Live")
        .link(&Href::new(base).part("?status=ended"), "Ended")
        .raw("</nav>");
}

/// `GET /console/meetings`: the organization's meetings, newest first.
pub(crate) async fn meetings(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    RawQuery(raw): RawQuery,
) -> PageResult {
    let listing: protocol::Listing = query(raw.clone(), json!({}))?;
    let names = names(&state, caller).await?;
    let list = data(protocol::list_meetings(State(state), caller, ApiQuery(listing)).await)?;
    let mut body = Html::default();
    status_filter(&mut body, "/console/meetings");
    if list.is_empty() {
        body.raw("<p class=\"muted\">No meetings.</p>");
    } else {
        body.raw("<table>")
            .head(&[
                "Meeting",
                "Status",
                "Host",
                "Speaker",
                "Participants",
                "Created",
            ])
            .raw("<tbody>");
        for m in &list {
            let people = m
                .participants
                .iter()
                .map(|p| name_of(&names, &p.agent))
                .collect::<Vec<_>>()
                .join(", ");
            body.raw("<tr>")
                .td_link(&Href::new("/console/meetings").seg(&m.id), &m.id)
                .td(&m.status)
                .td(name_of(&names, &m.host))
                .td(m.speaker.as_deref().map_or("—", |s| name_of(&names, s)))
                .td(&people)
                .td(&when(&m.created_at))
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
        let last = list.last().map(|l| l.id.as_str());
        older_link(&mut body, "/console/meetings", raw, list.len(), last);
    }
    Ok(page(StatusCode::OK, "Meetings", true, body))
}

/// `GET /console/meetings/{meeting_id}`: status, participants, transcript and event log.
pub(crate) async fn meeting(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
) -> PageResult {
    let id = path(id)?;
    let m = data(protocol::show_meeting(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let names = names(&state, caller).await?;
    let messages =
        data(protocol::meeting_messages(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let events = protocol::meeting_event_log(&state, caller, &id, 1000).await?;
    let mut body = Html::default();
    body.raw("<p>")
        .text(&format!(
            "{} · hosted by {} · speaking: {}{}",
            m.status,
            name_of(&names, &m.host),
            m.speaker
                .as_deref()
                .map_or("nobody", |s| name_of(&names, s)),
            m.turn_deadline
                .map(|d| format!(" until {}", when(&d)))
                .unwrap_or_default()
        ))
        .raw("</p><h2>Participants</h2><ul>");
    for p in &m.participants {
        body.el(
            "<li>",
            &format!("{} ({})", name_of(&names, &p.agent), p.status),
            "</li>",
        );
    }
    body.raw("</ul><h2>Transcript</h2>");
    transcript(&mut body, &names, &messages);
    body.raw("<h2>Event log</h2><table>")
        .head(&["#", "Event", "Agent", "When"])
        .raw("<tbody>");
    for e in &events {
        body.raw("<tr>")
            .td(&e.seq.to_string())
            .td(&e.event_type)
            .td(e.agent.as_deref().map_or("", |a| name_of(&names, a)))
            .td(&when(&e.created_at))
            .raw("</tr>");
    }
    body.raw("</tbody></table>");
    Ok(page(
        StatusCode::OK,
        &format!("Meeting {}", m.id),
        true,
        body,
    ))
}

fn transcript(
    body: &mut Html,
    names: &HashMap<String, String>,
    messages: &[protocol::ProtocolMessageView],
) {
    if messages.is_empty() {
        body.raw("<p class=\"muted\">Nothing said yet.</p>");
        return;
    }
    body.raw("<ol class=\"transcript\">");
    for message in messages {
        let text = match &message.content {
            Value::String(text) => text.clone(),
            other => pretty(other),
        };
        body.raw("<li>")
            .el(
                "<span class=\"who\">",
                name_of(names, &message.from),
                "</span>",
            )
            .text(&text)
            .raw("</li>");
    }
    body.raw("</ol>");
}

/// `GET /console/sessions`: the organization's sessions, newest first.
pub(crate) async fn sessions(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    RawQuery(raw): RawQuery,
) -> PageResult {
    let listing: protocol::Listing = query(raw.clone(), json!({}))?;
    let names = names(&state, caller).await?;
    let list = data(protocol::list_sessions(State(state), caller, ApiQuery(listing)).await)?;
    let mut body = Html::default();
    status_filter(&mut body, "/console/sessions");
    if list.is_empty() {
        body.raw("<p class=\"muted\">No sessions.</p>");
    } else {
        body.raw("<table>")
            .head(&[
                "Session", "Agents", "Type", "Status", "Turn", "Messages", "Opened",
            ])
            .raw("<tbody>");
        for s in &list {
            body.raw("<tr>")
                .td_link(&Href::new("/console/sessions").seg(&s.id), &s.id)
                .td(&format!(
                    "{} and {}",
                    name_of(&names, &s.agent_a),
                    name_of(&names, &s.agent_b)
                ))
                .td(&s.session_type)
                .td(&s.status)
                .td(s.turn.as_deref().map_or("—", |t| name_of(&names, t)))
                .td(&s.messages_sent.to_string())
                .td(&when(&s.created_at))
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
        let last = list.last().map(|l| l.id.as_str());
        older_link(&mut body, "/console/sessions", raw, list.len(), last);
    }
    Ok(page(StatusCode::OK, "Sessions", true, body))
}

/// `GET /console/sessions/{session_id}`: a session and its transcript.
pub(crate) async fn session(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
) -> PageResult {
    let id = path(id)?;
    let s = data(protocol::show_session(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let names = names(&state, caller).await?;
    let messages = data(protocol::session_messages(State(state), caller, ApiPath(id)).await)?;
    let mut body = Html::default();
    body.raw("<p>")
        .text(&format!(
            "{} session between {} and {} · {} · turn: {} · {} messages",
            s.session_type,
            name_of(&names, &s.agent_a),
            name_of(&names, &s.agent_b),
            s.status,
            s.turn.as_deref().map_or("nobody", |t| name_of(&names, t)),
            s.messages_sent
        ))
        .raw("</p><h2>Transcript</h2>");
    transcript(&mut body, &names, &messages);
    Ok(page(
        StatusCode::OK,
        &format!("Session {}", s.id),
        true,
        body,
    ))
}

/// `GET /console/approvals`: the organization's approval requests (pending first by default).
pub(crate) async fn approvals(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    RawQuery(raw): RawQuery,
) -> PageResult {
    let listing: approvals::Listing = query(raw, json!({"state": "all"}))?;
    let names = names(&state, caller).await?;
    let list = data(approvals::list(State(state), caller, ApiQuery(listing)).await)?;
    let mut body = Html::default();
    body.raw(
        "<p class=\"muted\">Answering a request needs the full console (JavaScript) or the \
         API: these pages only read.</p>",
    );
    if list.is_empty() {
        body.raw("<p class=\"muted\">No approval requests.</p>");
    } else {
        body.raw("<table>")
            .head(&["Agent", "Tool", "Input", "State", "Asked", "Deadline"])
            .raw("<tbody>");
        for a in &list {
            body.raw("<tr>")
                .td(name_of(&names, &a.agent_id))
                .td(&a.tool)
                .el("<td><pre>", &pretty(&a.input), "</pre></td>")
                .td(&a.state)
                .td(&when(&a.requested_at))
                .td(&when(&a.deadline))
                .raw("</tr>");
        }
        body.raw("</tbody></table>");
    }
    Ok(page(StatusCode::OK, "Approvals", true, body))
}

/// `GET /console/agents/{agent_id}/context`: what the agent's next turn would send, now.
pub(crate) async fn context(
    State(state): State<AppState>,
    PageCaller(caller): PageCaller,
    id: Result<Path<String>, PathRejection>,
) -> PageResult {
    let id = path(id)?;
    let agent = data(agents::show(State(state.clone()), caller, ApiPath(id.clone())).await)?;
    let c = data(context::show(State(state), caller, ApiPath(id)).await)?;
    let mut body = Html::default();
    agent_nav(&mut body, &agent.id);
    body.raw("<p>")
        .text(&format!(
            "{} · window {} tokens · {} kept for the answer · history budget {}",
            c.model, c.window, c.response_reserve, c.history_budget
        ))
        .raw("</p>");
    if c.would_compress {
        body.raw(
            "<p class=\"error\">History is over its budget: the next turn compresses it \
             first.</p>",
        );
    }
    body.raw("<h2>Sections</h2><table>")
        .head(&["Section", "Tokens", "Of the window"])
        .raw("<tbody>");
    for section in &c.sections {
        let share = if c.window == 0 {
            0.0
        } else {
            section.tokens as f64 * 100.0 / c.window as f64
        };
        body.raw("<tr>")
            .td(&section.name)
            .td(&section.tokens.to_string())
            .td(&format!("{share:.1}%"))
            .raw("</tr>");
    }
    body.raw("</tbody></table><h2>System prompt, in order</h2>");
    for part in &c.system {
        let title = match &part.label {
            Some(label) => format!("{} {label} ({} tokens)", part.kind, part.tokens),
            None => format!("{} ({} tokens)", part.kind, part.tokens),
        };
        body.el("<details><summary>", &title, "</summary>").el(
            "<pre>",
            &part.text,
            "</pre></details>",
        );
    }
    body.raw("<h2>Tools</h2>")
        .el("<p class=\"mono\">", &c.tools.join(", "), "</p>")
        .raw("<h2>History</h2><p>")
        .text(&format!(
            "{} messages from {} batches; {} batches left out.",
            c.messages,
            c.batches.len(),
            c.excluded.len()
        ))
        .raw("</p>")
        .raw("<details><summary>The request body, in the provider's format</summary>")
        .el("<pre>", &pretty(&c.request), "</pre></details>");
    Ok(page(
        StatusCode::OK,
        &format!("Context of {}", agent.name),
        true,
        body,
    ))
}
