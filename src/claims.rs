//! Host claims in the running operator: the rules and the index are in
//! `kura_core::claims`; `watch` feeds the index from the instance and Ingress
//! watches and answers the reconcile.

pub mod watch;

pub use watch::Claims;
