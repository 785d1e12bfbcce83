//! kura-operator: reconciles Kura cache instances. The revision of an instance is
//! the content hash of its rendered manifests (see docs/architecture.md).
//!
//! The pure layers (types, configuration, validation, rendering, the plan, the
//! budget's and host claims' rules) are the `kura-core` crate, imported by its
//! name wherever they are used (`kura_core::render`, never a local alias); this
//! crate reads the caches and memory, decides (`decide`), and does the I/O.

// Unit tests may write as clients do; the code they test is checked without
// them (docs/architecture.md, "Who writes").
#![cfg_attr(test, allow(clippy::disallowed_methods))]
// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod claims;
pub mod config_watch;
pub mod context;
pub mod controller;
pub mod crd_check;
pub mod diff;
pub mod endpoint;
pub mod fence;
pub mod fleet_event;
pub mod gateway;
pub mod leader;
pub mod list_strategy;
pub mod memory;
pub mod metrics;
pub mod pass;
pub mod reconcile;
pub mod recorder;
pub mod refresh_budget;
pub mod run;
pub mod server;
pub mod shards;
pub mod stores;
pub mod traces;
