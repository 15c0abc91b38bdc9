//! The SQL of claims, turns and recovery (see [`crate::runs`] for the rules and decision 0010).
//!
//! Every function here runs inside the writer's transaction after the locks the writer took
//! for its group (on PostgreSQL: the row locks of every agent the group writes, in agent order),
//! so a claim is read and changed under its agent's lock and never raced. It must never commit,
//! never change a claim without its agent's lock, and never append to a finished turn.
//!
//! Statements are the checked ones of `pattern_db_sqlite::runs` and `pattern_db_postgres::runs`
//! (decision 0023 step 3 (c); recovery's candidate agents are four fixed statements, one per
//! scope and agent filter), except one whose text varies with the call and stays dynamic: the
//! insert of a turn's events (its `VALUES` list grows with the events).

pub(crate) mod writes;

use crate::{AgentError, BatchError, RunError, StorageError};
use std::collections::{BTreeSet, HashMap};

use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::instant;

use super::{
    Ctx, FromStored, StoredId, StoredTime, abandon_batch, begin_batch, complete_batch, load_batch,
    lock_agent, log_activity, now_ms, parse_uuid,
};
use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::model::{
    Abandoned, AgentId, BatchId, BatchInfo, BatchType, BeginBatch, NewMessage, RecoveryScope,
};
use crate::process::HolderStatus;
use crate::queue::{NewQueued, QueuedMessage, queued_from_plain};
use crate::runs::{
    ClaimInfo, Finished, NewTurn, NewTurnEvent, RunClaim, RunEnding, Started, Submit, Submitted,
    TurnEvent, TurnId, TurnInfo, TurnOutcome, TurnState, lifecycle,
};
use crate::wake::{self, WakeKey};

/// Longest turn source, idempotency key, fingerprint and event kind, in bytes.
const MAX_SOURCE: usize = 200;
const MAX_KEY: usize = 200;
const MAX_FINGERPRINT: usize = 200;
const MAX_KIND: usize = 64;

/// The arguments of [`crate::Database::finish_run`].
#[derive(Debug)]
pub(crate) struct FinishRun {
    pub(crate) claim: RunClaim,
    pub(crate) batch: BatchId,
    pub(crate) turn: TurnId,
    pub(crate) ending: RunEnding,
    pub(crate) events: Vec<NewTurnEvent>,
    pub(crate) next: bool,
}

// ---------------------------------------------------------------------------------------------
// claims

/// The claim row of `agent`: `(token, holder)`; `(0, None)` when it never ran under a claim.
async fn claim_row(conn: &mut Conn<'_>, agent: AgentId) -> Result<(i64, Option<String>)> {
    let row = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::claim(c, &agent.to_string())
            .await?
            .map(|r| (r.token, r.holder)),
        Conn::Postgres(c) => pattern_db_postgres::runs::claim(c, agent.0)
            .await?
            .map(|r| (r.token, r.holder)),
    };
    Ok(row.unwrap_or((0, None)))
}

/// `agent`'s open batches, in id order: `(id, lease expiry in ms, claim token)`.
async fn open_batches(
    conn: &mut Conn<'_>,
    agent: AgentId,
) -> Result<Vec<(i64, Option<i64>, Option<i64>)>> {
    Ok(match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::open_batches(c, &agent.to_string())
            .await?
            .into_iter()
            .map(|r| (r.id, r.lease_expires_at, r.claim_token))
            .collect(),
        Conn::Postgres(c) => pattern_db_postgres::runs::open_batches(c, agent.0)
            .await?
            .into_iter()
            .map(|r| {
                (
                    r.id,
                    r.lease_expires_at.map(|t| t.timestamp_millis()),
                    r.claim_token,
                )
            })
            .collect(),
    })
}

/// Refuses a write fenced by `claim` unless the claim is still this process's with that token.
/// Runs under the agent's lock (the writer's), so no takeover can commit in between.
pub(crate) async fn check_fence(conn: &mut Conn<'_>, ctx: &Ctx, claim: &RunClaim) -> Result<()> {
    let (token, holder) = claim_row(conn, claim.agent).await?;
    if token == claim.token && holder.as_deref() == Some(ctx.run_owner.as_str()) {
        Ok(())
    } else {
        Err(RunError::ClaimLost {
            agent: claim.agent,
            token: claim.token,
        }
        .into())
    }
}

/// Refuses a batch write that does not belong to the writer: a batch begun under a claim is
/// written only under that claim, and a fenced run writes only its own batches.
pub(crate) fn check_batch_owner(info: &BatchInfo, fence: Option<&RunClaim>) -> Result<()> {
    match (info.claim_token, fence) {
        (None, None) => Ok(()),
        (Some(token), Some(f)) if f.agent == info.agent_id && f.token == token => Ok(()),
        (Some(_), Some(f)) | (None, Some(f)) if f.agent == info.agent_id => {
            Err(RunError::ClaimLost {
                agent: f.agent,
                token: f.token,
            }
            .into())
        }
        // A run writing another agent's batch: only that batch's own rules apply.
        (None, Some(_)) => Ok(()),
        (Some(_), _) => Err(RunError::AgentBusy {
            agent: info.agent_id,
            holder: info
                .run_owner
                .clone()
                .unwrap_or_else(|| "another run".into()),
        }
        .into()),
    }
}

