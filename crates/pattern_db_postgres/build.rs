//! Recompiles the crate when its offline query cache (`.sqlx/`) changes: sqlx's macros read it
//! while they expand, and on stable Rust they cannot tell Cargo so themselves.
//!
//! It only prints `rerun-if` lines; it must never read the cache, write a file or touch a
//! database.

fn main() {
    println!("cargo:rerun-if-changed=.sqlx");
    println!("cargo:rerun-if-changed=build.rs");
}
