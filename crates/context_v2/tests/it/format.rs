//! Provider request formatting: the same hand-built contexts through the Anthropic, OpenAI and
//! Gemini formats.
//!
//! Each fixture is formatted for all three providers and compared with a JSON snapshot (under
//! `snapshots/`, maps sorted so the key order of `serde_json` features does not matter), and
//! every body goes through the structural checks: Anthropic and Gemini turns alternate, Gemini's
//! start with the user (Anthropic's may start with the assistant), no body holds text the
//! history does not (no invented user turn), every call is answered in the next turn by its results in call order, OpenAI
//! tool messages follow their assistant message in call order, no call or result is lost. A
//! property test runs the same checks on generated histories, and contexts that fail
//! `validate` (or put a call in the wrong role) are refused. These tests must never update a
//! snapshot to make a wrong body pass: read the `.snap` diff first.

use context_v2::format::{self, ForcedCall, RequestOptions, ToolChoice, anthropic, gemini, openai};
use context_v2::{
    AssemblySummary, CachePoint, ContextMessage, Damage, Error, MemoryContext, ModelInfo, Provider,
    SectionTokens, SystemPart, SystemPartKind, ToolDefinition, validate,
};
use pattern_db::{ContentBlock, Role, SnowflakeId};
use proptest::prelude::*;
use serde_json::{Value, json};

// -- building contexts -----------------------------------------------------------------------

fn msg(batch: i64, position: i64, role: Role, content: Vec<ContentBlock>) -> ContextMessage {
    ContextMessage {
        batch_id: SnowflakeId(batch),
        position: SnowflakeId(position),
        role,
        content,
    }
}

fn say(batch: i64, position: i64, role: Role, text: &str) -> ContextMessage {
    msg(batch, position, role, vec![ContentBlock::text(text)])
}

fn part(kind: SystemPartKind, text: &str) -> SystemPart {
    SystemPart {
        kind,
        text: text.into(),
    }
}

fn instructions() -> SystemPart {
    part(
        SystemPartKind::Instructions,
        "You are Pattern, an assistant with a persistent memory.",
    )
}

fn summary() -> SystemPart {
    part(
        SystemPartKind::Summary,
        "Earlier: Sam asked about trains to Paris; we compared two timetables.",
    )
}

/// Instructions, two memory blocks, tool rules, a summary.
fn full_system() -> Vec<SystemPart> {
    vec![
        instructions(),
        part(
            SystemPartKind::MemoryBlock {
                label: "persona".into(),
            },
            "<persona>\nCurious, concise, warm.\n</persona>",
        ),
        part(
            SystemPartKind::MemoryBlock {
                label: "human".into(),
            },
            "<human>\nName: Sam. Lives in Lyon.\n</human>",
        ),
        part(
            SystemPartKind::ToolRules,
            "Search before answering questions about current events.",
        ),
        summary(),
    ]
}

fn tool(name: &str, description: &str, field: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.into(),
        description: description.into(),
        input_schema: json!({
            "type": "object",
            "properties": { field: { "type": "string" } },
            "required": [field],
        }),
    }
}

fn tools() -> Vec<ToolDefinition> {
    vec![
        tool("weather", "Current weather of a city.", "city"),
        tool("web_search", "Search the web.", "query"),
        tool("set_timer", "Wake the agent at a time.", "at"),
    ]
}

fn context(
    system: Vec<SystemPart>,
    tools: Vec<ToolDefinition>,
    messages: Vec<ContextMessage>,
    cache_points: Vec<CachePoint>,
) -> MemoryContext {
    MemoryContext {
        system,
        tools,
        messages,
        cache_points,
        tokens: SectionTokens::default(),
        assembly: AssemblySummary {
            included_batches: Vec::new(),
            excluded: Vec::new(),
            trimmed_active: None,
        },
        compression: None,
    }
}

const ALL_POINTS: [CachePoint; 3] = [
    CachePoint::AfterTools,
    CachePoint::AfterSystem,
    CachePoint::AfterSummaries,
];

fn model(provider: Provider) -> ModelInfo {
    let name = match provider {
        Provider::Anthropic => "claude-sonnet-4-5",
        Provider::OpenAi => "gpt-4.1",
        Provider::Gemini => "gemini-2.5-flash",
    };
    ModelInfo {
        provider,
        model: name.into(),
        context_window: 200_000,
        max_output_tokens: 4096,
    }
}

const PROVIDERS: [Provider; 3] = [Provider::Anthropic, Provider::OpenAi, Provider::Gemini];

fn slug(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "anthropic",
        Provider::OpenAi => "openai",
        Provider::Gemini => "gemini",
    }
}

// -- the fixtures ----------------------------------------------------------------------------

/// (1) Instructions, two memory blocks, tool rules, a summary, tools, every cache point.
fn plain_chat() -> MemoryContext {
    context(
        full_system(),
        tools(),
        vec![
            say(10, 10, Role::User, "Hello!"),
            say(10, 11, Role::Assistant, "Hi Sam! How was Paris?"),
        ],
        ALL_POINTS.to_vec(),
    )
}

