//! What the database holds for each marker, read once after a run: the batches whose trigger
//! message carries it (with state and `retried_at`), and the pending queue entries that do.
//!
//! A marker's *lineages* count how many times its message is stored: every batch and pending
//! entry holding it, minus the batches that were abandoned and retried (`retried_at` set),
//! because a retry stores the same trigger again as its own batch or entry and the two are one
//! lineage. An acknowledged message must have exactly one lineage; any other at most one. This
//! module must never write, and never decide what counts as acknowledged (the caller knows what
//! each client was told).

use std::collections::HashMap;

use crate::harness::client::Final;
use crate::harness::model::markers_in;
use crate::harness::probe::{BatchRow, Probe};

/// Where one marker is stored.
#[derive(Debug, Clone, Default)]
pub struct Holders {
    /// Batches whose trigger holds it.
    pub batches: Vec<i64>,
    /// Pending queue entries that hold it.
    pub pending: Vec<i64>,
}

/// A snapshot of batches, triggers and pending entries.
#[derive(Debug, Clone, Default)]
pub struct Stored {
    /// Every batch.
    pub batches: HashMap<i64, BatchRow>,
    /// Marker -> where it is stored.
    pub markers: HashMap<String, Holders>,
}

impl Stored {
    /// Reads everything through `probe`.
    pub async fn read(probe: &Probe) -> Result<Self, String> {
        let batches = probe.batches().await?;
        let mut markers: HashMap<String, Holders> = HashMap::new();
        for (batch, content) in probe.triggers().await? {
            for m in dedup(markers_in(&content)) {
                markers.entry(m).or_default().batches.push(batch);
            }
        }
        for (entry, content) in probe.pending_queue().await? {
            for m in dedup(markers_in(&content)) {
                markers.entry(m).or_default().pending.push(entry);
            }
        }
        for holders in markers.values_mut() {
            holders.batches.sort_unstable();
            holders.pending.sort_unstable();
        }
        Ok(Self { batches, markers })
    }

    /// How many times `marker`'s message is stored (module doc).
    pub fn lineages(&self, marker: &str) -> i64 {
        let Some(h) = self.markers.get(marker) else {
            return 0;
        };
        let retried = h
            .batches
            .iter()
            .filter(|b| self.batches.get(b).is_some_and(|r| r.retried))
            .count();
        (h.batches.len() + h.pending.len()) as i64 - retried as i64
    }

    /// Where `marker` is stored, for a message: `batch 123 (abandoned, retried), entry 456`.
    pub fn describe(&self, marker: &str) -> String {
        let Some(h) = self.markers.get(marker) else {
            return "stored nowhere".to_owned();
        };
        let mut parts: Vec<String> = h
            .batches
            .iter()
            .map(|b| match self.batches.get(b) {
                Some(r) => format!(
                    "batch {b} ({}{})",
                    r.state,
                    if r.retried { ", retried" } else { "" }
                ),
                None => format!("batch {b} (no row)"),
            })
            .collect();
        parts.extend(h.pending.iter().map(|e| format!("pending entry {e}")));
        parts.join(", ")
    }

    /// Whether what a client was told about `marker` matches its batch: a success names a
    /// complete batch holding the marker; a failure (of a stored message) names a batch that is
    /// not complete, or, naming none, no batch holding the marker is complete. `Ok` for answers
    /// that say nothing about a stored message (errors without `message_saved: true`).
    pub fn check(&self, marker: &str, told: &Final) -> Result<(), String> {
        let holds = |b: i64| {
            self.markers
                .get(marker)
                .is_some_and(|h| h.batches.contains(&b))
        };
        match told {
            Final::Done { batch: Some(b) } => match self.batches.get(b) {
                Some(r) if r.state == "complete" && holds(*b) => Ok(()),
                Some(r) if r.state == "complete" => Err(format!(
                    "told done with batch {b}, which does not hold the marker (it is in: {})",
                    self.describe(marker)
                )),
                Some(r) => Err(format!("told done with batch {b}, which is {}", r.state)),
                None => Err(format!("told done with batch {b}, which does not exist")),
            },
            Final::Done { batch: None } => Err(format!(
                "told done without a batch (marker in: {})",
                self.describe(marker)
            )),
            Final::Failed {
                code,
                saved: Some(true),
                batch,
                ..
            } => match batch {
                Some(b) => match self.batches.get(b) {
                    Some(r) if r.state == "complete" => {
                        Err(format!("told `{code}` for batch {b}, which completed"))
                    }
                    _ => Ok(()),
                },
                None => {
                    let complete: Vec<i64> = self
                        .markers
                        .get(marker)
                        .map(|h| {
                            h.batches
                                .iter()
                                .copied()
                                .filter(|b| {
                                    self.batches.get(b).is_some_and(|r| r.state == "complete")
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    if complete.is_empty() {
                        Ok(())
                    } else {
                        Err(format!(
                            "told `{code}` naming no batch, but batch(es) {complete:?} holding \
                             the marker completed"
                        ))
                    }
                }
            },
            Final::Failed { .. } => Ok(()),
        }
    }
}

fn dedup(markers: Vec<&str>) -> Vec<String> {
    let mut out: Vec<String> = markers.into_iter().map(str::to_owned).collect();
    out.sort();
    out.dedup();
    out
}
