//! The CRDs' lifecycle: an operator started against an older CRD acts on
//! nothing and says so until the CRD is fixed, then resumes without a
//! restart; and `helm upgrade` brings a release's older CRD up to the chart's.
//!
//! CRDs are cluster-scoped and every other test uses the shared plane's, so
//! each test here runs against a second kube-apiserver on the plane's etcd
//! under an etcd prefix of its own (`startup::start_second_apiserver`),
//! where it may replace them. The prefixes are fixed: each test first removes
//! what an earlier run left there.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use serde_yaml::Value;

use super::startup::{Apiserver, start_second_apiserver, wait_ready};
use super::*;
use crate::operations::chart::{Output, chart_dir, run};
use crate::operator::{Operator, Options, config, free_port, instance};
use kura_core::api::KuraInstance;

const INSTANCES: &str = "kurainstances.kura.dev";
const GATEWAYS: &str = "kuragateways.kura.dev";

/// A second apiserver under `prefix`, ready, and a client and kubeconfig for it.
async fn own_apiserver(name: &str, prefix: &str) -> (Apiserver, kube::Client, PathBuf) {
    let dir = scratch_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let log = dir.join("kube-apiserver.log");
    let mut apiserver = start_second_apiserver(port, &log, prefix, &[]);
    let kubeconfig = kubeconfig_for(&dir, &format!("https://127.0.0.1:{port}"));
    wait_ready(&mut apiserver, &kubeconfig, &log).await;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    (apiserver, client, kubeconfig)
}

