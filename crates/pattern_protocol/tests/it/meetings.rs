//! Meetings on both backends: the lifecycle and round-robin turns, every refusal of bad input as
//! a typed error, turn timeouts applied by the next write, by a waiter and by the sweeper, the
//! event log (dense sequence, follower across reconnects), the views, and retention.

use std::time::{Duration, Instant};

use futures::StreamExt;
use pattern_db::Error as DbError;
use pattern_db::testkit::backdate;
use pattern_protocol::ProtocolError;
use pattern_protocol::{
    AgentId, Error, MeetingEventType as E, MeetingStatus, NewProtocolMessage, ParticipantStatus,
    Protocol, RetentionPolicy, SessionType,
};
use serde_json::json;

use crate::{Kind, agent, fresh, protocol};

const LONG: Duration = Duration::from_secs(20);
const WELL_BEFORE: Duration = Duration::from_secs(5);

pub(crate) fn say(text: &str) -> NewProtocolMessage {
    NewProtocolMessage::new("user_defined", json!({ "text": text }))
}

fn refusal(e: Error) -> ProtocolError {
    match e {
        Error::Protocol(e) => e,
        other => panic!("expected a protocol refusal, got {other}"),
    }
}

fn db(e: Error) -> DbError {
    match e {
        Error::Db(e) => e,
        other => panic!("not a storage error: {other}"),
    }
}

async fn speaker(p: &Protocol, m: pattern_protocol::MeetingId) -> Option<AgentId> {
    p.meeting(m).await.unwrap().speaker
}

