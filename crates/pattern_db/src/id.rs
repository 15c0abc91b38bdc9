//! Snowflake ids: 64-bit, time-ordered, unique across processes and machines.
//!
//! Layout (most significant first): 1 zero bit, 41 bits of milliseconds since
//! [`EPOCH_MS`] (good until 2094), 10 bits of machine id, 12 bits of sequence.
//!
//! A generator never hands out the same id twice and its ids strictly increase. It never sleeps
//! or blocks (it is called on async workers): when the 4,096 ids of one millisecond are used up,
//! or when the wall clock steps back, it keeps counting on a logical clock (the next millisecond
//! after the last one it used) instead of waiting for, or going back with, the wall clock. Ids
//! then carry a timestamp slightly ahead of the wall clock until the clock catches up: one
//! millisecond per 4,096 ids handed out faster than 4,096 per millisecond, which a database
//! writer never sustains.
//!
//! This module must never hand out a machine id itself: uniqueness across processes depends on the
//! caller giving each live generator its own machine id (from configuration or a database lease,
//! see [`crate::Database`]).

use crate::StorageError;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// 2025-01-01T00:00:00Z in Unix milliseconds: the zero of the timestamp field.
pub const EPOCH_MS: i64 = 1_735_689_600_000;
/// Bits of machine id.
pub const MACHINE_BITS: u32 = 10;
/// Bits of sequence per millisecond.
pub const SEQUENCE_BITS: u32 = 12;
/// Largest machine id (1023).
pub const MAX_MACHINE_ID: u16 = (1 << MACHINE_BITS) - 1;
const MAX_SEQUENCE: i64 = (1 << SEQUENCE_BITS) - 1;
const MAX_TIMESTAMP: i64 = (1 << 41) - 1;

/// A 64-bit snowflake id. Ordering of ids is ordering of creation (per generator, and across
/// generators to the precision of their clocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SnowflakeId(pub i64);

impl SnowflakeId {
    /// The raw value as stored in the database.
    pub fn get(self) -> i64 {
        self.0
    }

    /// Milliseconds since the Unix epoch encoded in the id.
    pub fn unix_millis(self) -> i64 {
        (self.0 >> (MACHINE_BITS + SEQUENCE_BITS)) + EPOCH_MS
    }

    /// The time encoded in the id.
    pub fn timestamp(self) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(self.unix_millis())
            .single()
            .unwrap_or_default()
    }

    /// The machine id field.
    pub fn machine_id(self) -> u16 {
        ((self.0 >> SEQUENCE_BITS) & i64::from(MAX_MACHINE_ID)) as u16
    }

    /// The sequence field.
    pub fn sequence(self) -> u16 {
        (self.0 & MAX_SEQUENCE) as u16
    }

    fn compose(ms_since_epoch: i64, machine: u16, seq: i64) -> Self {
        Self(
            (ms_since_epoch << (MACHINE_BITS + SEQUENCE_BITS))
                | (i64::from(machine) << SEQUENCE_BITS)
                | seq,
        )
    }
}

impl fmt::Display for SnowflakeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for SnowflakeId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.parse::<i64>() {
            Ok(v) if v >= 0 => Ok(Self(v)),
            Ok(_) => Err(StorageError::InvalidId {
                what: "snowflake id",
                value: s.to_owned(),
                reason: "negative".into(),
            }
            .into()),
            Err(e) => Err(StorageError::InvalidId {
                what: "snowflake id",
                value: s.to_owned(),
                reason: e.to_string(),
            }
            .into()),
        }
    }
}

/// Source of wall-clock milliseconds; replaceable so tests can step the clock back.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

#[derive(Debug)]
struct State {
    /// The machine id stamped into ids (replaced when this process had to lease another one).
    machine_id: u16,
    /// Last millisecond (since [`EPOCH_MS`]) used.
    last_ms: i64,
    /// Last sequence used in `last_ms`.
    seq: i64,
}

/// Hands out strictly increasing [`SnowflakeId`]s for one machine id. Thread-safe.
#[derive(Debug)]
pub struct SnowflakeGenerator<C: Clock = SystemClock> {
    clock: C,
    state: Mutex<State>,
}

impl SnowflakeGenerator<SystemClock> {
    /// A generator on the system clock.
    pub fn new(machine_id: u16) -> Result<Self> {
        Self::with_clock(machine_id, SystemClock)
    }
}

impl<C: Clock> SnowflakeGenerator<C> {
    /// A generator on the given clock.
    pub fn with_clock(machine_id: u16, clock: C) -> Result<Self> {
        if machine_id > MAX_MACHINE_ID {
            return Err(StorageError::Config(format!(
                "machine id {machine_id} is over the maximum {MAX_MACHINE_ID}"
            ))
            .into());
        }
        Ok(Self {
            clock,
            state: Mutex::new(State {
                machine_id,
                last_ms: -1,
                seq: MAX_SEQUENCE,
            }),
        })
    }

    /// The machine id this generator stamps.
    pub fn machine_id(&self) -> u16 {
        self.state
            .lock()
            .map(|s| s.machine_id)
            .unwrap_or_else(|p| p.into_inner().machine_id)
    }

    /// Stamps `machine_id` from now on: for a process whose machine-id lease was taken over
    /// (another process judged it dead) and that leased a new one. Later ids still exceed every
    /// earlier id: the next one moves to a new millisecond.
    pub fn set_machine_id(&self, machine_id: u16) -> Result<()> {
        if machine_id > MAX_MACHINE_ID {
            return Err(StorageError::Config(format!(
                "machine id {machine_id} is over the maximum {MAX_MACHINE_ID}"
            ))
            .into());
        }
        let mut state = self
            .state
            .lock()
            .map_err(|_| StorageError::Poisoned("snowflake generator"))?;
        state.machine_id = machine_id;
        state.seq = MAX_SEQUENCE;
        Ok(())
    }

