//! Document ingestion from real files the tests write: Markdown, plain text, HTML and a PDF made
//! with `lopdf`, cut into passages with their sections, pages and positions; bad input (binary,
//! corrupt PDF, a PDF with no text layer, a 1 GiB file, an empty file, an unknown extension) is a
//! typed error; storing a document's passages is idempotent on both backends.

use std::path::{Path, PathBuf};

use lopdf::content::{Content, Operation};
use lopdf::{Object, Stream, dictionary};
use memory_v2::ingest::{ChunkConfig, DocumentFormat, IngestConfig, read_document};
use memory_v2::{Error, ListArchival};
use pattern_db::testkit::TestDb;
use pattern_db::{Backend, NewAgent};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn config() -> IngestConfig {
    IngestConfig::default()
}

/// A PDF whose pages show `pages[i]` (each line a text line further down the page); an empty
/// page list entry draws only a rectangle (no text).
fn pdf(pages: &[&[&str]]) -> Vec<u8> {
    let mut doc = lopdf::Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Helvetica",
    });
    let resources_id = doc.add_object(dictionary! {
        "Font" => dictionary! { "F1" => font_id },
    });
    let mut kids = Vec::new();
    for lines in pages {
        let mut ops = Vec::new();
        if lines.is_empty() {
            ops.push(Operation::new(
                "re",
                vec![100.into(), 100.into(), 200.into(), 200.into()],
            ));
            ops.push(Operation::new("f", vec![]));
        } else {
            ops.push(Operation::new("BT", vec![]));
            ops.push(Operation::new("Tf", vec!["F1".into(), 12.into()]));
            ops.push(Operation::new("Td", vec![72.into(), 720.into()]));
            for (i, line) in lines.iter().enumerate() {
                if i > 0 {
                    // A paragraph gap.
                    ops.push(Operation::new("Td", vec![0.into(), (-48).into()]));
                }
                ops.push(Operation::new("Tj", vec![Object::string_literal(*line)]));
            }
            ops.push(Operation::new("ET", vec![]));
        }
        let content = Content { operations: ops };
        let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
        });
        kids.push(Object::from(page_id));
    }
    let count = i64::try_from(kids.len()).unwrap();
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => count,
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {
        "Type" => "Catalog",
        "Pages" => pages_id,
    });
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

const MARKDOWN: &str = "---\nauthor: someone\n---\n\n# Garden notes\n\nIntro paragraph about the \
garden.\n\n## Tomatoes\n\nTomatoes need *full* sun and\nregular watering.\n\n- stake them early\n\
- pinch the suckers\n\n```\nwater(tomatoes, litres = 2)\n```\n\n### Pests\n\nAphids love the new \
growth.\n\n## Beans\n\n| kind | days |\n|------|------|\n| runner | 60 |\n";

#[test]
fn markdown_is_cut_by_headings_with_sections_and_title() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "garden.md", MARKDOWN.as_bytes());
    let doc = read_document(&path, &config()).unwrap();
    assert_eq!(doc.format, DocumentFormat::Markdown);
    assert_eq!(doc.title, "Garden notes");
    let sections: Vec<Option<&str>> = doc.passages.iter().map(|p| p.section.as_deref()).collect();
    assert_eq!(
        sections,
        [
            Some("Garden notes"),
            Some("Garden notes > Tomatoes"),
            Some("Garden notes > Tomatoes > Pests"),
            Some("Garden notes > Beans"),
        ]
    );
    assert_eq!(doc.passages[0].text, "Intro paragraph about the garden.");
    assert_eq!(
        doc.passages[1].text,
        "Tomatoes need full sun and regular watering.\n\nstake them early\n\npinch the \
         suckers\n\nwater(tomatoes, litres = 2)"
    );
    assert!(doc.passages[3].text.contains("runner | 60"));
    // Front matter is not text of the document.
    assert!(doc.passages.iter().all(|p| !p.text.contains("author")));
    let positions: Vec<usize> = doc.passages.iter().map(|p| p.position).collect();
    assert_eq!(positions, [0, 1, 2, 3]);
}

#[test]
fn html_skips_scripts_and_keeps_structure() {
    let dir = tempfile::tempdir().unwrap();
    let html = "<!doctype html><html><head><title>Trip report</title><style>p{}</style>\
        <script>var secret = 1;</script></head><body><nav>Home | About</nav>\
        <h1>Day one</h1><p>We walked   to the\n lake.</p><div>Loose text in a div.</div>\
        <h2>Lunch</h2><ul><li>bread</li><li>cheese</li></ul>\
        <table><tr><th>item</th><th>cost</th></tr><tr><td>ferry</td><td>12</td></tr></table>\
        <h1>Day two</h1><p>Rain &amp; wind.</p></body></html>";
    let path = write(dir.path(), "trip.HTML", html.as_bytes());
    let doc = read_document(&path, &config()).unwrap();
    assert_eq!(doc.format, DocumentFormat::Html);
    assert_eq!(doc.title, "Trip report");
    let got: Vec<(Option<&str>, &str)> = doc
        .passages
        .iter()
        .map(|p| (p.section.as_deref(), p.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                Some("Day one"),
                "We walked to the lake.\n\nLoose text in a div."
            ),
            (
                Some("Day one > Lunch"),
                "bread\n\ncheese\n\nitem | cost\n\nferry | 12"
            ),
            (Some("Day two"), "Rain & wind."),
        ]
    );
    assert!(doc.passages.iter().all(|p| !p.text.contains("secret")));
}