/// (2) Parallel calls: results in one tool message, then in two, one of them a failure.
fn parallel_calls() -> MemoryContext {
    context(
        vec![instructions()],
        tools(),
        vec![
            say(10, 10, Role::User, "What's the weather in Paris and Rome?"),
            msg(
                10,
                11,
                Role::Assistant,
                vec![
                    ContentBlock::text("Checking both cities."),
                    ContentBlock::tool_use("call_a", "weather", json!({ "city": "Paris" })),
                    ContentBlock::tool_use("call_b", "weather", json!({ "city": "Rome" })),
                ],
            ),
            msg(
                10,
                12,
                Role::Tool,
                vec![
                    ContentBlock::tool_result("call_a", "18°C, cloudy", false),
                    ContentBlock::tool_result("call_b", "24°C, sunny", false),
                ],
            ),
            msg(
                10,
                13,
                Role::Assistant,
                vec![
                    ContentBlock::tool_use("call_c", "web_search", json!({ "query": "Paris" })),
                    ContentBlock::tool_use("call_d", "web_search", json!({ "query": "Rome" })),
                ],
            ),
            msg(
                10,
                14,
                Role::Tool,
                vec![ContentBlock::tool_result(
                    "call_c",
                    "search timed out",
                    true,
                )],
            ),
            msg(
                10,
                15,
                Role::Tool,
                vec![ContentBlock::tool_result("call_d", "Opera tonight", false)],
            ),
            say(
                10,
                16,
                Role::Assistant,
                "Paris: 18°C and cloudy. Rome: 24°C and sunny, with an opera tonight.",
            ),
        ],
        Vec::new(),
    )
}

/// (3) A heartbeat continued batch 10 after batch 20 ran: assistant text after a tool result,
/// then more assistant messages (a continuation), in assemble's order.
fn heartbeat_continuation() -> MemoryContext {
    context(
        vec![instructions(), summary()],
        tools(),
        vec![
            say(10, 10, Role::User, "Remind me to stretch at noon."),
            msg(
                10,
                11,
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "call_t",
                    "set_timer",
                    json!({ "at": "12:00" }),
                )],
            ),
            msg(
                10,
                12,
                Role::Tool,
                vec![ContentBlock::tool_result(
                    "call_t",
                    "timer set for 12:00",
                    false,
                )],
            ),
            say(10, 13, Role::Assistant, "Done: I will remind you at noon."),
            say(10, 30, Role::Assistant, "It is noon: time to stretch, Sam!"),
            msg(
                10,
                31,
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "call_s",
                    "set_timer",
                    json!({ "at": "12:30" }),
                )],
            ),
            msg(
                10,
                32,
                Role::Tool,
                vec![ContentBlock::tool_result(
                    "call_s",
                    "timer set for 12:30",
                    false,
                )],
            ),
            say(10, 33, Role::Assistant, "I will check in at half past."),
            say(20, 20, Role::User, "Thanks!"),
            say(20, 21, Role::Assistant, "Any time."),
        ],
        vec![CachePoint::AfterSystem],
    )
}

/// (4) Opens with the assistant; system-role messages; thinking signed, unsigned, and alone.
fn assistant_first() -> MemoryContext {
    context(
        vec![instructions()],
        Vec::new(),
        vec![
            say(
                10,
                10,
                Role::Assistant,
                "Good morning, Sam. You have a meeting at ten.",
            ),
            say(10, 11, Role::User, "Thanks. Anything else?"),
            msg(
                10,
                12,
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        text: "Sam wants the agenda; nothing else is scheduled.".into(),
                        signature: Some("EqQBCkYIARgCIkA".into()),
                    },
                    ContentBlock::text("Nothing else today."),
                ],
            ),
            say(20, 20, Role::System, "Timer fired: 09:30"),
            msg(
                20,
                21,
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        text: "Time is short.".into(),
                        signature: None,
                    },
                    ContentBlock::text("Time to leave for your meeting."),
                ],
            ),
            say(30, 30, Role::System, "Timer fired: 09:45"),
            msg(
                30,
                31,
                Role::Assistant,
                vec![ContentBlock::Thinking {
                    text: "Nothing to add.".into(),
                    signature: None,
                }],
            ),
            say(30, 32, Role::User, "On my way."),
        ],
        Vec::new(),
    )
}

/// (4b) A history that opens with the model calling a tool (its batch's trigger was archived):
/// Gemini gets the opening as a transcript in its system instruction.
fn opens_with_a_call() -> MemoryContext {
    context(
        vec![instructions()],
        tools(),
        vec![
            msg(
                10,
                10,
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "call_w",
                    "weather",
                    json!({ "city": "Oslo" }),
                )],
            ),
            msg(
                10,
                11,
                Role::Tool,
                vec![ContentBlock::tool_result("call_w", "-3°C, snow", false)],
            ),
            say(10, 12, Role::Assistant, "It is snowing in Oslo."),
            say(20, 20, Role::User, "Should I take the train?"),
        ],
        Vec::new(),
    )
}

/// (4c) Gemini 3 calls with thought signatures: each goes back beside its call.
fn signed_calls() -> MemoryContext {
    let signed = |id: &str, city: &str, signature: Option<&str>| ContentBlock::ToolUse {
        id: id.into(),
        name: "weather".into(),
        input: json!({ "city": city }),
        signature: signature.map(str::to_owned),
    };
    context(
        vec![instructions()],
        tools(),
        vec![
            say(10, 10, Role::User, "Weather in Paris and Rome?"),
            msg(
                10,
                11,
                Role::Assistant,
                vec![
                    signed("call_p", "Paris", Some("CiQBjz1rX2sigParis")),
                    signed("call_r", "Rome", None),
                ],
            ),
            msg(
                10,
                12,
                Role::Tool,
                vec![
                    ContentBlock::tool_result("call_p", "18°C", false),
                    ContentBlock::tool_result("call_r", "24°C", false),
                ],
            ),
            msg(
                10,
                13,
                Role::Assistant,
                vec![signed("call_p2", "Paris", Some("CiQBjz1rX2sigAgain"))],
            ),
            msg(
                10,
                14,
                Role::Tool,
                vec![ContentBlock::tool_result("call_p2", "19°C", false)],
            ),
        ],
        Vec::new(),
    )
}

