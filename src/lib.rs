//! kura-operator: reconciles Kura cache instances. The revision of an instance is
//! the content hash of its rendered manifests (see ARCHITECTURE.md).

pub mod api;
pub mod config;
pub mod keys;
pub mod names;
pub mod render;
pub mod run;
pub mod validate;
