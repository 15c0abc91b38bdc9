//! Shared set-up for runtime tests: a fresh database (either backend), one agent with a memory
//! block, a scripted model, and helpers to run a turn and read what was stored.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use memory_v2::{BlockType, DbMemoryStore, MemoryEditor, NewMemoryBlock};
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::tool::ToolRegistry;
use pattern_core::{
    Agent, AgentRuntime, DatabaseAgent, IncomingMessage, ResponseEvent, RuntimeConfig,
};
use pattern_db::testkit::TestDb;
use pattern_db::{Backend, Database, NewAgent, StoredBatch};

pub struct Harness {
    pub tdb: TestDb,
    pub db: Database,
    pub memory: Arc<DbMemoryStore>,
    pub provider: ScriptedProvider,
    pub agent: Arc<DatabaseAgent>,
}

pub fn config() -> RuntimeConfig {
    let mut c = RuntimeConfig::new("You are a test agent.", 100_000);
    c.tool_timeout = Duration::from_secs(2);
    c.permission_timeout = Duration::from_millis(500);
    c
}

impl Harness {
    pub async fn new(kind: Backend, turns: Vec<Turn>) -> Self {
        Self::with(kind, turns, config(), None).await
    }

    pub async fn with(
        kind: Backend,
        turns: Vec<Turn>,
        config: RuntimeConfig,
        tools: Option<Arc<ToolRegistry>>,
    ) -> Self {
        let tdb = TestDb::fresh(kind).await.unwrap();
        let db = tdb.open().await.unwrap();
        let provider = ScriptedProvider::new(turns);
        let memory = Arc::new(DbMemoryStore::new(db.clone()));
        let agent = Self::agent(&db, &memory, &provider, "ada", config, tools).await;
        Self {
            tdb,
            db,
            memory,
            provider,
            agent,
        }
    }

    /// Another agent on the same database.
    pub async fn agent(
        db: &Database,
        memory: &Arc<DbMemoryStore>,
        provider: &ScriptedProvider,
        name: &str,
        config: RuntimeConfig,
        tools: Option<Arc<ToolRegistry>>,
    ) -> Arc<DatabaseAgent> {
        let row = db.create_agent(NewAgent::named(name)).await.unwrap();
        memory
            .create_block(
                row.id,
                NewMemoryBlock {
                    label: "notes".into(),
                    description: "Things to remember.".into(),
                    value: "likes tea".into(),
                    char_limit: 200,
                    block_type: BlockType::Core,
                },
            )
            .await
            .unwrap();
        let mut builder = AgentRuntime::builder(
            db.clone(),
            row,
            memory.clone(),
            Arc::new(provider.clone()),
            config,
        )
        .archival(memory.clone());
        if let Some(tools) = tools {
            builder = builder.tools(tools);
        }
        DatabaseAgent::new(builder.build().unwrap())
    }

    pub async fn turn(&self, text: &str) -> Vec<ResponseEvent> {
        run(&self.agent, IncomingMessage::user(text)).await
    }

    pub async fn batches(&self) -> Vec<StoredBatch> {
        batches_of(&self.db, self.agent.id()).await
    }

    pub async fn notes(&self) -> String {
        use memory_v2::MemoryStore;
        self.memory
            .block(self.agent.id(), "notes")
            .await
            .unwrap()
            .value
    }

    pub async fn cleanup(self) {
        drop(self.agent);
        self.tdb.cleanup().await.unwrap();
    }
}

pub async fn run(agent: &Arc<DatabaseAgent>, message: IncomingMessage) -> Vec<ResponseEvent> {
    let stream = agent.clone().process(message).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), stream.collect::<Vec<_>>())
        .await
        .expect("turn finished")
}

pub async fn batches_of(db: &Database, agent: pattern_db::AgentId) -> Vec<StoredBatch> {
    let store = db.messages(agent);
    let infos = store.list_batches(None, 1000).await.unwrap();
    let mut out = Vec::new();
    for info in infos {
        out.push(store.get_batch(info.id).await.unwrap());
    }
    out.sort_by_key(|b| b.info.id);
    out
}

/// The last event, which must end the turn.
pub fn last(events: &[ResponseEvent]) -> &ResponseEvent {
    events.last().expect("events")
}

/// The tool results of a turn's events, in order: (content, is_error).
pub fn tool_results(events: &[ResponseEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            ResponseEvent::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// Waits until `check` holds, at most `limit`; panics naming `what` otherwise.
pub async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}
