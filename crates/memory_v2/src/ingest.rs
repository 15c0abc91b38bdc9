//! Document ingestion for archival memory: Markdown, plain text, HTML and PDF files turned into
//! passages that carry their source, position, title and section, ready to be stored as archival
//! passages in one transaction per document.
//!
//! Parsing is done by crates (`pulldown-cmark`, `scraper`, `pdf-extract`); this module only walks
//! their output for structure (headings, paragraphs, list items, code blocks, pages) and cuts it
//! into passages: a passage never crosses a heading, holds whole paragraphs while they fit in
//! [`ChunkConfig::max_chars`] (and never crosses a PDF page), and a passage that continues a section starts with the last
//! [`ChunkConfig::overlap_chars`] characters of the one before it (cut at a word), so a sentence
//! that straddles two passages is found in both. A paragraph longer than a passage is cut at
//! whitespace into overlapping windows.
//!
//! This module must never read more than [`IngestConfig::max_bytes`] of a file (the size is
//! checked before reading, and the read is bounded), never return a partial document (any
//! failure is a typed error and nothing of the document is returned), never guess a format from
//! content it cannot parse, and never write anything.

use std::io::Read;
use std::path::Path;

use pattern_db::NewArchival;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The default size limit of one document: 32 MiB. Larger files are refused before they are read.
pub const MAX_DOCUMENT_BYTES: u64 = 32 * 1024 * 1024;

/// How documents are cut into passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Characters a passage holds at most before its overlap (Unicode scalar values).
    pub max_chars: usize,
    /// Characters of the previous passage repeated at the start of the next one in a section.
    pub overlap_chars: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            max_chars: 1200,
            overlap_chars: 200,
        }
    }
}

/// Limits and chunking of [`read_document`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestConfig {
    /// Largest file read, in bytes (default [`MAX_DOCUMENT_BYTES`]).
    pub max_bytes: u64,
    /// How passages are cut.
    pub chunk: ChunkConfig,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            max_bytes: MAX_DOCUMENT_BYTES,
            chunk: ChunkConfig::default(),
        }
    }
}

/// The kinds of document taken, by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentFormat {
    /// `.md`, `.markdown`.
    Markdown,
    /// `.txt`, `.text`.
    Text,
    /// `.html`, `.htm`, `.xhtml`.
    Html,
    /// `.pdf`.
    Pdf,
}

impl DocumentFormat {
    /// The format of `path` by its extension (case-insensitive), if it is one taken.
    pub fn of_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "md" | "markdown" => Some(Self::Markdown),
            "txt" | "text" => Some(Self::Text),
            "html" | "htm" | "xhtml" => Some(Self::Html),
            "pdf" => Some(Self::Pdf),
            _ => None,
        }
    }

    /// Its name in passage metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Markdown => "markdown",
            Self::Text => "text",
            Self::Html => "html",
            Self::Pdf => "pdf",
        }
    }
}

/// One passage of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// Its text (the overlap with the previous passage included).
    pub text: String,
    /// The headings it stands under, outermost first, joined by ` > ` (none before the first).
    pub section: Option<String>,
    /// The PDF page its first paragraph is on (from 1).
    pub page: Option<u32>,
    /// Its place in the document, from 0.
    pub position: usize,
}

/// A parsed document: whole, or an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it came from, as given.
    pub path: String,
    /// Its format.
    pub format: DocumentFormat,
    /// Its title: the HTML `<title>`, else the first top-level heading, else the file's stem.
    pub title: String,
    /// SHA-256 of its bytes (hex): the dedupe keys of its passages derive from it.
    pub sha256: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its passages in document order.
    pub passages: Vec<Passage>,
}

impl Document {
    /// The passages as archival entries: metadata `{source, format, title, section, page,
    /// position, passages, sha256}`, the given tags, and the dedupe key
    /// `doc:<sha256>:<position>`, so importing the same bytes again stores nothing new.
    pub fn to_archival(&self, tags: &[String]) -> Vec<NewArchival> {
        let total = self.passages.len();
        self.passages
            .iter()
            .map(|p| NewArchival {
                content: p.text.clone(),
                metadata: json!({
                    "source": self.path,
                    "format": self.format.as_str(),
                    "title": self.title,
                    "section": p.section,
                    "page": p.page,
                    "position": p.position,
                    "passages": total,
                    "sha256": self.sha256,
                }),
                tags: tags.to_vec(),
                dedupe_key: Some(format!("doc:{}:{}", self.sha256, p.position)),
            })
            .collect()
    }
}

