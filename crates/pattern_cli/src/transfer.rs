//! The export file format: versioned JSON lines with an integrity header.
//!
//! ```text
//! {"format":"pattern-agent-export","version":1,"body_sha256":"…","body_lines":N,"sections":{…},…}
//! {"section":"agent","data":{…}}
//! {"section":"block","data":{…}}      one per memory block the agent owns, with its history
//! {"section":"batch","data":{…}}      one per batch, oldest first, with its messages
//! {"section":"summary","data":{…}}    one per summary
//! {"section":"archival","data":{…}}   one per archival passage, oldest first
//! ```
//!
//! The header (first line) carries the format version, the count of each section, the number of
//! body lines and the SHA-256 of the body (every byte after the header's newline). A reader
//! checks all of them before it believes a single line, so a truncated, extended or edited file
//! is refused. New sections (like `archival`) are added without a version change: a file with a
//! section this build does not know is refused by name, never imported in part, and files
//! without it stay readable. A change to an existing section's meaning bumps `version`.
//!
//! This module is pure (bytes in, bytes out): it must never touch the database, and
//! [`parse`] must never return a section list it has not verified.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use pattern::{BatchState, BatchType, ContentBlock, Role};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{CliError, Result};

/// The `format` value of every export.
pub(crate) const FORMAT: &str = "pattern-agent-export";
/// The format version this build writes and the newest it reads.
pub(crate) const VERSION: u32 = 1;

/// The first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) format: String,
    pub(crate) version: u32,
    pub(crate) producer: String,
    pub(crate) exported_at: DateTime<Utc>,
    pub(crate) agent: String,
    /// Lines of each section kind.
    pub(crate) sections: BTreeMap<String, u64>,
    pub(crate) body_lines: u64,
    pub(crate) body_sha256: String,
}

/// One body line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "section", content = "data", rename_all = "snake_case")]
pub(crate) enum Section {
    /// The agent's row.
    Agent(AgentRecord),
    /// A memory block the agent owns, with its history.
    Block(BlockRecord),
    /// A batch with its messages.
    Batch(BatchRecord),
    /// A summary of compressed history.
    Summary(SummaryRecord),
    /// An archival passage.
    Archival(ArchivalRecord),
}

impl Section {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Section::Agent(_) => "agent",
            Section::Block(_) => "block",
            Section::Batch(_) => "batch",
            Section::Summary(_) => "summary",
            Section::Archival(_) => "archival",
        }
    }
}

/// Section kinds this build reads.
pub(crate) const KNOWN_SECTIONS: &[&str] = &["agent", "block", "batch", "summary", "archival"];

/// `agent` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentRecord {
    pub(crate) name: String,
    pub(crate) metadata: serde_json::Value,
    pub(crate) created_at: DateTime<Utc>,
}

/// `block` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BlockRecord {
    pub(crate) label: String,
    pub(crate) description: String,
    pub(crate) value: String,
    pub(crate) char_limit: i64,
    pub(crate) block_type: String,
    pub(crate) version: i64,
    /// Every version, oldest first (1..=version).
    pub(crate) history: Vec<VersionRecord>,
}

/// One version of a block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VersionRecord {
    pub(crate) version: i64,
    pub(crate) value: String,
    pub(crate) description: String,
    pub(crate) change: String,
    pub(crate) created_at: DateTime<Utc>,
}

/// `batch` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BatchRecord {
    /// The batch id in the exporting database (summaries refer to it).
    pub(crate) id: i64,
    pub(crate) batch_type: BatchType,
    pub(crate) state: BatchState,
    pub(crate) archived: bool,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) completed_at: Option<DateTime<Utc>>,
    /// When an abandoned batch was retried (absent: never), so an import cannot retry it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retried_at: Option<DateTime<Utc>>,
    /// In sequence order.
    pub(crate) messages: Vec<MessageRecord>,
}

/// One message of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageRecord {
    pub(crate) role: Role,
    pub(crate) content: Vec<ContentBlock>,
    pub(crate) created_at: DateTime<Utc>,
}

/// `summary` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SummaryRecord {
    pub(crate) content: String,
    /// Exported batch ids (of `batch` sections in this file).
    pub(crate) from_batch: i64,
    pub(crate) through_batch: i64,
    pub(crate) message_count: i64,
    pub(crate) depth: i32,
    pub(crate) created_at: DateTime<Utc>,
}

/// `archival` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ArchivalRecord {
    pub(crate) content: String,
    pub(crate) metadata: serde_json::Value,
    pub(crate) tags: Vec<String>,
    pub(crate) key: Option<String>,
    pub(crate) created_at: DateTime<Utc>,
}

/// Serialises `sections` (the agent first) into a complete file.
pub(crate) fn write(agent: &str, sections: &[Section]) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for s in sections {
        serde_json::to_writer(&mut body, s)?;
        body.push(b'\n');
        *counts.entry(s.kind().to_owned()).or_default() += 1;
    }
    let header = Header {
        format: FORMAT.to_owned(),
        version: VERSION,
        producer: format!("pattern {}", env!("CARGO_PKG_VERSION")),
        exported_at: Utc::now(),
        agent: agent.to_owned(),
        sections: counts,
        body_lines: sections.len() as u64,
        body_sha256: sha256_hex(&body),
    };
    let mut file = serde_json::to_vec(&header)?;
    file.push(b'\n');
    file.extend_from_slice(&body);
    Ok(file)
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

fn damaged(reason: impl std::fmt::Display) -> CliError {
    CliError::refused(format!("damaged export file: {reason}"))
}

