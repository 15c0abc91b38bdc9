//! The bounds the OpenAPI document states are the bounds served (issue 17): every numeric
//! `minimum`/`maximum` of a query parameter or request-body field is in
//! `pattern_server::limits::BOUNDS` and nothing else is; every count-like number (`limit`,
//! `*_limit`, `rounds`, `*_ms`) states a maximum; and each bound, driven through a real server,
//! refuses one past either end with a 400 naming the field and accepts its maximum.

use std::collections::BTreeSet;

use pattern_db::Backend;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::Server;

type Stated = BTreeSet<(String, String, String, u64, u64)>;

/// The schema `value` names, following one `$ref` into `components/schemas`.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(r) => {
            let name = r.trim_start_matches("#/components/schemas/");
            &doc["components"]["schemas"][name]
        }
        None => value,
    }
}

fn bound_of(schema: &Value) -> Option<(u64, u64)> {
    Some((schema["minimum"].as_u64()?, schema["maximum"].as_u64()?))
}

fn count_like(name: &str) -> bool {
    name == "limit" || name.ends_with("_limit") || name == "rounds" || name.ends_with("_ms")
}

/// Every stated bound of the document, and every count-like number that states none.
fn stated(doc: &Value) -> (Stated, Vec<String>) {
    let mut bounds = Stated::new();
    let mut unbounded = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let mut fields: Vec<(String, &Value)> = Vec::new();
            for param in op["parameters"].as_array().into_iter().flatten() {
                let name = param["name"].as_str().unwrap().to_owned();
                fields.push((name, resolve(doc, &param["schema"])));
            }
            let body = &op["requestBody"]["content"]["application/json"]["schema"];
            if !body.is_null() {
                let body = resolve(doc, body);
                for (name, schema) in body["properties"].as_object().into_iter().flatten() {
                    fields.push((name.clone(), resolve(doc, schema)));
                }
            }
            for (name, schema) in fields {
                match bound_of(schema) {
                    Some((min, max)) => {
                        bounds.insert((method.clone(), path.clone(), name, min, max));
                    }
                    None if count_like(&name) && schema["maximum"].is_null() => {
                        unbounded.push(format!("{method} {path} `{name}`"));
                    }
                    None => {}
                }
            }
        }
    }
    (bounds, unbounded)
}

#[test]
fn the_document_states_exactly_the_bounds_the_server_enforces() {
    let doc = serde_json::to_value(pattern_server::openapi()).unwrap();
    let (bounds, unbounded) = stated(&doc);
    let table: Stated = pattern_server::limits::BOUNDS
        .iter()
        .map(|(method, path, b)| {
            (
                (*method).to_owned(),
                (*path).to_owned(),
                b.field.to_owned(),
                b.min,
                b.max,
            )
        })
        .collect();
    assert_eq!(bounds, table, "the document and limits::BOUNDS disagree");
    assert!(
        unbounded.is_empty(),
        "numbers without a stated maximum: {unbounded:?}"
    );
}

/// A request exercising one bound with `value`: the path and body to send.
fn request(
    method: &str,
    path: &str,
    field: &str,
    value: u64,
    agents: &[String; 2],
) -> (Method, String, Option<Value>) {
    let agent = &agents[0];
    let with = |mut body: Value| {
        body[field] = json!(value);
        Some(body)
    };
    match (method, path, field) {
        ("get", p, "limit") => (
            Method::GET,
            format!("{}?limit={value}", p.replace("{agent_id}", agent)),
            None,
        ),
        ("post", "/v1/agents/{agent_id}/search", _) => (
            Method::POST,
            format!("/v1/agents/{agent}/search"),
            with(json!({"query": "anything", "mode": "fts"})),
        ),
        ("post", "/v1/agents/{agent_id}/blocks", _) => (
            Method::POST,
            format!("/v1/agents/{agent}/blocks"),
            with(json!({"label": format!("b{value}"), "value": "x"})),
        ),
        ("post", "/v1/sessions", _) => (
            Method::POST,
            "/v1/sessions".to_owned(),
            with(json!({"from": agents[0], "to": agents[1], "session_type": "async"})),
        ),
        ("post", "/v1/meetings", _) => (
            Method::POST,
            "/v1/meetings".to_owned(),
            with(json!({"host": agent})),
        ),
        ("post", "/v1/meetings/run", _) => (
            Method::POST,
            "/v1/meetings/run".to_owned(),
            with(json!({"topic": "t", "agents": agents})),
        ),
        ("put", "/v1/agents/{agent_id}/retention", _) => (
            Method::PUT,
            format!("/v1/agents/{agent}/retention"),
            with(json!({})),
        ),
        other => panic!("no request for the bound {other:?}: add one here"),
    }
}

async fn each_bound_is_enforced_at_both_ends(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let agents = [
        s.agent(&s.key_a, "ada").await,
        s.agent(&s.key_a, "bob").await,
    ];
    for (method, path, bound) in pattern_server::limits::BOUNDS {
        for bad in [bound.min.wrapping_sub(1), bound.max + 1] {
            if bound.min == 0 && bad == u64::MAX {
                continue;
            }
            let (m, url, body) = request(method, path, bound.field, bad, &agents);
            let (status, answer) = s.send(m.clone(), Some(&s.key_a), &url, body).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{m} {url} = {bad}: {answer}"
            );
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(bound.field),
                "{m} {url}: the error names the field: {answer}"
            );
        }
        // A run meeting at its maximum would hold a hundred rounds: its lower end is enough.
        let accepted = if *path == "/v1/meetings/run" {
            bound.min
        } else {
            bound.max
        };
        let (m, url, body) = request(method, path, bound.field, accepted, &agents);
        let (status, answer) = s.send(m.clone(), Some(&s.key_a), &url, body).await;
        assert!(
            status.is_success(),
            "{m} {url} = {accepted}: {status} {answer}"
        );
    }
    s.stop().await;
}

conformance!(each_bound_is_enforced_at_both_ends);