/// Reads and parses the document at `path` (its format from its extension), refusing it before
/// reading when it is larger than `config.max_bytes`.
pub fn read_document(path: &Path, config: &IngestConfig) -> Result<Document> {
    let shown = path.display().to_string();
    let format = DocumentFormat::of_path(path).ok_or_else(|| Error::UnsupportedDocument {
        path: shown.clone(),
        reason: "not a document ingestion takes (by extension: .md, .markdown, .txt, .text, \
                 .html, .htm, .xhtml, .pdf; JSON Lines: .jsonl)"
            .to_owned(),
    })?;
    let unreadable = |e: std::io::Error| Error::DocumentUnreadable {
        path: shown.clone(),
        kind: e.kind(),
        reason: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(Error::UnsupportedDocument {
            path: shown,
            reason: "not a regular file".to_owned(),
        });
    }
    if meta.len() > config.max_bytes {
        return Err(Error::DocumentTooLarge {
            path: shown,
            bytes: meta.len(),
            max: config.max_bytes,
        });
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            f.take(config.max_bytes.saturating_add(1))
                .read_to_end(&mut bytes)
        })
        .map_err(unreadable)?;
    if bytes.len() as u64 > config.max_bytes {
        // It grew while being read.
        return Err(Error::DocumentTooLarge {
            path: shown,
            bytes: bytes.len() as u64,
            max: config.max_bytes,
        });
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    parse_document(&bytes, format, &shown, &stem, &config.chunk)
}

/// Parses `bytes` as a document of `format`; `path` names it in errors and metadata, `stem` is
/// the title when the document has none.
pub fn parse_document(
    bytes: &[u8],
    format: DocumentFormat,
    path: &str,
    stem: &str,
    chunk: &ChunkConfig,
) -> Result<Document> {
    let (title, blocks) = match format {
        DocumentFormat::Pdf => (None, pdf_blocks(bytes, path)?),
        _ => {
            let text = as_text(bytes, path)?;
            match format {
                DocumentFormat::Markdown => markdown_blocks(text),
                DocumentFormat::Html => html_blocks(text),
                _ => (None, text_blocks(text, None)),
            }
        }
    };
    let passages = chunk_blocks(&blocks, chunk);
    if passages.is_empty() {
        return Err(Error::EmptyDocument {
            path: path.to_owned(),
        });
    }
    Ok(Document {
        path: path.to_owned(),
        format,
        title: title.unwrap_or_else(|| stem.to_owned()),
        sha256: format!("{:x}", Sha256::digest(bytes)),
        bytes: bytes.len() as u64,
        passages,
    })
}

/// A text document's bytes as text: UTF-8 (a byte-order mark dropped) with no NUL byte.
fn as_text<'a>(bytes: &'a [u8], path: &str) -> Result<&'a str> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let nul = bytes.iter().position(|b| *b == 0);
    let bad = match std::str::from_utf8(bytes) {
        Ok(text) if nul.is_none() => return Ok(text),
        Ok(_) => nul,
        Err(e) => Some(nul.map_or(e.valid_up_to(), |n| n.min(e.valid_up_to()))),
    };
    Err(Error::NotText {
        path: path.to_owned(),
        offset: bad.unwrap_or(0),
    })
}

/// One structural unit: a paragraph, list item, code block, table row or PDF paragraph.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    /// Headings it stands under, outermost first.
    section: Vec<String>,
    text: String,
    page: Option<u32>,
}

/// Collapses runs of whitespace to one space. A NUL character (which some PDF text layers carry,
/// and which the store refuses in a passage) counts as whitespace.
fn squeeze(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c == '\0')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Paragraphs separated by blank lines (each paragraph's lines joined by spaces).
fn text_blocks(text: &str, page: Option<u32>) -> Vec<Block> {
    let mut out = Vec::new();
    let mut para: Vec<&str> = Vec::new();
    let flush = |para: &mut Vec<&str>, out: &mut Vec<Block>| {
        let text = squeeze(&para.join(" "));
        para.clear();
        if !text.is_empty() {
            out.push(Block {
                section: Vec::new(),
                text,
                page,
            });
        }
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut para, &mut out);
        } else {
            para.push(line);
        }
    }
    flush(&mut para, &mut out);
    out
}

/// Sets the heading of `level` (1-based): deeper headings are dropped, missing levels skipped.
fn set_heading(stack: &mut Vec<(usize, String)>, level: usize, text: String) {
    stack.retain(|(l, _)| *l < level);
    if !text.is_empty() {
        stack.push((level, text));
    }
}

