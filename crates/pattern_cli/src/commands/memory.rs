//! `pattern memory block list|show|create|set|append|history|undo`, over `memory_v2`'s
//! `DbMemoryStore`. The person at the command line is a human, so writes carry
//! `WriteAuth::Approved`; `--expect-version` makes a write refuse a block that changed (exit 4).
//! A value over the limit is refused (exit 5), never cut.

use pattern::Pattern;
use pattern::memory::{BlockType, MemoryEditor, MemoryStore, NewMemoryBlock, WriteAuth};
use serde::Serialize;

use crate::cli::{BlockCommand, ExpectArg, MemoryCommand};
use crate::env::{Config, Env, agent};
use crate::error::Result;
use crate::output::{self, BlockView, VersionView};

pub(crate) async fn run(env: &Env, command: MemoryCommand) -> Result<()> {
    let (pattern, config) = env.open().await?;
    let MemoryCommand::Block(command) = command;
    let result = block(env, &pattern, &config, command).await;
    pattern.close().await;
    result
}

/// Shape of a write's answer.
#[derive(Serialize)]
struct Written {
    label: String,
    version: i64,
    block: BlockView,
}

async fn expected(
    pattern: &Pattern,
    agent: pattern::AgentId,
    label: &str,
    expect: ExpectArg,
) -> Result<i64> {
    match expect.expect_version {
        Some(v) => Ok(v),
        None => Ok(pattern.memory().block(agent, label).await?.version),
    }
}

async fn written(env: &Env, pattern: &Pattern, agent: pattern::AgentId, label: &str) -> Result<()> {
    let block = pattern.memory().block(agent, label).await?;
    if env.json {
        output::json(&Written {
            label: label.to_owned(),
            version: block.version,
            block: BlockView::from(&block),
        })
    } else {
        output::line(&format!(
            "{label}: version {} ({}/{} chars)",
            block.version,
            block.char_count(),
            block.char_limit
        ))
    }
}

async fn block(env: &Env, pattern: &Pattern, config: &Config, command: BlockCommand) -> Result<()> {
    let memory = pattern.memory();
    match command {
        BlockCommand::List { agent: arg } => {
            let a = agent(pattern, config, &arg).await?;
            let blocks = memory.all_blocks(a.id).await?;
            if env.json {
                let views: Vec<BlockView> = blocks.iter().map(BlockView::from).collect();
                return output::json(&views);
            }
            if blocks.is_empty() {
                return output::line(&format!("agent {} has no memory blocks", a.name));
            }
            for b in &blocks {
                output::line(&format!(
                    "{:<20} v{:<4} {:>7}/{:<7} {:<8} {:<10} {}",
                    b.label,
                    b.version,
                    b.char_count(),
                    b.char_limit,
                    b.block_type.as_str(),
                    b.permission.as_str(),
                    output::preview(&b.value, 60)
                ))?;
            }
            Ok(())
        }
        BlockCommand::Show { label, agent: arg } => {
            let a = agent(pattern, config, &arg).await?;
            let b = memory.block(a.id, &label).await?;
            if env.json {
                return output::json(&BlockView::from(&b));
            }
            output::line(&format!(
                "{} (version {}, {}/{} chars, {}, {})\n{}\n---\n{}",
                b.label,
                b.version,
                b.char_count(),
                b.char_limit,
                b.block_type.as_str(),
                b.permission.as_str(),
                b.description,
                b.value
            ))
        }
        BlockCommand::Create {
            label,
            limit,
            description,
            value,
            block_type,
            agent: arg,
        } => {
            let a = agent(pattern, config, &arg).await?;
            let block_type: BlockType = block_type.parse()?;
            memory
                .create_block(
                    a.id,
                    NewMemoryBlock {
                        label: label.clone(),
                        description,
                        value,
                        char_limit: limit,
                        block_type,
                    },
                )
                .await?;
            written(env, pattern, a.id, &label).await
        }
        BlockCommand::Set {
            label,
            value,
            expect,
            agent: arg,
        } => {
            let a = agent(pattern, config, &arg).await?;
            let v = expected(pattern, a.id, &label, expect).await?;
            memory
                .set(a.id, &label, &value, v, WriteAuth::Approved)
                .await?;
            written(env, pattern, a.id, &label).await
        }
        BlockCommand::Append {
            label,
            text,
            expect,
            agent: arg,
        } => {
            let a = agent(pattern, config, &arg).await?;
            let v = expected(pattern, a.id, &label, expect).await?;
            memory
                .append(a.id, &label, &text, v, WriteAuth::Approved)
                .await?;
            written(env, pattern, a.id, &label).await
        }
        BlockCommand::Undo {
            label,
            expect,
            agent: arg,
        } => {
            let a = agent(pattern, config, &arg).await?;
            let v = expected(pattern, a.id, &label, expect).await?;
            memory.undo(a.id, &label, v, WriteAuth::Approved).await?;
            written(env, pattern, a.id, &label).await
        }
        BlockCommand::History { label, agent: arg } => {
            let a = agent(pattern, config, &arg).await?;
            let versions = memory.history(a.id, &label).await?;
            if env.json {
                let views: Vec<VersionView> = versions.iter().map(VersionView::from).collect();
                return output::json(&views);
            }
            for v in &versions {
                output::line(&format!(
                    "v{:<4} {:<8} {}  {}",
                    v.version,
                    v.change,
                    v.created_at.format("%Y-%m-%d %H:%M:%S"),
                    output::preview(&v.value, 70)
                ))?;
            }
            Ok(())
        }
    }
}