/// (5) Image references: a URL, a content hash, and an image in the assistant's own message.
fn images() -> MemoryContext {
    context(
        vec![instructions()],
        Vec::new(),
        vec![
            msg(
                10,
                10,
                Role::User,
                vec![
                    ContentBlock::text("What is in these pictures?"),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        reference: "https://example.com/cat.png".into(),
                    },
                    ContentBlock::Image {
                        media_type: "image/jpeg".into(),
                        reference: "sha256:9f86d081884c7d65".into(),
                    },
                ],
            ),
            say(
                10,
                11,
                Role::Assistant,
                "The first is a cat; I cannot open the second.",
            ),
            say(20, 20, Role::User, "Draw me one."),
            msg(
                20,
                21,
                Role::Assistant,
                vec![
                    ContentBlock::text("Here it is."),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        reference: "https://example.com/drawn.png".into(),
                    },
                ],
            ),
        ],
        Vec::new(),
    )
}

fn fixtures() -> Vec<(&'static str, MemoryContext, RequestOptions)> {
    let plain = RequestOptions::default();
    vec![
        (
            "plain_chat",
            plain_chat(),
            RequestOptions {
                stream: true,
                temperature: Some(0.7),
                ..RequestOptions::default()
            },
        ),
        ("parallel_calls", parallel_calls(), plain.clone()),
        (
            "heartbeat_continuation",
            heartbeat_continuation(),
            plain.clone(),
        ),
        ("assistant_first", assistant_first(), plain.clone()),
        ("opens_with_a_call", opens_with_a_call(), plain.clone()),
        ("signed_calls", signed_calls(), plain.clone()),
        ("images", images(), plain),
        (
            "forced_call",
            plain_chat(),
            RequestOptions {
                tool_choice: ToolChoice::Required,
                ..RequestOptions::default()
            },
        ),
        (
            "forced_call_schema",
            plain_chat(),
            RequestOptions {
                tool_choice: ToolChoice::Required,
                forced_call: ForcedCall::ResponseSchema,
                ..RequestOptions::default()
            },
        ),
        (
            "forced_tool",
            plain_chat(),
            RequestOptions {
                tool_choice: ToolChoice::Tool("set_timer".into()),
                ..RequestOptions::default()
            },
        ),
    ]
}

// -- structural checks -----------------------------------------------------------------------

