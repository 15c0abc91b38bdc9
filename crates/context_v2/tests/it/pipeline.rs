//! Stored batches to request bodies in one go, pinned by snapshots: a history with an abandoned
//! batch (a crash), an orphaned open batch, parallel calls answered out of order, a heartbeat
//! continuation, a reused call id, and a summary, assembled and formatted for every provider.
//! Ids are fixed so the snapshots are stable.

use chrono::{TimeZone, Utc};
use context_v2::format::{RequestOptions, request};
use context_v2::{
    AssemblySummary, CachePoint, MemoryContext, ModelInfo, Provider, SectionTokens, SystemPart,
    SystemPartKind, assemble,
};
use pattern_db::{
    AgentId, BatchInfo, BatchState, BatchType, ContentBlock, Message, MessageId, Role, SnowflakeId,
    StoredBatch,
};
use serde_json::json;

fn message(
    batch: i64,
    seq: i64,
    position: i64,
    batch_type: BatchType,
    role: Role,
    content: Vec<ContentBlock>,
) -> Message {
    Message {
        id: MessageId(uuid::Uuid::from_u128(position as u128)),
        agent_id: AgentId(uuid::Uuid::from_u128(1)),
        position: SnowflakeId(position),
        batch_id: SnowflakeId(batch),
        sequence_num: seq,
        batch_type,
        role,
        content,
        token_estimate: 10,
        archived: false,
        deleted: false,
        created_at: Utc
            .timestamp_millis_opt(1_767_225_600_000 + position)
            .unwrap(),
    }
}

fn batch(id: i64, state: BatchState, batch_type: BatchType, messages: Vec<Message>) -> StoredBatch {
    StoredBatch {
        info: BatchInfo {
            id: SnowflakeId(id),
            agent_id: AgentId(uuid::Uuid::from_u128(1)),
            batch_type,
            state,
            parent_batch: None,
            run_owner: None,
            lease_expires_at: None,
            message_count: messages.len() as i64,
            archived: false,
            started_at: Utc.timestamp_millis_opt(1_767_225_600_000 + id).unwrap(),
            completed_at: None,
            continuations: 0,
            retried_at: None,
            claim_token: None,
        },
        messages,
    }
}

fn history() -> Vec<StoredBatch> {
    use BatchType::*;
    use Role::*;
    let text = ContentBlock::text;
    let call = |id: &str, q: &str| ContentBlock::tool_use(id, "search", json!({ "query": q }));
    let result = |id: &str, r: &str| ContentBlock::tool_result(id, r, false);
    vec![
        // A finished request with two parallel calls whose results were stored in reverse order.
        batch(
            100,
            BatchState::Complete,
            UserRequest,
            vec![
                message(
                    100,
                    0,
                    100,
                    UserRequest,
                    User,
                    vec![text("Trains to Paris and Lyon tomorrow?")],
                ),
                message(
                    100,
                    1,
                    101,
                    UserRequest,
                    Assistant,
                    vec![call("call_0", "Paris"), call("call_1", "Lyon")],
                ),
                message(
                    100,
                    2,
                    102,
                    UserRequest,
                    Tool,
                    vec![result("call_1", "Lyon: 08:04, 10:04")],
                ),
                message(
                    100,
                    3,
                    103,
                    UserRequest,
                    Tool,
                    vec![result("call_0", "Paris: 07:31, 09:31")],
                ),
                message(
                    100,
                    4,
                    104,
                    UserRequest,
                    Assistant,
                    vec![text("Paris at 07:31 or 09:31; Lyon at 08:04 or 10:04.")],
                ),
            ],
        ),
        // A run that crashed mid-call and was recovered: never sent.
        batch(
            200,
            BatchState::Abandoned,
            UserRequest,
            vec![
                message(
                    200,
                    0,
                    200,
                    UserRequest,
                    User,
                    vec![text("Book the 07:31.")],
                ),
                message(
                    200,
                    1,
                    201,
                    UserRequest,
                    Assistant,
                    vec![call("call_0", "book 07:31")],
                ),
            ],
        ),
        // A heartbeat batch that was continued later; its server reuses `call_0`.
        batch(
            300,
            BatchState::Complete,
            SystemTrigger,
            vec![
                message(
                    300,
                    0,
                    300,
                    SystemTrigger,
                    System,
                    vec![text("Morning check-in.")],
                ),
                message(
                    300,
                    1,
                    301,
                    SystemTrigger,
                    Assistant,
                    vec![call("call_0", "calendar today")],
                ),
                message(
                    300,
                    2,
                    302,
                    SystemTrigger,
                    Tool,
                    vec![result("call_0", "Dentist at 14:00")],
                ),
                message(
                    300,
                    3,
                    401,
                    Continuation,
                    Assistant,
                    vec![text("Reminder: dentist at 14:00.")],
                ),
            ],
        ),
        // Open, not the active run: a crash recovery has not seen yet. Never sent.
        batch(
            350,
            BatchState::Open,
            UserRequest,
            vec![
                message(
                    350,
                    0,
                    350,
                    UserRequest,
                    User,
                    vec![text("Cancel the dentist.")],
                ),
                message(
                    350,
                    1,
                    351,
                    UserRequest,
                    Assistant,
                    vec![call("call_9", "cancel")],
                ),
            ],
        ),
        // The active run.
        batch(
            400,
            BatchState::Open,
            UserRequest,
            vec![message(
                400,
                0,
                400,
                UserRequest,
                User,
                vec![text("Thanks! Anything else today?")],
            )],
        ),
    ]
}

fn context() -> MemoryContext {
    let assembled = assemble(&history(), Some(SnowflakeId(400))).unwrap();
    MemoryContext {
        system: vec![
            SystemPart {
                kind: SystemPartKind::Instructions,
                text: "You are Pattern.".into(),
            },
            SystemPart {
                kind: SystemPartKind::MemoryBlock {
                    label: "human".into(),
                },
                text: "<memory_block label=\"human\">Sam, lives in Geneva.</memory_block>".into(),
            },
            SystemPart {
                kind: SystemPartKind::Summary,
                text: "<conversation_summary>Sam travels often.</conversation_summary>".into(),
            },
        ],
        tools: vec![context_v2::ToolDefinition {
            name: "search".into(),
            description: "Search timetables and calendars.".into(),
            input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        }],
        assembly: AssemblySummary::from(&assembled),
        messages: assembled.messages,
        cache_points: vec![
            CachePoint::AfterTools,
            CachePoint::AfterSystem,
            CachePoint::AfterSummaries,
        ],
        tokens: SectionTokens::default(),
        compression: None,
    }
}

#[test]
fn stored_history_to_every_provider() {
    let ctx = context();
    assert_eq!(
        ctx.assembly
            .excluded
            .iter()
            .map(|(b, r)| (b.get(), format!("{r:?}")))
            .collect::<Vec<_>>(),
        [(200, "Abandoned".to_owned()), (350, "Orphaned".to_owned())]
    );
    for (provider, model) in [
        (Provider::Anthropic, "claude-sonnet-4-5"),
        (Provider::OpenAi, "gpt-4.1"),
        (Provider::Gemini, "gemini-2.5-flash"),
    ] {
        let info = ModelInfo {
            provider,
            model: model.into(),
            context_window: 200_000,
            max_output_tokens: 1024,
        };
        let body = request(&ctx, &info, &RequestOptions::default()).unwrap();
        let text = body.to_string();
        assert!(
            !text.contains("Book the 07:31") && !text.contains("Cancel the dentist"),
            "{provider:?}"
        );
        insta::assert_json_snapshot!(format!("pipeline_{provider:?}").to_lowercase(), body);
    }
}
