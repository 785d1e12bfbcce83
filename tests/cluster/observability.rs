//! What the operator tells the people and tools watching it: Ready means the
//! endpoint answers (`endpoint`) and never comes from a stale address
//! (`stale_address`); health as kstatus, Flux, `kubectl wait` and Argo CD
//! read it (`health`); the shipped alerts and dashboard with a real
//! Prometheus (`monitoring`); the chart's kube-state-metrics series
//! (`kube_state_metrics`); and traces over OTLP (`traces`).

mod endpoint;
mod health;
mod kube_state_metrics;
pub(crate) mod monitoring;
mod stale_address;
mod traces;
