//! Browser tests of the web console: a real `pattern_server` (SQLite, scripted model) on a
//! loopback port, driven in headless Debian Chromium over WebDriver (ChromeDriver started per
//! test). Each test logs in through the page, saves a screenshot of what it checked (copied into
//! `PATTERN_CONSOLE_SCREENSHOTS`, e.g. `docs/console`, when set) and fails on any console error
//! in the page. Missing Chromium fails (see `webdriver.rs`): these tests must never pass by
//! skipping silently.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub,
    dead_code
)]

#[path = "../it/support.rs"]
mod support;
mod webdriver;

use std::time::Duration;

use pattern::ContentBlock;
use pattern::Database;
use pattern::core::testkit::Turn;
use pattern_db::Backend;
use pattern_db::testkit::TestDb;
use pattern_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::Server;
use crate::webdriver::{Browser, Driver};

/// A server and a browser logged in to it with `key`.
async fn open(s: &Server, key: &str) -> (Driver, Browser) {
    let driver = Driver::start().await;
    let b = driver.session().await;
    b.goto(&s.url("/")).await;
    login(&b, key).await;
    (driver, b)
}

/// Logs in from the keyboard: the key, then Enter.
/// Goes to `url` after emptying the page's content, so that what is awaited next is the new
/// page's (a change of the address's fragment alone does not reload the page).
async fn visit(b: &Browser, url: &str) {
    b.execute("document.getElementById('main').replaceChildren();", vec![])
        .await;
    b.goto(url).await;
}

async fn login(b: &Browser, key: &str) {
    b.fill("#login input[name=key]", &format!("{key}\u{E007}"))
        .await;
    b.wait_text("h1", "Agents", 10).await;
}

macro_rules! browser_test {
    ($name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if webdriver::skipped() {
                eprintln!("skipped: PATTERN_SKIP_BROWSER_TESTS=1");
                return;
            }
            cases::$name().await;
        }
    };
}

browser_test!(log_in_create_an_agent_and_chat_with_a_tool_call);
browser_test!(a_reload_mid_turn_resumes_the_stream);
browser_test!(a_stale_block_edit_shows_the_conflict_and_undo_restores);
browser_test!(an_abandoned_batch_after_a_crash_is_retried_once);
browser_test!(archival_search_shows_scores_and_refusals);
browser_test!(a_meeting_arrives_turn_by_turn);
browser_test!(a_session_is_followed_until_it_ends);
browser_test!(a_wrong_key_or_another_organization_sees_nothing);
browser_test!(the_context_page_counts_sections_against_the_window);
browser_test!(a_tool_call_waiting_for_approval_is_approved_from_the_chat);
browser_test!(meetings_sessions_approvals_schedules_and_mcp_are_listed);
browser_test!(the_read_only_pages_work_without_javascript);

/// Entry point of the crashing child of `an_abandoned_batch_after_a_crash_is_retried_once`; a
/// no-op in a normal run.
#[test]
fn crash_child() {
    support::doomed_child_main("PATTERN_CONSOLE_CRASH_CHILD");
}

mod cases {
    use super::*;

    const HOSTILE_NAME: &str = "<img src=x onerror=alert(1)>Ada";