fn section_of(stack: &[(usize, String)]) -> Vec<String> {
    stack.iter().map(|(_, t)| t.clone()).collect()
}

fn markdown_blocks(text: &str) -> (Option<String>, Vec<Block>) {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut title = None;
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut heading: Option<usize> = None;
    let mut in_code = false;
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    let mut in_metadata = false;
    let flush = |buf: &mut String, out: &mut Vec<Block>, stack: &[(usize, String)], code: bool| {
        let text = if code {
            buf.trim().to_owned()
        } else {
            squeeze(buf)
        };
        buf.clear();
        if !text.is_empty() {
            out.push(Block {
                section: section_of(stack),
                text,
                page: None,
            });
        }
    };
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(Tag::MetadataBlock(_)) => in_metadata = true,
            Event::End(TagEnd::MetadataBlock(_)) => in_metadata = false,
            Event::Start(Tag::Heading { level, .. }) => {
                flush(&mut buf, &mut out, &stack, false);
                heading = Some(level as usize);
            }
            Event::End(TagEnd::Heading(_)) => {
                let text = squeeze(&buf);
                buf.clear();
                let level = heading.take().unwrap_or(1);
                if title.is_none() && level == 1 && !text.is_empty() {
                    title = Some(text.clone());
                }
                set_heading(&mut stack, level, text);
            }
            Event::Start(Tag::CodeBlock(_)) => {
                flush(&mut buf, &mut out, &stack, false);
                in_code = true;
            }
            Event::End(TagEnd::CodeBlock) => {
                flush(&mut buf, &mut out, &stack, true);
                in_code = false;
            }
            Event::Start(Tag::Item | Tag::Paragraph | Tag::TableRow | Tag::TableHead) => {
                flush(&mut buf, &mut out, &stack, false);
            }
            Event::End(
                TagEnd::Paragraph
                | TagEnd::Item
                | TagEnd::TableRow
                | TagEnd::TableHead
                | TagEnd::BlockQuote(_),
            ) => flush(&mut buf, &mut out, &stack, false),
            Event::End(TagEnd::TableCell) => buf.push_str(" | "),
            Event::Text(t) | Event::Code(t) if !in_metadata => buf.push_str(&t),
            Event::SoftBreak | Event::HardBreak => buf.push(if in_code { '\n' } else { ' ' }),
            _ => {}
        }
    }
    flush(&mut buf, &mut out, &stack, in_code);
    (title, out)
}

/// Elements whose text is one block.
const HTML_LEAVES: &[&str] = &[
    "p",
    "li",
    "pre",
    "blockquote",
    "dt",
    "dd",
    "figcaption",
    "caption",
    "tr",
    "address",
];
/// Elements whose content is never text of the document.
const HTML_SKIPPED: &[&str] = &[
    "head", "script", "style", "noscript", "template", "svg", "math", "iframe", "object", "nav",
];

fn html_blocks(text: &str) -> (Option<String>, Vec<Block>) {
    let html = scraper::Html::parse_document(text);
    let title = scraper::Selector::parse("title")
        .ok()
        .and_then(|s| {
            html.select(&s)
                .next()
                .map(|t| squeeze(&t.text().collect::<String>()))
        })
        .filter(|t| !t.is_empty());
    let mut walk = HtmlWalk {
        stack: Vec::new(),
        out: Vec::new(),
        loose: String::new(),
        first_h1: None,
    };
    walk.element(html.root_element());
    walk.flush_loose();
    (title.or(walk.first_h1), walk.out)
}

struct HtmlWalk {
    stack: Vec<(usize, String)>,
    out: Vec<Block>,
    /// Text standing directly in a container (not in a paragraph).
    loose: String,
    first_h1: Option<String>,
}

impl HtmlWalk {
    fn push(&mut self, text: String) {
        if !text.is_empty() {
            self.out.push(Block {
                section: section_of(&self.stack),
                text,
                page: None,
            });
        }
    }

    fn flush_loose(&mut self) {
        let text = squeeze(&std::mem::take(&mut self.loose));
        self.push(text);
    }