/// Whether the agent may start a run now, after taking over a dead holder's claim and
/// abandoning expired batches begun without a claim.
enum Availability {
    Free { token: i64 },
    Busy,
}

async fn availability(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    now: i64,
) -> Result<Availability> {
    let (mut token, holder) = claim_row(conn, agent).await?;
    if let Some(holder) = holder {
        let status = ctx.judge.status(conn, &holder).await?;
        if status == HolderStatus::Alive {
            return Ok(Availability::Busy);
        }
        token = take_over(conn, ctx, agent, &holder, status, now).await?.0;
    }
    for (id, lease, claimed) in open_batches(conn, agent).await? {
        // A claimed batch whose claim is free has no run: its run was released uncleanly.
        // A batch begun without a claim blocks until its lease expires.
        let dead = claimed.is_some() || lease.is_some_and(|l| l < now);
        if !dead {
            return Ok(Availability::Busy);
        }
        abandon_dead(conn, ctx, agent, SnowflakeId(id), "its run is gone", now).await?;
    }
    Ok(Availability::Free { token })
}

/// Takes `agent` away from its dead `holder`: the token moves on (fencing every write the old
/// run may still try), its open batches are abandoned and their turns finished as
/// interrupted, and the claim is left free. A holder known gone is forgotten (its process row
/// and machine-id lease). Returns the new token and what was abandoned.
async fn take_over(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    holder: &str,
    status: HolderStatus,
    now: i64,
) -> Result<(i64, Vec<Abandoned>)> {
    let (token, open) = match conn {
        Conn::Sqlite(c) => {
            let id = agent.to_string();
            let token = pattern_db_sqlite::runs::take_over(c, &id).await?;
            (token, pattern_db_sqlite::runs::open_claimed(c, &id).await?)
        }
        Conn::Postgres(c) => {
            let token = pattern_db_postgres::runs::take_over(c, agent.0).await?;
            (
                token,
                pattern_db_postgres::runs::open_claimed(c, agent.0).await?,
            )
        }
    };
    let reason = format!("the process `{holder}` running it stopped");
    let mut abandoned = Vec::with_capacity(open.len());
    for id in open {
        abandoned.push(abandon_dead(conn, ctx, agent, SnowflakeId(id), &reason, now).await?);
    }
    if status == HolderStatus::Gone {
        crate::process::forget(conn, holder).await?;
    }
    wake::notify(conn, ctx.backend, &[WakeKey::Agent(agent), WakeKey::Queue]).await?;
    Ok((token, abandoned))
}

/// Abandons one open batch of a run that is gone and finishes its turn as interrupted.
async fn abandon_dead(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    reason: &str,
    now: i64,
) -> Result<Abandoned> {
    super::mark_abandoned(conn, batch, now).await?;
    super::approvals::end_batch(
        conn,
        ctx,
        batch,
        "recovery",
        &format!("the run ended before an answer: {reason}"),
    )
    .await?;
    let info = load_batch(conn, agent, batch).await?;
    let trigger = super::batch_trigger(conn, batch).await?;
    let payload = serde_json::json!({
        "batch_id": batch.get(),
        "run_owner": info.run_owner,
        "reason": reason,
    });
    log_activity(conn, ctx, agent, "batch_abandoned", &payload).await?;
    // A scheduled wakeup whose run died is queued again, once.
    super::queue::retry_crashed_wakeup(conn, ctx, agent, batch, now).await?;
    let turns: Vec<TurnId> = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::unfinished_of_batch(c, batch.get())
            .await?
            .into_iter()
            .map(|t| Ok(TurnId(t.uuid()?)))
            .collect::<Result<_>>()?,
        Conn::Postgres(c) => pattern_db_postgres::runs::unfinished_of_batch(c, batch.get())
            .await?
            .into_iter()
            .map(TurnId)
            .collect(),
    };
    for turn in turns {
        append_events(
            conn,
            ctx,
            agent,
            turn,
            &[lifecycle::interrupted(Some(batch))],
        )
        .await?;
        finish_turn(conn, turn, TurnOutcome::Interrupted, now).await?;
    }
    Ok(Abandoned {
        batch: info,
        trigger,
    })
}

/// Makes this process the holder of `agent`'s claim (free at `token`); returns the claim.
async fn acquire(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    token: i64,
    now: i64,
) -> Result<RunClaim> {
    let claim = RunClaim {
        agent,
        token: token + 1,
    };
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::acquire(
                c,
                &agent.to_string(),
                claim.token,
                &ctx.run_owner,
                now,
            )
            .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::acquire(
                c,
                agent.0,
                claim.token,
                &ctx.run_owner,
                instant(now)?,
            )
            .await?
        }
    };
    Ok(claim)
}

