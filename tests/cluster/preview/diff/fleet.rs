//! A configuration edit previewed, then read by the operator: diff listed
//! exactly what it then wrote.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{diff, write};
use crate::operator::{
    NO_ENDPOINT_CHECK, Operator, converged_count, delete_shared_class, instance, shared_class,
};
use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance, Phase};
use kura_core::kind::ChildKind;

const T: Duration = Duration::from_secs(120);

/// Four regions: r1 and r3 host-network (different domains), r2 cloud (its
/// dedicated gateways served by kura-sim), r4 host.
fn four_regions(ns: &str) -> String {
    config_of(ns, false)
}

/// The edit: r1's domain changes (hosts, the mounted configuration: pods
/// restart), r2 moves to host networking (the shared class: no restart, the
/// dedicated gateway goes), r4 is removed (its instance becomes invalid), r3
/// stays as it was.
fn edited_config(ns: &str) -> String {
    config_of(ns, true)
}

fn config_of(ns: &str, edited: bool) -> String {
    // kura-sim serves every class here: its addresses answer nothing, so the
    // endpoint check is off in each region.
    let region = |name: &str, network: &str, domain: &str| {
        format!(
            "  {name}:\n    network: {network}\n    sharedIngressClass: shared-{ns}\n    domain: {domain}\n{NO_ENDPOINT_CHECK}"
        )
    };
    let mut text = String::from(
        "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: kura.dev/sim-ingress\n  replicas: 1\nregions:\n",
    );
    text += &region(
        "r1",
        "host",
        if edited { "kura2.test" } else { "kura.test" },
    );
    text += &region("r2", if edited { "host" } else { "cloud" }, "kura.test");
    text += &region("r3", "host", "other.test");
    if !edited {
        text += &region("r4", "host", "kura.test");
    }
    text
}

fn fleet_instance(name: &str, region: &str, labels: Value) -> Value {
    let mut i = instance(name, "registry.example/kura:1.0.0");
    i["spec"]["region"] = json!(region);
    i["metadata"]["labels"] = labels;
    i
}

/// What a diff's JSON says will be written: `patch <resource> <name>` for
/// every object created or updated (the operator applies), `delete <resource>
/// <name>` for every one pruned.
fn predicted(report: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for i in report["instances"].as_array().unwrap() {
        for o in i["objects"].as_array().unwrap() {
            let kind = ChildKind::ALL
                .into_iter()
                .find(|k| k.kind() == o["kind"])
                .unwrap();
            let verb = if o["action"] == "prune" {
                "delete"
            } else {
                "patch"
            };
            out.insert(format!(
                "{verb} {} {}",
                kind.plural(),
                o["name"].as_str().unwrap()
            ));
        }
    }
    out
}

/// The operator's writes in `ns` since `since` as `verb resource name`,
/// without status writes; a write to an object that is being deleted (the
/// gateway controller removing its finalizer) counts as part of the delete.
fn written(ns: &str, since: &str, deleted: &BTreeSet<String>) -> BTreeSet<String> {
    mutations_since(ns, since)
        .into_iter()
        .filter_map(|m| {
            let mut parts = m.split(' ');
            let (verb, resource, name) = (parts.next()?, parts.next()?, parts.next()?);
            (!resource.contains('/')).then(|| format!("{verb} {resource} {name}"))
        })
        .filter(|w| {
            let target = w.split_once(' ').map(|(_, rest)| rest).unwrap_or_default();
            w.starts_with("delete ") || !deleted.contains(&format!("delete {target}"))
        })
        .collect()
}

async fn update_revision(ns: &TestNamespace, name: &str) -> Option<String> {
    let sts: Api<StatefulSet> = ns.api();
    sts.get(name).await.ok()?.status?.update_revision
}

