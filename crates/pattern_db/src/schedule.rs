//! Schedules: wakeups an agent receives at a time (`at`) or on a cron expression in a time zone
//! (decision 0012).
//!
//! A schedule is an entry of the agent's durable queue ([`crate::queue`]) marked `at` or `cron`:
//! its message is a system trigger (a `system_trigger` batch) delivered by whoever holds the
//! agent's claim, exactly once per fire time across processes. A cron schedule's next time is
//! computed here ([`next_fire`]) and stored in the transaction that delivers it. Input is checked
//! before anything is written: a bad expression, an unknown zone or a time in the past is a typed
//! error and nothing is stored; an agent has at most [`MAX_SCHEDULES_PER_AGENT`] live schedules
//! (checked under the agent's lock). This module must never store a schedule that cannot fire,
//! nor deliver a schedule outside the queue's claim rules.

use std::str::FromStr;
use std::time::Duration;

use crate::sql::Conn;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::model::{AgentId, BatchId, ContentBlock};
use crate::ops::queue::{AddSchedule, RemoveSchedule};
use crate::queue::{QueuedMessage, queued_from_plain};

/// The most live schedules one agent may have; one more is [`ScheduleError::TooMany`].
pub const MAX_SCHEDULES_PER_AGENT: usize = 100;
/// How far in the past a one-off `at` may be and still be taken (it fires at once).
pub const AT_GRACE: Duration = Duration::from_secs(60);
/// Longest message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 10_000;
/// Longest name, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest cron expression, in bytes.
pub const MAX_CRON_BYTES: usize = 200;
/// The queue entry `source` of schedules.
pub const SCHEDULE_SOURCE: &str = "schedule";

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Once, at this time.
    At(DateTime<Utc>),
    /// At every time the cron expression matches in the time zone (IANA name; `None`: UTC).
    /// Five fields (minute precision) or six (seconds first); an optional seventh is the year.
    Cron {
        /// The expression.
        expr: String,
        /// The time zone it is read in.
        tz: Option<String>,
    },
}

impl When {
    /// The `at` / `cron` / `tz` fields of a request (CLI, HTTP, tool): exactly one of `at`
    /// (RFC 3339) and `cron`; `tz` only with `cron`. Typed errors name the field.
    pub fn from_fields(at: Option<&str>, cron: Option<&str>, tz: Option<&str>) -> Result<When> {
        match (at, cron) {
            (Some(_), Some(_)) => Err(ScheduleError::Invalid {
                field: "cron",
                reason: "give either `at` or `cron`, not both".into(),
            }
            .into()),
            (None, None) => Err(ScheduleError::Invalid {
                field: "at",
                reason: "give `at` (an RFC 3339 time) or `cron` (an expression)".into(),
            }
            .into()),
            (Some(at), None) => {
                if tz.is_some() {
                    return Err(ScheduleError::Invalid {
                        field: "tz",
                        reason: "a time zone goes with `cron`; `at` carries its own offset".into(),
                    }
                    .into());
                }
                let at = DateTime::parse_from_rfc3339(at.trim()).map_err(|e| {
                    ScheduleError::Invalid {
                        field: "at",
                        reason: format!(
                            "`{at}` is not an RFC 3339 time such as 2030-01-31T09:30:00Z ({e})"
                        ),
                    }
                })?;
                Ok(When::At(at.with_timezone(&Utc)))
            }
            (None, Some(cron)) => Ok(When::Cron {
                expr: cron.to_owned(),
                tz: tz.map(str::to_owned),
            }),
        }
    }
}

/// A schedule to add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSchedule {
    /// The text the agent receives as its trigger (1..=[`MAX_MESSAGE_CHARS`] characters).
    pub message: String,
    /// When it fires.
    pub when: When,
    /// An optional label (1..=[`MAX_NAME_CHARS`] characters).
    pub name: Option<String>,
}

/// `at` (one-off) or `cron` (recurring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    /// One-off.
    At,
    /// Recurring.
    Cron,
}

impl ScheduleKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleKind::At => "at",
            ScheduleKind::Cron => "cron",
        }
    }
}

