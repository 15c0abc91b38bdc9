//! A real server on a loopback port over a fresh database, two organizations with one API key
//! each, a scripted model, and small HTTP helpers.

use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::StreamExt;
use pattern::core::provider::ModelProvider;
use pattern::core::testkit::{ScriptedProvider, Turn};
use pattern::search::{ConstellationDb, EmbedConfig, FastEmbedder, ModelPaths};
use pattern::{Database, DbConfig, Pattern};
use pattern_db::Backend;
use pattern_db::testkit::TestDb;
use pattern_server::{AppState, ServerConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct Server {
    pub base: String,
    pub http: reqwest::Client,
    pub db: Database,
    pub provider: Arc<ScriptedProvider>,
    /// Organization A's key and B's.
    pub key_a: String,
    pub key_b: String,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    test_db: Option<TestDb>,
}

pub fn config_for(test_db: &TestDb) -> DbConfig {
    let mut config = DbConfig::new(test_db.url.clone());
    config.batch_lease = Duration::from_secs(2);
    config
}

impl Server {
    pub async fn start(backend: Backend, turns: Vec<Turn>) -> Self {
        Self::start_with(backend, turns, ServerConfig::default()).await
    }

    pub async fn start_with(backend: Backend, turns: Vec<Turn>, config: ServerConfig) -> Self {
        let test_db = TestDb::fresh(backend).await.unwrap();
        let db = Database::open(config_for(&test_db)).await.unwrap();
        let mut server = Self::over(db, turns, config).await;
        server.test_db = Some(test_db);
        server
    }

    /// A server whose search has the real offline embedding model (vector and hybrid modes),
    /// with a background embedding worker that polls often.
    pub async fn start_embedded(backend: Backend, turns: Vec<Turn>) -> Self {
        let test_db = TestDb::fresh(backend).await.unwrap();
        let paths = ModelPaths::in_cache(
            &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache"),
        );
        let model = FastEmbedder::load(&paths, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("the embedding model is required (cargo xtask setup): {e}"));
        let embed = EmbedConfig {
            poll_interval: Duration::from_millis(50),
            ..EmbedConfig::default()
        };
        let search = ConstellationDb::connect(config_for(&test_db), Some(Arc::new(model)), embed)
            .await
            .unwrap();
        let mut server = Self::over_search(search, turns, ServerConfig::default()).await;
        server.test_db = Some(test_db);
        server
    }

    /// A server over an open database (keys for organizations `a` and `b`, created if missing).
    pub async fn over(db: Database, turns: Vec<Turn>, config: ServerConfig) -> Self {
        Self::over_search(ConstellationDb::fts_only(db), turns, config).await
    }

    /// A server over an open search layer (full text only, or with an embedder).
    pub async fn over_search(
        search: ConstellationDb,
        turns: Vec<Turn>,
        config: ServerConfig,
    ) -> Self {
        let db = search.db().clone();
        let pattern = Pattern::wire(search).await.unwrap();
        let key_a = key_for(&pattern, "org-a").await;
        let key_b = key_for(&pattern, "org-b").await;
        let provider = Arc::new(ScriptedProvider::new(turns));
        let model: Arc<dyn ModelProvider> = provider.clone();
        let state = AppState::new(pattern, model, config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                pattern_server::serve(listener, state, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            }
        });
        Self {
            base,
            http: reqwest::Client::new(),
            db,
            provider,
            key_a,
            key_b,
            state,
            stop: Some(stop),
            task: Some(task),
            test_db: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        key: Option<&str>,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, self.url(path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
        };
        (status, value)
    }

    pub async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::GET, Some(key), path, None).await
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, Some(key), path, Some(body))
            .await
    }

    pub async fn delete(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::DELETE, Some(key), path, None)
            .await
    }

    /// Creates an agent; returns its id.
    pub async fn agent(&self, key: &str, name: &str) -> String {
        let (status, body) = self
            .post(
                key,
                "/v1/agents",
                json!({"name": name, "instructions": "Be brief."}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// Opens an SSE stream with a POST (a new turn) or a GET (resume).
    pub async fn stream(
        &self,
        request: reqwest::RequestBuilder,
    ) -> (
        reqwest::header::HeaderMap,
        impl futures::Stream<Item = Event> + Unpin + use<>,
    ) {
        let response = request
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        let events = response
            .bytes_stream()
            .eventsource()
            .map(|e| e.unwrap())
            // Keep-alive comments carry no event.
            .filter(|e| futures::future::ready(!e.event.is_empty() || !e.data.is_empty()));
        (headers, Box::pin(events))
    }

    /// Sends `content` to `agent` as organization A, streaming; returns the turn id and events.
    pub async fn stream_message(
        &self,
        agent: &str,
        content: &str,
    ) -> (String, impl futures::Stream<Item = Event> + Unpin + use<>) {
        let post = self
            .http
            .post(self.url(&format!("/v1/agents/{agent}/messages")))
            .bearer_auth(&self.key_a)
            .json(&json!({"content": content, "stream": true}));
        let (headers, events) = self.stream(post).await;
        let turn = headers[pattern_server::TURN_ID_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        (turn, events)
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("the server stops")
                .unwrap();
        }
        self.state.pattern().clone().close().await;
        if let Some(test_db) = self.test_db.take() {
            test_db.cleanup().await.unwrap();
        }
    }
}

/// An API key of the organization `external_id` (created if missing).
pub async fn key_for(pattern: &Pattern, external_id: &str) -> String {
    let org = match pattern.protocol().organization(external_id).await {
        Ok(org) => org,
        Err(_) => pattern
            .protocol()
            .create_organization(external_id, external_id)
            .await
            .unwrap(),
    };
    pattern
        .db()
        .create_api_key(org.id, "tests")
        .await
        .unwrap()
        .secret
}

/// Reads events until `done` or `error`.
pub async fn until_end(events: &mut (impl futures::Stream<Item = Event> + Unpin)) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("an event within 30 s")
    {
        let end = event.event == "done" || event.event == "error";
        out.push(event);
        if end {
            break;
        }
    }
    out
}

/// The body of a doomed child server (this test binary re-run as `test`, with the database URL
/// in `var`): it serves one agent whose turns never answer, prints
/// `@@SERVER <base> <key> <agent>` and waits to be killed. A no-op when `var` is unset (the
/// normal run of the test).
pub fn doomed_child_main(var: &str) {
    let Ok(url) = std::env::var(var) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut config = DbConfig::new(url);
        config.batch_lease = Duration::from_secs(1);
        let db = Database::open(config).await.unwrap();
        let s = Server::over(
            db,
            vec![Turn::Slow(
                Duration::from_secs(120),
                vec![pattern::ContentBlock::text("never")],
            )],
            ServerConfig::default(),
        )
        .await;
        let agent = s.agent(&s.key_a, "doomed").await;
        let mut out = std::io::stdout().lock();
        std::io::Write::write_all(
            &mut out,
            format!("@@SERVER {} {} {agent}\n", s.base, s.key_a).as_bytes(),
        )
        .unwrap();
        std::io::Write::flush(&mut out).unwrap();
        drop(out);
        // Serve until killed.
        tokio::time::sleep(Duration::from_secs(300)).await;
    });
}

/// A doomed child server (see [`doomed_child_main`]) started from test `test` over `url`:
/// the process, and its base URL, API key and agent id once it serves.
pub fn spawn_doomed_child(
    test: &str,
    var: &str,
    url: &str,
) -> (std::process::Child, String, String, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(var, url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("@@SERVER ") {
            let parts: Vec<String> = rest.split_whitespace().map(str::to_owned).collect();
            let [base, key, agent] = <[String; 3]>::try_from(parts).unwrap();
            return (child, base, key, agent);
        }
    }
    // It ended (or closed its output) without serving: reap it before failing.
    let _ = child.kill();
    let _ = child.wait();
    panic!("the child server never started")
}
