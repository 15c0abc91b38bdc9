//! Export and import of whole agents through the real `pattern` binary, at realistic sizes:
//! agents with 1,000 and 10,000 batches (4 messages each, every other batch with a tool call and
//! its result) and 20 memory blocks of 10 versions. Timings include process start and opening
//! the database, as a user sees them. This bench must never touch a real data directory.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use pattern::db::legacy::LegacyMessage;
use pattern::memory::{BlockType, MemoryEditor, NewMemoryBlock, WriteAuth};
use pattern::{ContentBlock, NewAgent, Pattern, PatternConfig, Role};

fn pattern(data_dir: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_pattern"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("PATTERN_DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn history(batches: usize) -> Vec<LegacyMessage> {
    let msg = |role, content| LegacyMessage {
        role,
        content,
        created_at: None,
        origin: None,
    };
    let mut out = Vec::with_capacity(batches * 4);
    for i in 0..batches {
        out.push(msg(
            Role::User,
            vec![ContentBlock::text(format!(
                "question {i}: what do you remember about the engine drawings?"
            ))],
        ));
        if i % 2 == 0 {
            let id = format!("call-{i}");
            out.push(msg(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    id.clone(),
                    "archival_search",
                    serde_json::json!({"query": "engine drawings", "limit": 5}),
                )],
            ));
            out.push(msg(
                Role::Tool,
                vec![ContentBlock::tool_result(
                    id,
                    "three results about the difference engine".repeat(4),
                    false,
                )],
            ));
        } else {
            out.push(msg(
                Role::Assistant,
                vec![ContentBlock::text("Let me think about that.")],
            ));
            out.push(msg(Role::User, vec![ContentBlock::text("go on")]));
        }
        out.push(msg(
            Role::Assistant,
            vec![ContentBlock::text(
                "The drawings show the mill and the store, and the carry mechanism.".repeat(3),
            )],
        ));
    }
    out
}

fn seed(data_dir: &Path, batches: usize) {
    pattern(data_dir, &["init"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = Pattern::open(PatternConfig::data_dir(data_dir))
            .await
            .unwrap();
        let agent = p.db().create_agent(NewAgent::named("ada")).await.unwrap();
        for b in 0..20 {
            let label = format!("block-{b}");
            let mut version = p
                .memory()
                .create_block(
                    agent.id,
                    NewMemoryBlock {
                        label: label.clone(),
                        description: "notes".into(),
                        value: "start".into(),
                        char_limit: 5000,
                        block_type: BlockType::Core,
                    },
                )
                .await
                .unwrap()
                .version;
            for v in 0..9 {
                version = p
                    .memory()
                    .append(
                        agent.id,
                        &label,
                        &format!("fact {v}"),
                        version,
                        WriteAuth::Agent,
                    )
                    .await
                    .unwrap();
            }
        }
        p.messages(agent.id)
            .import_legacy(history(batches))
            .await
            .unwrap();
        p.close().await;
    });
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("transfer");
    group.sample_size(10);
    for batches in [1_000usize, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        seed(&data, batches);
        let file = dir.path().join("ada.jsonl");
        let file_arg = file.to_str().unwrap().to_owned();
        group.bench_function(format!("export_{batches}_batches"), |b| {
            b.iter(|| pattern(&data, &["export", "ada", &file_arg]));
        });
        let n = AtomicUsize::new(0);
        group.bench_function(format!("import_{batches}_batches"), |b| {
            b.iter(|| {
                let name = format!("copy-{}", n.fetch_add(1, Ordering::Relaxed));
                pattern(&data, &["import", &file_arg, "--rename", &name]);
            });
        });
        eprintln!(
            "export of {batches} batches: {} bytes",
            std::fs::metadata(&file).unwrap().len()
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
