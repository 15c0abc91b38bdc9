//! The protocol's storage ([`pattern_protocol::store::Store`]) on both backends, case by case
//! (moved from `pattern_db`'s conformance suite with the meeting SQL, unchanged in meaning): the
//! meeting tables' schema guards, a protocol message names a recipient or a meeting (never both),
//! meetings never join two organizations, the selector's chosen hand-over, and the
//! organization-scoped lists of sessions and meetings.

use pattern_db::testkit::insert_raw_protocol_message;
use pattern_db::{
    AgentError, AgentId, Database, Error, MeetingId, NewAgent, NewProtocolMessage, ProtocolError,
    ProtocolMessageId, SessionId, SessionStatus, SessionType, StorageError,
};
use pattern_protocol::ProtocolError as Refusal;
use pattern_protocol::store::Store;
use pattern_protocol::{ListPage, Liveness, MeetingEventType, MeetingPolicy};
use serde_json::json;

use crate::{Kind, agents, fresh, open_with, text};

async fn protocol_pair(db: &Database) -> (pattern_db::Agent, pattern_db::Agent) {
    let org = db.create_organization("acme", "Acme").await.unwrap();
    let new = |ext: &str| NewAgent {
        external_id: Some(ext.into()),
        ..NewAgent::named(ext.to_uppercase()).in_organization(org.id)
    };
    let a = db.create_agent(new("ada")).await.unwrap();
    let b = db.create_agent(new("bob")).await.unwrap();
    (a, b)
}

fn say(text: &str) -> NewProtocolMessage {
    NewProtocolMessage::new("chat", json!({ "text": text }))
}

