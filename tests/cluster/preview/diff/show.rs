//! `--show-diff`: the changed field, and nothing another manager owns.

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{diff, write};
use crate::operator::ready_instance;
use crate::support::*;

#[tokio::test]
async fn show_diff_shows_the_changed_host_and_no_field_of_another_manager() {
    let r = ready_instance("diff-show").await;
    let ns = &r.ns;
    // Another manager's label on the Ingress.
    let ingresses: Api<Ingress> = ns.api();
    ingresses
        .patch(
            "acme",
            &PatchParams::apply("rival").force(),
            &Patch::Apply(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "acme", "labels": {"team": "blue"}},
            })),
        )
        .await
        .unwrap();
    let live = ingresses.get("acme").await.unwrap();
    assert_eq!(
        live.metadata
            .labels
            .unwrap()
            .get("team")
            .map(String::as_str),
        Some("blue"),
        "negative control: the label is on the live object"
    );
    let edited = crate::operator::config(&ns.name, "host", "example.com/none")
        .replace("domain: kura.test", "domain: kura2.test");
    let path = write(&scratch_dir(&ns.name), "edited.yaml", &edited);
    let (code, out, err) = diff(
        &kubeconfig_path(),
        &[
            "-n",
            &ns.name,
            "--config",
            path.to_str().unwrap(),
            "--show-diff",
        ],
    );
    assert_eq!(code, 1, "{out}{err}");
    eprintln!("{out}");
    let ingress = out
        .split("  ~ ")
        .find(|section| section.starts_with("Ingress acme:"))
        .unwrap_or_else(|| panic!("no Ingress section:\n{out}"));
    assert!(
        ingress.contains("\n    -  - host: acme.r1.kura.test\n    +  - host: acme.r1.kura2.test\n"),
        "{ingress}"
    );
    assert!(
        !out.contains("team"),
        "another manager's label is not the operator's: {out}"
    );
    r.finish().await;
}
