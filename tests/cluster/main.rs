//! Integration tests against the real control plane (kube-apiserver, etcd,
//! kube-controller-manager built from their Go modules; see
//! scripts/control-plane.sh). Each test works in a namespace of its own.
//!
//! One support layer: `support` (a client, a namespace per test, waits on
//! conditions, private planes, impersonation) and `operator` (the operator
//! binary, its configurations and instances, and the waits on them). The
//! tests sit in theme folders; each folder's root file says what it holds.

// A client of the cluster, as a user is: the tests create, change and delete
// what they test against. The operator's writer modules (docs/architecture.md,
// "Who writes") do not apply to them.
#![allow(clippy::disallowed_methods)]
// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![allow(clippy::too_many_lines)]

mod operator;
mod support;

mod faults;
mod gateways;
mod lifecycle;
mod observability;
mod operations;
mod platform;
mod preview;
mod rollout;
mod safety;
