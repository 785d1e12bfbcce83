//! Generated names cannot collide, against the real control plane: accounts and
//! regions that join to the same text get gateways of their own, and an instance
//! cannot take the name of another instance's alias Ingress. (The reserved gateway
//! prefix is refused at admission: see admission.rs.)

use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::operator::{
    NO_ENDPOINT_CHECK, Operator, config, delete_shared_class, shared_class, wait_ready,
};
use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance, KuraInstanceStatus, Phase};

/// Long enough for a fresh instance with a dedicated gateway, short enough that a
/// stalled one fails the test quickly.
const READY: Duration = Duration::from_secs(90);

async fn ready_within(instances: &Api<KuraInstance>, name: &str) -> KuraInstanceStatus {
    wait_for(&format!("{name} to be Ready"), READY, || async {
        let s = instances.get(name).await.ok()?.status?;
        (s.phase == Some(Phase::Ready) && s.applied_revision == s.desired_revision).then_some(s)
    })
    .await
}

/// Two cloud regions, `c` and `b-c`, whose dedicated gateways kura-sim serves
/// (so each turns the endpoint check off: kura-sim's addresses answer nothing).
fn two_regions(namespace: &str) -> String {
    let region = |name: &str| {
        format!(
            "  {name}:\n    network: cloud\n    sharedIngressClass: shared-{namespace}\n    domain: kura.test\n{NO_ENDPOINT_CHECK}"
        )
    };
    format!(
        "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: kura.dev/sim-ingress\n  replicas: 1\nregions:\n{}{}",
        region("c"),
        region("b-c")
    )
}

fn instance(name: &str, account: &str, region: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
        "metadata": {"name": name},
        "spec": {"account": account, "region": region, "image": "registry.example/kura:1.0.0",
                 "storage": {"size": "1Gi"}},
    })
}

/// `gw-{account}-{region}` was `gw-a-b-c` for both (a-b, c) and (a, b-c): the second
/// instance's apply of the first one's gateway (account and region immutable) failed
/// until it stalled.
#[tokio::test]
async fn accounts_and_regions_that_join_alike_get_a_gateway_each() {
    let ns = TestNamespace::new("names-gw").await;
    let _op = Operator::start(&ns.name, &two_regions(&ns.name));
    let instances: Api<KuraInstance> = ns.api();
    for (name, account, region) in [("one", "a-b", "c"), ("two", "a", "b-c")] {
        apply_json(&instances, "test", instance(name, account, region))
            .await
            .unwrap();
    }
    let one = ready_within(&instances, "one").await;
    let two = ready_within(&instances, "two").await;

    let gateway_of =
        |s: &KuraInstanceStatus| s.gateway.as_ref().and_then(|g| g.gateway_name.clone());
    let (one_gw, two_gw) = (gateway_of(&one).unwrap(), gateway_of(&two).unwrap());
    assert_ne!(
        one_gw, two_gw,
        "each account and region has a gateway of its own"
    );
    let gateways: Api<KuraGateway> = ns.api();
    let listed = gateways.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 2, "two gateways: {listed:?}");
    for (name, account, region) in [(&one_gw, "a-b", "c"), (&two_gw, "a", "b-c")] {
        let spec = gateways.get(name).await.unwrap().spec;
        assert_eq!(
            (spec.account.as_str(), spec.region.as_str()),
            (account, region)
        );
    }
    // Each gateway's LoadBalancer Service, rendered by the gateway controller.
    let services: Api<Service> = ns.api();
    for name in [&one_gw, &two_gw] {
        wait_for(&format!("the Service of gateway {name}"), READY, || async {
            services.get_opt(name).await.ok()?.map(|_| ())
        })
        .await;
    }
}

/// An alias Ingress was named `<instance>-<hash8>`, a name another instance could
/// have: both then server-side applied the same Ingress with the same field manager,
/// rewriting it on every resync. Either admission refuses such a name, or the two
/// coexist and neither object is rewritten.
#[tokio::test]
async fn an_instance_named_like_another_instances_alias_ingress_takes_nothing_over() {
    let ns = TestNamespace::new("names-alias").await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let mut first = instance("a1", "acme", "r1");
    first["spec"]["aliases"] = json!(["extra.example.com"]);
    apply_json(&instances, "test", first).await.unwrap();
    let status = wait_ready(&instances, "a1").await;
    let alias = status
        .inventory
        .iter()
        .find(|e| e.kind == "Ingress" && e.name != "a1")
        .expect("the alias Ingress")
        .name
        .clone();

    match apply_json(&instances, "test", instance(&alias, "other", "r1")).await {
        Err(kube::Error::Api(s)) if s.code == 422 => {
            assert!(s.message.contains("metadata.name"), "{}", s.message);
        }
        Err(other) => panic!("creating {alias}: {other}"),
        Ok(_) => {
            // Admitted: over 20 s (several 3 s resyncs), a1's alias Ingress, which is
            // also the second instance's primary Ingress by name, must not change.
            let ingresses: Api<Ingress> = ns.api();
            let rv = ingresses
                .get(&alias)
                .await
                .unwrap()
                .metadata
                .resource_version
                .unwrap();
            let params = WatchParams::default()
                .fields(&format!("metadata.name={alias}"))
                .timeout(20);
            let changes: Vec<String> = ingresses
                .watch(&params, &rv)
                .await
                .unwrap()
                .try_filter_map(|e| async move {
                    Ok(match e {
                        WatchEvent::Modified(i) | WatchEvent::Deleted(i) => {
                            i.metadata.resource_version
                        }
                        _ => None,
                    })
                })
                .try_collect()
                .await
                .unwrap();
            assert!(
                changes.is_empty(),
                "Ingress {alias} was rewritten {} times in 20 s",
                changes.len()
            );
            let owner = ingresses
                .get(&alias)
                .await
                .unwrap()
                .metadata
                .labels
                .unwrap();
            assert_eq!(
                owner.get("kura.dev/instance").map(String::as_str),
                Some("a1")
            );
        }
    }
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