fn arr(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// Calls and results in the context, counted.
fn counts(ctx: &MemoryContext) -> (usize, usize) {
    let calls = ctx.messages.iter().map(|m| m.tool_use_ids().count()).sum();
    let results = ctx
        .messages
        .iter()
        .map(|m| m.tool_result_ids().count())
        .sum();
    (calls, results)
}

/// Roles alternate, the first is `user` (or the model's when `model_first` allows it), no turn
/// is empty; each model turn's calls are answered
/// by the leading results of the next turn, in order; results appear nowhere else.
fn check_turns(
    turns: &[Value],
    model_first: bool,
    model_role: &str,
    parts_key: &str,
    call: impl Fn(&Value) -> Option<String>,
    result: impl Fn(&Value) -> Option<String>,
) -> (usize, usize) {
    let (mut calls_seen, mut results_seen) = (0, 0);
    let opens_with_model = model_first && turns.first().is_some_and(|t| t["role"] == model_role);
    for (i, turn) in turns.iter().enumerate() {
        let role = s(&turn["role"]);
        let expected = if (i % 2 == 0) != opens_with_model {
            "user"
        } else {
            model_role
        };
        assert_eq!(role, expected, "turn {i} breaks alternation: {turn}");
        let parts = arr(&turn[parts_key]);
        assert!(!parts.is_empty(), "turn {i} is empty");
        let calls: Vec<String> = parts.iter().filter_map(&call).collect();
        let results: Vec<String> = parts.iter().filter_map(&result).collect();
        calls_seen += calls.len();
        results_seen += results.len();
        if role == "user" {
            assert!(calls.is_empty(), "call in a user turn: {turn}");
            let leading: Vec<String> = parts.iter().map_while(&result).collect();
            assert_eq!(leading, results, "a result after another part: {turn}");
            let asked: Vec<String> = match i.checked_sub(1) {
                Some(prev) => arr(&turns[prev][parts_key])
                    .iter()
                    .filter_map(&call)
                    .collect(),
                None => Vec::new(),
            };
            assert_eq!(
                results, asked,
                "turn {i} does not answer the calls before it"
            );
        } else {
            assert!(results.is_empty(), "result in a model turn: {turn}");
            if !calls.is_empty() {
                let next = turns
                    .get(i + 1)
                    .unwrap_or_else(|| panic!("calls of turn {i} are never answered"));
                let answered: Vec<String> =
                    arr(&next[parts_key]).iter().map_while(&result).collect();
                assert_eq!(answered, calls, "turn {i}'s calls are not answered next");
            }
        }
    }
    (calls_seen, results_seen)
}

fn check_anthropic(ctx: &MemoryContext, body: &Value) {
    let typed = |kind: &'static str, key: &'static str| {
        move |b: &Value| (b["type"] == kind).then(|| s(&b[key]).to_owned())
    };
    let seen = check_turns(
        arr(&body["messages"]),
        true,
        "assistant",
        "content",
        typed("tool_use", "id"),
        typed("tool_result", "tool_use_id"),
    );
    assert_eq!(seen, counts(ctx), "calls or results lost");
    let marks = body.to_string().matches("cache_control").count();
    assert!(marks <= 4, "{marks} cache breakpoints");
}

fn check_gemini(ctx: &MemoryContext, body: &Value) {
    let seen = check_turns(
        arr(&body["contents"]),
        false,
        "model",
        "parts",
        |p| p["functionCall"]["name"].as_str().map(str::to_owned),
        |p| p["functionResponse"]["name"].as_str().map(str::to_owned),
    );
    // Calls and results of the model's opening turns are in the system instruction's
    // transcript, one line each.
    let system = body["systemInstruction"].to_string();
    let in_transcript = (
        system.matches("calls ").count(),
        system.matches("[tool result ").count() + system.matches("[tool error ").count(),
    );
    assert_eq!(
        (seen.0 + in_transcript.0, seen.1 + in_transcript.1),
        counts(ctx),
        "calls or results lost"
    );
    assert!(!body.to_string().contains("cache_control"));
}

fn check_openai(ctx: &MemoryContext, body: &Value) {
    let messages = arr(&body["messages"]);
    let has_system = ctx.system.iter().any(|p| !p.text.is_empty());
    if has_system {
        assert_eq!(messages[0]["role"], "system");
    }
    let (mut calls_seen, mut results_seen) = (0, 0);
    let mut due: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = s(&m["role"]);
        if role == "system" {
            assert_eq!(i, 0, "system message in the history");
            continue;
        }
        if role == "tool" {
            assert!(!due.is_empty(), "tool message {i} answers nothing: {m}");
            assert_eq!(
                s(&m["tool_call_id"]),
                due.remove(0),
                "results out of call order"
            );
            results_seen += 1;
            continue;
        }
        assert!(
            due.is_empty(),
            "message {i} comes before the results of {due:?}"
        );
        if role == "assistant" {
            let content = &m["content"];
            assert!(content.is_null() || content.is_string(), "{m}");
            if let Some(calls) = m.get("tool_calls") {
                for call in arr(calls) {
                    assert_eq!(call["type"], "function");
                    let args: Value = serde_json::from_str(s(&call["function"]["arguments"]))
                        .unwrap_or_else(|e| panic!("arguments are not JSON: {e}"));
                    assert!(args.is_object());
                    due.push(s(&call["id"]).to_owned());
                    calls_seen += 1;
                }
                assert!(!due.is_empty(), "empty tool_calls: {m}");
            } else {
                assert!(content.is_string(), "assistant message with nothing: {m}");
            }
        } else {
            assert_eq!(role, "user", "{m}");
        }
    }
    assert!(due.is_empty(), "calls {due:?} never answered");
    assert_eq!(
        (calls_seen, results_seen),
        counts(ctx),
        "calls or results lost"
    );
}

/// Formats `ctx` for `provider` and runs that provider's structural checks.
fn checked(provider: Provider, ctx: &MemoryContext, opts: &RequestOptions) -> Value {
    let body = format::request(ctx, &model(provider), opts)
        .unwrap_or_else(|e| panic!("{provider:?}: {e}"));
    assert!(
        !body.to_string().contains("conversation continues"),
        "{provider:?} invented a turn: {body}"
    );
    match provider {
        Provider::Anthropic => check_anthropic(ctx, &body),
        Provider::OpenAi => check_openai(ctx, &body),
        Provider::Gemini => check_gemini(ctx, &body),
    }
    body
}

// -- snapshots -------------------------------------------------------------------------------

fn snapshot(name: &str) {
    let (_, ctx, opts) = fixtures()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"));
    validate(&ctx.messages).unwrap();
    for provider in PROVIDERS {
        let body = checked(provider, &ctx, &opts);
        insta::with_settings!({ sort_maps => true, omit_expression => true }, {
            insta::assert_json_snapshot!(format!("{name}__{}", slug(provider)), body);
        });
    }
}

#[test]
fn snapshot_plain_chat() {
    snapshot("plain_chat");
}

#[test]
fn snapshot_parallel_calls() {
    snapshot("parallel_calls");
}

#[test]
fn snapshot_heartbeat_continuation() {
    snapshot("heartbeat_continuation");
}

#[test]
fn snapshot_assistant_first() {
    snapshot("assistant_first");
}

#[test]
fn snapshot_opens_with_a_call() {
    snapshot("opens_with_a_call");
}

#[test]
fn snapshot_signed_calls() {
    snapshot("signed_calls");
}