    fn element(&mut self, element: scraper::ElementRef<'_>) {
        for child in element.children() {
            match child.value() {
                scraper::Node::Text(t) => self.loose.push_str(t),
                scraper::Node::Element(e) => {
                    let Some(el) = scraper::ElementRef::wrap(child) else {
                        continue;
                    };
                    let name = e.name();
                    if HTML_SKIPPED.contains(&name) {
                        continue;
                    }
                    if let Some(level) = heading_level(name) {
                        self.flush_loose();
                        let text = squeeze(&el.text().collect::<String>());
                        if level == 1 && self.first_h1.is_none() && !text.is_empty() {
                            self.first_h1 = Some(text.clone());
                        }
                        set_heading(&mut self.stack, level, text);
                    } else if HTML_LEAVES.contains(&name) {
                        self.flush_loose();
                        let raw: String = if name == "tr" {
                            el.children()
                                .filter_map(scraper::ElementRef::wrap)
                                .map(|c| squeeze(&c.text().collect::<String>()))
                                .collect::<Vec<_>>()
                                .join(" | ")
                        } else if name == "pre" {
                            el.text().collect::<String>().trim().to_owned()
                        } else {
                            squeeze(&el.text().collect::<String>())
                        };
                        self.push(raw);
                    } else if name == "br" {
                        self.loose.push(' ');
                    } else {
                        self.element(el);
                    }
                }
                _ => {}
            }
        }
    }
}

fn heading_level(name: &str) -> Option<usize> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

/// The paragraphs of each page of a PDF. A parser failure (or a panic inside the parser, which
/// malformed files can cause) is `CorruptDocument`; pages without any text are `NoTextLayer`.
fn pdf_blocks(bytes: &[u8], path: &str) -> Result<Vec<Block>> {
    if !bytes.starts_with(b"%PDF-") {
        return Err(Error::CorruptDocument {
            path: path.to_owned(),
            reason: "no `%PDF-` header".to_owned(),
        });
    }
    let pages = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem_by_pages(bytes))
        .map_err(|_| Error::CorruptDocument {
            path: path.to_owned(),
            reason: "the PDF parser gave up on this file".to_owned(),
        })?
        .map_err(|e| Error::CorruptDocument {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if pages.is_empty() {
        return Err(Error::CorruptDocument {
            path: path.to_owned(),
            reason: "no pages".to_owned(),
        });
    }
    let mut out = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
        out.extend(text_blocks(page, Some(number)));
    }
    if out.is_empty() {
        return Err(Error::NoTextLayer {
            path: path.to_owned(),
            pages: pages.len(),
        });
    }
    Ok(out)
}

/// Cuts blocks into passages (see the module doc).
fn chunk_blocks(blocks: &[Block], config: &ChunkConfig) -> Vec<Passage> {
    let max = config.max_chars.max(1);
    let overlap = config.overlap_chars.min(max / 2);
    let mut out: Vec<Passage> = Vec::new();
    let mut cur = String::new();
    let mut cur_len = 0usize;
    // Whether `cur` holds anything besides the overlap carried from the passage before.
    let mut fresh = false;
    // A passage never crosses a heading, nor a PDF page.
    let mut cur_section: Option<(&[String], Option<u32>)> = None;
    let mut cur_page: Option<u32> = None;
    let flush = |out: &mut Vec<Passage>,
                 cur: &mut String,
                 cur_len: &mut usize,
                 fresh: &mut bool,
                 section: Option<&[String]>,
                 page: Option<u32>| {
        if *fresh {
            out.push(Passage {
                text: cur.clone(),
                section: section.filter(|s| !s.is_empty()).map(|s| s.join(" > ")),
                page,
                position: out.len(),
            });
        }
        cur.clear();
        *cur_len = 0;
        *fresh = false;
    };
    for block in blocks {
        let key = (block.section.as_slice(), block.page);
        if cur_section != Some(key) {
            flush(
                &mut out,
                &mut cur,
                &mut cur_len,
                &mut fresh,
                cur_section.map(|k| k.0),
                cur_page,
            );
            cur_section = Some(key);
        }
        for piece in windows(&block.text, max, overlap) {
            let len = piece.chars().count();
            if fresh && cur_len + 2 + len > max {
                let carried = tail(&cur, overlap);
                flush(
                    &mut out,
                    &mut cur,
                    &mut cur_len,
                    &mut fresh,
                    cur_section.map(|k| k.0),
                    cur_page,
                );
                cur_len = carried.chars().count();
                cur = carried;
            }
            if !fresh {
                cur_page = block.page;
            }
            if !cur.is_empty() {
                cur.push_str("\n\n");
                cur_len += 2;
            }
            cur.push_str(&piece);
            cur_len += len;
            fresh = true;
        }
    }
    flush(
        &mut out,
        &mut cur,
        &mut cur_len,
        &mut fresh,
        cur_section.map(|k| k.0),
        cur_page,
    );
    out
}