async fn release(conn: &mut Conn<'_>, ctx: &Ctx, claim: &RunClaim) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::release(c, &claim.agent.to_string(), claim.token).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::release(c, claim.agent.0, claim.token).await?
        }
    };
    wake::notify(
        conn,
        ctx.backend,
        &[WakeKey::Agent(claim.agent), WakeKey::Queue],
    )
    .await
}

async fn set_claim_batch(conn: &mut Conn<'_>, claim: &RunClaim, batch: BatchId) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::set_batch(
                c,
                &claim.agent.to_string(),
                claim.token,
                batch.get(),
            )
            .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::set_batch(c, claim.agent.0, claim.token, batch.get()).await?
        }
    };
    Ok(())
}

/// The agent's oldest due pending queue entry.
async fn due_entry(
    conn: &mut Conn<'_>,
    agent: AgentId,
    now: i64,
) -> Result<Option<(QueuedMessage, Option<TurnId>)>> {
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::due_entry(c, &agent.to_string(), now)
            .await?
            .map(|(entry, turn)| {
                Ok((
                    queued_from_plain(entry)?,
                    turn.map(|t| parse_uuid(&t).map(TurnId)).transpose()?,
                ))
            })
            .transpose(),
        Conn::Postgres(c) => pattern_db_postgres::runs::due_entry(c, agent.0, instant(now)?)
            .await?
            .map(|(entry, turn)| Ok((queued_from_plain(entry)?, turn.map(TurnId))))
            .transpose(),
    }
}

/// Delivers `entry` under `claim`: marks it delivered (a recurring one moves on), begins its
/// batch, and moves its turn to running (creating one for entries queued without a turn).
async fn deliver(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    claim: RunClaim,
    entry: QueuedMessage,
    turn: Option<TurnId>,
    now: i64,
) -> Result<Started> {
    let agent = claim.agent;
    let mut entry = super::queue::claim_entry(conn, agent, entry.id, now, false)
        .await?
        .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
    let trigger = NewMessage::new(entry.role, entry.content.clone());
    let received = begin_batch(
        conn,
        ctx,
        agent,
        &trigger,
        &BeginBatch {
            batch_type: Some(entry.batch_type),
            ..BeginBatch::default()
        },
        Some(claim.token),
    )
    .await?;
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::set_delivered_batch(c, entry.id.get(), received.batch_id.get())
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::set_delivered_batch(
                c,
                entry.id.get(),
                received.batch_id.get(),
            )
            .await?
        }
    };
    entry.delivered_batch = Some(received.batch_id);
    set_claim_batch(conn, &claim, received.batch_id).await?;
    let turn = match turn {
        Some(turn) if entry.every.is_none() => {
            match conn {
                Conn::Sqlite(c) => {
                    pattern_db_sqlite::runs::start_turn(
                        c,
                        &turn.to_string(),
                        received.batch_id.get(),
                    )
                    .await?
                }
                Conn::Postgres(c) => {
                    pattern_db_postgres::runs::start_turn(c, turn.0, received.batch_id.get())
                        .await?
                }
            };
            turn
        }
        // A recurring entry (or one queued without a turn) gets a turn per delivery.
        _ => {
            let new = NewTurn::new(entry.source.clone());
            insert_turn(
                conn,
                &new,
                agent,
                TurnState::Running,
                Some(entry.id),
                Some(received.batch_id),
                now,
            )
            .await?;
            new.id
        }
    };
    append_events(conn, ctx, agent, turn, &[lifecycle::received(&received)]).await?;
    let turn = read_turn_tx(conn, agent, turn).await?;
    Ok(Started {
        claim,
        received,
        batch_type: entry.batch_type,
        turn,
        entry: Some(entry),
    })
}

async fn has_due(conn: &mut Conn<'_>, agent: AgentId, now: i64) -> Result<bool> {
    Ok(match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::has_due(c, &agent.to_string(), now).await?,
        Conn::Postgres(c) => pattern_db_postgres::runs::has_due(c, agent.0, instant(now)?).await?,
    })
}

