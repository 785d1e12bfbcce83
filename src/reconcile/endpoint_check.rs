//! The hook of the endpoint check (`crate::endpoint`) into activation: an
//! activation the caches call active (workload available on the revision,
//! every Ingress with an address) stays active only if the instance's
//! endpoint answers through its primary Ingress, unless the region turns the
//! check off (it is on by default). Everything else passes through unchanged.
//!
//! Called once per reconcile that probes, right after `probe` (see
//! `reconcile()`): at most one request per instance per pass, bounded by the
//! checker's timeout and slots.

use crate::config::RegionConfig;
use crate::endpoint::{Answer, Checker, Target};
use crate::render::Desired;

use super::probe::{self, Activation, ENDPOINT_NOT_ANSWERING};
use super::stores::Stores;

pub async fn confirm(
    activation: Activation,
    desired: &Desired,
    stores: &Stores,
    region: Option<&RegionConfig>,
    account: &str,
    checker: &Checker,
) -> Activation {
    let Activation::Active { .. } = &activation else {
        return activation;
    };
    let Some(check) = region.map(|r| &r.endpoint_check).filter(|c| c.enabled) else {
        return activation;
    };
    let (_, ingresses) = probe::gather(desired, stores);
    let Some(primary) = ingresses.first() else {
        return activation;
    };
    let address = primary
        .live
        .as_ref()
        .and_then(|i| i.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
        .and_then(|lb| {
            lb.iter()
                .find_map(|a| a.ip.clone().or_else(|| a.hostname.clone()))
        });
    let Some(address) = address else {
        // `probe` saw an address a moment ago; the next pass says which is gone.
        return activation;
    };
    let target = Target {
        address,
        port: check.port,
        host: primary.host.clone(),
        path: check.path.clone(),
        account: account.to_string(),
    };
    let answer = checker.check(&target).await;
    if answer.answered() {
        return activation;
    }
    let controller = primary
        .class
        .as_ref()
        .and_then(|c| c.spec.as_ref()?.controller.clone())
        .unwrap_or_else(|| "none".into());
    let cause = match answer {
        Answer::Refused { .. } | Answer::TimedOut { .. } => format!(
            "; is the ingress controller of class {} (controller {controller}) running?",
            primary.class_name
        ),
        _ => format!(
            " (ingress class {}, controller {controller})",
            primary.class_name
        ),
    };
    Activation::Waiting {
        reason: ENDPOINT_NOT_ANSWERING,
        message: format!(
            "ingress {}: {}{cause}",
            primary.name,
            answer.message(&target)
        ),
    }
}
