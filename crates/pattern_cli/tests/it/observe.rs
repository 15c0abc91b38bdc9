//! A real `pattern serve` process watched from outside: its `/metrics` scraped and parsed
//! after a turn, and its traces exported over OTLP to a collector in this test, checked for
//! the GenAI semantic conventions (an agent run holding a model request and a tool call).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pattern_db::Backend;
use prometheus_parse::{Scrape, Value as Metric};
use serde_json::Value;

use crate::block_on;
use crate::deploy::{Plan, deploy, exclusive};
use crate::harness::client::{Api, Final, Message};
use crate::harness::model::ModelOptions;
use crate::harness::servers::Stop;

/// An OTLP/HTTP (JSON) collector on loopback keeping every span it receives.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    async fn start() -> Self {
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
                        panic!("the exporter sent something else than JSON: {e}")
                    });
                    let mut kept = kept.lock().unwrap();
                    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                        let service = attribute(&resource["resource"], "service.name");
                        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                            for span in scope["spans"].as_array().into_iter().flatten() {
                                let mut span = span.clone();
                                span["service"] = service.clone().unwrap_or(Value::Null);
                                kept.push(span);
                            }
                        }
                    }
                    axum::Json(serde_json::json!({}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, spans }
    }

    fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }
}

/// The value of attribute `key` of an OTLP span or resource (any value type).
fn attribute(item: &Value, key: &str) -> Option<Value> {
    item["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| a["value"].as_object())
        .and_then(|v| v.values().next().cloned())
}

fn text(item: &Value, key: &str) -> Option<String> {
    attribute(item, key).and_then(|v| v.as_str().map(str::to_owned))
}

#[test]
fn serve_exports_metrics_and_genai_traces() {
    let _one = exclusive();
    block_on(async {
        let collector = Collector::start().await;
        let d = deploy(Plan {
            backend: Backend::Sqlite,
            slots: 1,
            agents: 1,
            model: ModelOptions::default(),
            serve_flags: Vec::new(),
            serve_env: vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), collector.url.clone()),
                ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
                ("OTEL_SERVICE_NAME".into(), "pattern-under-test".into()),
            ],
        })
        .await;
        let base = d.servers.base(0);
        let agent = d.agents[0].clone();
        let api = Api::new(&d.secret, false);
        let answer = api
            .send(
                &base,
                &Message::new(&agent, "hello there"),
                Duration::from_secs(60),
            )
            .await;
        assert!(
            matches!(answer.outcome, Some(Final::Done { .. })),
            "{answer:?}"
        );

        // Metrics, scraped and parsed: the turn, the tool call, two model requests.
        let text_body = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let scrape = Scrape::parse(text_body.lines().map(|l| Ok(l.to_owned()))).unwrap();
        let value = |name: &str, label: (&str, &str)| -> f64 {
            scrape
                .samples
                .iter()
                .filter(|s| {
                    s.metric == name
                        && s.labels.get("agent") == Some(agent.as_str())
                        && s.labels.get(label.0) == Some(label.1)
                })
                .map(|s| match s.value {
                    Metric::Counter(v) | Metric::Untyped(v) => v,
                    _ => 0.0,
                })
                .sum()
        };
        assert_eq!(
            value("pattern_turns_total", ("outcome", "completed")),
            1.0,
            "{text_body}"
        );
        assert_eq!(
            value("pattern_model_requests_total", ("outcome", "ok")),
            2.0,
            "{text_body}"
        );
        assert_eq!(
            value("pattern_tool_calls_total", ("tool", "archival_search")),
            1.0,
            "{text_body}"
        );

        // SIGTERM: the process sends what it buffered before it exits.
        let stopped = d
            .servers
            .stop(0, Stop::Term(Duration::from_secs(20)))
            .await
            .unwrap();
        assert!(!stopped.forced, "serve did not exit on SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        let spans = loop {
            let spans = collector.spans();
            let done = spans
                .iter()
                .any(|s| text(s, "gen_ai.operation.name").as_deref() == Some("execute_tool"));
            if done || Instant::now() > deadline {
                break spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let find = |op: &str| -> Vec<&Value> {
            spans
                .iter()
                .filter(|s| text(s, "gen_ai.operation.name").as_deref() == Some(op))
                .collect()
        };
        let runs = find("invoke_agent");
        assert_eq!(runs.len(), 1, "one agent run: {spans:#?}");
        let run = runs[0];
        assert_eq!(
            text(run, "gen_ai.agent.id").as_deref(),
            Some(agent.as_str())
        );
        assert_eq!(run["service"], "pattern-under-test");
        let chats = find("chat");
        assert_eq!(chats.len(), 2, "a tool call, then the answer: {chats:#?}");
        for chat in &chats {
            assert_eq!(chat["traceId"], run["traceId"], "one trace per run");
            assert_eq!(
                chat["parentSpanId"], run["spanId"],
                "model requests are inside the run"
            );
            assert!(
                chat["name"].as_str().unwrap().starts_with("chat "),
                "{chat}"
            );
            assert!(text(chat, "gen_ai.request.model").is_some(), "{chat}");
            assert!(text(chat, "gen_ai.provider.name").is_some(), "{chat}");
            assert!(
                attribute(chat, "gen_ai.usage.input_tokens").is_some(),
                "{chat}"
            );
            assert!(
                attribute(chat, "gen_ai.usage.output_tokens").is_some(),
                "{chat}"
            );
        }
        let finish: Vec<String> = chats
            .iter()
            .filter_map(|c| text(c, "gen_ai.response.finish_reasons"))
            .collect();
        assert!(finish.contains(&"tool_calls".to_owned()), "{finish:?}");
        let tools = find("execute_tool");
        assert_eq!(tools.len(), 1, "{tools:#?}");
        assert_eq!(
            text(tools[0], "gen_ai.tool.name").as_deref(),
            Some("archival_search")
        );
        assert_eq!(tools[0]["traceId"], run["traceId"]);
        // The HTTP request that carried the turn is traced too.
        assert!(
            spans.iter().any(|s| s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("request") || n.starts_with("POST"))),
            "no request span: {:?}",
            spans.iter().map(|s| s["name"].clone()).collect::<Vec<_>>()
        );
        // No message text in any attribute.
        assert!(
            !serde_json::to_string(&spans)
                .unwrap()
                .contains("hello there")
        );
        d.finish().await;
    });
}