/// Nothing crosses an organization's wall: no session, no meeting invitation or join (moved from
/// `pattern_db`'s `protocol_organizations_and_agents`, which keeps organizations and agents).
async fn nothing_crosses_an_organization_wall(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let beta = db.create_organization("beta", "Beta").await.unwrap();
    let ada = db
        .create_agent(NewAgent {
            external_id: Some("ada@acme".into()),
            ..NewAgent::named("Ada").in_organization(acme.id)
        })
        .await
        .unwrap();
    let other_ada = db
        .create_agent(NewAgent {
            external_id: Some("ada@acme".into()),
            ..NewAgent::named("Other").in_organization(beta.id)
        })
        .await
        .unwrap();
    // No session.
    let wall = store
        .open_session(ada.id, other_ada.id, SessionType::Async)
        .await;
    assert!(
        matches!(
            wall,
            Err(Error::Agent(AgentError::OtherOrganization { .. }))
        ),
        "{wall:?}"
    );
    assert!(matches!(
        wall.unwrap_err().class(),
        pattern_db::ErrorClass::NotFound
    ));
    // No meeting invitation or join.
    let meeting = store.create_meeting(ada.id, None).await.unwrap();
    assert!(matches!(
        store
            .invite_to_meeting(meeting.meeting.id, ada.id, other_ada.id)
            .await,
        Err(Error::Agent(AgentError::OtherOrganization { .. }))
    ));
    assert!(matches!(
        store.join_meeting(meeting.meeting.id, other_ada.id).await,
        Err(Error::Agent(AgentError::OtherOrganization { .. }))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn protocol_schema_guards_meetings(kind: Kind) {
    use pattern_db::testkit::execute_raw;
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (a, b) = protocol_pair(&db).await;
    let m = store.create_meeting(a.id, None).await.unwrap().meeting.id;
    store.join_meeting(m, b.id).await.unwrap();
    store.start_meeting(m, a.id).await.unwrap();
    let refused = [
        // A second speaker.
        format!(
            "UPDATE protocol_meeting_participants SET status = 'speaking' \
             WHERE meeting_id = '{m}' AND agent_id = '{}'",
            b.id
        ),
        // A status outside the vocabulary.
        format!(
            "UPDATE protocol_meeting_participants SET status = 'napping' WHERE meeting_id = '{m}'"
        ),
        // A speaker in a meeting that is not active.
        format!("UPDATE protocol_meetings SET status = 'ready' WHERE id = '{m}'"),
        // Ended without an end time.
        format!(
            "UPDATE protocol_meetings SET status = 'ended', current_speaker_id = NULL, \
             turn_deadline = NULL WHERE id = '{m}'"
        ),
        // Two participants with one join order.
        format!(
            "UPDATE protocol_meeting_participants SET join_order = 1 \
             WHERE meeting_id = '{m}' AND agent_id = '{}'",
            b.id
        ),
        // A repeated event number.
        format!(
            "INSERT INTO protocol_meeting_events (meeting_id, seq, event_type, agent_id, data, \
             created_at) VALUES ('{m}', 1, 'agent_spoke', NULL, NULL, {})",
            pattern_db::sql::time_of_millis(db.backend(), "0")
        ),
        // A non-positive turn duration.
        format!("UPDATE protocol_meetings SET turn_duration_ms = 0 WHERE id = '{m}'"),
    ];
    for sql in refused {
        let got = execute_raw(&db, &sql).await;
        assert!(
            matches!(got, Err(Error::Storage(StorageError::Database(_)))),
            "{sql}: {got:?}"
        );
    }
    // The meeting is untouched.
    let meeting = store.meeting(m).await.unwrap();
    assert_eq!(meeting.speaker, Some(a.id));
    assert_eq!(meeting.last_event_seq, 6);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn protocol_schema_refuses_recipient_and_meeting(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (a, b) = protocol_pair(&db).await;
    let meeting = store
        .create_meeting(a.id, None)
        .await
        .unwrap()
        .meeting
        .id
        .to_string();
    let both = insert_raw_protocol_message(&db, a.id, Some(b.id), Some(&meeting)).await;
    assert!(
        matches!(both, Err(Error::Storage(StorageError::Database(_)))),
        "{both:?}"
    );
    let neither = insert_raw_protocol_message(&db, a.id, None, None).await;
    assert!(
        matches!(neither, Err(Error::Storage(StorageError::Database(_)))),
        "{neither:?}"
    );
    // A meeting id must name a meeting (a foreign key on PostgreSQL, triggers on SQLite).
    let unknown = insert_raw_protocol_message(&db, a.id, None, Some("meeting-1")).await;
    assert!(
        matches!(unknown, Err(Error::Storage(StorageError::Database(_)))),
        "{unknown:?}"
    );
    // The same statement with exactly one of them is accepted: the CHECK is what refused.
    insert_raw_protocol_message(&db, a.id, Some(b.id), None)
        .await
        .unwrap();
    insert_raw_protocol_message(&db, a.id, None, Some(&meeting))
        .await
        .unwrap();
    assert_eq!(store.unread_count(b.id).await.unwrap(), 1);
    assert_eq!(
        store
            .meeting_messages(pattern_db::MeetingId(meeting.parse().unwrap()))
            .await
            .unwrap()
            .len(),
        1
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn the_selector_hands_the_turn_as_the_host_chose(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (_, ids) = agents(&db, &["host", "ann", "ben", "cat"]).await;
    let (host, ann, ben, cat) = (ids[0], ids[1], ids[2], ids[3]);
    let m = store
        .create_meeting_with_plan(host, None, MeetingPolicy::Selector, json!({}))
        .await
        .unwrap()
        .meeting
        .id;
    for a in [ann, ben, cat] {
        store.join_meeting(m, a).await.unwrap();
    }
    store.start_meeting(m, host).await.unwrap();
    assert_eq!(store.meeting(m).await.unwrap().speaker, Some(host));
    // Refusals: not the host, the host choosing itself or an absent agent; nothing changes.
    let errs = [
        store.choose_speaker(m, ann, ben).await.unwrap_err(),
        store.choose_speaker(m, host, host).await.unwrap_err(),
        store
            .choose_speaker(m, host, AgentId::new())
            .await
            .unwrap_err(),
    ];
    assert!(
        matches!(Refusal::of(&errs[0]), Some(Refusal::NotHost { .. })),
        "{}",
        errs[0]
    );
    assert!(
        matches!(errs[1], Error::Protocol(ProtocolError::InvalidMessage(_))),
        "{}",
        errs[1]
    );
    assert!(
        matches!(
            Refusal::of(&errs[2]),
            Some(Refusal::NotMeetingParticipant { .. })
        ),
        "{}",
        errs[2]
    );
    assert_eq!(store.meeting(m).await.unwrap().chosen, None);
    // The host chooses cat: after the host speaks, cat; after cat, the host again.
    store.choose_speaker(m, host, cat).await.unwrap();
    store.speak(m, host, text("cat, your view?")).await.unwrap();
    assert_eq!(store.meeting(m).await.unwrap().speaker, Some(cat));
    let err = store.choose_speaker(m, host, ann).await.unwrap_err();
    assert!(
        matches!(Refusal::of(&err), Some(Refusal::NotSpeaker { .. })),
        "{err}"
    );
    store.speak(m, cat, text("meow")).await.unwrap();
    assert_eq!(store.meeting(m).await.unwrap().speaker, Some(host));
    // The chosen speaker leaves before its turn: the host's turn goes on in join order.
    store.choose_speaker(m, host, ben).await.unwrap();
    store.leave_meeting(m, ben).await.unwrap();
    store.pass_turn(m, host).await.unwrap();
    assert_eq!(store.meeting(m).await.unwrap().speaker, Some(ann));
    let events = store.meeting_events_after(m, 0, 1000).await.unwrap();
    let reasons: Vec<String> = events
        .iter()
        .filter(|e| e.event_type == MeetingEventType::TurnPassed)
        .map(|e| {
            e.data.as_ref().unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(reasons, ["start", "chosen", "spoke", "passed"]);
    // A round-robin meeting has no choosing.
    let rr = store.create_meeting(host, None).await.unwrap().meeting.id;
    store.join_meeting(rr, ann).await.unwrap();
    store.start_meeting(rr, host).await.unwrap();
    let err = store.choose_speaker(rr, host, ann).await.unwrap_err();
    assert!(
        matches!(Refusal::of(&err), Some(Refusal::MeetingState { .. })),
        "{err}"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

fn page<Id>(liveness: Liveness, before: Option<Id>, limit: u32) -> ListPage<Id> {
    ListPage {
        liveness,
        before,
        limit,
    }
}

/// Two organizations' sessions and meetings: each lists its own only, live or ended on request,
/// newest first, paged by the last id.
async fn lists_are_walled_filtered_and_paged(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let globex = db.create_organization("globex", "Globex").await.unwrap();
    let mut agents = Vec::new();
    for name in ["a1", "a2", "a3"] {
        agents.push(
            db.create_org_agent(acme.id, NewAgent::named(name))
                .await
                .unwrap(),
        );
    }
    let g1 = db
        .create_org_agent(globex.id, NewAgent::named("g1"))
        .await
        .unwrap();
    let g2 = db
        .create_org_agent(globex.id, NewAgent::named("g2"))
        .await
        .unwrap();

    // Acme: three sessions (one ended), two meetings (one ended); Globex: one of each.
    let s1 = store
        .open_session(agents[0].id, agents[1].id, SessionType::Sync)
        .await
        .unwrap();
    let s2 = store
        .open_session(agents[1].id, agents[2].id, SessionType::Async)
        .await
        .unwrap();
    let s3 = store
        .open_session(agents[0].id, agents[2].id, SessionType::Sync)
        .await
        .unwrap();
    store.end_session(s2.id, agents[1].id).await.unwrap();
    let gs = store
        .open_session(g1.id, g2.id, SessionType::Sync)
        .await
        .unwrap();
    let m1 = store
        .create_meeting(agents[0].id, None)
        .await
        .unwrap()
        .meeting;
    let m2 = store
        .create_meeting(agents[1].id, None)
        .await
        .unwrap()
        .meeting;
    store.end_meeting(m1.id, agents[0].id).await.unwrap();
    let gm = store.create_meeting(g1.id, None).await.unwrap().meeting;

    let ids = |list: Vec<pattern_db::Session>| list.into_iter().map(|s| s.id).collect::<Vec<_>>();
    let all = ids(store
        .org_sessions(acme.id, page(Liveness::All, None, 10))
        .await
        .unwrap());
    assert_eq!(all, vec![s3.id, s2.id, s1.id], "newest first, Acme's only");
    let live = ids(store
        .org_sessions(acme.id, page(Liveness::Live, None, 10))
        .await
        .unwrap());
    assert_eq!(live, vec![s3.id, s1.id]);
    let ended = ids(store
        .org_sessions(acme.id, page(Liveness::Ended, None, 10))
        .await
        .unwrap());
    assert_eq!(ended, vec![s2.id]);
    let first = ids(store
        .org_sessions(acme.id, page(Liveness::All, None, 2))
        .await
        .unwrap());
    assert_eq!(first, vec![s3.id, s2.id]);
    let next = ids(store
        .org_sessions(acme.id, page(Liveness::All, Some(s2.id), 2))
        .await
        .unwrap());
    assert_eq!(next, vec![s1.id], "the page after the last id");
    // Each choice of rows pages too (its own statement).
    let live_next = ids(store
        .org_sessions(acme.id, page(Liveness::Live, Some(s3.id), 10))
        .await
        .unwrap());
    assert_eq!(live_next, vec![s1.id]);
    let ended_next = ids(store
        .org_sessions(acme.id, page(Liveness::Ended, Some(s3.id), 10))
        .await
        .unwrap());
    assert_eq!(ended_next, vec![s2.id]);
    let ended_none = ids(store
        .org_sessions(acme.id, page(Liveness::Ended, Some(s2.id), 10))
        .await
        .unwrap());
    assert!(ended_none.is_empty());
    let theirs = ids(store
        .org_sessions(globex.id, page(Liveness::All, None, 10))
        .await
        .unwrap());
    assert_eq!(theirs, vec![gs.id]);
    // Another organization's cursor never shows its rows.
    let unknown: Option<SessionId> = Some(SessionId::new());
    assert!(
        store
            .org_sessions(globex.id, page(Liveness::All, unknown, 10))
            .await
            .unwrap()
            .iter()
            .all(|s| s.id == gs.id)
    );

    let mids =
        |list: Vec<pattern_protocol::Meeting>| list.into_iter().map(|m| m.id).collect::<Vec<_>>();
    let all = mids(
        store
            .org_meetings(acme.id, page(Liveness::All, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(all, vec![m2.id, m1.id]);
    let live = mids(
        store
            .org_meetings(acme.id, page(Liveness::Live, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(live, vec![m2.id]);
    let ended = mids(
        store
            .org_meetings(acme.id, page(Liveness::Ended, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(ended, vec![m1.id]);
    let next = mids(
        store
            .org_meetings(acme.id, page(Liveness::All, Some(m2.id), 10))
            .await
            .unwrap(),
    );
    assert_eq!(next, vec![m1.id]);
    let live_next = mids(
        store
            .org_meetings(acme.id, page(Liveness::Live, Some(m2.id), 10))
            .await
            .unwrap(),
    );
    assert!(
        live_next.is_empty(),
        "the live meeting is the cursor itself"
    );
    let ended_next = mids(
        store
            .org_meetings(acme.id, page(Liveness::Ended, Some(m2.id), 10))
            .await
            .unwrap(),
    );
    assert_eq!(ended_next, vec![m1.id]);
    let none: Option<MeetingId> = Some(m1.id);
    assert!(
        store
            .org_meetings(acme.id, page(Liveness::All, none, 10))
            .await
            .unwrap()
            .is_empty()
    );
    let theirs = mids(
        store
            .org_meetings(globex.id, page(Liveness::All, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(theirs, vec![gm.id]);
}

async fn protocol_sessions_are_normalised_and_one_live(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (a, b) = protocol_pair(&db).await;
    let ab = store
        .open_session(a.id, b.id, SessionType::Sync)
        .await
        .unwrap();
    assert!(ab.agent_a < ab.agent_b);
    assert_eq!(ab.status, SessionStatus::Active);
    assert_eq!(ab.turn, Some(a.id), "the opener speaks first");
    // B-A is A-B: the same live session, turn unchanged.
    let ba = store
        .open_session(b.id, a.id, SessionType::Sync)
        .await
        .unwrap();
    assert_eq!(ba, ab);
    assert_eq!(store.session(ab.id).await.unwrap(), ab);
    // Another type is another session; an async one has no turn.
    let async_ = store
        .open_session(b.id, a.id, SessionType::Async)
        .await
        .unwrap();
    assert_ne!(async_.id, ab.id);
    assert_eq!(async_.turn, None);
    // Concurrent opens of one pair agree on one session.
    let opens = (0..8).map(|i| {
        let db = db.clone();
        let (x, y) = if i % 2 == 0 {
            (a.id, b.id)
        } else {
            (b.id, a.id)
        };
        tokio::spawn(async move {
            Store::new(&db)
                .open_session(x, y, SessionType::Sync)
                .await
                .unwrap()
                .id
        })
    });
    for id in futures::future::join_all(opens).await {
        assert_eq!(id.unwrap(), ab.id);
    }
    // Once ended, the pair may open a new one.
    store.end_session(ab.id, b.id).await.unwrap();
    let again = store
        .open_session(b.id, a.id, SessionType::Sync)
        .await
        .unwrap();
    assert_ne!(again.id, ab.id);
    assert_eq!(again.turn, Some(b.id));

    let alone = store
        .open_session(a.id, a.id, SessionType::Async)
        .await
        .unwrap_err();
    assert!(matches!(Refusal::of(&alone), Some(Refusal::SelfSession(x)) if *x == a.id));
    assert!(matches!(
        store
            .open_session(a.id, AgentId::new(), SessionType::Async)
            .await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    assert!(matches!(
        store.session(SessionId::new()).await,
        Err(Error::Protocol(ProtocolError::NotFound {
            kind: "session",
            ..
        }))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn protocol_sync_sessions_alternate_strictly(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (a, b) = protocol_pair(&db).await;
    let s = store
        .open_session(b.id, a.id, SessionType::Sync)
        .await
        .unwrap();
    // B opened: A is out of turn, and the refusal changes nothing.
    let refused = store
        .send_session_message(s.id, a.id, say("too early"))
        .await;
    assert!(
        matches!(&refused, Err(Error::Protocol(ProtocolError::OutOfTurn { agent, turn, .. })) if *agent == a.id && *turn == Some(b.id)),
        "{refused:?}"
    );
    assert_eq!(store.session(s.id).await.unwrap(), s);
    assert!(store.session_messages(s.id).await.unwrap().is_empty());
    assert_eq!(store.unread_count(b.id).await.unwrap(), 0);

    let m1 = store
        .send_session_message(s.id, b.id, say("one"))
        .await
        .unwrap();
    assert_eq!(m1.recipient, Some(a.id));
    assert_eq!(m1.session, Some(s.id));
    assert_eq!(store.session(s.id).await.unwrap().turn, Some(a.id));
    assert!(matches!(
        store.send_session_message(s.id, b.id, say("twice")).await,
        Err(Error::Protocol(ProtocolError::OutOfTurn { .. }))
    ));
    let m2 = store
        .send_session_message(s.id, a.id, say("two"))
        .await
        .unwrap();
    let m3 = store
        .send_session_message(s.id, b.id, say("three"))
        .await
        .unwrap();
    assert!(m1.seq < m2.seq && m2.seq < m3.seq);
    let stored = store.session_messages(s.id).await.unwrap();
    assert_eq!(stored, [m1.clone(), m2.clone(), m3.clone()]);
    assert_eq!(store.session(s.id).await.unwrap().turn, Some(a.id));

    // A stranger can neither send nor end.
    let org = db.organization_by_external_id("acme").await.unwrap();
    let eve = db
        .create_agent(NewAgent::named("Eve").in_organization(org.id))
        .await
        .unwrap();
    assert!(matches!(
        store.send_session_message(s.id, eve.id, say("hi")).await,
        Err(Error::Protocol(ProtocolError::NotParticipant { .. }))
    ));
    assert!(matches!(
        store.end_session(s.id, eve.id).await,
        Err(Error::Protocol(ProtocolError::NotParticipant { .. }))
    ));
    assert!(matches!(
        store
            .send_session_message(s.id, a.id, NewProtocolMessage::new("", json!(1)))
            .await,
        Err(Error::Protocol(ProtocolError::InvalidMessage(_)))
    ));
    assert!(matches!(
        NewProtocolMessage::from_json_str("chat", "{not json"),
        Err(Error::Protocol(ProtocolError::InvalidMessage(_)))
    ));
    let parsed = NewProtocolMessage::from_json_str("chat", r#"{"k": [1, 2]}"#).unwrap();
    let m4 = store
        .send_session_message(s.id, a.id, parsed)
        .await
        .unwrap();
    assert_eq!(m4.content, json!({"k": [1, 2]}));

    // Ending: the turn is gone, nothing more can be sent, ending again is refused.
    let ended = store.end_session(s.id, a.id).await.unwrap();
    assert_eq!(ended.status, SessionStatus::Ended);
    assert_eq!(ended.turn, None);
    assert!(ended.ended_at.is_some());
    assert_eq!(store.session(s.id).await.unwrap(), ended);
    assert!(matches!(
        store.send_session_message(s.id, b.id, say("late")).await,
        Err(Error::Protocol(ProtocolError::SessionEnded(_)))
    ));
    assert!(matches!(
        store.end_session(s.id, b.id).await,
        Err(Error::Protocol(ProtocolError::SessionEnded(_)))
    ));
    assert_eq!(store.session_messages(s.id).await.unwrap().len(), 4);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn protocol_async_inbox(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (a, b) = protocol_pair(&db).await;
    let s = store
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(
            store
                .send_session_message(s.id, a.id, say(&format!("a{i}")))
                .await
                .unwrap(),
        );
    }
    let from_b = store
        .send_session_message(s.id, b.id, say("b0"))
        .await
        .unwrap();
    assert_eq!(store.unread_count(b.id).await.unwrap(), 5);
    assert_eq!(store.unread_count(a.id).await.unwrap(), 1);
    assert_eq!(store.unread(b.id).await.unwrap(), sent);
    assert_eq!(
        store.oldest_unread(b.id).await.unwrap().as_ref(),
        sent.first()
    );
    assert_eq!(
        store.unread(a.id).await.unwrap().as_slice(),
        std::slice::from_ref(&from_b)
    );

    // Only the recipient can mark: A marking B's messages changes nothing.
    let ids: Vec<_> = sent.iter().map(|m| m.id).collect();
    assert_eq!(store.mark_read(a.id, &ids).await.unwrap(), 0);
    assert_eq!(store.unread_count(b.id).await.unwrap(), 5);
    // Idempotent, counts only what changed.
    assert_eq!(store.mark_read(b.id, &ids[..2]).await.unwrap(), 2);
    assert_eq!(store.mark_read(b.id, &ids[..3]).await.unwrap(), 1);
    assert_eq!(store.mark_read(b.id, &ids[..3]).await.unwrap(), 0);
    assert_eq!(
        store
            .mark_read(b.id, &[ProtocolMessageId::new()])
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.unread_count(b.id).await.unwrap(), 2);
    assert_eq!(store.unread(b.id).await.unwrap(), sent[3..]);
    let read = store.session_messages(s.id).await.unwrap();
    assert!(read[..3].iter().all(|m| m.read_at.is_some()));
    assert!(read[3..].iter().all(|m| m.read_at.is_none()));
    assert!(matches!(
        store.mark_read(AgentId::new(), &ids).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));

    store.end_session(s.id, b.id).await.unwrap();
    assert!(matches!(
        store.send_session_message(s.id, a.id, say("late")).await,
        Err(Error::Protocol(ProtocolError::SessionEnded(_)))
    ));
    // Unread messages outlive their session.
    assert_eq!(store.unread_count(b.id).await.unwrap(), 2);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn protocol_sync_turn_race_has_one_winner(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| c.pg_write_connections = 4).await;
    let store = Store::new(&db);
    let (a, b) = protocol_pair(&db).await;
    for round in 0..5 {
        let s = store
            .open_session(a.id, b.id, SessionType::Sync)
            .await
            .unwrap();
        let sends = (0..6).map(|i| {
            let db = db.clone();
            let id = s.id;
            let sender = a.id;
            tokio::spawn(async move {
                Store::new(&db)
                    .send_session_message(id, sender, say(&format!("r{round} t{i}")))
                    .await
            })
        });
        let mut won = 0;
        for r in futures::future::join_all(sends).await {
            match r.unwrap() {
                Ok(_) => won += 1,
                Err(Error::Protocol(ProtocolError::OutOfTurn { turn, .. })) => {
                    assert_eq!(turn, Some(b.id))
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!(won, 1, "exactly one send of the turn wins");
        assert_eq!(store.session_messages(s.id).await.unwrap().len(), 1);
        assert_eq!(store.session(s.id).await.unwrap().turn, Some(b.id));
        store.end_session(s.id, a.id).await.unwrap();
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    nothing_crosses_an_organization_wall,
    protocol_sessions_are_normalised_and_one_live,
    protocol_sync_sessions_alternate_strictly,
    protocol_async_inbox,
    protocol_sync_turn_race_has_one_winner,
    protocol_schema_refuses_recipient_and_meeting,
    protocol_schema_guards_meetings,
    the_selector_hands_the_turn_as_the_host_chose,
    lists_are_walled_filtered_and_paged,
);
