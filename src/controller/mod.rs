//! Controller wiring: reflectors (the caches `observe` reads), watches and their
//! mapping to instances and gateways, the error policies.
//!
//! `scope`: where the operator looks and how each kind is watched;
//! `reflect`: every cache and its stream of touched objects; `streams`: the
//! caches and streams both controllers run on; `foreign`: the names of
//! objects without the operator's label; `instance` and `gateway`: the two
//! controllers, their triggers and error policies.

pub mod foreign;
pub mod gateway;
pub mod instance;
pub mod reflect;
pub mod scope;
pub mod streams;