pub(crate) async fn submit(conn: &mut Conn<'_>, ctx: &Ctx, s: &Submit) -> Result<Submitted> {
    let agent = s.agent;
    check_turn(&s.turn)?;
    if let Some(idem) = &s.turn.idempotency
        && let Some(first) = read_turn_by_key_tx(conn, agent, &idem.key).await?
    {
        return if first.fingerprint.as_deref() == Some(idem.fingerprint.as_str()) {
            Ok(Submitted::Replayed(first))
        } else {
            Err(RunError::IdempotencyKeyReused {
                key: idem.key.clone(),
                turn: first.id,
            }
            .into())
        };
    }
    lock_agent(conn, agent).await?;
    let now = now_ms();
    let free = if s.start {
        match availability(conn, ctx, agent, now).await? {
            Availability::Free { token } if !has_due(conn, agent, now).await? => Some(token),
            _ => None,
        }
    } else {
        None
    };
    match free {
        Some(token) => {
            let claim = acquire(conn, ctx, agent, token, now).await?;
            let received = begin_batch(
                conn,
                ctx,
                agent,
                &s.trigger,
                &BeginBatch {
                    batch_type: s.batch_type,
                    parent_batch: None,
                    retry_of: s.retry_of,
                },
                Some(claim.token),
            )
            .await?;
            set_claim_batch(conn, &claim, received.batch_id).await?;
            insert_turn(
                conn,
                &s.turn,
                agent,
                TurnState::Running,
                None,
                Some(received.batch_id),
                now,
            )
            .await?;
            append_events(
                conn,
                ctx,
                agent,
                s.turn.id,
                &[lifecycle::received(&received)],
            )
            .await?;
            let batch_type = load_batch(conn, agent, received.batch_id).await?.batch_type;
            let turn = read_turn_tx(conn, agent, s.turn.id).await?;
            Ok(Submitted::Started(Box::new(Started {
                claim,
                received,
                batch_type,
                turn,
                entry: None,
            })))
        }
        None => {
            let batch_type = s.batch_type.unwrap_or(match s.trigger.role {
                crate::model::Role::System => BatchType::SystemTrigger,
                _ => BatchType::UserRequest,
            });
            let entry = NewQueued {
                source: s.turn.source.clone(),
                retry_of: s.retry_of,
                ..NewQueued::now(batch_type, s.trigger.role, s.trigger.content.clone())
            };
            let entry = super::queue::enqueue(conn, ctx, agent, &entry).await?;
            match conn {
                Conn::Sqlite(c) => {
                    pattern_db_sqlite::runs::set_entry_turn(
                        c,
                        entry.id.get(),
                        &s.turn.id.to_string(),
                    )
                    .await?
                }
                Conn::Postgres(c) => {
                    pattern_db_postgres::runs::set_entry_turn(c, entry.id.get(), s.turn.id.0)
                        .await?
                }
            };
            insert_turn(
                conn,
                &s.turn,
                agent,
                TurnState::Queued,
                Some(entry.id),
                None,
                now,
            )
            .await?;
            append_events(conn, ctx, agent, s.turn.id, &[lifecycle::queued(entry.id)]).await?;
            wake::notify(conn, ctx.backend, &[WakeKey::Agent(agent), WakeKey::Queue]).await?;
            let turn = read_turn_tx(conn, agent, s.turn.id).await?;
            Ok(Submitted::Queued { entry, turn })
        }
    }
}

pub(crate) async fn claim_next(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
) -> Result<Option<Box<Started>>> {
    if let Conn::Postgres(c) = conn {
        // Another process claiming (or writing) this agent right now: leave it to them.
        let locked = pattern_db_postgres::runs::lock_agent_skip_locked(c, agent.0).await?;
        if locked.is_none() {
            return Ok(None);
        }
    }
    lock_agent(conn, agent).await?;
    let now = now_ms();
    let Availability::Free { token } = availability(conn, ctx, agent, now).await? else {
        return Ok(None);
    };
    let Some((entry, turn)) = due_entry(conn, agent, now).await? else {
        return Ok(None);
    };
    let claim = acquire(conn, ctx, agent, token, now).await?;
    Ok(Some(Box::new(
        deliver(conn, ctx, claim, entry, turn, now).await?,
    )))
}

pub(crate) async fn finish_run(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    f: &FinishRun,
) -> Result<Box<Finished>> {
    let agent = f.claim.agent;
    let turn = read_turn_tx(conn, agent, f.turn).await?;
    if turn.state == TurnState::Finished {
        return Err(RunError::TurnFinished(f.turn).into());
    }
    let now = now_ms();
    let (batch, outcome) = match &f.ending {
        RunEnding::Complete => (
            complete_batch(conn, ctx, agent, f.batch, Some(&f.claim)).await?,
            TurnOutcome::Done,
        ),
        RunEnding::Abandon { reason } => (
            abandon_batch(conn, ctx, agent, f.batch, reason, Some(&f.claim))
                .await?
                .batch,
            TurnOutcome::Failed,
        ),
    };
    append_events(conn, ctx, agent, f.turn, &f.events).await?;
    finish_turn(conn, f.turn, outcome, now).await?;
    let next = if f.next {
        match due_entry(conn, agent, now).await? {
            Some((entry, turn)) => Some(Box::new(
                deliver(conn, ctx, f.claim, entry, turn, now).await?,
            )),
            None => None,
        }
    } else {
        None
    };
    if next.is_none() {
        release(conn, ctx, &f.claim).await?;
    }
    let turn = read_turn_tx(conn, agent, f.turn).await?;
    Ok(Box::new(Finished { batch, turn, next }))
}

