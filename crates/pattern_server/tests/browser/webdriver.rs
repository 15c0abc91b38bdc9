//! A small W3C WebDriver client over `reqwest` (the handful of commands the console's tests use),
//! and the ChromeDriver process it talks to: started on a free loopback port per test, killed
//! when dropped, driving Debian's headless Chromium with a fresh profile.
//!
//! Missing Chromium or ChromeDriver fails the test with what to install, unless
//! `PATTERN_SKIP_BROWSER_TESTS=1` opts out. This module must never leave a ChromeDriver running
//! (dropping the [`Driver`] kills it) nor point the browser anywhere but loopback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const SKIP_ENV: &str = "PATTERN_SKIP_BROWSER_TESTS";

/// Whether browser tests are skipped on purpose (only by the explicit environment variable).
pub fn skipped() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|v| v == "1")
}

fn program(env: &str, default: &str) -> PathBuf {
    let path = std::env::var(env).map_or_else(|_| PathBuf::from(default), PathBuf::from);
    assert!(
        path.is_file(),
        "{} not found: browser tests need Debian's `chromium` and `chromium-driver` packages \
         (`cargo xtask setup` installs them; or as root: apt-get install -y chromium \
         chromium-driver), or {env} pointing at the program; set {SKIP_ENV}=1 to skip these \
         tests on purpose",
        path.display()
    );
    path
}

/// A running ChromeDriver.
pub struct Driver {
    child: Child,
    base: String,
    _profiles: tempfile::TempDir,
    profiles: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub async fn start() -> Driver {
        let driver = program("PATTERN_CHROMEDRIVER", "/usr/bin/chromedriver");
        program("PATTERN_CHROMIUM", "/usr/bin/chromium");
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let profiles = tempfile::tempdir().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let path = profiles.path().to_owned();
        Driver {
            child,
            base,
            _profiles: profiles,
            profiles: path,
        }
    }

    /// A new headless browser session with a fresh profile.
    pub async fn session(&self) -> Browser {
        self.new_session(true).await
    }

    /// A new headless browser session with a fresh profile whose pages run no JavaScript (the
    /// content setting a user or an administrator sets); WebDriver's own scripts still run.
    pub async fn session_without_javascript(&self) -> Browser {
        self.new_session(false).await
    }

    async fn new_session(&self, javascript: bool) -> Browser {
        let chromium = program("PATTERN_CHROMIUM", "/usr/bin/chromium");
        let profile = tempfile::tempdir_in(&self.profiles).unwrap().keep();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1200,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
                "prefs": {
                    "profile.managed_default_content_settings.javascript":
                        if javascript { 1 } else { 2 },
                },
            },
        }}});
        let http = reqwest::Client::new();
        let response: Value = http
            .post(format!("{}/session", self.base))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = response["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {response}"))
            .to_owned();
        Browser {
            http,
            url: format!("{}/session/{id}", self.base),
        }
    }
}