/// The CRD of crds/ named `file`, as YAML.
fn repo_crd(file: &str) -> Value {
    let text = std::fs::read_to_string(repo().join("crds").join(file)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// `crd` without the property `name` of `parent` (`spec` or `status`) of
/// its served version: a CRD of an earlier release.
fn without(mut crd: Value, parent: &str, name: &str) -> Value {
    let properties = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        [parent]["properties"];
    let removed = properties
        .as_mapping_mut()
        .unwrap()
        .remove(Value::from(name));
    assert!(removed.is_some(), "{parent}.{name} is in the CRD");
    crd
}

/// Whether the installed CRD `name` has the property `parent.property`.
async fn has_property(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    parent: &str,
    property: &str,
) -> bool {
    let crd = crds.get(name).await.unwrap();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap();
    schema.properties.as_ref().unwrap()[parent]
        .properties
        .as_ref()
        .is_some_and(|p| p.contains_key(property))
}

/// Removes every CRD of ours (and so every object of them), waiting until gone.
async fn remove_crds(crds: &Api<CustomResourceDefinition>) {
    for name in [INSTANCES, GATEWAYS] {
        let _ = crds.delete(name, &DeleteParams::default()).await;
    }
    wait_for("the CRDs to be gone", Duration::from_secs(60), || async {
        let gone = crds.get_opt(INSTANCES).await.ok()?.is_none()
            && crds.get_opt(GATEWAYS).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
}

/// Server-side applies `crd` (the field manager `test`, taking over any
/// field) and waits until it is Established.
async fn apply_crd(crds: &Api<CustomResourceDefinition>, crd: &Value) {
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    let crd: CustomResourceDefinition =
        serde_json::from_value(serde_json::to_value(crd).unwrap()).unwrap();
    crds.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
    established(crds, &name).await;
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    wait_for(
        &format!("CRD {name} to be established"),
        Duration::from_secs(60),
        || async {
            let crd = crds.get(name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        },
    )
    .await;
}

/// The measured case of the issue: the operator started against a
/// KuraInstance CRD of an earlier release (no `spec.pause`, no
/// `status.appliedSpecHash`) is not Ready, names both versions and the fix
/// in one log line and an Event, reports `kura_crd_compatible` 0, and
/// writes nothing; the current CRD applied, it becomes Ready and reconciles
/// (its `appliedSpecHash` kept), without a restart.
#[tokio::test]
async fn an_older_crd_holds_the_operator_until_the_current_one_is_applied() {
    let (_apiserver, client, kubeconfig) =
        own_apiserver("crd-compat", "/kura-ops-test-crd-compat").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    remove_crds(&crds).await;
    let mut stale = without(
        without(
            repo_crd("kura.dev_kurainstances.yaml"),
            "status",
            "appliedSpecHash",
        ),
        "spec",
        "pause",
    );
    stale["metadata"]["annotations"]["kura.dev/operator-version"] = "0.0.9".into();
    apply_crd(&crds, &stale).await;
    apply_crd(&crds, &repo_crd("kura.dev_kuragateways.yaml")).await;

    // A namespace of this run's own: this apiserver has no controller
    // manager, so an earlier run's children are never collected.
    let ns = &format!("crd-compat-{}", std::process::id());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await;
    // The region's shared class (nothing serves it here: the apply needs
    // only the name).
    let classes: Api<k8s_openapi::api::networking::v1::IngressClass> = Api::all(client.clone());
    let _ = classes
        .delete(&format!("shared-{ns}"), &DeleteParams::default())
        .await;
    crate::operator::sim_class(&client, &format!("shared-{ns}")).await;
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), ns);
    let _ = instances.delete("acme", &DeleteParams::default()).await;
    wait_gone(
        "no instance left",
        Duration::from_secs(30),
        &instances,
        "acme",
    )
    .await;
    instances
        .create(
            &PostParams::default(),
            &serde_json::from_value(instance("acme", "ghcr.io/kura-dev/kura:1.8.2")).unwrap(),
        )
        .await
        .unwrap();

    let op = Operator::start_with(
        ns,
        &config(ns, "host", "example.com/none"),
        &[
            ("POD_NAME", "kura-operator-test"),
            ("POD_NAMESPACE", ns),
            ("POD_UID", "00000000-0000-0000-0000-000000000001"),
        ],
        Options {
            kubeconfig: Some(kubeconfig.clone()),
            ..Options::default()
        },
    );
    // The caches list (the check does not keep them from it) and the
    // instance controller has the instance in hand: were the gate open, it
    // would have written its status by now.
    op.wait_for_log_count("caches synced", 1, Duration::from_secs(60))
        .await;
    let (status, why) = op.get("/readyz").await.expect("/readyz answers");
    assert_eq!(status, 503, "{why}");
    let version = env!("CARGO_PKG_VERSION");
    for needle in [
        "CRD kurainstances.kura.dev (version 0.0.9) is not compatible",
        &format!("this operator (version {version})"),
        "missing spec.pause, status.appliedSpecHash",
        "kubectl apply --server-side -f crds/",
    ] {
        assert!(why.contains(needle), "/readyz: {needle:?} in {why}");
    }
    let lines: Vec<String> = op
        .log()
        .lines()
        .filter(|l| l.contains("is not compatible"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "one log line: {lines:#?}");
    assert!(
        lines[0].contains("0.0.9")
            && lines[0].contains(version)
            && lines[0].contains("helm upgrade"),
        "{}",
        lines[0]
    );
    let gauge = |crd: &str| format!("kura_crd_compatible{{crd=\"{crd}\"}}");
    assert_eq!(op.metric(&gauge(INSTANCES)).await, Some(0.0));
    assert_eq!(op.metric(&gauge(GATEWAYS)).await, Some(1.0));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let note = wait_for(
        "the Warning Event on the Pod",
        Duration::from_secs(30),
        || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("IncompatibleCRD"))
                .and_then(|e| e.note)
        },
    )
    .await;
    assert!(note.contains("spec.pause"), "{note}");
    let written = instances.get("acme").await.unwrap();
    assert!(
        written.status.is_none(),
        "nothing is written while the CRD is incompatible: {:?}",
        written.status
    );
    let children: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), ns);
    assert!(
        children.get_opt("acme").await.unwrap().is_none(),
        "no child applied"
    );

    // The fix: the current CRD, applied as the README says.
    apply_crd(&crds, &repo_crd("kura.dev_kurainstances.yaml")).await;
    wait_for(
        "the operator to be Ready",
        Duration::from_secs(60),
        || async {
            let (status, _) = op.get("/readyz").await?;
            (status == 200).then_some(())
        },
    )
    .await;
    assert_eq!(op.metric(&gauge(INSTANCES)).await, Some(1.0));
    let hash = wait_for(
        "the instance reconciled, its appliedSpecHash kept",
        Duration::from_secs(60),
        || async { instances.get("acme").await.ok()?.status?.applied_spec_hash },
    )
    .await;
    assert!(!hash.is_empty());
    assert!(
        op.log().contains("is compatible with this operator"),
        "the recovery is logged"
    );
    drop(op);
    remove_crds(&crds).await;
}