/// Frees a claim of this process whose run is gone; `false` when it is not ours any more.
pub(crate) async fn release_claim(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    claim: &RunClaim,
    reason: &str,
) -> Result<bool> {
    lock_agent(conn, claim.agent).await?;
    if check_fence(conn, ctx, claim).await.is_err() {
        return Ok(false);
    }
    let now = now_ms();
    let open = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::open_of_token(c, &claim.agent.to_string(), claim.token).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::open_of_token(c, claim.agent.0, claim.token).await?
        }
    };
    for id in open {
        abandon_dead(conn, ctx, claim.agent, SnowflakeId(id), reason, now).await?;
    }
    release(conn, ctx, claim).await?;
    Ok(true)
}

pub(crate) async fn cancel_turn(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    turn: TurnId,
) -> Result<Box<TurnInfo>> {
    lock_agent(conn, agent).await?;
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::request_cancel(c, &agent.to_string(), &turn.to_string(), now)
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::request_cancel(c, agent.0, turn.0, instant(now)?).await?
        }
    };
    let info = read_turn_tx(conn, agent, turn).await?;
    wake::notify(conn, ctx.backend, &[WakeKey::Cancel(turn)]).await?;
    Ok(Box::new(info))
}

/// Recovery: the batches of dead runs (all open ones with [`RecoveryScope::AllOpen`]), agent by
/// agent in agent order, each under its agent's lock.
pub(crate) async fn recover(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    only: Option<AgentId>,
    scope: RecoveryScope,
) -> Result<Vec<Abandoned>> {
    let now = now_ms();
    // Candidates, read without locks; each is checked again under its agent's lock.
    let mut agents: BTreeSet<AgentId> = BTreeSet::new();
    let mut statuses: HashMap<String, HolderStatus> = HashMap::new();
    let held: Vec<(AgentId, String)> = match conn {
        Conn::Sqlite(c) => match only {
            Some(a) => pattern_db_sqlite::runs::held_of(c, &a.to_string()).await?,
            None => pattern_db_sqlite::runs::held(c).await?,
        }
        .into_iter()
        .map(|r| Ok((AgentId(r.agent_id.uuid()?), r.holder)))
        .collect::<Result<_>>()?,
        Conn::Postgres(c) => match only {
            Some(a) => pattern_db_postgres::runs::held_of(c, a.0).await?,
            None => pattern_db_postgres::runs::held(c).await?,
        }
        .into_iter()
        .map(|r| (AgentId(r.agent_id), r.holder))
        .collect(),
    };
    for (agent, holder) in held {
        let status = match statuses.get(&holder) {
            Some(s) => *s,
            None => {
                let s = ctx.judge.status(conn, &holder).await?;
                statuses.insert(holder, s);
                s
            }
        };
        if scope == RecoveryScope::AllOpen || status != HolderStatus::Alive {
            agents.insert(agent);
        }
    }
    // One fixed statement per scope and agent filter (every open batch is a candidate with
    // `AllOpen`; otherwise one with a claim token or an expired lease).
    match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::runs as lite;
            let only = only.map(|a| a.to_string());
            let ids = match (scope, only.as_deref()) {
                (RecoveryScope::AllOpen, None) => lite::agents_with_open_batches(c).await?,
                (RecoveryScope::AllOpen, Some(a)) => lite::agent_with_open_batches(c, a).await?,
                (RecoveryScope::ExpiredLeases, None) => {
                    lite::agents_with_stale_batches(c, now).await?
                }
                (RecoveryScope::ExpiredLeases, Some(a)) => {
                    lite::agent_with_stale_batches(c, now, a).await?
                }
            };
            for id in ids {
                agents.insert(AgentId(id.uuid()?));
            }
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::runs as pg;
            let ids = match (scope, only) {
                (RecoveryScope::AllOpen, None) => pg::agents_with_open_batches(c).await?,
                (RecoveryScope::AllOpen, Some(a)) => pg::agent_with_open_batches(c, a.0).await?,
                (RecoveryScope::ExpiredLeases, None) => {
                    pg::agents_with_stale_batches(c, instant(now)?).await?
                }
                (RecoveryScope::ExpiredLeases, Some(a)) => {
                    pg::agent_with_stale_batches(c, instant(now)?, a.0).await?
                }
            };
            agents.extend(ids.into_iter().map(AgentId));
        }
    }

    let mut out = Vec::new();
    for agent in agents {
        match lock_agent(conn, agent).await {
            Ok(()) => {}
            Err(Error::Agent(AgentError::NotFound(_))) => continue,
            Err(e) => return Err(e),
        }
        let (_, holder) = claim_row(conn, agent).await?;
        let mut taken_over = false;
        if let Some(holder) = holder {
            let status = ctx.judge.status(conn, &holder).await?;
            if scope == RecoveryScope::AllOpen || status != HolderStatus::Alive {
                out.extend(take_over(conn, ctx, agent, &holder, status, now).await?.1);
                taken_over = true;
            }
        }
        let rows = open_batches(conn, agent).await?;
        let (_, holder_now) = claim_row(conn, agent).await?;
        for (id, lease, claimed) in rows {
            let dead = match claimed {
                // A run's batch is dead when no live run holds the agent.
                Some(_) => holder_now.is_none(),
                None => scope == RecoveryScope::AllOpen || lease.is_some_and(|l| l < now),
            };
            if dead {
                let reason = if taken_over || claimed.is_some() {
                    "its run's process stopped"
                } else {
                    "its lease expired"
                };
                out.push(abandon_dead(conn, ctx, agent, SnowflakeId(id), reason, now).await?);
            }
        }
    }
    out.sort_by_key(|a| a.batch.id);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// turns