async fn lifecycle_and_round_robin(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b, c) = (
        agent(&p, "ada").await,
        agent(&p, "bob").await,
        agent(&p, "cy").await,
    );
    let created = p.create_meeting(a.id, None).await.unwrap();
    let m = created.meeting.id;
    assert_eq!(created.meeting.status, MeetingStatus::Created);
    assert_eq!(
        created
            .events
            .iter()
            .map(|e| e.event_type)
            .collect::<Vec<_>>(),
        [E::MeetingCreated, E::AgentJoined]
    );
    // Not ready with the host alone.
    let refused = refusal(p.start_meeting(m, a.id).await.unwrap_err());
    assert!(
        matches!(refused, ProtocolError::MeetingState { .. }),
        "{refused}"
    );
    p.invite(m, a.id, b.id).await.unwrap();
    assert!(matches!(
        refusal(p.invite(m, b.id, c.id).await.unwrap_err()),
        ProtocolError::NotHost { .. }
    ));
    assert!(matches!(
        refusal(p.invite(m, a.id, b.id).await.unwrap_err()),
        ProtocolError::AlreadyParticipant { .. }
    ));
    let joined = p.join_meeting(m, b.id).await.unwrap();
    assert_eq!(joined.meeting.status, MeetingStatus::Ready);
    assert!(matches!(
        refusal(p.join_meeting(m, b.id).await.unwrap_err()),
        ProtocolError::AlreadyParticipant { .. }
    ));
    // Anyone may join, invited or not.
    p.join_meeting(m, c.id).await.unwrap();
    assert!(matches!(
        refusal(p.speak(m, a.id, say("early")).await.unwrap_err()),
        ProtocolError::MeetingState { .. }
    ));
    assert!(matches!(
        refusal(p.start_meeting(m, b.id).await.unwrap_err()),
        ProtocolError::NotHost { .. }
    ));
    let started = p.start_meeting(m, a.id).await.unwrap();
    assert_eq!(started.meeting.status, MeetingStatus::Active);
    assert_eq!(started.meeting.speaker, Some(a.id));
    assert!(matches!(
        refusal(p.start_meeting(m, a.id).await.unwrap_err()),
        ProtocolError::MeetingState { .. }
    ));

    // Round robin in join order, wrapping; only the speaker speaks.
    let out = refusal(p.speak(m, b.id, say("me first")).await.unwrap_err());
    assert!(
        matches!(out, ProtocolError::NotSpeaker { speaker: Some(s), .. } if s == a.id),
        "{out}"
    );
    let mut said = Vec::new();
    for (who, next) in [(a.id, b.id), (b.id, c.id), (c.id, a.id), (a.id, b.id)] {
        let u = p.speak(m, who, say(&format!("{who}"))).await.unwrap();
        assert_eq!(u.meeting.speaker, Some(next));
        said.push(u.message.unwrap());
    }
    // c leaves while b speaks: b's turn passes to a, skipping c.
    p.leave_meeting(m, c.id).await.unwrap();
    assert!(matches!(
        refusal(p.leave_meeting(m, c.id).await.unwrap_err()),
        ProtocolError::NotMeetingParticipant { .. }
    ));
    assert_eq!(
        p.speak(m, b.id, say("b")).await.unwrap().meeting.speaker,
        Some(a.id)
    );
    // The speaker leaving passes the turn at once; passing is a turn without a message.
    let left = p.leave_meeting(m, a.id).await.unwrap();
    assert_eq!(left.meeting.speaker, Some(b.id));
    assert_eq!(
        p.pass_turn(m, b.id).await.unwrap().meeting.speaker,
        Some(b.id)
    );
    // A participant who left may join again, at the end of the order.
    p.join_meeting(m, c.id).await.unwrap();
    let participants = p.participants(m).await.unwrap();
    let order: Vec<_> = participants
        .iter()
        .filter(|x| x.status.is_present())
        .map(|x| x.agent)
        .collect();
    assert_eq!(order, [b.id, c.id]);
    assert_eq!(
        participants
            .iter()
            .find(|x| x.agent == b.id)
            .unwrap()
            .status,
        ParticipantStatus::Speaking
    );
    // History in order.
    let history = p.meeting_messages(m).await.unwrap();
    assert_eq!(history.len(), 5);
    assert_eq!(&history[..4], &said[..]);
    assert!(
        history
            .iter()
            .all(|x| x.meeting == Some(m) && x.recipient.is_none())
    );

    // Only the host ends; an ended meeting refuses everything.
    assert!(matches!(
        refusal(p.end_meeting(m, b.id).await.unwrap_err()),
        ProtocolError::NotHost { .. }
    ));
    let ended = p.end_meeting(m, a.id).await.unwrap();
    assert_eq!(ended.meeting.status, MeetingStatus::Ended);
    assert_eq!(ended.meeting.speaker, None);
    for refused in [
        p.join_meeting(m, a.id).await.unwrap_err(),
        p.speak(m, b.id, say("late")).await.unwrap_err(),
        p.end_meeting(m, a.id).await.unwrap_err(),
        p.invite(m, a.id, c.id).await.unwrap_err(),
    ] {
        assert!(matches!(refusal(refused), ProtocolError::MeetingEnded(x) if x == m));
    }

    // The log: dense from 1, ending with meeting_ended.
    let events = p.events_after(m, 0, 1000).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap().event_type, E::MeetingEnded);
    assert_eq!(
        p.meeting(m).await.unwrap().last_event_seq,
        events.len() as u64
    );
    assert_eq!(p.events_after(m, 3, 2).await.unwrap(), events[3..5]);
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn bad_input_is_typed(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let a = agent(&p, "ada").await;
    let ghost = AgentId::new();
    assert!(matches!(
        db(p.create_meeting(ghost, None).await.unwrap_err()),
        DbError::Agent(pattern_db::AgentError::NotFound(_))
    ));
    for bad in [Duration::ZERO, Duration::from_secs(8 * 24 * 3600)] {
        assert!(matches!(
            db(p.create_meeting(a.id, Some(bad)).await.unwrap_err()),
            DbError::Protocol(pattern_db::ProtocolError::InvalidMessage(_))
        ));
    }
    let m = p.create_meeting(a.id, None).await.unwrap().meeting.id;
    assert!(matches!(
        db(p.join_meeting(m, ghost).await.unwrap_err()),
        DbError::Agent(pattern_db::AgentError::NotFound(_))
    ));
    let unknown = pattern_protocol::MeetingId::new();
    assert!(matches!(
        db(p.join_meeting(unknown, a.id).await.unwrap_err()),
        DbError::Protocol(pattern_db::ProtocolError::NotFound { .. })
    ));
    assert!(matches!(
        db(p.events_after(unknown, 0, 10).await.unwrap_err()),
        DbError::Protocol(pattern_db::ProtocolError::NotFound { .. })
    ));
    assert!(matches!(
        db(p.speak(m, a.id, NewProtocolMessage::new("", json!(1)))
            .await
            .unwrap_err()),
        DbError::Protocol(pattern_db::ProtocolError::InvalidMessage(_))
    ));
    assert!(matches!(
        db(NewProtocolMessage::from_json_str("chat", "{not json")
            .unwrap_err()
            .into()),
        DbError::Protocol(pattern_db::ProtocolError::InvalidMessage(_))
    ));
    // Nothing of the refused writes left a trace: two events (created, host joined).
    assert_eq!(p.meeting(m).await.unwrap().last_event_seq, 2);
    assert_eq!(p.events_after(m, 0, 10).await.unwrap().len(), 2);
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

/// A started meeting of `n` agents (the first hosts), with `turn` as turn duration.
pub(crate) async fn started(
    p: &Protocol,
    names: &[&str],
    turn: Option<Duration>,
) -> (pattern_protocol::MeetingId, Vec<AgentId>) {
    let mut ids = Vec::new();
    for name in names {
        ids.push(agent(p, name).await.id);
    }
    let m = p.create_meeting(ids[0], turn).await.unwrap().meeting.id;
    for id in &ids[1..] {
        p.join_meeting(m, *id).await.unwrap();
    }
    p.start_meeting(m, ids[0]).await.unwrap();
    (m, ids)
}

async fn timeouts_apply_without_a_watcher(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    // Long enough that a loaded machine does not let a second turn expire between two calls.
    let turn = Duration::from_millis(1000);
    let (m, ids) = started(&p, &["ada", "bob", "cy"], Some(turn)).await;
    // Nobody watches; ada stays silent past her deadline. The next write (bob speaking) applies
    // the timeout first, so bob is the speaker by then.
    tokio::time::sleep(turn + Duration::from_millis(100)).await;
    let u = p.speak(m, ids[1], say("after the timeout")).await.unwrap();
    let kinds: Vec<_> = u.events.iter().map(|e| e.event_type).collect();
    assert_eq!(
        kinds,
        [
            E::AgentTimedOut,
            E::TurnPassed,
            E::AgentSpoke,
            E::TurnPassed
        ]
    );
    assert_eq!(u.events[0].agent, Some(ids[0]));
    assert_eq!(u.meeting.speaker, Some(ids[2]));
    // Ada, timed out, is refused.
    assert!(matches!(
        refusal(p.speak(m, ids[0], say("too late")).await.unwrap_err()),
        ProtocolError::NotSpeaker { .. }
    ));

    // The sweeper times out cy (nobody else acts).
    tokio::time::sleep(turn + Duration::from_millis(100)).await;
    let swept = p.sweep_timeouts().await.unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].events[0].event_type, E::AgentTimedOut);
    assert_eq!(swept[0].events[0].agent, Some(ids[2]));
    assert_eq!(speaker(&p, m).await, Some(ids[0]));
    assert!(p.sweep_timeouts().await.unwrap().is_empty());

    // A waiter applies the timeout itself: bob waits, nobody acts, ada times out.
    let start = Instant::now();
    assert!(p.wait_for_meeting_turn(m, ids[1], LONG).await.unwrap());
    assert!(start.elapsed() < turn * 3, "took {:?}", start.elapsed());
    let last = p.events_after(m, 0, 1000).await.unwrap();
    assert!(
        last.iter()
            .rev()
            .take(2)
            .any(|e| e.event_type == E::AgentTimedOut && e.agent == Some(ids[0]))
    );
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn wait_for_meeting_turn_wakes(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (m, ids) = started(&p, &["ada", "bob"], None).await;
    assert!(p.wait_for_meeting_turn(m, ids[0], LONG).await.unwrap());
    assert!(
        !p.wait_for_meeting_turn(m, ids[1], Duration::from_millis(200))
            .await
            .unwrap()
    );
    let waiter = {
        let p = p.clone();
        let bob = ids[1];
        tokio::spawn(async move {
            let start = Instant::now();
            (p.wait_for_meeting_turn(m, bob, LONG).await, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.speak(m, ids[0], say("over to you")).await.unwrap();
    let (turn, waited) = waiter.await.unwrap();
    assert!(turn.unwrap());
    assert!(waited < WELL_BEFORE, "woken after {waited:?}");

    // Ending wakes a waiter with MeetingEnded; a stranger is refused.
    let waiter = {
        let p = p.clone();
        let ada = ids[0];
        tokio::spawn(async move { p.wait_for_meeting_turn(m, ada, LONG).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let eve = agent(&p, "eve").await;
    assert!(matches!(
        refusal(p.wait_for_meeting_turn(m, eve.id, LONG).await.unwrap_err()),
        ProtocolError::NotMeetingParticipant { .. }
    ));
    p.end_meeting(m, ids[0]).await.unwrap();
    assert!(matches!(
        refusal(waiter.await.unwrap().unwrap_err()),
        ProtocolError::MeetingEnded(_)
    ));
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn follower_never_misses_or_repeats_across_reconnects(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (m, ids) = started(&p, &["ada", "bob", "cy"], None).await;
    let writer = {
        let p = p.clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            for round in 0..10 {
                for id in &ids {
                    p.speak(m, *id, say(&format!("{round}"))).await.unwrap();
                    if round % 3 == 0 {
                        tokio::time::sleep(Duration::from_millis(150)).await;
                    }
                }
            }
            p.end_meeting(m, ids[0]).await.unwrap();
        })
    };
    // Reconnect (a new follower from the saved cursor) every few events, sometimes dropping a
    // `next` that is waiting (cancel-safety).
    let mut seen = Vec::new();
    let mut cursor = 0;
    let give_up = Instant::now() + LONG;
    'outer: loop {
        assert!(
            Instant::now() < give_up,
            "the follower stopped making progress"
        );
        let mut follower = p.follow(m, cursor);
        for _ in 0..7 {
            match tokio::time::timeout(Duration::from_millis(100), follower.next()).await {
                Err(_) => break,
                Ok(next) => match next.unwrap() {
                    Some(event) => seen.push(event),
                    None => break 'outer,
                },
            }
        }
        cursor = follower.cursor();
    }
    writer.await.unwrap();
    let all = p.events_after(m, 0, 10_000).await.unwrap();
    assert_eq!(seen, all);
    assert_eq!(
        seen.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=all.len() as u64).collect::<Vec<_>>()
    );
    // The stream form ends after meeting_ended too.
    let streamed: Vec<_> = p.follow(m, 0).into_stream().collect().await;
    assert_eq!(streamed.len(), all.len());
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn views(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b) = (agent(&p, "ada").await, agent(&p, "bob").await);
    let s = p
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();
    let ended = p.open_session(a.id, b.id, SessionType::Sync).await.unwrap();
    p.end_session(ended.id, a.id).await.unwrap();
    p.send(s.id, a.id, say("one")).await.unwrap();
    let two = p.send(s.id, a.id, say("two")).await.unwrap();
    let conversations = p.active_conversations().await.unwrap();
    assert_eq!(conversations.len(), 1);
    assert_eq!(conversations[0].session.id, s.id);
    let names = [
        conversations[0].agent_a_external_id.as_str(),
        conversations[0].agent_b_external_id.as_str(),
    ];
    assert!(names.contains(&"ada") && names.contains(&"bob"));
    let unread = p.unread_per_agent().await.unwrap();
    assert_eq!(
        unread
            .iter()
            .map(|u| (u.external_id.as_str(), u.unread))
            .collect::<Vec<_>>(),
        [("ada", 0), ("bob", 2)]
    );
    assert_eq!(unread[1].latest_at, Some(two.created_at));
    assert_eq!(unread[0].latest_at, None);

    let m = p.create_meeting(a.id, None).await.unwrap().meeting.id;
    p.join_meeting(m, b.id).await.unwrap();
    p.start_meeting(m, a.id).await.unwrap();
    let done = p.create_meeting(b.id, None).await.unwrap().meeting.id;
    p.end_meeting(done, b.id).await.unwrap();
    let meetings = p.active_meetings().await.unwrap();
    assert_eq!(meetings.len(), 1);
    assert_eq!(meetings[0].meeting.id, m);
    assert_eq!(meetings[0].host_external_id, "ada");
    assert_eq!(meetings[0].speaker_external_id.as_deref(), Some("ada"));
    assert_eq!(meetings[0].participant_count, 2);
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn retention_archives_and_deletes_only_what_is_old_and_over(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b) = (agent(&p, "ada").await, agent(&p, "bob").await);
    let inbox = p
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();
    let read = p.send(inbox.id, a.id, say("read")).await.unwrap();
    let unread = p.send(inbox.id, a.id, say("unread")).await.unwrap();
    p.mark_read(b.id, &[read.id]).await.unwrap();
    let sync = p.open_session(a.id, b.id, SessionType::Sync).await.unwrap();
    let in_ended = p
        .send(sync.id, a.id, say("in an ended session"))
        .await
        .unwrap();
    p.end_session(sync.id, b.id).await.unwrap();
    let (live, ids) = started(&p, &["cy", "dee"], None).await;
    let live_said = p
        .speak(live, ids[0], say("live"))
        .await
        .unwrap()
        .message
        .unwrap();
    let over = p.create_meeting(a.id, None).await.unwrap().meeting.id;
    p.join_meeting(over, b.id).await.unwrap();
    p.start_meeting(over, a.id).await.unwrap();
    let over_said = p
        .speak(over, a.id, say("over"))
        .await
        .unwrap()
        .message
        .unwrap();
    p.end_meeting(over, a.id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Nothing is old enough at 90 days.
    let keep = RetentionPolicy {
        archive_messages_after: Duration::from_secs(90 * 86_400),
        delete_ended_after: Duration::from_secs(30 * 86_400),
        dry_run: false,
    };
    let report = p.retention(keep).await.unwrap();
    assert!(report.archived_messages.is_empty() && report.deleted_sessions.is_empty());
    assert!(report.deleted_meetings.is_empty());

    // A zero age is refused, nothing changed.
    let zero = RetentionPolicy {
        archive_messages_after: Duration::ZERO,
        delete_ended_after: Duration::ZERO,
        dry_run: false,
    };
    for policy in [
        zero,
        RetentionPolicy {
            archive_messages_after: Duration::from_secs(86_400),
            ..zero
        },
        RetentionPolicy {
            delete_ended_after: Duration::from_secs(86_400),
            ..zero
        },
    ] {
        let e = p.retention(policy).await.unwrap_err();
        assert_eq!(e.class(), pattern_db::ErrorClass::Invalid, "{e:?}");
        assert!(e.to_string().contains("invalid retention policy"), "{e}");
    }
    assert_eq!(p.session(sync.id).await.unwrap().id, sync.id);

    // Everything moves two days back: a day's age now finds what is read or over.
    backdate(p.db(), Duration::from_secs(2 * 86_400))
        .await
        .unwrap();
    let now = RetentionPolicy {
        archive_messages_after: Duration::from_secs(86_400),
        delete_ended_after: Duration::from_secs(86_400),
        dry_run: true,
    };
    let dry = p.retention(now).await.unwrap();
    let mut expected = vec![read.id, in_ended.id, over_said.id];
    expected.sort();
    let mut got = dry.archived_messages.clone();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(dry.deleted_sessions, [sync.id]);
    assert_eq!(dry.deleted_meetings, [over]);
    assert!(
        serde_json::to_value(&dry).unwrap()["dry_run"]
            .as_bool()
            .unwrap()
    );
    // The dry run changed nothing.
    assert_eq!(p.session(sync.id).await.unwrap().id, sync.id);
    assert!(p.store().archived_message(read.id).await.unwrap().is_none());

    let wet = p
        .retention(RetentionPolicy {
            dry_run: false,
            ..now
        })
        .await
        .unwrap();
    assert_eq!(wet.archived_messages.len(), 3);
    assert!(p.session(sync.id).await.is_err());
    assert!(p.meeting(over).await.is_err());
    for id in [read.id, in_ended.id, over_said.id] {
        assert_eq!(
            p.store().archived_message(id).await.unwrap().unwrap().id,
            id
        );
    }
    // Unread messages stay in the inbox; the live meeting keeps its history.
    // (Backdated, so compared by id.)
    let ids =
        |v: Vec<pattern_protocol::ProtocolMessage>| v.iter().map(|m| m.id).collect::<Vec<_>>();
    assert_eq!(ids(p.unread(b.id).await.unwrap()), [unread.id]);
    assert_eq!(ids(p.meeting_messages(live).await.unwrap()), [live_said.id]);
    assert_eq!(p.meeting(live).await.unwrap().status, MeetingStatus::Active);
    // Running again finds nothing more.
    let again = p
        .retention(RetentionPolicy {
            dry_run: false,
            ..now
        })
        .await
        .unwrap();
    assert!(again.archived_messages.is_empty() && again.deleted_sessions.is_empty());
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
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
    lifecycle_and_round_robin,
    bad_input_is_typed,
    timeouts_apply_without_a_watcher,
    wait_for_meeting_turn_wakes,
    follower_never_misses_or_repeats_across_reconnects,
    views,
    retention_archives_and_deletes_only_what_is_old_and_over,
);
