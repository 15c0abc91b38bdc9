//! `pattern search`, `pattern reindex` and `pattern embed --status|--backfill|--reembed`: search
//! across messages, blocks and archival passages, and the upkeep of the full-text index and the
//! embeddings, through `pattern::search::ConstellationDb` (opened by `crate::search_db`). This module
//! must never pretend a vector search happened: `auto` without embeddings says on stderr that it
//! fell back to full-text.

use pattern::db::ContentType;
use pattern::search::{Progress, SearchMode, SearchOptions};
use serde::Serialize;

use crate::cli::{EmbedArgs, ModeArg, SearchArgs, TypeArg};
use crate::env::Env;
use crate::error::Result;
use crate::output;
use crate::search_db::{SearchDb, Vectors, from_db_v2};

use pattern_api::views::SearchHitView as HitView;

/// `embed_status` shape.
#[derive(Serialize)]
struct StatusView {
    enabled: bool,
    pending_jobs: u64,
    indexed: u64,
    embedded: u64,
    failures: u64,
    last_error: Option<String>,
}

pub(crate) async fn search(env: &Env, args: SearchArgs) -> Result<()> {
    let vectors = match args.mode {
        ModeArg::Fts => Vectors::Off,
        ModeArg::Vector | ModeArg::Hybrid => Vectors::Required,
        ModeArg::Auto => Vectors::IfAvailable,
    };
    let db = SearchDb::open(env, vectors).await?;
    let result = run_search(env, &db, args).await;
    db.close().await;
    result
}

async fn run_search(env: &Env, db: &SearchDb, args: SearchArgs) -> Result<()> {
    let mode = match args.mode {
        ModeArg::Fts => SearchMode::Fts,
        ModeArg::Vector => SearchMode::Vector,
        ModeArg::Hybrid => SearchMode::Hybrid,
        ModeArg::Auto => {
            if !db.has_vectors() {
                eprintln!("note: searching full-text only (no embeddings)");
            }
            SearchMode::Auto
        }
    };
    let mut opts = SearchOptions::mode(mode).with_limit(args.limit);
    if let Some(name) = &args.agent {
        let org = crate::env::organization_id(db.raw()).await?;
        opts = opts.for_agent(db.raw().agent_in_scope(Some(org), name).await?.id);
    }
    if !args.types.is_empty() {
        let types: Vec<ContentType> = args
            .types
            .iter()
            .map(|t| match t {
                TypeArg::Message => ContentType::Message,
                TypeArg::Block => ContentType::Block,
                TypeArg::Archival => ContentType::Archival,
            })
            .collect();
        opts = opts.only(&types);
    }
    if matches!(mode, SearchMode::Vector | SearchMode::Hybrid) {
        // Embed what earlier processes left queued, so recent writes are found.
        db.db
            .wait_idle(std::time::Duration::from_secs(30))
            .await
            .map_err(from_db_v2)?;
    }
    let hits = db.db.search(&args.query, &opts).await.map_err(from_db_v2)?;
    let views: Vec<HitView> = hits.iter().map(HitView::from).collect();
    if env.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line("no hits");
    }
    for v in &views {
        let first = v.text.lines().next().unwrap_or("");
        output::line(&format!(
            "{:.3} {}:{} {}",
            v.score, v.content_type, v.id, first
        ))?;
    }
    Ok(())
}

pub(crate) async fn reindex(env: &Env) -> Result<()> {
    let db = SearchDb::open(env, Vectors::Off).await?;
    // The rebuild reports no counts as it goes: the terminal shows that it runs, and for how long.
    let bar = super::spinner("reindexing");
    let result = db.raw().reindex().await;
    let postgres = db.raw().backend() == pattern::db::Backend::Postgres;
    bar.finish_and_clear();
    db.close().await;
    let documents = result?;
    if env.json {
        output::json(&serde_json::json!({ "documents": documents }))
    } else if postgres {
        // Each process keeps its own index in memory (decision 0028): this one was built and
        // dropped; servers keep theirs current without a rebuild.
        output::line(&format!(
            "full-text index built from the database: {documents} documents (on PostgreSQL each \
             process keeps its own index and keeps it current; nothing to rebuild)"
        ))
    } else {
        output::line(&format!("full-text index rebuilt: {documents} documents"))
    }
}

pub(crate) async fn embed(env: &Env, args: EmbedArgs) -> Result<()> {
    let vectors = if args.status {
        Vectors::IfAvailable
    } else {
        Vectors::Required
    };
    let db = SearchDb::open(env, vectors).await?;
    let result = run_embed(env, &db, &args).await;
    db.close().await;
    result
}

async fn run_embed(env: &Env, db: &SearchDb, args: &EmbedArgs) -> Result<()> {
    if args.status {
        let s = db.db.status().await.map_err(from_db_v2)?;
        let view = StatusView {
            enabled: db.has_vectors(),
            pending_jobs: s.pending_jobs,
            indexed: s.indexed,
            embedded: s.embedded,
            failures: s.failures,
            last_error: s.last_error,
        };
        if env.json {
            return output::json(&view);
        }
        return output::line(&format!(
            "embeddings {}: {} vectors indexed, {} jobs pending",
            if view.enabled { "on" } else { "off" },
            view.indexed,
            view.pending_jobs
        ));
    }
    let bar = super::progress(0, "embedding");
    let mut report = |p: Progress| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    };
    if args.reembed {
        let queued = db.db.reembed(&mut report).await;
        bar.finish_and_clear();
        let queued = queued.map_err(from_db_v2)?;
        return if env.json {
            output::json(&serde_json::json!({ "queued": queued }))
        } else {
            output::line(&format!("re-embedded {queued} item(s)"))
        };
    }
    let done = db.db.backfill(&mut report).await;
    bar.finish_and_clear();
    let done = done.map_err(from_db_v2)?;
    if env.json {
        output::json(&done)
    } else {
        let reclaimed = if done.reclaimed > 0 {
            format!(
                "{} job(s) freed from processes that are gone; ",
                done.reclaimed
            )
        } else {
            String::new()
        };
        output::line(&format!(
            "{reclaimed}{} job(s) were pending, {} queued now; embedded {}; {} still pending",
            done.already_pending, done.queued, done.embedded, done.pending
        ))
    }
}
