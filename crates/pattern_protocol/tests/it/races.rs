//! Isolation-style races on both backends, each through several independent handles (own pools
//! and writers: several connections), and on PostgreSQL also through several processes (this test
//! binary re-executed as children). Every outcome must be one of the allowed serial orders.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pattern_db::testkit::{TestDb, backdate};
use pattern_protocol::{
    AgentId, Error, MeetingEventType as E, MeetingId, MeetingStatus, Protocol, RetentionPolicy,
    SessionType,
};

use pattern_protocol::ProtocolError;

use crate::meetings::{say, started};
use crate::{Kind, agent, fresh, protocol};

const ROUNDS: usize = 12;

/// `n` more handles on the same database, each with its own connections and writer.
async fn handles(tdb: &TestDb, n: usize) -> Vec<Protocol> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(Protocol::new(tdb.open().await.unwrap()).await.unwrap());
    }
    out
}

fn is_not_speaker(r: &Result<pattern_protocol::MeetingUpdate, Error>) -> bool {
    matches!(r, Err(Error::Protocol(ProtocolError::NotSpeaker { .. })))
}

/// The event log is dense from 1 and each turn_passed names the speaker that follows.
async fn log_is_consistent(p: &Protocol, m: MeetingId) {
    let events = p.events_after(m, 0, 100_000).await.unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
    }
    let mut speaker = None;
    for e in &events {
        match e.event_type {
            E::TurnPassed => speaker = e.agent,
            E::AgentSpoke | E::AgentTimedOut => assert_eq!(e.agent, speaker, "{e:?}"),
            _ => {}
        }
    }
}

async fn close(ps: Vec<Protocol>, tdb: TestDb) {
    for p in ps {
        p.db().clone().close().await;
    }
    tdb.cleanup().await.unwrap();
}

async fn two_agents_racing_to_speak(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (m, ids) = started(&p, &["ada", "bob", "cy"], None).await;
    let hs = handles(&tdb, 2).await;
    for round in 0..ROUNDS {
        let s = p.meeting(m).await.unwrap().speaker.unwrap();
        let k = ids.iter().position(|x| *x == s).unwrap();
        let n = ids[(k + 1) % ids.len()];
        // The speaker and the next one race; the next one only wins if it comes second.
        let (h0, h1) = (hs[0].clone(), hs[1].clone());
        let (first, second) = if round % 2 == 0 { (s, n) } else { (n, s) };
        let (r0, r1) = tokio::join!(
            async move { h0.speak(m, first, say("race")).await },
            async move { h1.speak(m, second, say("race")).await }
        );
        let (rs, rn) = if round % 2 == 0 { (r0, r1) } else { (r1, r0) };
        rs.unwrap();
        assert!(rn.is_ok() || is_not_speaker(&rn), "{rn:?}");
        // Two handles speaking as the same speaker: exactly one is stored.
        let now = p.meeting(m).await.unwrap().speaker.unwrap();
        let (h0, h1) = (hs[0].clone(), hs[1].clone());
        let (a, b) = tokio::join!(
            async move { h0.speak(m, now, say("twice")).await },
            async move { h1.speak(m, now, say("twice")).await }
        );
        assert_eq!(
            [&a, &b].iter().filter(|r| r.is_ok()).count(),
            1,
            "{a:?} {b:?}"
        );
        assert!(is_not_speaker(&a) || is_not_speaker(&b));
    }
    log_is_consistent(&p, m).await;
    let mut all = hs;
    all.push(p);
    close(all, tdb).await;
}

async fn timeout_fires_while_the_speaker_answers(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let turn = Duration::from_millis(150);
    let (m, _ids) = started(&p, &["ada", "bob", "cy"], Some(turn)).await;
    let hs = handles(&tdb, 2).await;
    let (mut spoke, mut timed_out) = (0, 0);
    for round in 0..ROUNDS {
        let meeting = p.meeting(m).await.unwrap();
        let s = meeting.speaker.unwrap();
        let deadline = meeting.turn_deadline.unwrap();
        let before = meeting.last_event_seq;
        // Answer right around the deadline: a little before, at, or a little after it.
        let offset = chrono::Duration::milliseconds(round as i64 % 5 * 5 - 10);
        let wait = (deadline + offset - chrono::Utc::now())
            .to_std()
            .unwrap_or_default();
        tokio::time::sleep(wait).await;
        let (h0, h1) = (hs[0].clone(), hs[1].clone());
        let (answer, sweep) = tokio::join!(
            async move { h0.speak(m, s, say("just in time?")).await },
            async move { h1.store().apply_meeting_timeouts(m).await }
        );
        sweep.unwrap();
        let events = p.events_after(m, before, 100).await.unwrap();
        let out = events
            .iter()
            .any(|e| e.event_type == E::AgentTimedOut && e.agent == Some(s));
        let said = events
            .iter()
            .any(|e| e.event_type == E::AgentSpoke && e.agent == Some(s));
        // Either the answer came first (stored, no timeout) or the timeout did (answer refused).
        match answer {
            Ok(_) => {
                assert!(said && !out, "{events:?}");
                spoke += 1;
            }
            Err(e) => {
                assert!(
                    matches!(e, Error::Protocol(ProtocolError::NotSpeaker { .. })),
                    "{e}"
                );
                assert!(out && !said, "{events:?}");
                timed_out += 1;
            }
        }
    }
    assert_eq!(spoke + timed_out, ROUNDS);
    log_is_consistent(&p, m).await;
    let mut all = hs;
    all.push(p);
    close(all, tdb).await;
}