fn check_turn(turn: &NewTurn) -> Result<()> {
    if turn.source.len() > MAX_SOURCE {
        return Err(BatchError::InvalidContent(format!(
            "a turn's source is at most {MAX_SOURCE} bytes"
        ))
        .into());
    }
    if let Some(idem) = &turn.idempotency {
        if idem.key.is_empty() || idem.key.len() > MAX_KEY {
            return Err(BatchError::InvalidContent(format!(
                "an idempotency key is 1 to {MAX_KEY} bytes"
            ))
            .into());
        }
        if idem.fingerprint.len() > MAX_FINGERPRINT {
            return Err(BatchError::InvalidContent(format!(
                "a request fingerprint is at most {MAX_FINGERPRINT} bytes"
            ))
            .into());
        }
    }
    Ok(())
}

async fn insert_turn(
    conn: &mut Conn<'_>,
    turn: &NewTurn,
    agent: AgentId,
    state: TurnState,
    queue_id: Option<SnowflakeId>,
    batch_id: Option<BatchId>,
    now: i64,
) -> Result<()> {
    let key = turn.idempotency.as_ref().map(|i| i.key.as_str());
    let fingerprint = turn.idempotency.as_ref().map(|i| i.fingerprint.as_str());
    let queue_id = queue_id.map(SnowflakeId::get);
    let batch_id = batch_id.map(SnowflakeId::get);
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::insert_turn(
                c,
                &turn.id.to_string(),
                &agent.to_string(),
                &turn.source,
                key,
                fingerprint,
                queue_id,
                batch_id,
                state.as_str(),
                now,
            )
            .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::insert_turn(
                c,
                turn.id.0,
                agent.0,
                &turn.source,
                key,
                fingerprint,
                queue_id,
                batch_id,
                state.as_str(),
                instant(now)?,
            )
            .await?
        }
    };
    Ok(())
}

async fn finish_turn(
    conn: &mut Conn<'_>,
    turn: TurnId,
    outcome: TurnOutcome,
    now: i64,
) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::finish_turn(c, &turn.to_string(), outcome.as_str(), now)
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::runs::finish_turn(c, turn.0, outcome.as_str(), instant(now)?)
                .await?
        }
    };
    Ok(())
}

/// Appends `events` to `agent`'s unfinished turn; returns the last sequence number.
pub(crate) async fn append_events(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    turn: TurnId,
    events: &[NewTurnEvent],
) -> Result<u64> {
    let row = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::turn_state(c, &turn.to_string())
            .await?
            .map(|r| (r.agent_id == agent.to_string(), r.state, r.last_seq)),
        Conn::Postgres(c) => pattern_db_postgres::runs::turn_state(c, turn.0)
            .await?
            .map(|r| (r.agent_id == agent.0, r.state, r.last_seq)),
    };
    let Some((mine, state, last)) = row else {
        return Err(RunError::TurnNotFound { agent, turn }.into());
    };
    if !mine {
        return Err(RunError::TurnNotFound { agent, turn }.into());
    }
    if state.parse::<TurnState>()? == TurnState::Finished {
        return Err(RunError::TurnFinished(turn).into());
    }
    if events.is_empty() {
        return Ok(u64::try_from(last).unwrap_or(0));
    }
    for e in events {
        if e.kind.is_empty() || e.kind.len() > MAX_KIND {
            return Err(BatchError::InvalidContent(format!(
                "a turn event's kind is 1 to {MAX_KIND} bytes"
            ))
            .into());
        }
        if e.data.len() > ctx.max_content_bytes {
            return Err(BatchError::ContentTooLarge {
                size: e.data.len(),
                limit: ctx.max_content_bytes,
            }
            .into());
        }
        if !serde_json::from_str::<serde_json::Value>(&e.data).is_ok_and(|v| v.is_object()) {
            return Err(
                BatchError::InvalidContent("a turn event's data is a JSON object".into()).into(),
            );
        }
    }
    let now = now_ms();
    for (chunk_start, chunk) in super::fixed_chunks(events)
        .into_iter()
        .scan(0usize, |at, c| {
            let start = *at;
            *at += c.len();
            Some((start, c))
        })
    {
        let sql = format!(
            "INSERT INTO turn_events (turn_id, seq, kind, data, created_at) VALUES {}",
            super::value_rows(&*conn, chunk.len(), 5)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (i, e) in chunk.iter().enumerate() {
            q = q
                .bind(turn.to_string())
                .bind(last + 1 + (chunk_start + i) as i64)
                .bind(e.kind.clone())
                .bind(e.data.clone())
                .bind(now);
        }
        q.execute(&mut *conn).await?;
    }
    let new_last = last + events.len() as i64;
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::set_last_seq(c, &turn.to_string(), new_last).await?
        }
        Conn::Postgres(c) => pattern_db_postgres::runs::set_last_seq(c, turn.0, new_last).await?,
    };
    wake::notify(conn, ctx.backend, &[WakeKey::Turn(turn)]).await?;
    Ok(u64::try_from(new_last).unwrap_or(0))
}

