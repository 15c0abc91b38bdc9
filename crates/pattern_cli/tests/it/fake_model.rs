//! A fake OpenAI-compatible model server on loopback, for `chat` and `send` through the real
//! binary: it answers `POST .../chat/completions` in llama.cpp's streaming wire format (as the
//! recorded cassettes in `crates/pattern_core/tests/cassettes/llama_openai_chat.*` show).
//!
//! What it does depends on the last user message: one containing `fail` gets HTTP 400; one
//! containing `slow` gets a first chunk and then a chunk every 100 ms for a minute (announced
//! on [`FakeModel::wait_slow`], so a test can interrupt the turn mid-stream); one containing
//! `notify` gets a call of `send_message` to the user (`the kettle is on`), then, once its result
//! is in, `after tool: RESULT`; `guarded` gets a call of `memory_append` on the block `family` (which the tests share with
//! `partner` permission, so it needs approval); a request ending with a tool result gets
//! `after tool: RESULT`; anything else gets `echo: MESSAGE`, streamed in a few chunks. It must never be used for anything but these
//! tests: it reads one request per connection and closes it. It records the `model` each request
//! names ([`FakeModel::models_seen`]) and answers a model named `missing...` with 404
//! `model_not_found`, as OpenAI does.

use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The running server; stopped when dropped.
pub struct FakeModel {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    /// The `model` every request named, in order.
    seen: Arc<Mutex<Vec<String>>>,
    slow: std_mpsc::Receiver<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeModel {
    pub fn start() -> Self {
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let (slow_tx, slow) = std_mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let models = seen.clone();
        let thread = std::thread::spawn(move || {
            crate::block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                ready_tx.send(listener.local_addr().unwrap()).unwrap();
                let accept = async {
                    loop {
                        let (socket, _) = listener.accept().await.unwrap();
                        let slow_tx = slow_tx.clone();
                        let models = models.clone();
                        tokio::spawn(async move {
                            // A client that went away mid-answer is what cancelling looks like.
                            let _ = answer(socket, slow_tx, models).await;
                        });
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let addr = ready_rx.recv().unwrap();
        Self {
            base_url: format!("http://{addr}/v1"),
            seen,
            slow,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The `model` every request named so far, in order.
    pub fn models_seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until a `slow` answer has sent its first chunk.
    pub fn wait_slow(&self) {
        self.slow
            .recv_timeout(Duration::from_secs(120))
            .expect("the slow request reached the model");
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The text of the last user message of a chat completions request.
fn last_user_text(body: &Value) -> String {
    let Some(messages) = body["messages"].as_array() else {
        return String::new();
    };
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Whether the request's last message is a tool result.
fn request_has_tool_result(request: &Value) -> bool {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool")
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null))
}

/// One SSE event as an HTTP chunk.
async fn event(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let payload = format!("data: {data}\n\n");
    let framed = format!("{:x}\r\n{payload}\r\n", payload.len());
    socket.write_all(framed.as_bytes()).await?;
    socket.flush().await
}

fn delta(content: &str) -> String {
    json!({
        "choices": [{"finish_reason": null, "index": 0, "delta": {"content": content}}],
        "created": 1_795_315_907, "id": "chatcmpl-fake", "model": "fake",
        "object": "chat.completion.chunk"
    })
    .to_string()
}

async fn answer(
    mut socket: TcpStream,
    slow: std_mpsc::Sender<()>,
    seen: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let request = read_request(&mut socket).await?;
    let model = request["model"].as_str().unwrap_or("").to_owned();
    seen.lock().unwrap().push(model.clone());
    if model.starts_with("missing") {
        let body = format!(
            r#"{{"error": {{"message": "The model `{model}` does not exist", "type": "invalid_request_error", "code": "model_not_found"}}}}"#
        );
        let response = format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        return socket.write_all(response.as_bytes()).await;
    }
    let text = last_user_text(&request);
    let after_tool = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_owned());
    if text.contains("fail") {
        let body =
            r#"{"error": {"message": "the fake model refuses", "type": "invalid_request_error"}}"#;
        let response = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        return socket.write_all(response.as_bytes()).await;
    }
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        )
        .await?;
    let role = json!({
        "choices": [{"finish_reason": null, "index": 0, "delta": {"role": "assistant", "content": null}}],
        "created": 1_795_315_907, "id": "chatcmpl-fake", "model": "fake",
        "object": "chat.completion.chunk"
    });
    event(&mut socket, &role.to_string()).await?;
    if text.contains("slow") {
        event(&mut socket, &delta("thinking")).await?;
        let _ = slow.send(());
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            event(&mut socket, &delta(".")).await?;
        }
    } else if let Some(result) = after_tool {
        for piece in ["after tool: ", result.as_str()] {
            event(&mut socket, &delta(piece)).await?;
        }
    } else if text.contains("notify") {
        let call = json!({
            "choices": [{"finish_reason": null, "index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": "call_n1", "type": "function",
                "function": {"name": "send_message",
                    "arguments": "{\"content\": \"the kettle is on\"}"}
            }]}}],
            "created": 1_795_315_907, "id": "chatcmpl-fake", "model": "fake",
            "object": "chat.completion.chunk"
        });
        event(&mut socket, &call.to_string()).await?;
    } else if text.contains("guarded") {
        let call = json!({
            "choices": [{"finish_reason": null, "index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": "call_g1", "type": "function",
                "function": {"name": "memory_append",
                    "arguments": "{\"label\": \"family\", \"content\": \"likes jazz\"}"}
            }]}}],
            "created": 1_795_315_907, "id": "chatcmpl-fake", "model": "fake",
            "object": "chat.completion.chunk"
        });
        event(&mut socket, &call.to_string()).await?;
    } else {
        for piece in ["echo", ": ", text.as_str()] {
            event(&mut socket, &delta(piece)).await?;
        }
    }
    let calls = text.contains("guarded") || text.contains("notify");
    let finish = if calls && !request_has_tool_result(&request) {
        "tool_calls"
    } else {
        "stop"
    };
    let stop = json!({
        "choices": [{"finish_reason": finish, "index": 0, "delta": {}}],
        "created": 1_795_315_908, "id": "chatcmpl-fake", "model": "fake",
        "object": "chat.completion.chunk"
    });
    event(&mut socket, &stop.to_string()).await?;
    let usage = json!({
        "choices": [], "created": 1_795_315_908, "id": "chatcmpl-fake", "model": "fake",
        "object": "chat.completion.chunk",
        "usage": {"completion_tokens": 3, "prompt_tokens": 20, "total_tokens": 23}
    });
    event(&mut socket, &usage.to_string()).await?;
    event(&mut socket, "[DONE]").await?;
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await
}
