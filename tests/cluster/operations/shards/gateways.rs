//! A dedicated gateway is collected only by the replica holding its
//! namespace's shard, though every replica caches every gateway and sees it
//! unused: the other replica never deletes (or writes) anything there.

use std::time::Duration;

use kube::api::DeleteParams;

use super::*;
use kura_core::api::KuraGateway;

#[tokio::test]
async fn a_gateway_is_collected_only_by_the_shard_that_owns_its_namespace() {
    let config = crate::operator::config(HOME, "cloud", "kura.dev/sim-ingress");
    let mut bench = Bench::start("shards-gw", 33, 1, config).await;
    // A gateway is found unused once the garbage collector has deleted its
    // instance's Ingresses, which nothing of the gateway's watches: the
    // resync finds it (as in gateways::collection).
    bench.resync = "3s";
    let (_a, _b, held) = bench.two_replicas().await;
    bench.converged_fleet().await;
    let all: Api<KuraGateway> = Api::all(bench.client.clone());
    let gateways = all.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        gateways.len(),
        bench.namespaces.len(),
        "one dedicated gateway per instance"
    );

    let since = now();
    for (k, (ns, _)) in bench.namespaces.iter().enumerate() {
        bench
            .instances(ns)
            .delete(&format!("i-{k}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_empty(
        "every gateway to be collected",
        Duration::from_secs(120),
        &all,
    )
    .await;
    // The apiserver writes a request's audit line once it has answered it,
    // so the last delete's line can land after the list above came back
    // empty: read the log until it shows as many deletes as there were
    // gateways, for up to 30 s (a gateway deleted by anyone but a replica
    // never shows; the assertion below then names what the log does show).
    let is_delete =
        |w: &Write| w.succeeded() && w.verb == "delete" && w.object.contains("/kuragateways/");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let w = loop {
        let w = writes(&bench, &since);
        let deletes = w.iter().filter(|w| is_delete(w)).count();
        if deletes >= bench.namespaces.len() || tokio::time::Instant::now() >= deadline {
            break w;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let deletes: Vec<&Write> = w.iter().filter(|w| is_delete(w)).collect();
    assert_eq!(deletes.len(), bench.namespaces.len(), "{w:?}");
    for w in &w {
        let ns = w.object.split('/').next().unwrap();
        let shard = bench.namespaces.iter().find(|(n, _)| n == ns).unwrap().1;
        assert!(
            held[&w.replica].contains(&shard),
            "{w:?}: written by a replica not holding shard {shard} ({held:?})"
        );
    }
}