pub(crate) async fn prune_turns(conn: &mut Conn<'_>, before: i64) -> Result<u64> {
    Ok(match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::runs::prune_events(c, before).await?;
            pattern_db_sqlite::runs::prune_turns(c, before).await?
        }
        Conn::Postgres(c) => {
            let before = instant(before)?;
            pattern_db_postgres::runs::prune_events(c, before).await?;
            pattern_db_postgres::runs::prune_turns(c, before).await?
        }
    })
}

// ---------------------------------------------------------------------------------------------
// reads

pub(crate) async fn count_prunable(pool: &Pool, before: i64) -> Result<u64> {
    let mut pooled = pool.acquire().await?;
    let n = match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::count_prunable(c, before).await?,
        Conn::Postgres(c) => pattern_db_postgres::runs::count_prunable(c, instant(before)?).await?,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A turn from either engine's checked row ([`FromStored`]).
fn turn_from_plain(row: impl FromStored<TurnInfo>) -> Result<TurnInfo> {
    row.into_domain()
}

/// A claim from either engine's checked row ([`FromStored`]).
fn claim_from_plain(row: impl FromStored<ClaimInfo>) -> Result<ClaimInfo> {
    row.into_domain()
}

/// [`FromStored`] for the turn and claim rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! runs_from_stored {
    ($engine:ident) => {
        impl FromStored<TurnInfo> for $engine::runs::TurnRow {
            fn into_domain(self) -> Result<TurnInfo> {
                Ok(TurnInfo {
                    id: TurnId(self.id.uuid()?),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    source: self.source,
                    idempotency_key: self.idempotency_key,
                    fingerprint: self.fingerprint,
                    queue_id: self.queue_id.map(SnowflakeId),
                    batch_id: self.batch_id.map(SnowflakeId),
                    state: self.state.parse()?,
                    outcome: self.outcome.map(|o| o.parse()).transpose()?,
                    last_seq: u64::try_from(self.last_seq).unwrap_or(0),
                    cancel_requested: self.cancel_requested_at.is_some(),
                    created_at: self.created_at.time(),
                    finished_at: self.finished_at.map(StoredTime::time),
                })
            }
        }

        impl FromStored<ClaimInfo> for $engine::runs::ClaimRow {
            fn into_domain(self) -> Result<ClaimInfo> {
                Ok(ClaimInfo {
                    agent: AgentId(self.agent_id.uuid()?),
                    token: self.token,
                    holder: self.holder,
                    claimed_at: self.claimed_at.map(StoredTime::time),
                    batch_id: self.batch_id.map(SnowflakeId),
                })
            }
        }

        impl FromStored<TurnEvent> for $engine::runs::TurnEventRow {
            fn into_domain(self) -> Result<TurnEvent> {
                Ok(TurnEvent {
                    seq: u64::try_from(self.seq).unwrap_or(0),
                    kind: self.kind,
                    data: self.data,
                    created_at: self.created_at.time(),
                })
            }
        }
    };
}

runs_from_stored!(pattern_db_sqlite);
runs_from_stored!(pattern_db_postgres);

async fn read_turn_tx(conn: &mut Conn<'_>, agent: AgentId, turn: TurnId) -> Result<TurnInfo> {
    let row = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::turn(c, &agent.to_string(), &turn.to_string())
            .await?
            .map(turn_from_plain),
        Conn::Postgres(c) => pattern_db_postgres::runs::turn(c, agent.0, turn.0)
            .await?
            .map(turn_from_plain),
    };
    match row {
        Some(info) => info,
        None => Err(RunError::TurnNotFound { agent, turn }.into()),
    }
}

