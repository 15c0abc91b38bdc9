//! Round-robin fairness as a property: over any sequence of joins, leaves and speaking attempts
//! (by anyone), the speaker is always the one a simple model predicts (the next present
//! participant after the previous speaker in join order, wrapping, skipping those who left), and
//! once membership stops changing every present participant speaks exactly once per round, in
//! join order. The selector policy the same way: the model adds the host's choices, the turn
//! going back to the host after anyone else, and to the chosen one (if present) after the host.

use pattern_protocol::{AgentId, Error, MeetingStatus, Protocol};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use pattern_protocol::ProtocolError;

use crate::meetings::say;
use crate::{Kind, agent, fresh, protocol};

const AGENTS: usize = 5;

#[derive(Debug, Clone)]
enum Step {
    Join(usize),
    Leave(usize),
    /// A speaking attempt by this agent (refused unless it is the speaker).
    Speak(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..AGENTS).prop_map(Step::Join),
        (0..AGENTS).prop_map(Step::Leave),
        (0..AGENTS).prop_map(Step::Speak),
        (0..AGENTS).prop_map(Step::Speak),
    ]
}

/// The model: present agents with their join order, and the speaker.
struct Model {
    present: Vec<(usize, u64)>,
    last_order: u64,
    speaker: Option<usize>,
}

impl Model {
    fn next_after(&self, order: u64) -> Option<usize> {
        let mut sorted = self.present.clone();
        sorted.sort_by_key(|p| p.1);
        sorted
            .iter()
            .find(|p| p.1 > order)
            .or(sorted.first())
            .map(|p| p.0)
    }

    fn order_of(&self, who: usize) -> Option<u64> {
        self.present.iter().find(|p| p.0 == who).map(|p| p.1)
    }
}

fn fairness(kind: Kind) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tdb = rt.block_on(fresh(kind));
    let p: Protocol = rt.block_on(protocol(&tdb));
    let ids: Vec<AgentId> = rt.block_on(async {
        let mut ids = Vec::new();
        for n in 0..AGENTS {
            ids.push(agent(&p, &format!("agent-{n}")).await.id);
        }
        ids
    });
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(step(), 0..40), |steps| {
            rt.block_on(check(&p, &ids, steps));
            Ok(())
        })
        .unwrap();
    rt.block_on(async {
        p.db().clone().close().await;
        tdb.cleanup().await.unwrap();
    });
}

async fn check(p: &Protocol, ids: &[AgentId], steps: Vec<Step>) {
    let index = |id: AgentId| ids.iter().position(|x| *x == id).unwrap();
    // Agent 0 hosts and agent 1 joins; the meeting starts with agent 0 speaking.
    let m = p.create_meeting(ids[0], None).await.unwrap().meeting.id;
    p.join_meeting(m, ids[1]).await.unwrap();
    p.start_meeting(m, ids[0]).await.unwrap();
    let mut model = Model {
        present: vec![(0, 1), (1, 2)],
        last_order: 2,
        speaker: Some(0),
    };
    for step in steps {
        match step {
            Step::Join(who) => {
                let got = p.join_meeting(m, ids[who]).await;
                if model.order_of(who).is_some() {
                    assert!(matches!(
                        got,
                        Err(Error::Protocol(ProtocolError::AlreadyParticipant { .. }))
                    ));
                } else {
                    got.unwrap();
                    model.last_order += 1;
                    model.present.push((who, model.last_order));
                }
            }
            Step::Leave(who) => {
                let got = p.leave_meeting(m, ids[who]).await;
                let Some(order) = model.order_of(who) else {
                    assert!(matches!(
                        got,
                        Err(Error::Protocol(ProtocolError::NotMeetingParticipant { .. }))
                    ));
                    continue;
                };
                let update = got.unwrap();
                model.present.retain(|p| p.0 != who);
                if model.speaker == Some(who) || model.present.is_empty() {
                    model.speaker = model.next_after(order);
                }
                if model.present.is_empty() {
                    assert_eq!(update.meeting.status, MeetingStatus::Ended);
                    return;
                }
            }
            Step::Speak(who) => {
                let got = p.speak(m, ids[who], say("turn")).await;
                if model.speaker == Some(who) {
                    got.unwrap();
                    let order = model.order_of(who).unwrap();
                    model.speaker = model.next_after(order);
                } else if model.order_of(who).is_none() {
                    assert!(matches!(
                        got,
                        Err(Error::Protocol(ProtocolError::NotMeetingParticipant { .. }))
                    ));
                } else {
                    assert!(matches!(
                        got,
                        Err(Error::Protocol(ProtocolError::NotSpeaker { .. }))
                    ));
                }
            }
        }
        let speaker = p.meeting(m).await.unwrap().speaker.map(index);
        assert_eq!(speaker, model.speaker, "after {step:?}");
    }
    // Membership is stable now: one full round has every present participant speak once, in
    // join order starting from the current speaker.
    let mut sorted = model.present.clone();
    sorted.sort_by_key(|p| p.1);
    let start = sorted
        .iter()
        .position(|p| Some(p.0) == model.speaker)
        .unwrap();
    let expected: Vec<usize> = (0..sorted.len())
        .map(|k| sorted[(start + k) % sorted.len()].0)
        .collect();
    let mut round = Vec::new();
    for _ in 0..sorted.len() {
        let now = p.meeting(m).await.unwrap().speaker.unwrap();
        p.speak(m, now, say("round")).await.unwrap();
        round.push(index(now));
    }
    assert_eq!(round, expected);
    p.end_meeting(m, ids[0]).await.unwrap();
}

