//! Reusable parts of the multi-process crash harness and the load test: a validating fake model
//! ([`model`]), `pattern serve` processes kept on fixed loopback ports that can be killed and
//! restarted ([`servers`]), an HTTP client for turns, SSE streams and resumes ([`client`]), a
//! read-only look at the database ([`probe`]), what it holds per message marker ([`stored`]) and
//! a load driver ([`load`]).
//!
//! Nothing here uses the test binary's helpers or asserts: its only paths are
//! `crate::harness::...`, so a benchmark mounts this folder as `mod harness` at its root (with
//! `#[path]`) and drives 1 or 3 processes with it. It must never write to the database it
//! inspects, reach anything but loopback, or leave a process running after its owner is dropped.

// A library for this binary's tests and for benchmarks: not every item has a user in both.
#![allow(dead_code)]

pub mod client;
pub mod load;
pub mod model;
pub mod probe;
pub mod servers;
pub mod stored;
