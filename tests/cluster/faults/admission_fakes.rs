//! The cluster fighting back: admission policies that deny or rewrite what the
//! operator writes, and a webhook whose service is down — all real admission
//! control of the real apiserver, scoped to one test namespace. Cluster-scoped,
//! so each is deleted when its guard drops.

use serde_json::{Value, json};

use crate::support::{kubeconfig_path, kubectl, run_with_input};

/// Cluster-scoped objects of a test, deleted (without waiting) on drop.
pub struct Guard {
    objects: Vec<(String, String)>,
}

impl Guard {
    fn create(objects: Vec<Value>) -> Guard {
        let mut names = Vec::new();
        for object in &objects {
            apply(object);
            let kind = object["kind"].as_str().unwrap().to_lowercase();
            let name = object["metadata"]["name"].as_str().unwrap().to_string();
            names.push((kind, name));
        }
        Guard { objects: names }
    }

    /// Remove the objects now (the fault ends), and wait until they are gone.
    pub fn lift(mut self) {
        for (kind, name) in self.objects.drain(..) {
            delete(&kind, &name, true);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for (kind, name) in self.objects.drain(..) {
            delete(&kind, &name, false);
        }
    }
}

fn apply(object: &Value) {
    let out = run_with_input(
        std::process::Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args(["apply", "--server-side", "-f", "-"])
            .stdout(std::process::Stdio::null()),
        object.to_string().as_bytes(),
        "kubectl apply",
    );
    assert!(out.status.success(), "kubectl apply {object}");
}

fn delete(kind: &str, name: &str, wait: bool) {
    let _ = std::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .args(["delete", kind, name, "--ignore-not-found"])
        .arg(format!("--wait={wait}"))
        .stdout(std::process::Stdio::null())
        .status();
}

/// Whether a server-side dry-run of a StatefulSet named "probe" with
/// `replicas` and `image` is refused in `namespace`: how a test waits until a
/// new policy or webhook is enforced (they take effect asynchronously).
pub async fn statefulset_refused(
    sts: &kube::Api<k8s_openapi::api::apps::v1::StatefulSet>,
    replicas: i32,
    image: &str,
) -> bool {
    let dry = kube::api::PatchParams::apply("probe").dry_run().force();
    let probe = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "probe"},
        "spec": {"replicas": replicas, "serviceName": "x", "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "kura", "image": image}]}}}});
    sts.patch("probe", &dry, &kube::api::Patch::Apply(&probe))
        .await
        .is_err()
}

fn in_namespace(namespace: &str) -> Value {
    json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}})
}

/// A ValidatingAdmissionPolicy (with its binding) that denies `operations` on
/// `resources` of `group` in `namespace` when `deny_if` (CEL) holds.
pub fn deny(
    namespace: &str,
    group: &str,
    resources: &str,
    operations: &[&str],
    deny_if: &str,
    message: &str,
) -> Guard {
    let name = format!("deny-{}-{namespace}", resources.replace('/', "-"));
    // A DELETE has no `object`, only `oldObject`: the rule sees `request`.
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [group], "apiVersions": ["*"],
                "operations": operations, "resources": [resources],
            }]},
            "validations": [{"expression": format!("!({deny_if})"), "message": message}],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": in_namespace(namespace)},
        },
    });
    // A new policy takes a moment to be enforced: tests wait until a dry-run
    // shows it before they count on it.
    Guard::create(vec![policy, binding])
}

/// A MutatingAdmissionPolicy that pins the image of the first container of
/// every StatefulSet created or updated in `namespace` to `digest`, the way an
/// image-policy admission controller does (`repo:tag` → `repo:tag@sha256:…`).
pub fn pin_images(namespace: &str, digest: &str) -> Guard {
    let name = format!("pin-images-{namespace}");
    let image = "object.spec.template.spec.containers[0].image";
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["statefulsets"],
            }]},
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": format!(
                "!{image}.contains('@') ? [JSONPatch{{op: \"replace\", path: \"/spec/template/spec/containers/0/image\", value: {image} + \"@sha256:{digest}\"}}] : []"
            )}}],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": in_namespace(namespace)}},
    });
    Guard::create(vec![policy, binding])
}

/// A validating webhook on StatefulSets of `namespace` whose service does not
/// exist, with failurePolicy Fail: every write of a StatefulSet gets a 500.
pub fn webhook_down(namespace: &str) -> Guard {
    let name = format!("down-{namespace}");
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "statefulsets.down.kura.test",
            "clientConfig": {"service": {"namespace": namespace, "name": "webhook-that-is-down", "port": 443}},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["statefulsets"]}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
            "namespaceSelector": in_namespace(namespace),
        }],
    });
    Guard::create(vec![config])
}
