//! One host, one instance, across shards: two instances in namespaces of
//! shards held by different replicas ask for the same host at the same
//! moment. Neither replica's cache shows the other's grant in time, so the
//! shared ledger decides: exactly one serves it, the other reports the
//! conflict naming the holder, and that stays so when the holder's replica
//! is killed and the survivor takes its shards over.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;

use super::*;
use crate::gateways::host_claims::{assert_names, host_conflict, ingresses_for, with_host};

#[tokio::test]
async fn one_host_asked_for_in_two_shards_goes_to_one_instance_across_a_failover() {
    let bench = Bench::start(
        "shards-hosts",
        35,
        1,
        fleet_config(HOME, "256Mi", "  maxUnavailable: 1\n"),
    )
    .await;
    let (mut a, mut b, held) = bench.two_replicas().await;
    let of = |replica: &str| -> String {
        let mine = bench
            .namespaces
            .iter()
            .find(|(_, s)| held[replica].contains(s));
        mine.unwrap().0.clone()
    };
    let (ns_a, ns_b) = (of("a"), of("b"));
    let host = "shop.shards-hosts.test";
    let (api_a, api_b) = (bench.instances(&ns_a), bench.instances(&ns_b));
    let (in_a, in_b) = tokio::join!(
        apply_json(&api_a, "test", with_host("shop", Some(host), &[])),
        apply_json(&api_b, "test", with_host("shop", Some(host), &[])),
    );
    in_a.unwrap();
    in_b.unwrap();

    let (winner, loser) = wait_for(
        "one instance to serve the host",
        Duration::from_secs(120),
        || async {
            let served = ingresses_for(&bench.client, host).await;
            match served.as_slice() {
                [one] if *one == format!("{ns_a}/shop") => Some((ns_a.clone(), ns_b.clone())),
                [one] if *one == format!("{ns_b}/shop") => Some((ns_b.clone(), ns_a.clone())),
                _ => None,
            }
        },
    )
    .await;
    let holder = format!("{winner}/shop");
    let message = host_conflict(&bench.instances(&loser), "shop").await;
    assert_names(&message, &["spec.host", host, &holder]);
    let workload = |ns: &str| Api::<StatefulSet>::namespaced(bench.client.clone(), ns);
    assert!(
        workload(&loser).get_opt("shop").await.unwrap().is_none(),
        "nothing is applied for the instance whose host is taken"
    );

    // The winner's replica killed: the survivor takes its shards and
    // reconciles every instance of them (no resync: it is 10 minutes).
    let (killed, survivor, survivor_name) = if winner == ns_a {
        (&mut a, &b, "b")
    } else {
        (&mut b, &a, "a")
    };
    let conflicts = || survivor.log().matches("outcome=\"host-conflict\"").count();
    let before = conflicts();
    killed.kill();
    bench
        .balanced(&[(survivor_name, survivor, SHARDS as usize)], LEASE * 2)
        .await;
    wait_for(
        "the survivor to reconcile the loser again",
        Duration::from_secs(60),
        || async { (conflicts() > before).then_some(()) },
    )
    .await;
    assert_eq!(
        ingresses_for(&bench.client, host).await,
        std::slice::from_ref(&holder),
        "the host stays with its holder across the failover"
    );
    let message = host_conflict(&bench.instances(&loser), "shop").await;
    assert_names(&message, &["spec.host", host, &holder]);
    assert!(workload(&loser).get_opt("shop").await.unwrap().is_none());
}