async fn next_speaker_leaves_while_the_turn_passes(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (m, ids) = started(&p, &["ada", "bob", "cy"], None).await;
    let hs = handles(&tdb, 2).await;
    for _ in 0..ROUNDS {
        let order: Vec<AgentId> = p
            .participants(m)
            .await
            .unwrap()
            .iter()
            .filter(|x| x.status.is_present())
            .map(|x| x.agent)
            .collect();
        let s = p.meeting(m).await.unwrap().speaker.unwrap();
        let k = order.iter().position(|x| *x == s).unwrap();
        let n = order[(k + 1) % order.len()];
        let after = order[(k + 2) % order.len()];
        let (h0, h1) = (hs[0].clone(), hs[1].clone());
        let (spoke, left) = tokio::join!(
            async move { h0.speak(m, s, say("passing")).await },
            async move { h1.leave_meeting(m, n).await }
        );
        spoke.unwrap();
        left.unwrap();
        // In both serial orders the turn skips the one who left.
        assert_eq!(p.meeting(m).await.unwrap().speaker, Some(after));
        p.join_meeting(m, n).await.unwrap();
    }
    assert_eq!(p.meeting(m).await.unwrap().status, MeetingStatus::Active);
    assert_eq!(ids.len(), 3);
    log_is_consistent(&p, m).await;
    let mut all = hs;
    all.push(p);
    close(all, tdb).await;
}

async fn mark_read_races_a_new_message(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b) = (agent(&p, "ada").await, agent(&p, "bob").await);
    let s = p
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();
    let hs = handles(&tdb, 2).await;
    p.send(s.id, a.id, say("first")).await.unwrap();
    for _ in 0..ROUNDS {
        let seen: Vec<_> = p.unread(b.id).await.unwrap().iter().map(|x| x.id).collect();
        let (h0, h1) = (hs[0].clone(), hs[1].clone());
        let (marked, sent) =
            tokio::join!(async move { h0.mark_read(b.id, &seen).await }, async move {
                h1.send(s.id, a.id, say("new")).await
            });
        // Whatever the order, exactly what was seen is marked and the new message stays unread.
        assert_eq!(marked.unwrap(), 1);
        let sent = sent.unwrap();
        assert_eq!(p.unread(b.id).await.unwrap(), [sent]);
    }
    let mut all = hs;
    all.push(p);
    close(all, tdb).await;
}

async fn retention_races_an_active_meeting(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (m, ids) = started(&p, &["ada", "bob"], None).await;
    let (old, old_ids) = started(&p, &["cy", "dee"], None).await;
    p.speak(old, old_ids[0], say("old")).await.unwrap();
    let hs = handles(&tdb, 2).await;
    let speaking = {
        let h = hs[0].clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            let mut said = Vec::new();
            for round in 0..ROUNDS * 2 {
                let who = ids[round % 2];
                said.push(
                    h.speak(m, who, say("live"))
                        .await
                        .unwrap()
                        .message
                        .unwrap()
                        .id,
                );
            }
            said
        })
    };
    let cleaning = {
        let h = hs[1].clone();
        tokio::spawn(async move {
            // Each round moves everything two days back, so a day's age sees the live
            // meeting's messages as old too: only its being live keeps them.
            let policy = RetentionPolicy {
                archive_messages_after: Duration::from_secs(86_400),
                delete_ended_after: Duration::from_secs(86_400),
                dry_run: false,
            };
            let mut archived = Vec::new();
            let mut deleted = Vec::new();
            for round in 0..ROUNDS {
                if round == ROUNDS / 2 {
                    h.end_meeting(old, old_ids[0]).await.unwrap();
                }
                backdate(h.db(), Duration::from_secs(2 * 86_400))
                    .await
                    .unwrap();
                let report = h.retention(policy).await.unwrap();
                archived.extend(report.archived_messages);
                deleted.extend(report.deleted_meetings);
            }
            (archived, deleted)
        })
    };
    let said = speaking.await.unwrap();
    let (archived, deleted) = cleaning.await.unwrap();
    // The active meeting lost nothing; the ended one went whole, its message archived.
    let history: Vec<_> = p
        .meeting_messages(m)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(history, said);
    assert!(said.iter().all(|id| !archived.contains(id)));
    assert_eq!(deleted, [old]);
    assert_eq!(archived.len(), 1);
    assert!(
        p.store()
            .archived_message(archived[0])
            .await
            .unwrap()
            .is_some()
    );
    log_is_consistent(&p, m).await;
    let mut all = hs;
    all.push(p);
    close(all, tdb).await;
}

macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::Kind::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::Kind::Postgres).await
                }
            )*
        }
    };
}