/// `text` cut into windows of at most `max` characters at whitespace, each after the first
/// starting `overlap` characters before the previous one ended (at a word).
fn windows(text: &str, max: usize, overlap: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max {
        return vec![text.to_owned()];
    }
    let mut out = Vec::new();
    let mut start = 0usize;
    loop {
        let hard_end = (start + max).min(chars.len());
        let mut end = hard_end;
        if hard_end < chars.len() {
            // Back off to the last whitespace in the second half of the window.
            if let Some(ws) = (start + max / 2..hard_end)
                .rev()
                .find(|&i| chars[i].is_whitespace())
            {
                end = ws;
            }
        }
        let piece: String = chars[start..end].iter().collect();
        let piece = piece.trim().to_owned();
        if !piece.is_empty() {
            out.push(piece);
        }
        if end >= chars.len() {
            return out;
        }
        // The next window starts `overlap` back, moved forward to a word start; always forward.
        let mut next = end.saturating_sub(overlap).max(start + 1);
        while next < end && !chars[next - 1].is_whitespace() {
            next += 1;
        }
        start = next;
    }
}

/// The last `n` characters of `text`, starting at a word (empty when `n` is 0).
fn tail(text: &str, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= n {
        return text.to_owned();
    }
    let mut start = chars.len() - n;
    while start < chars.len() && !chars[start - 1].is_whitespace() {
        start += 1;
    }
    chars[start..].iter().collect::<String>().trim().to_owned()
}

#[cfg(test)]
mod tests {
    //! Unit tests of the cutting rules.

    use super::*;

    fn block(section: &[&str], text: &str) -> Block {
        Block {
            section: section.iter().map(|s| (*s).to_owned()).collect(),
            text: text.to_owned(),
            page: None,
        }
    }

    #[test]
    fn passages_never_cross_headings_and_keep_whole_paragraphs() {
        let blocks = vec![
            block(&["A"], "one two"),
            block(&["A"], "three four"),
            block(&["A", "B"], "five"),
        ];
        let p = chunk_blocks(
            &blocks,
            &ChunkConfig {
                max_chars: 100,
                overlap_chars: 10,
            },
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].text, "one two\n\nthree four");
        assert_eq!(p[0].section.as_deref(), Some("A"));
        assert_eq!(p[1].text, "five");
        assert_eq!(p[1].section.as_deref(), Some("A > B"));
        assert_eq!((p[0].position, p[1].position), (0, 1));
    }

    #[test]
    fn a_continued_section_overlaps_the_passage_before() {
        let blocks = vec![
            block(&[], "alpha beta gamma delta"),
            block(&[], "epsilon zeta eta theta"),
        ];
        let p = chunk_blocks(
            &blocks,
            &ChunkConfig {
                max_chars: 30,
                overlap_chars: 11,
            },
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].text, "alpha beta gamma delta");
        assert_eq!(p[1].text, "gamma delta\n\nepsilon zeta eta theta");
        assert_eq!(p[1].section, None);
    }

    #[test]
    fn long_paragraphs_are_cut_at_whitespace_with_overlap_and_lose_no_word() {
        let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
        let text = words.join(" ");
        let pieces = windows(&text, 100, 20);
        assert!(pieces.len() > 10);
        for p in &pieces {
            assert!(p.chars().count() <= 100, "{p}");
            // Never a cut word.
            for w in p.split_whitespace() {
                assert!(words.contains(&w.to_owned()), "cut word {w}");
            }
        }
        let mut seen: Vec<&str> = pieces.iter().flat_map(|p| p.split_whitespace()).collect();
        seen.dedup();
        let mut all: Vec<&str> = seen.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 400, "every word is in some passage");
        // Consecutive pieces share words.
        for pair in pieces.windows(2) {
            let last = pair[0].split_whitespace().last().unwrap_or_default();
            assert!(pair[1].contains(last), "no overlap between {pair:?}");
        }
    }

    #[test]
    fn a_word_longer_than_a_passage_is_cut_and_the_loop_ends() {
        let text = "x".repeat(250);
        let pieces = windows(&text, 100, 30);
        assert!(pieces.iter().all(|p| p.chars().count() <= 100));
        assert!(pieces.concat().len() >= 250);
    }

    #[test]
    fn formats_come_from_extensions() {
        assert_eq!(
            DocumentFormat::of_path(Path::new("a/B.MD")),
            Some(DocumentFormat::Markdown)
        );
        assert_eq!(
            DocumentFormat::of_path(Path::new("x.htm")),
            Some(DocumentFormat::Html)
        );
        assert_eq!(DocumentFormat::of_path(Path::new("x.docx")), None);
        assert_eq!(DocumentFormat::of_path(Path::new("README")), None);
    }
}
