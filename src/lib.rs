//! kura-operator: reconciles Kura cache instances. The revision of an instance is
//! the content hash of its rendered manifests (see docs/architecture.md).

pub mod api;
pub mod cached_sts;
pub mod claims;
pub mod compact;
pub mod config;
pub mod config_watch;
pub mod context;
pub mod controller;
pub mod diff;
pub mod endpoint;
pub mod fields;
pub mod gateway;
pub mod gateway_controller;
pub mod keys;
pub mod kind;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod names;
pub mod reconcile;
pub mod render;
pub mod retry;
pub mod rollout;
pub mod rules;
pub mod run;
pub mod server;
pub mod status_trust;
pub mod stores;
pub mod time;
pub mod validate;