#[derive(Debug, Clone)]
enum SelectorStep {
    Join(usize),
    Leave(usize),
    Speak(usize),
    /// The host (agent 0) chooses this agent.
    Choose(usize),
}

fn selector_step() -> impl Strategy<Value = SelectorStep> {
    prop_oneof![
        (0..AGENTS).prop_map(SelectorStep::Join),
        (0..AGENTS).prop_map(SelectorStep::Leave),
        (0..AGENTS).prop_map(SelectorStep::Speak),
        (0..AGENTS).prop_map(SelectorStep::Speak),
        (0..AGENTS).prop_map(SelectorStep::Choose),
        (0..AGENTS).prop_map(SelectorStep::Choose),
    ]
}

fn selector(kind: Kind) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tdb = rt.block_on(fresh(kind));
    let p: Protocol = rt.block_on(protocol(&tdb));
    let ids: Vec<AgentId> = rt.block_on(async {
        let mut ids = Vec::new();
        for n in 0..AGENTS {
            ids.push(agent(&p, &format!("agent-{n}")).await.id);
        }
        ids
    });
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(selector_step(), 0..48), |steps| {
            rt.block_on(check_selector(&p, &ids, steps));
            Ok(())
        })
        .unwrap();
    rt.block_on(async {
        p.db().clone().close().await;
        tdb.cleanup().await.unwrap();
    });
}

/// Who the model says speaks after `from` (whose join order was `order`) hands the turn on.
fn selector_next(model: &Model, chosen: Option<usize>, from: usize, order: u64) -> Option<usize> {
    let host_present = model.order_of(0).is_some();
    if from != 0 && host_present {
        return Some(0);
    }
    if from == 0
        && let Some(c) = chosen.filter(|c| model.order_of(*c).is_some())
    {
        return Some(c);
    }
    model.next_after(order)
}

async fn check_selector(p: &Protocol, ids: &[AgentId], steps: Vec<SelectorStep>) {
    let index = |id: AgentId| ids.iter().position(|x| *x == id).unwrap();
    let m = p
        .create_meeting_with_plan(
            ids[0],
            None,
            pattern_protocol::MeetingPolicy::Selector,
            serde_json::json!({}),
        )
        .await
        .unwrap()
        .meeting
        .id;
    p.join_meeting(m, ids[1]).await.unwrap();
    p.start_meeting(m, ids[0]).await.unwrap();
    let mut model = Model {
        present: vec![(0, 1), (1, 2)],
        last_order: 2,
        speaker: Some(0),
    };
    let mut chosen: Option<usize> = None;
    for step in steps {
        match step {
            SelectorStep::Join(who) => {
                if p.join_meeting(m, ids[who]).await.is_ok() {
                    assert!(model.order_of(who).is_none(), "joined twice");
                    model.last_order += 1;
                    model.present.push((who, model.last_order));
                }
            }
            SelectorStep::Leave(who) => {
                let got = p.leave_meeting(m, ids[who]).await;
                let Some(order) = model.order_of(who) else {
                    assert!(got.is_err());
                    continue;
                };
                let update = got.unwrap();
                model.present.retain(|p| p.0 != who);
                if model.present.is_empty() {
                    assert_eq!(update.meeting.status, MeetingStatus::Ended);
                    return;
                }
                if model.speaker == Some(who) {
                    model.speaker = selector_next(&model, chosen.take(), who, order);
                }
            }
            SelectorStep::Speak(who) => {
                let got = p.speak(m, ids[who], say("turn")).await;
                if model.speaker == Some(who) {
                    got.unwrap();
                    let order = model.order_of(who).unwrap();
                    model.speaker = selector_next(&model, chosen.take(), who, order);
                } else {
                    assert!(got.is_err(), "{who} spoke out of turn");
                }
            }
            SelectorStep::Choose(who) => {
                let valid = model.speaker == Some(0) && who != 0 && model.order_of(who).is_some();
                let got = p.choose_speaker(m, ids[0], ids[who]).await;
                assert_eq!(got.is_ok(), valid, "choose {who}: {got:?}");
                if valid {
                    chosen = Some(who);
                }
            }
        }
        let meeting = p.meeting(m).await.unwrap();
        assert_eq!(meeting.speaker.map(index), model.speaker, "after {step:?}");
        assert_eq!(meeting.chosen.map(index), chosen, "after {step:?}");
    }
    p.end_meeting(m, ids[0]).await.unwrap();
}

#[test]
fn sqlite_selector_hands_the_turn_as_chosen() {
    selector(Kind::Sqlite);
}

#[test]
fn postgres_selector_hands_the_turn_as_chosen() {
    selector(Kind::Postgres);
}

#[test]
fn sqlite_round_robin_is_fair() {
    fairness(Kind::Sqlite);
}

#[test]
fn postgres_round_robin_is_fair() {
    fairness(Kind::Postgres);
}