    /// The next id: greater than every id this generator returned or [`observe`](Self::observe)d.
    pub fn next_id(&self) -> Result<SnowflakeId> {
        let now = self.clock.now_millis() - EPOCH_MS;
        let mut state = self
            .state
            .lock()
            .map_err(|_| StorageError::Poisoned("snowflake generator"))?;
        if now > state.last_ms {
            state.last_ms = now;
            state.seq = 0;
        } else if state.seq < MAX_SEQUENCE {
            // Same millisecond, or the clock stepped back: keep counting on the logical clock.
            state.seq += 1;
        } else {
            // This millisecond is used up (4,096 ids in it, or the clock is behind): move the
            // logical clock on rather than block the caller until the wall clock moves.
            state.last_ms += 1;
            state.seq = 0;
        }
        if state.last_ms > MAX_TIMESTAMP || state.last_ms < 0 {
            return Err(StorageError::Clock(format!(
                "clock reads {} ms since the snowflake epoch, outside the 41-bit range",
                state.last_ms
            ))
            .into());
        }
        Ok(SnowflakeId::compose(
            state.last_ms,
            state.machine_id,
            state.seq,
        ))
    }

    /// Makes every later id greater than `seen` (used after reading the highest stored position, so
    /// that ids stay increasing across restarts and clock steps).
    pub fn observe(&self, seen: SnowflakeId) -> Result<()> {
        let ms = seen.0 >> (MACHINE_BITS + SEQUENCE_BITS);
        let mut state = self
            .state
            .lock()
            .map_err(|_| StorageError::Poisoned("snowflake generator"))?;
        // Machine ids sit above the sequence bits, so an id of another machine in the same
        // millisecond may outrank anything we could stamp there: move to the next millisecond.
        if ms >= state.last_ms {
            state.last_ms = ms + 1;
            state.seq = -1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    #[derive(Debug, Clone)]
    struct ManualClock(Arc<AtomicI64>);
    impl Clock for ManualClock {
        fn now_millis(&self) -> i64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn fields_round_trip() {
        let g = SnowflakeGenerator::new(37).unwrap();
        let id = g.next_id().unwrap();
        assert_eq!(id.machine_id(), 37);
        let now = SystemClock.now_millis();
        assert!((id.unix_millis() - now).abs() < 5_000);
        assert!(id.0 > 0);
    }

    #[test]
    fn rejects_machine_id_over_range() {
        assert!(matches!(
            SnowflakeGenerator::new(1024),
            Err(Error::Storage(StorageError::Config(_)))
        ));
    }

    #[test]
    fn clock_stepping_back_keeps_order() {
        let t = Arc::new(AtomicI64::new(EPOCH_MS + 10_000));
        let g = SnowflakeGenerator::with_clock(1, ManualClock(t.clone())).unwrap();
        let a = g.next_id().unwrap();
        t.store(EPOCH_MS + 5_000, Ordering::SeqCst); // five seconds back
        let mut prev = a;
        for _ in 0..10_000 {
            let id = g.next_id().unwrap();
            assert!(id > prev);
            prev = id;
        }
        // The logical clock moved at most a few ms ahead of where it was.
        assert!(prev.unix_millis() - a.unix_millis() <= 3);
    }

    #[test]
    fn sequence_exhaustion_borrows_the_next_millisecond_without_waiting() {
        // The clock never moves: a generator that waited for it would hang here.
        let t = Arc::new(AtomicI64::new(EPOCH_MS + 1));
        let g = SnowflakeGenerator::with_clock(2, ManualClock(t.clone())).unwrap();
        let ids: Vec<_> = (0..3 * 4096 + 5).map(|_| g.next_id().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ids[4095].unix_millis(), EPOCH_MS + 1);
        assert_eq!(ids[4096].unix_millis(), EPOCH_MS + 2);
        // One millisecond of lead per 4,096 ids beyond the clock, no more.
        assert_eq!(ids.last().unwrap().unix_millis(), EPOCH_MS + 4);
        // When the clock catches up, ids follow it again.
        t.store(EPOCH_MS + 10, Ordering::SeqCst);
        let next = g.next_id().unwrap();
        assert_eq!(next.unix_millis(), EPOCH_MS + 10);
        assert_eq!(next.sequence(), 0);
    }

    #[test]
    fn observe_moves_past_seen_ids() {
        let t = Arc::new(AtomicI64::new(EPOCH_MS + 100));
        let g = SnowflakeGenerator::with_clock(3, ManualClock(t)).unwrap();
        let future = SnowflakeId::compose(500, 9, 7);
        g.observe(future).unwrap();
        let id = g.next_id().unwrap();
        assert!(id > future, "{id:?} <= {future:?}");
        let full = SnowflakeId::compose(600, 9, MAX_SEQUENCE);
        g.observe(full).unwrap();
        assert!(g.next_id().unwrap() > full);
    }

    #[test]
    fn parse_and_display() {
        let id: SnowflakeId = "12345".parse().unwrap();
        assert_eq!(id.to_string(), "12345");
        assert!("-1".parse::<SnowflakeId>().is_err());
        assert!("x".parse::<SnowflakeId>().is_err());
    }
}