#[test]
fn gemini_sends_each_call_signature_beside_its_call_and_no_one_else_does() {
    let ctx = signed_calls();
    let g = checked(Provider::Gemini, &ctx, &RequestOptions::default());
    let calls: Vec<(String, Option<String>)> = arr(&g["contents"])
        .iter()
        .flat_map(|t| arr(&t["parts"]).clone())
        .filter(|p| p.get("functionCall").is_some())
        .map(|p| {
            (
                s(&p["functionCall"]["args"]["city"]).to_owned(),
                p["thoughtSignature"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("Paris".to_owned(), Some("CiQBjz1rX2sigParis".to_owned())),
            ("Rome".to_owned(), None),
            ("Paris".to_owned(), Some("CiQBjz1rX2sigAgain".to_owned())),
        ]
    );
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let body = checked(provider, &ctx, &RequestOptions::default()).to_string();
        assert!(!body.contains("CiQBjz1rX2sig"), "{provider:?}: {body}");
    }
}

#[test]
fn snapshot_images() {
    snapshot("images");
}

#[test]
fn snapshot_forced_call() {
    snapshot("forced_call");
}

#[test]
fn snapshot_forced_call_schema() {
    snapshot("forced_call_schema");
}

#[test]
fn a_forced_call_by_schema_admits_only_the_allowed_tools() {
    let ctx = plain_chat();
    let one = RequestOptions {
        tool_choice: ToolChoice::Tool("set_timer".into()),
        forced_call: ForcedCall::ResponseSchema,
        ..RequestOptions::default()
    };
    let body = checked(Provider::OpenAi, &ctx, &one);
    assert!(body.get("tool_choice").is_none(), "{body}");
    let schema = &body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["properties"]["name"]["enum"], json!(["set_timer"]));
    assert_eq!(schema["properties"]["arguments"], ctx.tools[2].input_schema);
    // Not forced: no schema, whatever the mode.
    let auto = RequestOptions {
        forced_call: ForcedCall::ResponseSchema,
        ..RequestOptions::default()
    };
    let body = checked(Provider::OpenAi, &ctx, &auto);
    assert!(body.get("response_format").is_none(), "{body}");
    // Other formats ignore the mode and force natively.
    let body = checked(Provider::Anthropic, &ctx, &one);
    assert_eq!(body["tool_choice"]["name"], "set_timer");
}

#[test]
fn a_text_only_answer_is_asked_for_in_each_format() {
    let ctx = plain_chat();
    let none = RequestOptions {
        tool_choice: ToolChoice::None,
        ..RequestOptions::default()
    };
    let a = checked(Provider::Anthropic, &ctx, &none);
    assert_eq!(a["tool_choice"], json!({"type": "none"}));
    assert!(a["tools"].is_array());
    let o = checked(Provider::OpenAi, &ctx, &none);
    assert_eq!(o["tool_choice"], "none");
    assert!(o["tools"].is_array());
    let g = checked(Provider::Gemini, &ctx, &none);
    assert_eq!(g["toolConfig"]["functionCallingConfig"]["mode"], "NONE");
    // A server that ignores `tool_choice` is offered no tool at all.
    let withheld = RequestOptions {
        tool_choice: ToolChoice::None,
        forced_call: ForcedCall::ResponseSchema,
        ..RequestOptions::default()
    };
    let body = openai::request(&ctx, &model(Provider::OpenAi), &withheld).unwrap();
    assert!(
        body.get("tools").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );
    assert!(body.get("response_format").is_none(), "{body}");
}

#[test]
fn snapshot_forced_tool() {
    snapshot("forced_tool");
}

#[test]
fn a_forced_call_needs_an_offered_tool() {
    let no_tools = context(
        vec![instructions()],
        Vec::new(),
        vec![say(10, 10, Role::User, "hi")],
        Vec::new(),
    );
    for provider in PROVIDERS {
        let required = RequestOptions {
            tool_choice: ToolChoice::Required,
            ..RequestOptions::default()
        };
        let err = format::request(&no_tools, &model(provider), &required).unwrap_err();
        assert!(
            matches!(err, context_v2::Error::UnknownToolChoice { ref tool } if tool == "*"),
            "{provider:?}: {err}"
        );
        let unknown = RequestOptions {
            tool_choice: ToolChoice::Tool("launch_rockets".into()),
            ..RequestOptions::default()
        };
        let err = format::request(&plain_chat(), &model(provider), &unknown).unwrap_err();
        assert!(
            matches!(err, context_v2::Error::UnknownToolChoice { ref tool } if tool == "launch_rockets"),
            "{provider:?}: {err}"
        );
        // Auto is written nowhere: the provider's default applies.
        let body = checked(provider, &plain_chat(), &RequestOptions::default());
        assert!(body.get("tool_choice").is_none() && body.get("toolConfig").is_none());
    }
}

// -- targeted assertions ---------------------------------------------------------------------

#[test]
fn request_dispatches_on_the_provider() {
    for (_, ctx, opts) in fixtures() {
        let m = |p| model(p);
        assert_eq!(
            format::request(&ctx, &m(Provider::Anthropic), &opts).unwrap(),
            anthropic::request(&ctx, &m(Provider::Anthropic), &opts).unwrap()
        );
        assert_eq!(
            format::request(&ctx, &m(Provider::OpenAi), &opts).unwrap(),
            openai::request(&ctx, &m(Provider::OpenAi), &opts).unwrap()
        );
        assert_eq!(
            format::request(&ctx, &m(Provider::Gemini), &opts).unwrap(),
            gemini::request(&ctx, &m(Provider::Gemini), &opts).unwrap()
        );
    }
}

#[test]
fn heartbeat_assistant_messages_merge_for_anthropic_and_gemini_only() {
    let ctx = heartbeat_continuation();
    let opts = RequestOptions::default();
    let a = checked(Provider::Anthropic, &ctx, &opts);
    let merged = &arr(&a["messages"])[3];
    assert_eq!(merged["role"], "assistant");
    let kinds: Vec<&str> = arr(&merged["content"])
        .iter()
        .map(|b| s(&b["type"]))
        .collect();
    assert_eq!(kinds, ["text", "text", "tool_use"]);
    let g = checked(Provider::Gemini, &ctx, &opts);
    assert_eq!(arr(&arr(&g["contents"])[3]["parts"]).len(), 3);
    // OpenAI keeps the three assistant messages apart.
    let o = checked(Provider::OpenAi, &ctx, &opts);
    let roles: Vec<&str> = arr(&o["messages"]).iter().map(|m| s(&m["role"])).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "assistant",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
}

