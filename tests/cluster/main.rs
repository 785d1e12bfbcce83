//! Integration tests against the real control plane (kube-apiserver, etcd,
//! kube-controller-manager built from their Go modules; see
//! scripts/control-plane.sh). Each test works in a namespace of its own.

mod support;

mod admission;
mod chart;
mod control_plane;
mod founding_incident;
mod operator;
mod ops;
mod recovery;