    pub async fn log_in_create_an_agent_and_chat_with_a_tool_call() {
        let s = Server::start(
            Backend::Sqlite,
            vec![
                Turn::call("c1", "archival_insert", json!({"content": "Ada likes tea"})),
                Turn::text("Noted: <b>tea</b> & <script>alert(2)</script>"),
            ],
        )
        .await;
        let driver = Driver::start().await;
        let b = driver.session().await;
        b.goto(&s.url("/")).await;
        // A wrong key is refused in the page, and not kept.
        b.fill("#login input[name=key]", "pat_wrong").await;
        b.click("#login button[type=submit]").await;
        let shown = b.wait_text("#login-result", "Login failed", 10).await;
        assert!(shown.contains("unknown or revoked"), "{shown}");
        let kept = b
            .execute("return sessionStorage.getItem('pattern.key');", vec![])
            .await;
        assert!(kept.is_null(), "a refused key is not stored: {kept}");
        b.screenshot("login-refused").await;
        login(&b, &s.key_a).await;

        // A name the naming rule refuses: the API's reason shows, nothing is stored.
        b.fill("#create-agent input[name=name]", "no/slashes").await;
        b.click("#create-agent button[type=submit]").await;
        let refused = b.wait_text("#create-agent", "Not created", 10).await;
        assert!(refused.contains("name"), "{refused}");
        let (_, agents) = s.get(&s.key_a, "/v1/agents").await;
        assert_eq!(agents.as_array().unwrap().len(), 0, "{agents}");
        // Create an agent whose name is markup: it shows as text.
        b.fill("#create-agent input[name=name]", HOSTILE_NAME).await;
        b.fill("#create-agent textarea[name=instructions]", "Be brief.")
            .await;
        b.click("#create-agent button[type=submit]").await;
        b.wait_text("h1", HOSTILE_NAME, 10).await;
        assert_eq!(b.count("main img").await, 0, "no markup from the name");
        b.click("#nav a[href='#/agents']").await;
        b.wait_text("#agents", HOSTILE_NAME, 10).await;
        b.screenshot("agents").await;
        b.click("#agents a.agent-name").await;
        b.find("#chat textarea").await;

        // Send a message: the answer streams with its tool call and result.
        // From the keyboard: type, Tab to Send, Enter.
        b.fill(
            "#chat textarea",
            "Remember that Ada likes <i>tea</i>\u{E004}\u{E007}",
        )
        .await;
        b.wait_text("#turn-status", "Turn finished", 20).await;
        let turn = b.text("#turn").await;
        assert!(
            turn.contains("Remember that Ada likes <i>tea</i>"),
            "{turn}"
        );
        assert!(turn.contains("call archival_insert"), "{turn}");
        assert!(turn.contains("result of archival_insert"), "{turn}");
        assert!(
            turn.contains("Noted: <b>tea</b> & <script>alert(2)</script>"),
            "{turn}"
        );
        assert_eq!(b.count("main b, main i, main script").await, 0);
        b.screenshot("chat").await;
        // After a reload the history holds the turn, once.
        b.refresh().await;
        let history = b.wait_text("#history", "Noted:", 10).await;
        assert_eq!(history.matches("call archival_insert").count(), 1);
        // The batch timeline shows the turn's batch with its matched tool pair.
        b.click(".subnav a[href$='/batches']").await;
        b.click("tr[data-state=complete] details summary").await;
        let detail = b
            .wait_text("tr[data-state=complete] details", "Tool pairs: 1", 10)
            .await;
        assert!(
            detail.contains("archival_insert [c1]: call #1 → result #2"),
            "{detail}"
        );
        b.screenshot("batches").await;
        b.assert_no_console_errors(&[400, 401]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn a_reload_mid_turn_resumes_the_stream() {
        let s = Server::start(
            Backend::Sqlite,
            vec![
                Turn::call("c1", "archival_insert", json!({"content": "fact"})),
                Turn::Slow(
                    Duration::from_millis(2500),
                    vec![ContentBlock::text("finished after the reload")],
                ),
            ],
        )
        .await;
        let agent = s.agent(&s.key_a, "resumer").await;
        let (_driver, b) = open(&s, &s.key_a).await;
        b.goto(&s.url(&format!("/#/agents/{agent}"))).await;
        b.fill("#chat textarea", "Store a fact, then think").await;
        b.click("#chat button[type=submit]").await;
        b.wait_text("#turn", "result of archival_insert", 10).await;
        let stored = b
            .execute(
                "return JSON.parse(sessionStorage.getItem('pattern.turn.' + arguments[0]));",
                vec![json!(agent)],
            )
            .await;
        assert!(stored["turn"].is_string(), "{stored}");
        assert!(stored["cursor"].as_u64().unwrap() >= 3, "{stored}");
        b.refresh().await;
        b.wait_text("#turn-status", "Resuming", 5).await;
        b.screenshot("chat-resuming").await;
        b.wait_text("#turn", "finished after the reload", 15).await;
        b.wait_text("#turn-status", "Turn finished", 5).await;
        let turn = b.text("#turn").await;
        assert_eq!(turn.matches("call archival_insert").count(), 1, "{turn}");
        assert_eq!(
            turn.matches("result of archival_insert").count(),
            1,
            "{turn}"
        );
        assert_eq!(turn.matches("Store a fact").count(), 1, "{turn}");
        // The history above does not repeat the turn in flight.
        assert!(!b.text("#history").await.contains("Store a fact"));
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn a_stale_block_edit_shows_the_conflict_and_undo_restores() {
        let s = Server::start(Backend::Sqlite, vec![]).await;
        let agent = s.agent(&s.key_a, "rememberer").await;
        let blocks = format!("/v1/agents/{agent}/blocks");
        let (status, body) = s
            .post(
                &s.key_a,
                &blocks,
                json!({"label": "human", "value": "likes <script>alert(3)</script> tea",
                    "char_limit": 60}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (_driver, b) = open(&s, &s.key_a).await;
        b.goto(&s.url(&format!("/#/agents/{agent}/memory"))).await;
        let card = "[data-label=human]";
        b.wait_text(card, "35 / 60 characters", 10).await;
        let value = b
            .execute(
                "return document.querySelector(arguments[0]).value;",
                vec![json!(format!("{card} textarea"))],
            )
            .await;
        assert_eq!(value, "likes <script>alert(3)</script> tea");
        // Someone else changes the block while the page shows version 1.
        let (status, body) = s
            .send(
                reqwest::Method::PUT,
                Some(&s.key_a),
                &format!("{blocks}/human"),
                Some(json!({"value": "likes coffee", "expected_version": 1})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        b.fill(&format!("{card} textarea"), "likes green tea").await;
        b.click(&format!("{card} button[type=submit]")).await;
        let shown = b.wait_text(".conflict", "Version conflict", 10).await;
        assert!(shown.contains("not saved"), "{shown}");
        b.screenshot("memory-conflict").await;
        let (_, now) = s.get(&s.key_a, &format!("{blocks}/human")).await;
        assert_eq!(now["value"], "likes coffee");
        b.click(".conflict button").await;
        b.wait_text(card, "version 2", 10).await;
        // Over the limit: refused with the API's reason, nothing stored.
        b.fill(&format!("{card} textarea"), &"x".repeat(61)).await;
        b.click(&format!("{card} button[type=submit]")).await;
        let refused = b.wait_text(".block-result", "Refused", 10).await;
        assert!(refused.contains("nothing saved"), "{refused}");
        let (_, now) = s.get(&s.key_a, &format!("{blocks}/human")).await;
        assert_eq!(now["version"], 2);
        // A good edit, then undo it.
        b.fill(&format!("{card} textarea"), "likes coffee\nand jazz")
            .await;
        b.click(&format!("{card} button[type=submit]")).await;
        b.wait_text(".block-result", "Saved as version 3", 10).await;
        b.click(&format!("{card} button.secondary")).await;
        b.wait_text(".block-result", "Undone: now version 4", 10)
            .await;
        let (_, now) = s.get(&s.key_a, &format!("{blocks}/human")).await;
        assert_eq!(now["value"], "likes coffee");
        // History with diffs.
        b.click(&format!("{card} details.history summary")).await;
        b.wait_text(&format!("{card} details.history"), "version 3", 10)
            .await;
        assert!(b.count(&format!("{card} .diff ins")).await >= 1);
        assert!(b.count(&format!("{card} .diff del")).await >= 1);
        assert_eq!(b.count("main script").await, 0);
        b.screenshot("memory-history").await;
        b.assert_no_console_errors(&[409, 422]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn an_abandoned_batch_after_a_crash_is_retried_once() {
        // A child server takes the message, then is killed (SIGKILL) mid-turn.
        let tdb = TestDb::fresh(Backend::Sqlite).await.unwrap();
        let (mut child, base, key, agent) =
            support::spawn_doomed_child("crash_child", "PATTERN_CONSOLE_CRASH_CHILD", &tdb.url);
        let response = reqwest::Client::new()
            .post(format!("{base}/v1/agents/{agent}/messages"))
            .bearer_auth(&key)
            .json(&json!({"content": "two coffees, please", "stream": false}))
            .timeout(Duration::from_millis(800))
            .send()
            .await;
        assert!(
            response.is_err(),
            "the slow turn answers only after the kill"
        );
        child.kill().unwrap();
        child.wait().unwrap();

        // The restarted server (same database) abandons the dead run's batch at once.
        let db = Database::open(support::config_for(&tdb)).await.unwrap();
        let s = Server::over(
            db,
            vec![Turn::text("Two coffees, noted.")],
            ServerConfig {
                recovery_interval: Duration::from_millis(200),
                ..ServerConfig::default()
            },
        )
        .await;
        let (_driver, b) = open(&s, &key).await;
        b.goto(&s.url(&format!("/#/agents/{agent}/batches"))).await;
        for _ in 0..50 {
            if b.count("tr[data-state=abandoned] button").await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            b.refresh().await;
            b.find("#batches").await;
        }
        b.screenshot("batches-abandoned").await;
        b.click("tr[data-state=abandoned] button").await;
        let shown = b
            .wait_text("#batch-result", "Two coffees, noted.", 20)
            .await;
        assert!(shown.contains("Retried batch"), "{shown}");
        b.wait_text("tr[data-state=abandoned]", "retried", 10).await;
        assert_eq!(b.count("tr[data-state=abandoned] button").await, 0);
        assert_eq!(b.count("tr[data-state=complete]").await, 1);
        b.screenshot("batches-retried").await;
        // A second retry (another tab, the API) is refused: retried once.
        let batch = b
            .execute(
                "return document.querySelector('tr[data-state=abandoned]').dataset.batch;",
                vec![],
            )
            .await;
        let (status, _) = s
            .post(
                &key,
                &format!(
                    "/v1/agents/{agent}/batches/{}/retry",
                    batch.as_str().unwrap()
                ),
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT);
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
        tdb.cleanup().await.unwrap();
    }

    pub async fn archival_search_shows_scores_and_refusals() {
        // The real offline embedding model: every mode answers.
        let s = Server::start_embedded(Backend::Sqlite, vec![]).await;
        let agent = s.agent(&s.key_a, "librarian").await;
        for text in [
            "Ada drinks green tea every morning",
            "Grace prefers coffee",
            "<b>bold</b> tea notes",
        ] {
            let (status, body) = s
                .post(
                    &s.key_a,
                    &format!("/v1/agents/{agent}/archival"),
                    json!({ "text": text }),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
        let (_driver, b) = open(&s, &s.key_a).await;
        b.goto(&s.url(&format!("/#/agents/{agent}/archival"))).await;
        b.wait_text("#passages", "Grace prefers coffee", 10).await;
        // Store one through the page.
        b.fill("#insert-archival textarea", "Tea with Ada on Fridays")
            .await;
        b.click("#insert-archival button").await;
        b.wait_text("#passages", "Tea with Ada on Fridays", 10)
            .await;
        // Embedding runs in the background; wait until vector search sees all four.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, hits) = s
                .post(
                    &s.key_a,
                    &format!("/v1/agents/{agent}/search"),
                    json!({"query": "tea", "mode": "vector"}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{hits}");
            if hits.as_array().unwrap().len() == 4 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "not embedded: {hits}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for mode in ["fts", "vector", "auto", "hybrid"] {
            b.execute(
                "document.querySelector('#search-results').replaceChildren();",
                vec![],
            )
            .await;
            b.fill("#search input[name=query]", "tea").await;
            b.execute(
                "document.querySelector('#search select').value = arguments[0];",
                vec![json!(mode)],
            )
            .await;
            b.click("#search button").await;
            b.wait_text("#search-results", "Score", 10).await;
            let results = b.text("#search-results").await;
            assert!(results.contains("green tea"), "{mode}: {results}");
            assert!(
                results.contains("<b>bold</b> tea notes"),
                "{mode}: {results}"
            );
            assert!(b.count("#search-results td.score").await >= 3, "{mode}");
            if mode == "fts" {
                assert!(!results.contains("coffee"), "{mode}: {results}");
            }
        }
        assert_eq!(b.count("main b").await, 0);
        b.screenshot("search").await;
        // An over-long query is refused with the API's reason, never cut.
        b.execute(
            "document.querySelector('#search input[name=query]').value = 'tea '.repeat(5000);",
            vec![],
        )
        .await;
        b.click("#search button").await;
        let refused = b.wait_text("#search-results", "Search failed", 10).await;
        assert!(refused.contains("query"), "{refused}");
        b.assert_no_console_errors(&[400, 422]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn a_meeting_arrives_turn_by_turn() {
        let s = Server::start(
            Backend::Sqlite,
            vec![
                Turn::Slow(
                    Duration::from_millis(400),
                    vec![ContentBlock::text("I open: tea or coffee?")],
                ),
                Turn::Slow(
                    Duration::from_millis(400),
                    vec![ContentBlock::text("Tea, <em>always</em>.")],
                ),
            ],
        )
        .await;
        s.agent(&s.key_a, "host").await;
        s.agent(&s.key_a, "guest").await;
        let (_driver, b) = open(&s, &s.key_a).await;
        b.click("#nav a[href='#/meetings']").await;
        b.find("#run-meeting input[type=checkbox]").await;
        b.fill("#run-meeting input[name=topic]", "Morning drinks")
            .await;
        b.execute(
            "for (const box of document.querySelectorAll('#run-meeting input[type=checkbox]')) box.click();",
            vec![],
        )
        .await;
        b.click("#run-meeting button[type=submit]").await;
        b.wait_text("#meeting-status", "live", 10).await;
        // The speaker's run streams before its speech is in the transcript.
        b.wait_text("#runs", "tea or coffee?", 20).await;
        b.wait_text("#transcript", "tea or coffee?", 20).await;
        b.wait_text("#transcript", "Tea, <em>always</em>.", 20)
            .await;
        b.wait_text("#meeting-state", "ended", 20).await;
        b.wait_text("#meeting-status", "over", 10).await;
        assert!(b.count("#events li").await >= 4);
        let runs = b.text("#runs").await;
        assert!(runs.contains("Tea, <em>always</em>."), "{runs}");
        assert_eq!(b.count("#runs > li").await, 2, "{runs}");
        assert_eq!(b.count("main em").await, 0);
        b.screenshot("meeting").await;
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn a_session_is_followed_until_it_ends() {
        let s = Server::start(Backend::Sqlite, vec![]).await;
        let ada = s.agent(&s.key_a, "ada").await;
        let bob = s.agent(&s.key_a, "bob").await;
        let (_driver, b) = open(&s, &s.key_a).await;
        b.click("#nav a[href='#/sessions']").await;
        b.find("#start-session select[name=to] option").await;
        b.click("#start-session button[type=submit]").await;
        b.wait_text("#session-summary", "turn: ada", 10).await;
        let id = b
            .execute("return location.hash.split('/')[2];", vec![])
            .await;
        let messages = format!("/v1/sessions/{}/messages", id.as_str().unwrap());
        let (status, body) = s
            .post(
                &s.key_a,
                &messages,
                json!({"from": ada, "content": "hello <b>bob</b>"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        b.wait_text("#session-transcript", "hello <b>bob</b>", 10)
            .await;
        b.wait_text("#session-summary", "turn: bob", 10).await;
        s.post(
            &s.key_a,
            &messages,
            json!({"from": bob, "content": "hi ada"}),
        )
        .await;
        b.wait_text("#session-transcript", "hi ada", 10).await;
        // State and transcript are read together: the turn is back with ada.
        let summary = b.text("#session-summary").await;
        assert!(summary.contains("turn: ada"), "{summary}");
        b.screenshot("session").await;
        let (status, body) = s
            .post(
                &s.key_a,
                &format!("/v1/sessions/{}/end", id.as_str().unwrap()),
                json!({"agent": ada}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        b.wait_text("#session-status", "over", 10).await;
        b.wait_text("#session-state", "ended", 5).await;
        assert_eq!(b.count("main b").await, 0);
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn a_wrong_key_or_another_organization_sees_nothing() {
        let s = Server::start(Backend::Sqlite, vec![]).await;
        let agent = s.agent(&s.key_a, "private").await;
        let guest = s.agent(&s.key_a, "guest").await;
        let (status, meeting) = s
            .post(&s.key_a, "/v1/meetings", json!({"host": agent}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{meeting}");
        let (_, session) = s
            .post(
                &s.key_a,
                "/v1/sessions",
                json!({"from": agent, "to": guest, "session_type": "sync"}),
            )
            .await;
        // Organization B logs in with a key of its own, revoked later in the session.
        let org_b = s
            .state
            .pattern()
            .protocol()
            .organization("org-b")
            .await
            .unwrap();
        let issued = s.db.create_api_key(org_b.id, "console").await.unwrap();
        let (_driver, b) = open(&s, &issued.secret).await;
        b.wait_text("main", "No agents yet.", 10).await;
        for page in ["", "/batches", "/memory", "/archival", "/context"] {
            visit(&b, &s.url(&format!("/#/agents/{agent}{page}"))).await;
            let shown = b.wait_text("main", "Not found", 10).await;
            assert!(!shown.contains("private"), "{page}: {shown}");
        }
        visit(
            &b,
            &s.url(&format!("/#/meetings/{}", meeting["id"].as_str().unwrap())),
        )
        .await;
        b.wait_text("main", "Not found", 10).await;
        visit(
            &b,
            &s.url(&format!("/#/sessions/{}", session["id"].as_str().unwrap())),
        )
        .await;
        b.wait_text("main", "Not found", 10).await;
        b.screenshot("other-organization").await;
        // A key revoked mid-session: the next call sends the page back to the login, and the
        // key is forgotten.
        s.db.revoke_api_key(org_b.id, issued.key.id).await.unwrap();
        b.click("#nav a[href='#/agents']").await;
        let shown = b.wait_text("main", "The server refused the key", 10).await;
        assert!(shown.contains("unknown or revoked"), "{shown}");
        let kept = b
            .execute("return sessionStorage.getItem('pattern.key');", vec![])
            .await;
        assert!(kept.is_null(), "{kept}");
        b.screenshot("login-revoked").await;
        b.assert_no_console_errors(&[401, 404]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn a_tool_call_waiting_for_approval_is_approved_from_the_chat() {
        use pattern::memory::{BlockType, MemoryEditor, MemoryStore, NewMemoryBlock, Permission};
        let s = Server::start(
            Backend::Sqlite,
            vec![
                Turn::call(
                    "c1",
                    "memory_append",
                    json!({"label": "family", "content": "likes jazz"}),
                ),
                Turn::text("noted"),
            ],
        )
        .await;
        let writer = s.agent(&s.key_a, "writer").await;
        let owner: pattern::AgentId = s.agent(&s.key_a, "owner").await.parse().unwrap();
        let memory = s.state.pattern().memory();
        memory
            .create_block(
                owner,
                NewMemoryBlock {
                    label: "family".into(),
                    description: "About the family.".into(),
                    value: "Ada".into(),
                    char_limit: 500,
                    block_type: BlockType::Core,
                },
            )
            .await
            .unwrap();
        memory
            .share(
                owner,
                "family",
                writer.parse().unwrap(),
                Permission::Partner,
            )
            .await
            .unwrap();
        let (_driver, b) = open(&s, &s.key_a).await;
        visit(&b, &s.url(&format!("/#/agents/{writer}"))).await;
        // Per-agent model: set one, then back to the server's default (this server's scripted
        // model) before the turn.
        b.click("details.model summary").await;
        b.execute(
            "document.querySelector('#set-model select').value = 'anthropic';",
            vec![],
        )
        .await;
        b.fill("#set-model input[name=model]", "claude-test").await;
        b.click("#set-model button").await;
        b.wait_text("#agent-model", "anthropic / claude-test", 10)
            .await;
        let (_, agent) = s.get(&s.key_a, &format!("/v1/agents/{writer}")).await;
        assert_eq!(agent["metadata"]["model"]["model"], "claude-test");
        b.execute(
            "document.querySelector('#set-model select').value = '';",
            vec![],
        )
        .await;
        b.click("#set-model button").await;
        b.wait_text("#agent-model", "server default", 10).await;
        b.fill("#chat textarea", "Ada likes jazz, remember it")
            .await;
        b.click("#chat button[type=submit]").await;
        b.wait_text("#turn", "waiting for approval of memory_append", 15)
            .await;
        b.screenshot("chat-approval").await;
        b.click("li.approval button").await;
        b.wait_text("li.approval", "approved.", 10).await;
        b.wait_text("#turn-status", "Turn finished", 15).await;
        b.wait_text("#turn", "noted", 5).await;
        let family = memory.block(owner, "family").await.unwrap();
        assert!(family.value.contains("likes jazz"), "{}", family.value);
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn the_context_page_counts_sections_against_the_window() {
        let s = Server::start(Backend::Sqlite, vec![Turn::text("Hello <u>there</u>.")]).await;
        let agent = s.agent(&s.key_a, "inspected").await;
        s.post(
            &s.key_a,
            &format!("/v1/agents/{agent}/blocks"),
            json!({"label": "persona", "value": "I am <u>helpful</u>."}),
        )
        .await;
        s.post(
            &s.key_a,
            &format!("/v1/agents/{agent}/messages"),
            json!({"content": "hi"}),
        )
        .await;
        let (_driver, b) = open(&s, &s.key_a).await;
        b.goto(&s.url(&format!("/#/agents/{agent}/context"))).await;
        let shown = b.wait_text("#context", "tokens", 10).await;
        assert!(shown.contains("200000"), "{shown}");
        let sections = b.text("#sections").await;
        for name in ["system", "tools", "summaries", "history"] {
            assert!(sections.contains(name), "{sections}");
        }
        assert!(b.text("#context").await.contains("persona"));
        b.click("#request summary").await;
        b.wait_text("#request", "\"stream\": true", 5).await;
        assert_eq!(b.count("main u").await, 0);
        b.screenshot("context").await;
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
    }

    pub async fn meetings_sessions_approvals_schedules_and_mcp_are_listed() {
        let s = Server::start(Backend::Sqlite, vec![]).await;
        let ada = s.agent(&s.key_a, "ada").await;
        let bob = s.agent(&s.key_a, "bob").await;
        let (_, first) = s.post(&s.key_a, "/v1/meetings", json!({"host": ada})).await;
        let (_, session) = s
            .post(
                &s.key_a,
                "/v1/sessions",
                json!({"from": ada, "to": bob, "session_type": "sync"}),
            )
            .await;
        // Organization B's meeting is never listed.
        let theirs = s.agent(&s.key_b, "carol").await;
        let (_, hidden) = s
            .post(&s.key_b, "/v1/meetings", json!({"host": theirs}))
            .await;
        let (_driver, b) = open(&s, &s.key_a).await;
        b.click("#nav a[href='#/meetings']").await;
        b.wait_text("#meetings-list", first["id"].as_str().unwrap(), 10)
            .await;
        // Live: a meeting created elsewhere appears without a reload.
        let (_, second) = s.post(&s.key_a, "/v1/meetings", json!({"host": bob})).await;
        let list = b
            .wait_text("#meetings-list", second["id"].as_str().unwrap(), 10)
            .await;
        assert!(!list.contains(hidden["id"].as_str().unwrap()), "{list}");
        assert_eq!(b.count("#meetings-list tr").await, 2, "{list}");
        b.screenshot("meetings-list").await;
        b.click("#nav a[href='#/sessions']").await;
        let list = b
            .wait_text("#sessions-list", session["id"].as_str().unwrap(), 10)
            .await;
        assert!(list.contains("ada and bob"), "{list}");
        b.screenshot("sessions-list").await;
        b.click("#nav a[href='#/approvals']").await;
        b.wait_text("#approval-list", "No requests.", 10).await;
        // Schedules: added from the form, then listed.
        visit(&b, &s.url(&format!("/#/agents/{ada}/schedules"))).await;
        b.wait_text("#schedule-list", "No schedules.", 10).await;
        b.fill("#add-schedule input[name=message]", "<b>standup</b>")
            .await;
        b.fill("#add-schedule input[name=cron]", "0 9 * * MON-FRI")
            .await;
        b.click("#add-schedule button[type=submit]").await;
        b.wait_text("#schedule-list", "<b>standup</b>", 10).await;
        assert_eq!(b.count("main b").await, 0);
        b.screenshot("schedules").await;
        visit(&b, &s.url(&format!("/#/agents/{ada}/mcp"))).await;
        b.wait_text("#mcp-names", "No MCP servers.", 10).await;
        b.fill("#mcp-servers textarea", "{not json").await;
        b.click("#mcp-servers button[type=submit]").await;
        b.wait_text("#mcp-servers .error", "Not JSON", 10).await;
        b.screenshot("mcp").await;
        b.assert_no_console_errors(&[]).await;
        b.quit().await;
        s.stop().await;
    }

    /// The JavaScript-free pages in a browser that runs no page script: log in through the form,
    /// read the agents and a block's history (data as text), another organization's id is not
    /// found, and a made-up cookie is sent back to the login.
    pub async fn the_read_only_pages_work_without_javascript() {
        // Sessions that lapse within the test (it checks the expiry at the end).
        let lifetime = Duration::from_secs(10);
        let config = ServerConfig {
            console_session: lifetime,
            ..ServerConfig::default()
        };
        let s = Server::start_with(Backend::Sqlite, vec![], config).await;
        let ada = s.agent(&s.key_a, HOSTILE_NAME).await;
        let blocks = format!("/v1/agents/{ada}/blocks");
        let (status, _) = s
            .post(
                &s.key_a,
                &blocks,
                json!({"label": "notes", "value": "<script>alert(1)</script>first"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, body) = s
            .send(
                reqwest::Method::PUT,
                Some(&s.key_a),
                &format!("{blocks}/notes"),
                Some(json!({"value": "second <i>version</i>", "expected_version": 1})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let theirs = s.agent(&s.key_b, "bea").await;

        let driver = Driver::start().await;
        let b = driver.session_without_javascript().await;
        b.goto(&s.url("/")).await;
        // The single-page console says it needs JavaScript and links to these pages.
        b.wait_text("main", "This console needs JavaScript", 10)
            .await;
        // Parsed as elements only when the page runs no script.
        b.click("main noscript a[href='/console/login']").await;
        b.wait_text("h1", "Log in", 10).await;
        b.fill("input[name=key]", &format!("{}\u{E007}", s.key_a))
            .await;
        let logged_in = std::time::Instant::now();
        let agents = b.wait_text("main", "server default", 10).await;
        assert!(agents.contains(HOSTILE_NAME), "{agents}");
        assert_eq!(b.count("main img").await, 0);
        b.screenshot("nojs-agents").await;
        b.click("main td a").await;
        b.wait_text("h1", HOSTILE_NAME, 10).await;
        b.click("nav.subnav a[href$='/blocks']").await;
        b.wait_text("main", "characters", 10).await;
        b.click("main h2 a").await;
        let history = b.wait_text("main", "History", 10).await;
        assert!(
            history.contains("<script>alert(1)</script>first"),
            "{history}"
        );
        assert!(history.contains("second <i>version</i>"), "{history}");
        assert_eq!(b.count("main script, main i").await, 0);
        b.screenshot("nojs-block-history").await;
        // Another organization's agent, by its id in the address.
        b.goto(&s.url(&format!("/console/agents/{theirs}/blocks")))
            .await;
        let shown = b.wait_text("h1", "Not found", 10).await;
        assert!(!shown.contains("bea"));
        b.screenshot("nojs-other-organization").await;
        // The session lapses: the browser drops the cookie at its Max-Age (the server refuses
        // the token after its expiry too: `tests/it/pages.rs`), and the next page is the login.
        let left = lifetime.saturating_sub(logged_in.elapsed());
        assert!(
            !left.is_zero(),
            "the pages took longer than the session lasts"
        );
        tokio::time::sleep(left + Duration::from_millis(200)).await;
        b.goto(&s.url("/console/agents")).await;
        b.wait_text("h1", "Log in", 10).await;
        assert!(b.current_url().await.ends_with("/console/login"));
        // A made-up session cookie: back to the login, told why.
        b.replace_cookies(
            "pattern_console",
            &format!("pcs_{}", "0".repeat(64)),
            "/console",
        )
        .await;
        b.goto(&s.url("/console/agents")).await;
        b.wait_text("main", "has ended or is not valid", 10).await;
        assert!(b.current_url().await.ends_with("/console/login?ended"));
        b.screenshot("nojs-session-ended").await;
        b.assert_no_console_errors(&[404]).await;
        b.quit().await;
        s.stop().await;
    }
}