#[test]
fn plain_text_paragraphs_fill_passages_with_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let paragraphs: Vec<String> = (0..30)
        .map(|i| format!("Paragraph {i} says something about topic {i} in a few words."))
        .collect();
    let path = write(dir.path(), "notes.txt", paragraphs.join("\n\n").as_bytes());
    let cfg = IngestConfig {
        chunk: ChunkConfig {
            max_chars: 300,
            overlap_chars: 60,
        },
        ..config()
    };
    let doc = read_document(&path, &cfg).unwrap();
    assert_eq!(doc.title, "notes");
    assert!(doc.passages.len() > 5);
    for p in &doc.passages {
        assert!(p.text.chars().count() <= 300 + 60, "{}", p.text);
        assert_eq!(p.section, None);
    }
    // Every paragraph is whole in some passage, and each passage after the first starts with
    // the end of the one before.
    for para in &paragraphs {
        assert!(doc.passages.iter().any(|p| p.text.contains(para.as_str())));
    }
    for pair in doc.passages.windows(2) {
        let head: String = pair[1].text.chars().take(20).collect();
        assert!(pair[0].text.contains(&head), "no overlap: {pair:?}");
    }
}

#[test]
fn pdf_text_comes_with_its_pages() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = pdf(&[
        &["Hello from page one.", "A second paragraph here."],
        &["Second page speaks."],
    ]);
    let path = write(dir.path(), "report.pdf", &bytes);
    let doc = read_document(&path, &config()).unwrap();
    assert_eq!(doc.format, DocumentFormat::Pdf);
    let all: String = doc
        .passages
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("Hello from page one."), "{all}");
    assert!(all.contains("Second page speaks."), "{all}");
    let second = doc
        .passages
        .iter()
        .find(|p| p.text.contains("Second page speaks."))
        .unwrap();
    assert_eq!(second.page, Some(2));
    assert_eq!(doc.passages[0].page, Some(1));
}

#[test]
fn bad_documents_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let c = config();
    // A binary file named as text.
    let bin = write(
        dir.path(),
        "image.txt",
        &[0x89, b'P', b'N', b'G', 0, 1, 2, 0xff],
    );
    assert!(matches!(
        read_document(&bin, &c),
        Err(Error::NotText { offset: 0, .. })
    ));
    let latin1 = write(dir.path(), "old.md", b"caf\xe9 au lait");
    assert!(matches!(
        read_document(&latin1, &c),
        Err(Error::NotText { offset: 3, .. })
    ));
    // A PDF cut in half, and one that is not a PDF at all.
    let whole = pdf(&[&["Some text."]]);
    let cut = write(dir.path(), "cut.pdf", &whole[..whole.len() / 2]);
    let e = read_document(&cut, &c).unwrap_err();
    assert!(matches!(e, Error::CorruptDocument { .. }), "{e:?}");
    let fake = write(dir.path(), "fake.pdf", b"hello, I am text");
    assert!(matches!(
        read_document(&fake, &c),
        Err(Error::CorruptDocument { .. })
    ));
    // Pages without text: a scan.
    let scan = write(dir.path(), "scan.pdf", &pdf(&[&[], &[]]));
    assert!(matches!(
        read_document(&scan, &c),
        Err(Error::NoTextLayer { pages: 2, .. })
    ));
    // Nothing but whitespace.
    let empty = write(dir.path(), "empty.md", b"  \n\n\t\n");
    assert!(matches!(
        read_document(&empty, &c),
        Err(Error::EmptyDocument { .. })
    ));
    let docx = write(dir.path(), "letter.docx", b"PK\x03\x04");
    let e = read_document(&docx, &c).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDocument { .. }));
    assert_eq!(e.class(), pattern_db::ErrorClass::Invalid);
    assert!(matches!(
        read_document(dir.path(), &c),
        Err(Error::UnsupportedDocument { .. } | Error::DocumentUnreadable { .. })
    ));
    let missing = dir.path().join("missing.md");
    let e = read_document(&missing, &c).unwrap_err();
    assert_eq!(e.class(), pattern_db::ErrorClass::NotFound);
}

#[test]
fn a_one_gigabyte_file_is_refused_without_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.txt");
    // Sparse: takes no disk, but is 1 GiB long.
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    let started = std::time::Instant::now();
    let e = read_document(&path, &config()).unwrap_err();
    assert!(
        matches!(e, Error::DocumentTooLarge { bytes, max, .. } if bytes == 1 << 30 && max == memory_v2::ingest::MAX_DOCUMENT_BYTES),
        "{e:?}"
    );
    assert_eq!(e.class(), pattern_db::ErrorClass::Refused);
    assert!(e.to_string().contains("huge.txt"));
    // Refused from its size, not after reading it (a generous bound for a loaded machine).
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

/// A document's passages are stored whole in one call, with their metadata, and storing the
/// same file again stores nothing new.
async fn storing_a_document_is_idempotent(backend: Backend) {
    let tdb = TestDb::fresh(backend).await.unwrap();
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("reader")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "garden.md", MARKDOWN.as_bytes());
    let doc = read_document(&path, &config()).unwrap();
    let entries = doc.to_archival(&["garden".to_owned()]);
    db.insert_archival_many(agent.id, entries.clone())
        .await
        .unwrap();
    db.insert_archival_many(agent.id, entries).await.unwrap();
    let stored = db
        .list_archival(
            agent.id,
            ListArchival {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), doc.passages.len());
    let pests = stored
        .iter()
        .find(|e| e.content.contains("Aphids"))
        .unwrap();
    assert_eq!(pests.metadata["section"], "Garden notes > Tomatoes > Pests");
    assert_eq!(pests.metadata["title"], "Garden notes");
    assert_eq!(pests.metadata["format"], "markdown");
    assert_eq!(pests.metadata["position"], 2);
    assert_eq!(pests.metadata["source"], path.display().to_string());
    assert_eq!(pests.tags, ["garden"]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(storing_a_document_is_idempotent);
