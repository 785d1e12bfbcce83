//! kura-operator's core: everything the operator decides, as pure functions of
//! values, with no Kubernetes client and no async runtime. The revision of an
//! instance is the content hash of its rendered manifests.
//!
//! - vocabulary: `api` (the CRD types), `kind` (`ChildKind`), `keys`, `names`
//! - whether an installed CRD serves what this build reads and writes:
//!   `crd_compat`
//! - inputs: `config`, `validate` (with `rules`), `accepted` (a configuration
//!   accepted, with its fleet revision)
//! - the endpoint check's verdict: `endpoint` (the request is the operator's)
//! - rendering: `render` (canonical manifests, hashes, the revision)
//! - the decision of a pass as a value: `judge` (a snapshot in, the verdict
//!   and its effects out)
//! - decisions: `plan` (an instance's state machine), `rollout` (the fleet
//!   budget's rules), `budget` (an instance as a member of the fleet), `claims` (who holds a host), `status_trust`
//! - sharing a fleet between replicas: `shard` (the shard of a namespace,
//!   which shards a replica holds, the ledger of reservations)
//! - arithmetic: `time`, `retry`, `window` (maintenance windows, deadlines,
//!   pauses that end)
//! - what the caches keep of an object: `compact`, `fields`, `cached_sts`
//!
//! The operator crate (`kura-operator`) reads the caches and memory, calls
//! these, and does the I/O.

// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod accepted;
pub mod api;
pub mod budget;
pub mod cached_sts;
pub mod claims;
pub mod compact;
pub mod config;
pub mod crd_compat;
pub mod endpoint;
pub mod events;
pub mod fields;
pub mod gateway;
pub mod judge;
pub mod keys;
pub mod kind;
pub mod names;
pub mod outcome;
pub mod plan;
pub mod render;
pub mod retry;
pub mod rollout;
pub mod rules;
pub mod shard;
pub mod status;
pub mod status_trust;
pub mod storage;
pub mod time;
pub mod validate;
pub mod window;

/// `status::compute` and `events::notes_for` as tables (tests of both,
/// apart from each so that neither module's tests import the other).
#[cfg(test)]
mod outcome_tables;
