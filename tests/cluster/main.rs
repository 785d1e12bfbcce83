//! Integration tests against the real control plane (kube-apiserver, etcd,
//! kube-controller-manager built from their Go modules; see
//! scripts/control-plane.sh). Each test works in a namespace of its own.

// A client of the cluster, as a user is: the tests create, change and delete
// what they test against. The operator's writer modules (docs/architecture.md,
// "Who writes") do not apply to them.
#![allow(clippy::disallowed_methods)]
// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![allow(clippy::too_many_lines)]

mod support;

// The hostile corpus and spec generator the unit tests of `render` use, not a copy.
#[path = "../../crates/kura-core/src/render/tests/hostile/corpus_cases.rs"]
mod hostile;

mod acceptance;
mod admission;
mod admission_fakes;
mod api_proxy;
mod apply_edges;
mod budget;
mod budget_hostile;
mod chaos;
mod chart;
mod conflict;
mod control_plane;
mod deletion;
mod dev_script;
mod diff;
mod drift;
mod endpoint;
mod failures;
mod founding_incident;
mod gateways;
mod gc_safety;
mod health;
mod host_claims;
mod hostile_status;
mod idle;
mod image_drift;
mod kube_state_metrics;
mod ledger_race;
mod minimal_apply;
mod monitoring;
mod names;
mod node;
mod operator;
mod ops;
mod orphans;
mod ownership;
mod perturb;
mod plane_faults;
mod preview_truth;
mod progress;
mod readme;
mod recovery;
mod restart;
mod retry_count;
mod rollout_status;
mod shards;
mod stale_address;
mod stall;
mod status_memory;
mod storage;
mod throttling;
mod traces;
mod versions;
mod windows;