/// Checks a whole file and returns its header and sections, or refuses it (exit 5) saying why.
pub(crate) fn parse(file: &[u8]) -> Result<(Header, Vec<Section>)> {
    let Some(newline) = file.iter().position(|&b| b == b'\n') else {
        return Err(damaged("no header line (empty or truncated file)"));
    };
    let (head, body) = (&file[..newline], &file[newline + 1..]);
    let raw: serde_json::Value =
        serde_json::from_slice(head).map_err(|e| damaged(format!("header is not JSON: {e}")))?;
    if raw.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(CliError::refused(
            "not a Pattern export file (its first line has no `\"format\": \"pattern-agent-export\"`)",
        ));
    }
    let version = raw.get("version").and_then(serde_json::Value::as_u64);
    match version {
        Some(v) if v == u64::from(VERSION) => {}
        Some(v) if v > u64::from(VERSION) => {
            return Err(CliError::refused(format!(
                "export format version {v} is newer than this build reads ({VERSION}): upgrade Pattern"
            )));
        }
        other => {
            return Err(damaged(format!("unsupported format version {other:?}")));
        }
    }
    let header: Header =
        serde_json::from_value(raw).map_err(|e| damaged(format!("header: {e}")))?;
    let digest = sha256_hex(body);
    if digest != header.body_sha256 {
        return Err(damaged(format!(
            "body checksum mismatch (sha256 {digest}, header says {}): the file is truncated or \
             was changed",
            header.body_sha256
        )));
    }
    if !body.is_empty() && !body.ends_with(b"\n") {
        return Err(damaged("the last line is not terminated"));
    }
    let lines: Vec<&[u8]> = body
        .split(|&b| b == b'\n')
        .take_while(|l| !l.is_empty())
        .collect();
    if lines.len() as u64 != header.body_lines {
        return Err(damaged(format!(
            "{} body lines, header says {}",
            lines.len(),
            header.body_lines
        )));
    }
    for kind in header.sections.keys() {
        if !KNOWN_SECTIONS.contains(&kind.as_str()) {
            return Err(CliError::refused(format!(
                "the export has `{kind}` sections, which this build cannot import: upgrade Pattern"
            )));
        }
    }
    let mut sections = Vec::with_capacity(lines.len());
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let section: Section =
            serde_json::from_slice(line).map_err(|e| damaged(format!("line {}: {e}", i + 2)))?;
        *counts.entry(section.kind().to_owned()).or_default() += 1;
        sections.push(section);
    }
    if counts != header.sections {
        return Err(damaged(format!(
            "section counts {counts:?} differ from the header's {:?}",
            header.sections
        )));
    }
    match sections.first() {
        Some(Section::Agent(_)) if counts.get("agent") == Some(&1) => {}
        _ => {
            return Err(damaged(
                "the first body line must be the one `agent` section",
            ));
        }
    }
    Ok((header, sections))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Section> {
        vec![
            Section::Agent(AgentRecord {
                name: "ada".into(),
                metadata: serde_json::json!({"instructions": "be brief"}),
                created_at: Utc::now(),
            }),
            Section::Summary(SummaryRecord {
                content: "earlier".into(),
                from_batch: 1,
                through_batch: 2,
                message_count: 4,
                depth: 0,
                created_at: Utc::now(),
            }),
        ]
    }

    #[test]
    fn round_trip() {
        let original = sample();
        let file = write("ada", &original).unwrap();
        let (header, sections) = parse(&file).unwrap();
        assert_eq!(header.agent, "ada");
        assert_eq!(header.body_lines, 2);
        assert_eq!(sections, original);
    }

    #[test]
    fn every_truncation_is_refused() {
        let file = write("ada", &sample()).unwrap();
        for cut in 0..file.len() {
            let err = parse(&file[..cut]).unwrap_err();
            assert_eq!(err.kind, crate::error::Kind::Refused, "cut {cut}: {err}");
        }
    }

    #[test]
    fn a_changed_byte_is_refused() {
        let file = write("ada", &sample()).unwrap();
        let header_end = file.iter().position(|&b| b == b'\n').unwrap();
        for at in (header_end + 1..file.len()).step_by(7) {
            let mut bad = file.clone();
            bad[at] ^= 0x01;
            let err = parse(&bad).unwrap_err();
            assert!(err.message.contains("checksum"), "{err}");
        }
    }

    #[test]
    fn unknown_sections_and_newer_versions_are_refused_by_name() {
        let mut file = write("ada", &sample()).unwrap();
        let text = String::from_utf8(file.clone()).unwrap();
        let (head, body) = text.split_once('\n').unwrap();
        let mut header: serde_json::Value = serde_json::from_str(head).unwrap();
        header["version"] = 2.into();
        let newer = format!("{header}\n{body}");
        let err = parse(newer.as_bytes()).unwrap_err();
        assert!(err.message.contains("newer"), "{err}");

        let extra = b"{\"section\":\"vectors\",\"data\":{}}\n";
        let mut body2 = body.as_bytes().to_vec();
        body2.extend_from_slice(extra);
        let mut header2: serde_json::Value = serde_json::from_str(head).unwrap();
        header2["sections"]["vectors"] = 1.into();
        header2["body_lines"] = 3.into();
        header2["body_sha256"] = sha256_hex(&body2).into();
        file = format!("{header2}\n").into_bytes();
        file.extend_from_slice(&body2);
        let err = parse(&file).unwrap_err();
        assert!(err.message.contains("`vectors`"), "{err}");
    }
}