/// A live schedule (one that will still fire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Its id (the queue entry's).
    pub id: SnowflakeId,
    /// The agent it wakes.
    pub agent_id: AgentId,
    /// Its label.
    pub name: Option<String>,
    /// What the agent receives.
    pub message: String,
    /// One-off or recurring.
    pub kind: ScheduleKind,
    /// The cron expression of a recurring schedule.
    pub cron: Option<String>,
    /// The time zone a cron expression is read in (`UTC` for one-offs).
    pub time_zone: String,
    /// When it fires next.
    pub next_at: DateTime<Utc>,
    /// How often it fired.
    pub deliveries: i64,
    /// The batch its latest firing began.
    pub last_batch: Option<BatchId>,
    /// When it was added.
    pub created_at: DateTime<Utc>,
}

impl Schedule {
    /// The schedule a queue entry is; `None` for entries that are not schedules.
    pub fn from_entry(entry: &QueuedMessage) -> Option<Schedule> {
        let schedule = entry.schedule.as_deref()?;
        let message = entry
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        Some(Schedule {
            id: entry.id,
            agent_id: entry.agent_id,
            name: schedule.name.clone(),
            message,
            kind: schedule.kind,
            cron: schedule.cron.clone(),
            time_zone: schedule.time_zone.clone().unwrap_or_else(|| "UTC".into()),
            next_at: entry.deliver_at,
            deliveries: entry.deliveries,
            last_batch: entry.delivered_batch,
            created_at: entry.created_at,
        })
    }
}

/// A schedule checked and ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValidSchedule {
    pub(crate) message: String,
    pub(crate) name: Option<String>,
    pub(crate) kind: ScheduleKind,
    pub(crate) cron: Option<String>,
    pub(crate) time_zone: Option<String>,
    /// First fire time, Unix ms.
    pub(crate) first: i64,
}

fn parse_zone(tz: Option<&str>) -> Result<chrono_tz::Tz> {
    match tz {
        None => Ok(chrono_tz::UTC),
        Some(name) => chrono_tz::Tz::from_str(name.trim())
            .map_err(|_| Error::Schedule(ScheduleError::UnknownTimeZone(name.to_owned()))),
    }
}

fn parse_cron(expr: &str) -> Result<croner::Cron> {
    if expr.len() > MAX_CRON_BYTES {
        return Err(ScheduleError::InvalidCron {
            expr: expr.chars().take(40).collect::<String>() + "...",
            reason: format!("longer than {MAX_CRON_BYTES} bytes"),
        }
        .into());
    }
    croner::Cron::from_str(expr).map_err(|e| {
        Error::Schedule(ScheduleError::InvalidCron {
            expr: expr.to_owned(),
            reason: e.to_string(),
        })
    })
}