#[test]
fn parallel_results_in_one_message_become_several_tool_messages() {
    let o = checked(
        Provider::OpenAi,
        &parallel_calls(),
        &RequestOptions::default(),
    );
    let tools: Vec<(&str, &str)> = arr(&o["messages"])
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (s(&m["tool_call_id"]), s(&m["content"])))
        .collect();
    assert_eq!(
        tools,
        [
            ("call_a", "18°C, cloudy"),
            ("call_b", "24°C, sunny"),
            ("call_c", "Error: search timed out"),
            ("call_d", "Opera tonight"),
        ]
    );
}

#[test]
fn a_history_opening_with_the_assistant_gets_no_invented_user_turn() {
    let ctx = assistant_first();
    let opts = RequestOptions::default();
    // Anthropic accepts an assistant message first: sent as stored.
    let a = checked(Provider::Anthropic, &ctx, &opts);
    assert_eq!(arr(&a["messages"])[0]["role"], "assistant");
    assert_eq!(
        arr(&a["messages"])[0]["content"][0]["text"],
        "Good morning, Sam. You have a meeting at ten."
    );
    // Gemini needs the user first: the opening goes into the system instruction, labelled with
    // its stored role, and the contents start with the user's real turn.
    let g = checked(Provider::Gemini, &ctx, &opts);
    assert_eq!(
        arr(&g["contents"])[0],
        json!({ "role": "user", "parts": [{ "text": "Thanks. Anything else?" }] })
    );
    let system = arr(&g["systemInstruction"]["parts"]);
    assert_eq!(
        system.last(),
        Some(&json!({ "text": "[assistant] Good morning, Sam. You have a meeting at ten." }))
    );
    let o = checked(Provider::OpenAi, &ctx, &opts);
    assert_eq!(arr(&o["messages"])[1]["role"], "assistant");
    // Only signed thinking survives, and only for Anthropic.
    for (provider, body) in [
        (Provider::Anthropic, &a),
        (Provider::OpenAi, &o),
        (Provider::Gemini, &g),
    ] {
        let text = body.to_string();
        assert!(!text.contains("Time is short."), "{provider:?}");
        assert!(!text.contains("Nothing to add."), "{provider:?}");
        assert_eq!(
            text.contains("EqQBCkYIARgCIkA"),
            provider == Provider::Anthropic,
            "{provider:?}"
        );
        assert!(text.contains("[system] Timer fired: 09:30"), "{provider:?}");
    }
}

#[test]
fn gemini_gets_an_opening_call_and_its_result_as_a_transcript() {
    let g = checked(
        Provider::Gemini,
        &opens_with_a_call(),
        &RequestOptions::default(),
    );
    let system = arr(&g["systemInstruction"]["parts"]);
    assert_eq!(
        system.last(),
        Some(
            &json!({ "text": "[assistant calls weather] {\"city\":\"Oslo\"}\n[tool result weather] -3°C, snow\n[assistant] It is snowing in Oslo." })
        )
    );
    assert_eq!(
        arr(&g["contents"]),
        &vec![json!({ "role": "user", "parts": [{ "text": "Should I take the train?" }] })]
    );
}

fn cache_marks(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (section, key) in [("tools", "name"), ("system", "text")] {
        if let Some(items) = body.get(section) {
            for item in arr(items) {
                if item.get("cache_control").is_some() {
                    assert_eq!(item["cache_control"], json!({ "type": "ephemeral" }));
                    out.push(format!("{section}:{}", s(&item[key])));
                }
            }
        }
    }
    assert!(!body["messages"].to_string().contains("cache_control"));
    out
}

#[test]
fn anthropic_cache_breakpoints_follow_the_cache_points() {
    let opts = RequestOptions::default();
    let m = model(Provider::Anthropic);
    let with = |system: Vec<SystemPart>, points: &[CachePoint]| {
        let ctx = context(system, tools(), plain_chat().messages, points.to_vec());
        cache_marks(&anthropic::request(&ctx, &m, &opts).unwrap())
    };
    let memory_end = "system:Search before answering questions about current events.";
    let summary_end =
        "system:Earlier: Sam asked about trains to Paris; we compared two timetables.";
    assert_eq!(
        with(full_system(), &ALL_POINTS),
        ["tools:set_timer", memory_end, summary_end]
    );
    assert!(with(full_system(), &[]).is_empty());
    assert_eq!(
        with(full_system(), &[CachePoint::AfterTools]),
        ["tools:set_timer"]
    );
    assert_eq!(
        with(full_system(), &[CachePoint::AfterSystem]),
        [memory_end]
    );
    assert_eq!(
        with(full_system(), &[CachePoint::AfterSummaries]),
        [summary_end]
    );
    // Without summaries, AfterSystem marks the last block and AfterSummaries nothing.
    let no_summary: Vec<SystemPart> = full_system()
        .into_iter()
        .filter(|p| p.kind != SystemPartKind::Summary)
        .collect();
    assert_eq!(
        with(no_summary.clone(), &ALL_POINTS),
        ["tools:set_timer", memory_end]
    );
    // Only summaries: AfterSystem marks nothing.
    assert_eq!(
        with(vec![summary()], &[CachePoint::AfterSystem]),
        Vec::<String>::new()
    );
    // No tools: AfterTools marks nothing; a repeated point marks once.
    let ctx = context(
        no_summary,
        Vec::new(),
        plain_chat().messages,
        vec![
            CachePoint::AfterTools,
            CachePoint::AfterSystem,
            CachePoint::AfterSystem,
        ],
    );
    let body = anthropic::request(&ctx, &m, &opts).unwrap();
    assert!(body.get("tools").is_none());
    assert_eq!(cache_marks(&body), [memory_end]);
}