#[tokio::test]
async fn diff_of_a_config_edit_lists_exactly_what_the_operator_then_writes() {
    let ns = TestNamespace::new("diff-fleet").await;
    let classes = shared_class(&ns).await;
    let dir = scratch_dir(&ns.name);
    let before_path = write(&dir, "before.yaml", &four_regions(&ns.name));
    let after_path = write(&dir, "after.yaml", &edited_config(&ns.name));
    let before_cfg = before_path.to_str().unwrap();
    let after_cfg = after_path.to_str().unwrap();
    let op = Operator::start(&ns.name, &four_regions(&ns.name));
    let instances: Api<KuraInstance> = ns.api();
    for (name, region, labels) in [
        ("a", "r1", json!({"tier": "gold"})),
        ("b", "r2", json!({})),
        ("c", "r3", json!({})),
        ("e", "r4", json!({})),
    ] {
        apply_json(&instances, "test", fleet_instance(name, region, labels))
            .await
            .unwrap();
    }
    wait_for("the fleet to converge", T, || async {
        (converged_count(&instances, None).await == 4).then_some(())
    })
    .await;
    let kubeconfig = kubeconfig_path();

    // Converged: nothing to change, exit 0, the summary alone.
    let (code, out, err) = diff(&kubeconfig, &["-n", &ns.name, "--config", before_cfg]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(
        out,
        "4 instances: 0 changing, 0 pod restarts, 0 objects written (0 created), 0 pruned\n"
    );

    // The edited configuration, before the operator reads it.
    let (code, out, err) = diff(
        &kubeconfig,
        &["-n", &ns.name, "--config", after_cfg, "-o", "json"],
    );
    assert_eq!(code, 1, "{out}{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    eprintln!("diff of the edit:\n{out}");
    let summary = &report["summary"];
    assert_eq!(
        (
            &summary["changing"],
            &summary["podRestarts"],
            &summary["objectsWritten"],
            &summary["objectsPruned"],
            &summary["invalid"]
        ),
        (&json!(2), &json!(1), &json!(4), &json!(1), &json!(1)),
        "{summary}"
    );
    let by_name = |n: &str| {
        report["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("a")["podRestart"], true);
    assert_eq!(
        by_name("b")["podRestart"],
        false,
        "a new ingress class rolls no pods"
    );
    assert_eq!(by_name("c")["state"], "unchanged");
    let e = by_name("e");
    assert_eq!(e["state"], "invalid");
    assert_eq!(e["problems"][0]["field"], "spec.region", "{e}");
    let expected = predicted(&report);
    let text = diff(&kubeconfig, &["-n", &ns.name, "--config", after_cfg]).1;
    assert!(
        text.contains(&format!(
            "{}/e: invalid, nothing applied\n  spec.region: ",
            ns.name
        )),
        "invalid instances are listed with their errors:\n{text}"
    );

    // A label selector narrows the instances.
    let (_, out, _) = diff(
        &kubeconfig,
        &[
            "-n",
            &ns.name,
            "-l",
            "tier=gold",
            "--config",
            after_cfg,
            "-o",
            "json",
        ],
    );
    let selected: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&Value> = selected["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["name"])
        .collect();
    assert_eq!(names, [&json!("a")]);

    // Now the operator reads it.
    let revisions_before = [
        update_revision(&ns, "a").await,
        update_revision(&ns, "b").await,
    ];
    let applied = |name: &str| {
        by_name(name)["desiredRevision"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (a_rev, b_rev) = (applied("a"), applied("b"));
    let since = jiff::Timestamp::now().to_string();
    op.set_config(&edited_config(&ns.name));
    let gateways: Api<KuraGateway> = ns.api();
    wait_for("the operator to apply what diff said", T, || async {
        let status = |name: &'static str| {
            let instances = instances.clone();
            async move { instances.get(name).await.ok()?.status }
        };
        let a = status("a").await?;
        let b = status("b").await?;
        let e = status("e").await?;
        let gone = gateways
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty();
        (a.applied_revision.as_deref() == Some(&a_rev)
            && b.applied_revision.as_deref() == Some(&b_rev)
            && e.phase == Some(Phase::Invalid)
            && gone)
            .then_some(())
    })
    .await;
    let wrote = written(&ns.name, &since, &expected);
    eprintln!("the operator wrote: {wrote:?}");
    assert_eq!(
        wrote, expected,
        "diff listed exactly the objects the operator then wrote and deleted"
    );
    // Pods restart where diff said so (the StatefulSet controller's new
    // revision of the pod template), and nowhere else.
    let revisions_after = [
        update_revision(&ns, "a").await,
        update_revision(&ns, "b").await,
    ];
    assert_ne!(revisions_before[0], revisions_after[0], "a's pods roll");
    assert_eq!(revisions_before[1], revisions_after[1], "b's pods do not");

    // Converged on the edit: nothing left to write; e stays invalid (exit 1).
    let (code, out, _) = diff(
        &kubeconfig,
        &["-n", &ns.name, "--config", after_cfg, "-o", "json"],
    );
    let after: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(after["summary"]["changing"], 0, "{out}");
    assert_eq!(after["summary"]["invalid"], 1, "{out}");
    assert_eq!(code, 1);
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