/// One browser session.
pub struct Browser {
    http: reqwest::Client,
    url: String,
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        match self.try_call(method, path, body).await {
            Ok(value) => value,
            Err((error, message)) => panic!("webdriver {path}: {error}: {message}"),
        }
    }

    /// A WebDriver command; its error (`error`, `message`) instead of a panic.
    async fn try_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, (String, String)> {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response: Value = request.send().await.unwrap().json().await.unwrap();
        if let Some(error) = response["value"].get("error") {
            return Err((
                error.as_str().unwrap_or_default().to_owned(),
                response["value"]["message"].to_string(),
            ));
        }
        Ok(response["value"].clone())
    }

    /// Runs `commands` on the element `css` finds; when the page re-rendered it in between
    /// (a stale reference), finds it again and starts over, a few times.
    async fn on_element(&self, css: &str, commands: &[(&str, Value)]) {
        for attempt in 0..5 {
            let e = self.find(css).await;
            let mut stale = false;
            for (command, body) in commands {
                let path = format!("/element/{}/{command}", e.0);
                match self
                    .try_call(reqwest::Method::POST, &path, Some(body.clone()))
                    .await
                {
                    Ok(_) => {}
                    Err((error, _)) if error == "stale element reference" && attempt < 4 => {
                        stale = true;
                        break;
                    }
                    Err((error, message)) => panic!("webdriver {path}: {error}: {message}"),
                }
            }
            if !stale {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn refresh(&self) {
        self.post("/refresh", json!({})).await;
    }

    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": args}))
            .await
    }

    /// The first element matching `css`, waiting up to 10 s for it.
    pub async fn find(&self, css: &str) -> Element {
        let started = Instant::now();
        loop {
            let found = self
                .execute(
                    "return document.querySelector(arguments[0]) !== null;",
                    vec![json!(css)],
                )
                .await;
            if found == true {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no element `{css}` within 10 s; page text: {}",
                self.text("body").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let value = self
            .post("/element", json!({"using": "css selector", "value": css}))
            .await;
        Element(
            value[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("no element `{css}`: {value}"))
                .to_owned(),
        )
    }

    pub async fn click(&self, css: &str) {
        self.on_element(css, &[("click", json!({}))]).await;
    }

    /// Clears a field and types `text` into it (real key events).
    pub async fn fill(&self, css: &str, text: &str) {
        self.on_element(
            css,
            &[("clear", json!({})), ("value", json!({ "text": text }))],
        )
        .await;
    }

    /// The text content of the first element matching `css` ("" when there is none).
    pub async fn text(&self, css: &str) -> String {
        self.execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
            vec![json!(css)],
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> u64 {
        self.execute(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .await
        .as_u64()
        .unwrap()
    }

    /// Waits up to `secs` for the text of `css` to contain `needle`; returns the text.
    pub async fn wait_text(&self, css: &str, needle: &str, secs: u64) -> String {
        let started = Instant::now();
        loop {
            let text = self.text(css).await;
            if text.contains(needle) {
                return text;
            }
            assert!(
                started.elapsed() < Duration::from_secs(secs),
                "`{css}` never contained {needle:?} within {secs} s; it holds {text:?}; \
                 page: {}",
                self.text("main").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG of the page as `name.png` under the target dir's temp folder, and into the
    /// folder named by `PATTERN_CONSOLE_SCREENSHOTS` (relative to the workspace root) when set.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let value = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64_decode(value.as_str().unwrap());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, &png).unwrap();
        if let Ok(docs) = std::env::var("PATTERN_CONSOLE_SCREENSHOTS") {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let docs = root.join(docs);
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(docs.join(format!("{name}.png")), &png).unwrap();
        }
        path
    }

    /// The page's console messages at level SEVERE since the last call (uncaught exceptions,
    /// `console.error`, refused loads), as `(source, message)`.
    pub async fn console_errors(&self) -> Vec<(String, String)> {
        let logs = self.post("/se/log", json!({"type": "browser"})).await;
        logs.as_array()
            .unwrap()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| {
                (
                    e["source"].as_str().unwrap_or_default().to_owned(),
                    e["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Fails on any console error, except refused API calls the test provoked on purpose
    /// (network entries naming one of `expected` statuses).
    pub async fn assert_no_console_errors(&self, expected: &[u16]) {
        let errors: Vec<_> = self
            .console_errors()
            .await
            .into_iter()
            .filter(|(source, message)| {
                !(source == "network"
                    && expected
                        .iter()
                        .any(|s| message.contains(&format!("status of {s} "))))
            })
            .collect();
        assert!(errors.is_empty(), "console errors: {errors:#?}");
    }

    /// The address the browser shows.
    pub async fn current_url(&self) -> String {
        let value = self.call(reqwest::Method::GET, "/url", None).await;
        value.as_str().unwrap().to_owned()
    }

    /// Forgets every cookie, then sets `name=value` for `path` on the current page's host.
    pub async fn replace_cookies(&self, name: &str, value: &str, path: &str) {
        self.call(reqwest::Method::DELETE, "/cookie", None).await;
        self.post(
            "/cookie",
            json!({"cookie": {"name": name, "value": value, "path": path}}),
        )
        .await;
    }

    pub async fn quit(self) {
        let _ = self.http.delete(&self.url).send().await;
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}
