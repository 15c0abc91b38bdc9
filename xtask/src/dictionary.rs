//! `cargo xtask dictionary --out PATH`: trains a zstd dictionary for SQLite's compressed message
//! content from this repository's own English prose (every Markdown file under `docs/`, then
//! `ARCHITECTURE.md` and `README.md`), the way `pattern_db_sqlite`'s built-in dictionary was
//! made (`crates/pattern_db_sqlite/src/messages/english-1.zdict`: this command run in a checkout
//! of commit 806052a, the parent of the commit that added it, makes the same bytes).
//!
//! Samples are paragraphs (whitespace collapsed, at least 64 bytes), each as text and every
//! fourth also as the JSON of a one-text-block message, the two forms content is stored in. A
//! dictionary is part of the storage format once shipped: frames name it by id and are read back
//! for as long as a database holds one, so this command must never overwrite a file (a new
//! dictionary is a new file, added beside the old, never a replacement).

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The dictionary's size: 4 KiB. On 387-byte English-like messages 4, 16 and 32 KiB took the
/// same time (the entropy tables are what saves it) and 4 KiB stored the fewest bytes (504, 521
/// and 526 a message with indexes); on other English prose (licences and package READMEs, 313
/// bytes a paragraph) all three stored 181-182 bytes against 204 without (decision 0025,
/// "Stop 50").
const SIZE: usize = 4 * 1024;
/// Paragraphs shorter than this are headings and table rows, not prose.
const MIN_SAMPLE: usize = 64;

/// Trains the dictionary and writes it to `out`, which must not exist.
pub(crate) fn run(root: &Path, out: &Path) -> Result<()> {
    let samples = samples(root)?;
    if samples.len() < 100 {
        bail!(
            "only {} samples of prose found under {}",
            samples.len(),
            root.display()
        );
    }
    let dictionary = zstd::dict::from_samples(&samples, SIZE).context("training the dictionary")?;
    let id =
        zstd::zstd_safe::get_dict_id(&dictionary).context("the trained dictionary has no id")?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("{} (a dictionary is never overwritten)", out.display()))?;
    file.write_all(&dictionary)?;
    file.sync_all()?;
    println!(
        "{}: {} bytes, dictionary id {id}, from {} samples ({} bytes)",
        out.display(),
        dictionary.len(),
        samples.len(),
        samples.iter().map(Vec::len).sum::<usize>()
    );
    Ok(())
}

/// The training samples, in a fixed order (files sorted by path).
fn samples(root: &Path) -> Result<Vec<Vec<u8>>> {
    let mut files = Vec::new();
    markdown_under(&root.join("docs"), &mut files)?;
    files.sort();
    files.push(root.join("ARCHITECTURE.md"));
    files.push(root.join("README.md"));
    let mut samples = Vec::new();
    let mut n = 0usize;
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for paragraph in text.split("\n\n") {
            let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
            if paragraph.len() < MIN_SAMPLE {
                continue;
            }
            if n.is_multiple_of(4) {
                let block = serde_json::json!([{ "type": "text", "text": paragraph }]);
                samples.push(block.to_string().into_bytes());
            }
            n += 1;
            samples.push(paragraph.into_bytes());
        }
    }
    Ok(samples)
}

fn markdown_under(dir: &Path, into: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            markdown_under(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            into.push(path);
        }
    }
    Ok(())
}