/// helm with `kubeconfig`.
fn helm_on(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    run(
        Command::new(tool("helm"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
        None,
    )
}

/// A copy of the chart whose KuraInstance CRD lacks `spec.pause`: the
/// chart of an earlier release.
fn older_chart(dir: &std::path::Path) -> PathBuf {
    let copy = dir.join("kura-operator-older");
    let _ = std::fs::remove_dir_all(&copy);
    let status = Command::new("cp")
        .arg("-r")
        .arg(chart_dir())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let file = copy.join("files/crds/kura.dev_kurainstances.yaml");
    let older = without(repo_crd("kura.dev_kurainstances.yaml"), "spec", "pause");
    std::fs::write(&file, serde_yaml::to_string(&older).unwrap()).unwrap();
    copy
}

/// A release installed from a chart whose CRD is older than this one's is
/// upgraded by `helm upgrade`: the CRD gains the property, and an instance
/// using it keeps it (before, the chart's `crds/` directory was installed
/// once and never upgraded: the property stayed pruned). The CRDs carry
/// `helm.sh/resource-policy: keep` and outlive `helm uninstall`.
#[tokio::test]
async fn helm_upgrade_upgrades_a_releases_older_crd() {
    let (_apiserver, client, kubeconfig) =
        own_apiserver("chart-crds", "/kura-ops-test-chart-crds").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let (release, ns) = ("kura", "chart-crds");
    let _ = helm_on(
        &kubeconfig,
        &["uninstall", release, "-n", ns, "--ignore-not-found"],
    );
    remove_crds(&crds).await;

    let older = older_chart(&scratch_dir("chart-crds"));
    let out = helm_on(
        &kubeconfig,
        &[
            "install",
            release,
            older.to_str().unwrap(),
            "-n",
            ns,
            "--create-namespace",
        ],
    );
    assert!(out.ok, "helm install (older chart): {}", out.stderr);
    let line = "kurainstances.kura.dev: installed and upgraded by this release; kept on uninstall";
    assert!(out.stdout.contains(line), "NOTES: {}", out.stdout);
    assert!(!has_property(&crds, INSTANCES, "spec", "pause").await);
    let installed = crds.get(INSTANCES).await.unwrap();
    let annotations = installed.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some(release),
        "the release manages its CRDs"
    );
    assert_eq!(
        annotations
            .get("helm.sh/resource-policy")
            .map(String::as_str),
        Some("keep")
    );

    // Established before an instance is created; a pause is pruned.
    established(&crds, INSTANCES).await;
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), ns);
    let mut paused = instance("acme", "ghcr.io/kura-dev/kura:1.8.2");
    paused["spec"]["paused"] = true.into();
    paused["spec"]["pause"] = json!({"reason": "day 2"});
    let _ = instances.delete("acme", &DeleteParams::default()).await;
    let created = instances
        .create(
            &PostParams::default(),
            &serde_json::from_value(paused.clone()).unwrap(),
        )
        .await
        .unwrap();
    assert!(
        created.spec.pause.is_none(),
        "the older CRD prunes spec.pause"
    );

    let chart = chart_dir();
    let out = helm_on(
        &kubeconfig,
        &["upgrade", release, chart.to_str().unwrap(), "-n", ns],
    );
    assert!(out.ok, "helm upgrade: {}", out.stderr);
    assert!(
        has_property(&crds, INSTANCES, "spec", "pause").await,
        "helm upgrade left the release's older CRD as it was"
    );
    wait_for("spec.pause kept", Duration::from_secs(60), || async {
        let patched = instances
            .patch(
                "acme",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"pause": {"reason": "day 2"}}})),
            )
            .await
            .ok()?;
        patched.spec.pause.is_some().then_some(())
    })
    .await;

    let out = helm_on(&kubeconfig, &["uninstall", release, "-n", ns]);
    assert!(out.ok, "helm uninstall: {}", out.stderr);
    assert!(
        crds.get_opt(INSTANCES).await.unwrap().is_some(),
        "kept on uninstall (crds.keep)"
    );
    remove_crds(&crds).await;
}
