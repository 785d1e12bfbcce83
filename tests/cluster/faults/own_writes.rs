//! An apply the watch has not delivered yet is not sent again. The operator
//! talks through a proxy that delays the ConfigMap watch's events by far more
//! than the settle time (a lagging watch cache, or a watch relisting after
//! lost events): every pass in between sees the instance's ConfigMap missing
//! from the cache. The process knows what it wrote (the apply's answer, kept
//! until the cache shows it), so those passes send nothing; without that they
//! created it again (a create-only apply refused, read, and applied).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use crate::faults::api_proxy::ApiProxy;
use crate::operator::{Operator, Options, apply_acme, delete_shared_class, shared_class};
use crate::support::*;
use kura_core::api::KuraInstance;

/// How late the ConfigMap watch's events reach the operator: several passes
/// (a 3 s resync) and the settle time fit in it, and it stays well inside
/// `stores::unseen::FORGET_AFTER` (30 s), after which the cache is taken as
/// it is (at 20 s a loaded machine's watch came past it once).
const LAG: Duration = Duration::from_secs(15);
const T: Duration = Duration::from_secs(120);

#[tokio::test]
async fn an_apply_the_watch_has_not_delivered_is_not_sent_again() {
    let ns = TestNamespace::new("own-writes").await;
    let classes = shared_class(&ns).await;
    let proxy = ApiProxy::start().await;
    proxy.lag(Some(("/configmaps", LAG)));
    let options = Options {
        kubeconfig: Some(
            proxy.kubeconfig(&std::env::temp_dir().join(format!("kura-op-{}", ns.name))),
        ),
        ..Options::default()
    };
    let op = Operator::start_in(&ns.name, options);
    wait_for("the operator to be ready", T, || async {
        (op.get("/readyz").await?.0 == 200).then_some(())
    })
    .await;

    let since = jiff::Timestamp::now().to_string();
    let instances: Api<KuraInstance> = ns.api();
    apply_acme(&instances).await;
    let config_maps: Api<ConfigMap> = ns.api();
    let created = wait_for("the instance's ConfigMap", T, || async {
        let list = config_maps
            .list(&ListParams::default().labels("kura.dev/instance=acme"))
            .await
            .ok()?;
        list.items.into_iter().next()
    })
    .await;
    let uid = created.metadata.uid.clone().unwrap();
    // Passes made while the cache still lacks it, past the settle time: the
    // window in which it used to be sent again.
    op.wait_for_log_count("outcome=", 3, LAG).await;
    assert!(
        !proxy.watch_delivered(&uid),
        "the passes above came before the watch delivered the ConfigMap"
    );
    wait_for("the watch to deliver the ConfigMap", T, || async {
        proxy.watch_delivered(&uid).then_some(())
    })
    .await;
    op.wait_for_log_count("outcome=", 2, T).await;

    let writes: Vec<String> = mutations_since(&ns.name, &since)
        .into_iter()
        .filter(|w| w.contains(" configmaps "))
        .collect();
    assert_eq!(
        writes.len(),
        1,
        "the ConfigMap is written once, by its create: {writes:?}"
    );
    let now = config_maps
        .get(created.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(now.metadata.uid.as_deref(), Some(uid.as_str()));
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