#[test]
fn cache_points_never_reach_openai_or_gemini() {
    for provider in [Provider::OpenAi, Provider::Gemini] {
        let body = checked(provider, &plain_chat(), &RequestOptions::default());
        assert!(!body.to_string().contains("cache_control"), "{provider:?}");
    }
}

#[test]
fn options_and_model_facts_land_where_each_api_wants_them() {
    let ctx = plain_chat();
    let none = RequestOptions::default();
    let set = RequestOptions {
        stream: true,
        temperature: Some(0.2),
        ..RequestOptions::default()
    };
    let a = |o| anthropic::request(&ctx, &model(Provider::Anthropic), o).unwrap();
    assert_eq!(a(&none)["model"], "claude-sonnet-4-5");
    assert_eq!(a(&none)["max_tokens"], 4096);
    assert!(a(&none).get("stream").is_none() && a(&none).get("temperature").is_none());
    assert_eq!(
        (&a(&set)["stream"], &a(&set)["temperature"]),
        (&json!(true), &json!(0.2))
    );

    let o = |o| openai::request(&ctx, &model(Provider::OpenAi), o).unwrap();
    assert_eq!(o(&none)["model"], "gpt-4.1");
    assert_eq!(o(&none)["max_tokens"], 4096);
    for key in ["stream", "stream_options", "temperature"] {
        assert!(o(&none).get(key).is_none(), "{key}");
    }
    assert_eq!(o(&set)["stream_options"], json!({ "include_usage": true }));
    assert_eq!(o(&set)["temperature"], json!(0.2));

    let g = |o| gemini::request(&ctx, &model(Provider::Gemini), o).unwrap();
    assert_eq!(
        g(&none)["generationConfig"],
        json!({ "maxOutputTokens": 4096 })
    );
    assert_eq!(
        g(&set)["generationConfig"],
        json!({ "maxOutputTokens": 4096, "temperature": 0.2 })
    );
    assert!(g(&set).get("stream").is_none() && g(&set).get("model").is_none());
    assert_eq!(
        gemini::method(&model(Provider::Gemini), &set),
        "models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );

    // A temperature that is not a number is left out, everywhere.
    let nan = RequestOptions {
        stream: false,
        temperature: Some(f32::NAN),
        ..RequestOptions::default()
    };
    assert!(a(&nan).get("temperature").is_none());
    assert!(o(&nan).get("temperature").is_none());
    assert!(g(&nan)["generationConfig"].get("temperature").is_none());
}

#[test]
fn empty_sections_are_left_out() {
    let ctx = context(
        vec![part(SystemPartKind::Instructions, "")],
        Vec::new(),
        vec![say(10, 10, Role::User, "hi")],
        ALL_POINTS.to_vec(),
    );
    let opts = RequestOptions::default();
    let a = checked(Provider::Anthropic, &ctx, &opts);
    assert!(a.get("system").is_none() && a.get("tools").is_none());
    let o = checked(Provider::OpenAi, &ctx, &opts);
    assert!(o.get("tools").is_none());
    assert_eq!(o["messages"], json!([{ "role": "user", "content": "hi" }]));
    let g = checked(Provider::Gemini, &ctx, &opts);
    assert!(g.get("systemInstruction").is_none() && g.get("tools").is_none());
    // An empty history stays empty: nothing to continue, nothing added.
    let empty = context(vec![instructions()], Vec::new(), Vec::new(), Vec::new());
    assert_eq!(
        checked(Provider::Anthropic, &empty, &opts)["messages"],
        json!([])
    );
    assert_eq!(
        checked(Provider::Gemini, &empty, &opts)["contents"],
        json!([])
    );
}

#[test]
fn contexts_that_fail_validation_are_refused_with_the_validate_error() {
    let unanswered = vec![
        say(10, 10, Role::User, "go"),
        msg(
            10,
            11,
            Role::Assistant,
            vec![ContentBlock::tool_use("x", "weather", json!({}))],
        ),
    ];
    let orphan = vec![
        say(10, 10, Role::User, "go"),
        msg(
            10,
            11,
            Role::Tool,
            vec![ContentBlock::tool_result("y", "?", false)],
        ),
    ];
    let reversed = vec![
        msg(
            10,
            11,
            Role::Assistant,
            vec![
                ContentBlock::tool_use("a", "weather", json!({})),
                ContentBlock::tool_use("b", "weather", json!({})),
            ],
        ),
        msg(
            10,
            12,
            Role::Tool,
            vec![
                ContentBlock::tool_result("b", "", false),
                ContentBlock::tool_result("a", "", false),
            ],
        ),
    ];
    for messages in [unanswered, orphan, reversed] {
        let expected = validate(&messages).unwrap_err();
        let ctx = context(full_system(), tools(), messages, ALL_POINTS.to_vec());
        for provider in PROVIDERS {
            let err =
                format::request(&ctx, &model(provider), &RequestOptions::default()).unwrap_err();
            assert_eq!(err.to_string(), expected.to_string(), "{provider:?}");
            assert_eq!(
                std::mem::discriminant(&err),
                std::mem::discriminant(&expected)
            );
        }
    }
}

#[test]
fn a_call_outside_an_assistant_message_is_refused() {
    // `validate` accepts this pairing; no provider can carry a call in a user turn.
    let messages = vec![
        msg(
            7,
            10,
            Role::User,
            vec![ContentBlock::tool_use("u", "weather", json!({}))],
        ),
        msg(
            7,
            11,
            Role::Tool,
            vec![ContentBlock::tool_result("u", "", false)],
        ),
    ];
    validate(&messages).unwrap();
    let ctx = context(Vec::new(), Vec::new(), messages, Vec::new());
    for provider in PROVIDERS {
        let err = format::request(&ctx, &model(provider), &RequestOptions::default()).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::DamagedBatch { batch, tool_use_id, damage: Damage::CallInWrongRole(Role::User) }
                    if *batch == SnowflakeId(7) && tool_use_id == "u"
            ),
            "{provider:?}: {err}"
        );
    }
}