on_both!(
    two_agents_racing_to_speak,
    timeout_fires_while_the_speaker_answers,
    next_speaker_leaves_while_the_turn_passes,
    mark_read_races_a_new_message,
    retention_races_an_active_meeting,
);

// -- several processes (PostgreSQL) ------------------------------------------------------------

/// Entry point of a child process; a no-op in a normal test run. It opens its own protocol
/// handle, says `@@READY`, waits for a line on stdin, then runs its command and prints the
/// outcome.
#[test]
fn race_child() {
    let (Ok(url), Ok(command)) = (
        std::env::var("PATTERN_PROTOCOL_CHILD"),
        std::env::var("PATTERN_PROTOCOL_COMMAND"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let db = pattern_db::Database::open_url(&url).await.unwrap();
        let p = Protocol::new(db).await.unwrap();
        let parts: Vec<&str> = command.split(' ').collect();
        let meeting = MeetingId(parts[1].parse().unwrap());
        let agent = AgentId(parts[2].parse().unwrap());
        let mut out = std::io::stdout().lock();
        writeln!(out, "@@READY").unwrap();
        out.flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let outcome = match parts[0] {
            "speak" => match p.speak(meeting, agent, say("from a child")).await {
                Ok(_) => "OK".to_owned(),
                Err(Error::Protocol(ProtocolError::NotSpeaker { .. })) => "NOT_SPEAKER".to_owned(),
                Err(e) => format!("ERROR {e}"),
            },
            "wait" => {
                let start = Instant::now();
                match p
                    .wait_for_meeting_turn(meeting, agent, Duration::from_secs(30))
                    .await
                {
                    Ok(turn) => format!("TURN {turn} {}", start.elapsed().as_millis()),
                    Err(e) => format!("ERROR {e}"),
                }
            }
            other => format!("ERROR unknown command {other}"),
        };
        writeln!(out, "@@{outcome}").unwrap();
        out.flush().unwrap();
        p.db().clone().close().await;
    });
}

struct Child {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Child {
    fn spawn(url: &str, command: String) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "races::race_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PATTERN_PROTOCOL_CHILD", url)
            .env("PATTERN_PROTOCOL_COMMAND", command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut me = Self { child, lines };
        assert_eq!(me.line(), "READY");
        me
    }

    /// The next `@@` answer of the child, without the marker.
    fn line(&mut self) -> String {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            // The harness may print its "test ... " prefix on the same line.
            if let Some(at) = line.find("@@") {
                return line[at + 2..].to_owned();
            }
        }
        panic!("child ended without an answer");
    }

    fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();
    }

    fn finish(mut self) -> String {
        let outcome = self.line();
        self.child.wait().unwrap();
        outcome
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_processes_race_to_speak_and_wake_each_other() {
    let tdb = fresh(Kind::Postgres).await;
    let p = protocol(&tdb).await;
    let (m, ids) = started(&p, &["ada", "bob", "cy"], None).await;
    for _ in 0..3 {
        // Four processes speak as the current speaker at once: exactly one is stored.
        let s = p.meeting(m).await.unwrap().speaker.unwrap();
        let before = p.meeting_messages(m).await.unwrap().len();
        let url = tdb.url.clone();
        let mut children: Vec<Child> = tokio::task::spawn_blocking(move || {
            (0..4)
                .map(|_| Child::spawn(&url, format!("speak {m} {s}")))
                .collect()
        })
        .await
        .unwrap();
        for c in &mut children {
            c.go();
        }
        let outcomes: Vec<String> =
            tokio::task::spawn_blocking(move || children.into_iter().map(Child::finish).collect())
                .await
                .unwrap();
        assert_eq!(
            outcomes.iter().filter(|o| *o == "OK").count(),
            1,
            "{outcomes:?}"
        );
        assert_eq!(
            outcomes.iter().filter(|o| *o == "NOT_SPEAKER").count(),
            3,
            "{outcomes:?}"
        );
        assert_eq!(p.meeting_messages(m).await.unwrap().len(), before + 1);
    }
    // A process waiting for its turn is woken by this process's write (LISTEN/NOTIFY), long
    // before its 30 s timeout: nothing else would wake it.
    let s = p.meeting(m).await.unwrap().speaker.unwrap();
    let k = ids.iter().position(|x| *x == s).unwrap();
    let n = ids[(k + 1) % ids.len()];
    let url = tdb.url.clone();
    let mut waiter = tokio::task::spawn_blocking(move || {
        let mut c = Child::spawn(&url, format!("wait {m} {n}"));
        c.go();
        c
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.speak(m, s, say("wake the other process")).await.unwrap();
    let outcome = tokio::task::spawn_blocking(move || {
        let o = waiter.line();
        waiter.child.wait().unwrap();
        o
    })
    .await
    .unwrap();
    let ms: u64 = outcome
        .strip_prefix("TURN true ")
        .unwrap_or_else(|| panic!("{outcome}"))
        .parse()
        .unwrap();
    assert!(ms < 5_000, "woken after {ms} ms");
    log_is_consistent(&p, m).await;
    close(vec![p], tdb).await;
}