async fn read_turn_by_key_tx(
    conn: &mut Conn<'_>,
    agent: AgentId,
    key: &str,
) -> Result<Option<TurnInfo>> {
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::turn_by_key(c, &agent.to_string(), key)
            .await?
            .map(turn_from_plain)
            .transpose(),
        Conn::Postgres(c) => pattern_db_postgres::runs::turn_by_key(c, agent.0, key)
            .await?
            .map(turn_from_plain)
            .transpose(),
    }
}

pub(crate) async fn read_turn(pool: &Pool, agent: AgentId, turn: TurnId) -> Result<TurnInfo> {
    let mut pooled = pool.acquire().await?;
    let mut conn = pooled.conn();
    read_turn_tx(&mut conn, agent, turn).await
}

pub(crate) async fn read_turn_by_key(
    pool: &Pool,
    agent: AgentId,
    key: &str,
) -> Result<Option<TurnInfo>> {
    let mut pooled = pool.acquire().await?;
    let mut conn = pooled.conn();
    read_turn_by_key_tx(&mut conn, agent, key).await
}

pub(crate) async fn read_turns(pool: &Pool, agent: AgentId, limit: usize) -> Result<Vec<TurnInfo>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::turns(c, &agent.to_string(), limit)
            .await?
            .into_iter()
            .map(turn_from_plain)
            .collect(),
        Conn::Postgres(c) => pattern_db_postgres::runs::turns(c, agent.0, limit)
            .await?
            .into_iter()
            .map(turn_from_plain)
            .collect(),
    }
}

pub(crate) async fn read_events(
    pool: &Pool,
    turn: TurnId,
    after: u64,
    limit: usize,
) -> Result<Vec<TurnEvent>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::events(c, &turn.to_string(), after, limit)
            .await?
            .into_iter()
            .map(FromStored::into_domain)
            .collect(),
        Conn::Postgres(c) => pattern_db_postgres::runs::events(c, turn.0, after, limit)
            .await?
            .into_iter()
            .map(FromStored::into_domain)
            .collect(),
    }
}

pub(crate) async fn read_claim_info(pool: &Pool, agent: AgentId) -> Result<Option<ClaimInfo>> {
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::claim(c, &agent.to_string())
            .await?
            .map(claim_from_plain)
            .transpose(),
        Conn::Postgres(c) => pattern_db_postgres::runs::claim(c, agent.0)
            .await?
            .map(claim_from_plain)
            .transpose(),
    }
}

pub(crate) async fn read_claims_of(pool: &Pool, holder: &str) -> Result<Vec<ClaimInfo>> {
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::claims_of(c, holder)
            .await?
            .into_iter()
            .map(claim_from_plain)
            .collect(),
        Conn::Postgres(c) => pattern_db_postgres::runs::claims_of(c, holder)
            .await?
            .into_iter()
            .map(claim_from_plain)
            .collect(),
    }
}

/// Up to `limit` agents with due queue entries and no live run, the earliest due first. A claim's
/// holder counts as gone when its process row is missing or expired, or (on PostgreSQL) its
/// session no longer holds its liveness lock; `claim_next` decides for sure.
pub(crate) async fn read_deliverable(pool: &Pool, limit: usize) -> Result<Vec<AgentId>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let now = now_ms();
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::runs::deliverable(c, now, limit)
            .await?
            .into_iter()
            .map(|a| Ok(AgentId(a.uuid()?)))
            .collect(),
        Conn::Postgres(c) => Ok(
            pattern_db_postgres::runs::deliverable(c, instant(now)?, limit)
                .await?
                .into_iter()
                .map(AgentId)
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BatchState;

    #[test]
    fn the_lock_namespace_in_sql_is_the_constant() {
        assert_eq!(crate::process::LOCK_NAMESPACE, 20564);
    }

    #[test]
    fn batch_owners() {
        let agent = AgentId::new();
        let mut info = BatchInfo {
            id: SnowflakeId(1),
            agent_id: agent,
            batch_type: BatchType::UserRequest,
            state: BatchState::Open,
            parent_batch: None,
            run_owner: Some("p".into()),
            lease_expires_at: None,
            message_count: 1,
            archived: false,
            started_at: chrono::Utc::now(),
            completed_at: None,
            continuations: 0,
            retried_at: None,
            claim_token: Some(3),
        };
        let mine = RunClaim { agent, token: 3 };
        let stale = RunClaim { agent, token: 2 };
        assert!(check_batch_owner(&info, Some(&mine)).is_ok());
        assert!(matches!(
            check_batch_owner(&info, Some(&stale)),
            Err(Error::Run(RunError::ClaimLost { .. }))
        ));
        assert!(matches!(
            check_batch_owner(&info, None),
            Err(Error::Run(RunError::AgentBusy { .. }))
        ));
        info.claim_token = None;
        assert!(check_batch_owner(&info, None).is_ok());
        assert!(matches!(
            check_batch_owner(&info, Some(&mine)),
            Err(Error::Run(RunError::ClaimLost { .. }))
        ));
    }
}