// -- generated histories ---------------------------------------------------------------------

/// One step of a generated conversation.
#[derive(Debug, Clone)]
enum Step {
    /// User text, or a system-role message.
    Said { system: bool },
    /// An image, fetchable or not.
    Image { url: bool },
    /// Assistant text; thinking 0: none, 1: signed, 2: unsigned; with or without text.
    Reply { thinking: u8, text: bool },
    /// Parallel calls; `layout` spreads the results: 0 one tool message, 1 one each, 2 one user
    /// message with trailing text, 3 first result alone then the rest with trailing text.
    Calls {
        n: usize,
        layout: u8,
        remark: bool,
        failed: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        any::<bool>().prop_map(|system| Step::Said { system }),
        any::<bool>().prop_map(|url| Step::Image { url }),
        (0u8..3, any::<bool>()).prop_map(|(thinking, text)| Step::Reply { thinking, text }),
        (1usize..=3, 0u8..4, any::<bool>(), any::<bool>()).prop_map(
            |(n, layout, remark, failed)| Step::Calls {
                n,
                layout,
                remark,
                failed
            }
        ),
    ]
}

fn build(steps: &[Step]) -> Vec<ContextMessage> {
    let mut out = Vec::new();
    let mut next_call = 0;
    let mut said = 0;
    let mut pos = 0;
    let mut push = |role, content| {
        pos += 1;
        out.push(msg(1, pos, role, content));
    };
    for st in steps {
        said += 1;
        match *st {
            Step::Said { system } => {
                let role = if system { Role::System } else { Role::User };
                push(role, vec![ContentBlock::text(format!("note {said}"))]);
            }
            Step::Image { url } => {
                let reference = if url {
                    "https://example.com/x.png"
                } else {
                    "sha256:00"
                };
                push(
                    Role::User,
                    vec![ContentBlock::Image {
                        media_type: "image/png".into(),
                        reference: reference.into(),
                    }],
                );
            }
            Step::Reply { thinking, text } => {
                let mut content = Vec::new();
                if thinking > 0 {
                    content.push(ContentBlock::Thinking {
                        text: "hmm".into(),
                        signature: (thinking == 1).then(|| "sig".to_owned()),
                    });
                }
                if text || thinking == 0 {
                    content.push(ContentBlock::text(format!("reply {said}")));
                }
                push(Role::Assistant, content);
            }
            Step::Calls {
                n,
                layout,
                remark,
                failed,
            } => {
                let ids: Vec<String> = (0..n).map(|k| format!("call_{}", next_call + k)).collect();
                next_call += n;
                let mut calls = Vec::new();
                if remark {
                    calls.push(ContentBlock::text("let me check"));
                }
                for (k, id) in ids.iter().enumerate() {
                    calls.push(ContentBlock::tool_use(
                        id,
                        format!("tool_{k}"),
                        json!({ "k": k }),
                    ));
                }
                push(Role::Assistant, calls);
                let results: Vec<ContentBlock> = ids
                    .iter()
                    .enumerate()
                    .map(|(k, id)| {
                        ContentBlock::tool_result(id, format!("out {k}"), failed && k == 0)
                    })
                    .collect();
                match layout {
                    0 => push(Role::Tool, results),
                    1 => {
                        for r in results {
                            push(Role::Tool, vec![r]);
                        }
                    }
                    2 => {
                        let mut content = results;
                        content.push(ContentBlock::text("and also"));
                        push(Role::User, content);
                    }
                    _ => {
                        let mut rest = results;
                        let first = rest.remove(0);
                        push(Role::Tool, vec![first]);
                        if !rest.is_empty() {
                            rest.push(ContentBlock::text("and also"));
                            push(Role::User, rest);
                        }
                    }
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_histories_format_into_valid_turns(
        steps in prop::collection::vec(step(), 0..12),
        with_tools in any::<bool>(),
    ) {
        let messages = build(&steps);
        prop_assert!(validate(&messages).is_ok());
        let ctx = context(
            full_system(),
            if with_tools { tools() } else { Vec::new() },
            messages,
            ALL_POINTS.to_vec(),
        );
        for provider in PROVIDERS {
            checked(provider, &ctx, &RequestOptions::default());
        }
    }
}