/// The first time after `after` (exclusive) that `expr` matches in zone `tz` (`None`: UTC), or
/// `None` when it never matches again. A bad expression or zone is a typed error.
pub fn next_fire(
    expr: &str,
    tz: Option<&str>,
    after: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>> {
    let zone = parse_zone(tz)?;
    let cron = parse_cron(expr)?;
    match cron.find_next_occurrence(&after.with_timezone(&zone), false) {
        Ok(t) => Ok(Some(t.with_timezone(&Utc))),
        Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
        Err(e) => Err(ScheduleError::InvalidCron {
            expr: expr.to_owned(),
            reason: e.to_string(),
        }
        .into()),
    }
}

impl NewSchedule {
    /// Checks every field against `now`; the schedule as it will be stored.
    pub(crate) fn validate(&self, now: DateTime<Utc>) -> Result<ValidSchedule> {
        let chars = self.message.chars().count();
        if self.message.trim().is_empty() || chars > MAX_MESSAGE_CHARS {
            return Err(ScheduleError::Invalid {
                field: "message",
                reason: format!("must be 1 to {MAX_MESSAGE_CHARS} characters, not blank"),
            }
            .into());
        }
        if let Some(name) = &self.name
            && (name.trim().is_empty() || name.chars().count() > MAX_NAME_CHARS)
        {
            return Err(ScheduleError::Invalid {
                field: "name",
                reason: format!("must be 1 to {MAX_NAME_CHARS} characters, not blank"),
            }
            .into());
        }
        let (kind, cron, time_zone, first) = match &self.when {
            When::At(at) => {
                let grace = chrono::Duration::from_std(AT_GRACE).unwrap_or_default();
                if *at < now - grace {
                    return Err(ScheduleError::InPast { at: *at, now }.into());
                }
                (ScheduleKind::At, None, None, *at)
            }
            When::Cron { expr, tz } => {
                let expr = expr.trim().to_owned();
                let zone = parse_zone(tz.as_deref())?;
                let Some(first) = next_fire(&expr, Some(zone.name()), now)? else {
                    return Err(ScheduleError::InvalidCron {
                        expr,
                        reason: "it never matches a future time".into(),
                    }
                    .into());
                };
                (
                    ScheduleKind::Cron,
                    Some(expr),
                    Some(zone.name().to_owned()),
                    first,
                )
            }
        };
        Ok(ValidSchedule {
            message: self.message.clone(),
            name: self.name.clone(),
            kind,
            cron,
            time_zone,
            first: first.timestamp_millis(),
        })
    }
}

/// The schedules among queue entries (an entry that is not one is left out).
fn schedules_of(entries: Vec<QueuedMessage>) -> Vec<Schedule> {
    entries.iter().filter_map(Schedule::from_entry).collect()
}

/// Queue entries from either engine's checked rows.
fn entries_of<R>(rows: Vec<R>) -> Result<Vec<QueuedMessage>>
where
    R: crate::ops::FromStored<QueuedMessage>,
{
    rows.into_iter().map(queued_from_plain).collect()
}

impl Database {
    /// Adds a schedule for `agent`: checked first (typed errors, nothing stored), then stored in
    /// one transaction that also checks the agent's cap. Returns it with its first fire time.
    pub async fn add_schedule(&self, agent: AgentId, new: NewSchedule) -> Result<Schedule> {
        let valid = new.validate(Utc::now())?;
        let q = self.write(AddSchedule { agent, valid }).await?;
        self.hub().wake(crate::wake::WakeKey::Agent(agent));
        self.hub().wake(crate::wake::WakeKey::Queue);
        Schedule::from_entry(&q).ok_or(Error::Schedule(ScheduleError::NotFound(q.id)))
    }

    /// Removes `agent`'s live schedule `id`; [`ScheduleError::NotFound`] when it has none
    /// such (another agent's, fired already, removed already).
    pub async fn remove_schedule(&self, agent: AgentId, id: SnowflakeId) -> Result<Schedule> {
        let q = self.write(RemoveSchedule { agent, id }).await?;
        Schedule::from_entry(&q).ok_or(Error::Schedule(ScheduleError::NotFound(id)))
    }

    /// `agent`'s live schedules, in the order they were added.
    pub async fn schedules(&self, agent: AgentId) -> Result<Vec<Schedule>> {
        let mut pooled = self.reader().acquire().await?;
        let entries = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                entries_of(pattern_db_sqlite::schedules::of_agent(c, &agent.to_string()).await?)?
            }
            Conn::Postgres(c) => {
                entries_of(pattern_db_postgres::schedules::of_agent(c, agent.0).await?)?
            }
        };
        Ok(schedules_of(entries))
    }

    /// Every agent's live schedules, by next fire time.
    pub async fn all_schedules(&self) -> Result<Vec<Schedule>> {
        let mut pooled = self.reader().acquire().await?;
        let entries = match &mut pooled.conn() {
            Conn::Sqlite(c) => entries_of(pattern_db_sqlite::schedules::all(c).await?)?,
            Conn::Postgres(c) => entries_of(pattern_db_postgres::schedules::all(c).await?)?,
        };
        Ok(schedules_of(entries))
    }

    /// The live schedule `id`, whichever agent it belongs to.
    pub async fn schedule(&self, id: SnowflakeId) -> Result<Schedule> {
        let mut pooled = self.reader().acquire().await?;
        let entry = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::schedules::one(c, id.get())
                .await?
                .map(queued_from_plain)
                .transpose()?,
            Conn::Postgres(c) => pattern_db_postgres::schedules::one(c, id.get())
                .await?
                .map(queued_from_plain)
                .transpose()?,
        };
        entry
            .as_ref()
            .and_then(Schedule::from_entry)
            .ok_or(Error::Schedule(ScheduleError::NotFound(id)))
    }

    /// The queue entries of `agent` that retry a crashed wakeup (for inspection and tests).
    pub async fn queue_retries(&self, agent: AgentId) -> Result<Vec<(QueuedMessage, BatchId)>> {
        let mut pooled = self.reader().acquire().await?;
        let entries = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                entries_of(pattern_db_sqlite::schedules::retries(c, &agent.to_string()).await?)?
            }
            Conn::Postgres(c) => {
                entries_of(pattern_db_postgres::schedules::retries(c, agent.0).await?)?
            }
        };
        entries
            .into_iter()
            .map(|entry| {
                let of = entry.retry_of.ok_or(ScheduleError::NotFound(entry.id))?;
                Ok((entry, of))
            })
            .collect()
    }
}

