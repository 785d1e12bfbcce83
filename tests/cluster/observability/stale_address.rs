//! No Ready from a stale address. An Ingress moved to another class keeps the
//! address its old controller wrote (controllers do not clear what they stop
//! serving); counted as an address of the new class, it would report Ready an
//! instance that nothing serves (docs/incidents.md #1).

use std::time::Duration;

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::operator::{config, ready_instance};
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn address(ingress: &Ingress) -> Option<String> {
    ingress
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

#[tokio::test]
async fn moving_to_a_class_nobody_serves_is_not_ready_on_the_old_address() {
    let scenario = ready_instance("stale-address").await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);
    let ingresses: Api<Ingress> = ns.api();
    // kura-sim plays the shared class's ingress controller and gave an address.
    assert!(address(&ingresses.get("acme").await.unwrap()).is_some());

    // The region moves to a class whose controller does not run.
    let dark = format!("dark-{}", ns.name);
    let all_classes: Api<IngressClass> = Api::all(ns.client.clone());
    all_classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": dark},
                "spec": {"controller": "example.com/not-running"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let moved = config(&ns.name, "host", "example.com/none").replace(
        &format!("sharedIngressClass: shared-{}", ns.name),
        &format!("sharedIngressClass: {dark}"),
    );
    op.set_config(&moved);
    wait_for("the Ingress to move to the dark class", T, || async {
        let i = ingresses.get("acme").await.ok()?;
        (i.spec?.ingress_class_name.as_deref() == Some(dark.as_str())).then_some(())
    })
    .await;
    let status = wait_for("the instance to say what is wrong", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
        (s.applied_revision == s.desired_revision && ready.reason == "IngressNoAddress")
            .then_some(ready)
    })
    .await;
    assert!(
        status.message.contains(&dark) && status.message.contains("example.com/not-running"),
        "names the class and its controller: {}",
        status.message
    );
    assert_eq!(
        address(&ingresses.get("acme").await.unwrap()),
        None,
        "the old class's address is gone"
    );
    let _ = all_classes.delete(&dark, &Default::default()).await;
    scenario.finish().await;
}
