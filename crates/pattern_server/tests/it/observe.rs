//! What an operator watches: `/metrics` scraped and parsed (turns, tool calls, tokens and
//! latency histograms of a real turn, the database gauges), its optional bearer token, and CORS
//! answered only for the configured origins.

use pattern::core::testkit::Turn;
use pattern_db::Backend;
use pattern_server::{CorsOrigins, MetricsToken, ServerConfig};
use prometheus_parse::{Sample, Scrape, Value as Metric};
use reqwest::StatusCode;
use serde_json::json;

use crate::support::Server;

async fn scrape(s: &Server, token: Option<&str>) -> (StatusCode, String) {
    let mut request = s.http.get(s.url("/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.text().await.unwrap())
}

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The samples of `name` whose `agent` label is `agent`.
fn of<'a>(scrape: &'a Scrape, name: &str, agent: &str) -> Vec<&'a Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && s.labels.get("agent") == Some(agent))
        .collect()
}

fn number(sample: &Sample) -> f64 {
    match &sample.value {
        Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v) => *v,
        other => panic!("not a number: {other:?}"),
    }
}

async fn metrics_count_a_turn_its_tools_and_tokens(backend: Backend) {
    let s = Server::start(
        backend,
        vec![
            Turn::call("c1", "archival_insert", json!({"content": "Ada likes tea"})),
            Turn::text("Noted."),
        ],
    )
    .await;
    let a = s.agent(&s.key_a, "watched").await;
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/messages"),
            json!({"content": "I like tea"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, text) = scrape(&s, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let scrape = parse(&text);
    let turns = of(&scrape, "pattern_turns_total", &a);
    assert_eq!(turns.len(), 1, "{text}");
    assert_eq!(turns[0].labels.get("outcome"), Some("completed"));
    assert_eq!(number(turns[0]), 1.0);
    let tools = of(&scrape, "pattern_tool_calls_total", &a);
    assert_eq!(tools.len(), 1, "{text}");
    assert_eq!(tools[0].labels.get("tool"), Some("archival_insert"));
    assert_eq!(tools[0].labels.get("outcome"), Some("ok"));
    let requests: f64 = of(&scrape, "pattern_model_requests_total", &a)
        .iter()
        .map(|s| number(s))
        .sum();
    assert_eq!(requests, 2.0, "one call, then the answer: {text}");
    let tokens = of(&scrape, "pattern_model_tokens_total", &a);
    assert!(
        tokens.iter().any(|s| s.labels.get("type") == Some("input")),
        "{text}"
    );
    // Latency histograms: one turn observed, two steps.
    let turn_latency = of(&scrape, "pattern_turn_duration_seconds", &a);
    match &turn_latency[0].value {
        Metric::Histogram(buckets) => {
            assert_eq!(buckets.last().unwrap().count, 1.0, "{text}");
        }
        other => panic!("turn latency is not a histogram: {other:?}"),
    }
    let steps = of(&scrape, "pattern_step_duration_seconds", &a);
    match &steps[0].value {
        Metric::Histogram(buckets) => assert_eq!(buckets.last().unwrap().count, 2.0),
        other => panic!("step latency is not a histogram: {other:?}"),
    }
    // Database gauges are there (their values are the whole database's).
    for gauge in [
        "pattern_open_batches",
        "pattern_queue_depth",
        "pattern_runs_active",
        "pattern_embedding_backlog",
        "pattern_agents_loaded",
        "pattern_database_up",
    ] {
        assert!(
            scrape.samples.iter().any(|s| s.metric == gauge),
            "{gauge} missing: {text}"
        );
    }
    // Nothing stored leaks into labels: the message, the agent's name, the passage.
    for secret in ["I like tea", "Ada likes tea", "watched"] {
        assert!(!text.contains(secret), "{secret} in /metrics");
    }
    s.stop().await;
}

async fn metrics_take_their_own_token_when_configured(backend: Backend) {
    let config = ServerConfig {
        metrics_token: MetricsToken::new("scrape-me"),
        ..ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![], config).await;
    let (status, body) = scrape(&s, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("invalid_api_key"), "{body}");
    let (status, _) = scrape(&s, Some("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // An organization's key is not the metrics token.
    let key = s.key_a.clone();
    let (status, _) = scrape(&s, Some(&key)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, text) = scrape(&s, Some("scrape-me")).await;
    assert_eq!(status, StatusCode::OK);
    parse(&text);
    s.stop().await;
}

async fn cors_answers_only_the_configured_origins(backend: Backend) {
    let config = ServerConfig {
        cors: CorsOrigins::parse(&["https://console.example"]).unwrap(),
        ..ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![], config).await;
    let preflight = |origin: &'static str| {
        s.http
            .request(reqwest::Method::OPTIONS, s.url("/v1/agents"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let allowed = preflight("https://console.example").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://console.example"
    );
    let other = preflight("https://evil.example").await.unwrap();
    assert!(
        other.headers().get("access-control-allow-origin").is_none(),
        "{:?}",
        other.headers()
    );
    // A real request from the allowed origin carries the header, errors included (JSON).
    let response = s
        .http
        .get(s.url("/v1/agents"))
        .header("origin", "https://console.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://console.example"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "missing_api_key");
    s.stop().await;
}

conformance!(
    metrics_count_a_turn_its_tools_and_tokens,
    metrics_take_their_own_token_when_configured,
    cors_answers_only_the_configured_origins,
);