/// Refusals of schedules (module [`crate::schedule`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// A schedule's cron expression cannot be parsed, or never fires.
    #[error("`cron`: invalid cron expression `{expr}`: {reason}")]
    InvalidCron {
        /// The expression as given.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A schedule names a time zone the IANA database does not know.
    #[error("`tz`: unknown time zone `{0}` (an IANA name such as `Europe/Berlin`, or `UTC`)")]
    UnknownTimeZone(String),
    /// A one-off schedule's time has passed (beyond the grace of [`crate::schedule::AT_GRACE`]).
    #[error("`at`: {at} is in the past (now is {now})")]
    InPast {
        /// The time asked for.
        at: chrono::DateTime<chrono::Utc>,
        /// The time it was checked at.
        now: chrono::DateTime<chrono::Utc>,
    },
    /// A schedule's other fields are not valid (which field, and why).
    #[error("`{field}`: {reason}")]
    Invalid {
        /// The field: `message`, `name`, `at`/`cron`.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The agent has as many live schedules as it may have.
    #[error("agent {agent} has {limit} schedules already, the most it may have; remove one first")]
    TooMany {
        /// The agent.
        agent: crate::AgentId,
        /// The cap ([`crate::schedule::MAX_SCHEDULES_PER_AGENT`]).
        limit: usize,
    },
    /// No live schedule with this id (of this agent, when an agent was given).
    #[error("unknown schedule {0}")]
    NotFound(crate::SnowflakeId),
}

impl ScheduleError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            ScheduleError::InvalidCron { .. }
            | ScheduleError::UnknownTimeZone(_)
            | ScheduleError::InPast { .. }
            | ScheduleError::Invalid { .. } => C::Invalid,
            ScheduleError::TooMany { .. } => C::Refused,
            ScheduleError::NotFound(_) => C::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_with_and_without_seconds_in_zones() {
        let after = DateTime::parse_from_rfc3339("2026-03-28T12:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        // Five fields: minute precision.
        let t = next_fire("30 9 * * *", None, after).ok().flatten();
        assert_eq!(
            t.map(|t| t.to_rfc3339()),
            Some("2026-03-29T09:30:00+00:00".into())
        );
        // Six fields: seconds first.
        let t = next_fire("15 * * * * *", None, after).ok().flatten();
        assert_eq!(
            t.map(|t| t.to_rfc3339()),
            Some("2026-03-28T12:00:15+00:00".into())
        );
        // In Berlin, 09:30 on the 29th is after the switch to summer time (UTC+2).
        let t = next_fire("30 9 * * *", Some("Europe/Berlin"), after)
            .ok()
            .flatten();
        assert_eq!(
            t.map(|t| t.to_rfc3339()),
            Some("2026-03-29T07:30:00+00:00".into())
        );
        assert!(matches!(
            next_fire("61 * * * *", None, after),
            Err(Error::Schedule(ScheduleError::InvalidCron { .. }))
        ));
        assert!(matches!(
            next_fire("* * * * *", Some("Mars/Olympus"), after),
            Err(Error::Schedule(ScheduleError::UnknownTimeZone(_)))
        ));
    }

    #[test]
    fn validation_is_typed() {
        let now = Utc::now();
        let new = |when| NewSchedule {
            message: "wake up".into(),
            when,
            name: None,
        };
        let past = new(When::At(now - chrono::Duration::seconds(120)));
        assert!(matches!(
            past.validate(now),
            Err(Error::Schedule(ScheduleError::InPast { .. }))
        ));
        let grace = new(When::At(now - chrono::Duration::seconds(5)));
        assert!(grace.validate(now).is_ok());
        let blank = NewSchedule {
            message: "  ".into(),
            ..new(When::At(now))
        };
        assert!(matches!(
            blank.validate(now),
            Err(Error::Schedule(ScheduleError::Invalid {
                field: "message",
                ..
            }))
        ));
        let never = new(When::Cron {
            expr: "0 0 30 2 *".into(),
            tz: None,
        });
        assert!(matches!(
            never.validate(now),
            Err(Error::Schedule(ScheduleError::InvalidCron { .. }))
        ));
    }
}
