//! Running the operator: probes and metrics, leader election (also with its
//! Lease requests hanging), an invalid configuration file at runtime, the
//! chart's RBAC as the operator really uses it, a `helm upgrade` of the
//! configuration, start-up against a cluster without the CRDs, and CRDs older
//! than the operator (`crds`); a restart that writes nothing (`restart`);
//! the Helm chart itself (`chart`); and shards across replicas (`shards`).
//! Each test runs the real binary against the real control plane.

pub(crate) mod chart;
mod config;
mod conventional;
mod crds;
mod leader;
mod lists;
mod logs;
mod metrics;
mod probes;
mod rbac;
mod restart;
mod shards;
mod startup;
mod upgrade;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

/// The apiserver's address, from the kubeconfig.
fn apiserver_addr() -> String {
    let kc = admin_kubeconfig();
    let server = kc["clusters"][0]["cluster"]["server"].as_str().unwrap();
    server.trim_start_matches("https://").to_string()
}

/// A kubeconfig for `server` instead of the plane's (same CA and token: the
/// certificate names 127.0.0.1 and is valid on any port).
fn kubeconfig_for(dir: &Path, server: &str) -> PathBuf {
    let mut kc = admin_kubeconfig();
    kc["clusters"][0]["cluster"]["server"] = server.into();
    write_kubeconfig(dir, "kubeconfig-via", &kc)
}

/// Creates the instance `acme` (image `registry.example/kura:1.0.0`) and
/// waits until it is applied; returns its status.
pub async fn create_acme(
    instances: &kube::Api<kura_core::api::KuraInstance>,
    timeout: Duration,
) -> kura_core::api::KuraInstanceStatus {
    crate::operator::apply_acme(instances).await;
    wait_applied(instances, "acme", None, timeout).await
}

/// Waits for an instance's applied revision to equal its desired one and to
/// differ from `not`; returns the status.
pub async fn wait_applied(
    instances: &kube::Api<kura_core::api::KuraInstance>,
    name: &str,
    not: Option<&str>,
    timeout: Duration,
) -> kura_core::api::KuraInstanceStatus {
    wait_for(
        &format!("{name} to be applied (revision other than {not:?})"),
        timeout,
        || async {
            let s = instances.get(name).await.ok()?.status?;
            let applied = s.applied_revision.as_deref()?;
            (s.desired_revision.as_deref() == Some(applied) && Some(applied) != not).then_some(s)
        },
    )
    .await
}
