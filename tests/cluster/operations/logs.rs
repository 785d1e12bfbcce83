//! Structured logs: with `--log-format json`, every line of a reconcile names
//! the instance (namespace and name fields); env values never reach the log,
//! and a secretKeyRef is passed on as a reference, never read.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::*;
use crate::operator::{Operator, config, delete_shared_class, instance, shared_class};
use kura_core::api::KuraInstance;

const LITERAL: &str = "literal-env-value-never-logged";

#[tokio::test]
async fn json_reconcile_lines_name_the_instance_and_env_values_stay_out() {
    let ns = TestNamespace::new("ops-logs").await;
    let classes = shared_class(&ns).await;
    // The most verbose the operator gets, plus every request kube makes.
    let op = Operator::start_with_env(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &[
            ("KURA_LOG_FORMAT", "json"),
            ("KURA_LOG", "info,kura_operator=trace,kube=debug"),
        ],
    );
    let instances: Api<KuraInstance> = ns.api();
    let mut body = instance("acme", "registry.example/kura:1.0.0");
    body["spec"]["env"] = json!([
        {"name": "API_TOKEN", "value": LITERAL},
        {"name": "DB_PASSWORD", "secretKeyRef": {"name": "db", "key": "password"}},
    ]);
    apply_json(&instances, "test", body).await.unwrap();
    wait_applied(&instances, "acme", None, Duration::from_secs(90)).await;
    // A second apply, so the log has more than the first pass.
    let patch =
        json!({"metadata": {"annotations": {"kura.dev/reapply-at": "2026-11-29T13:00:00Z"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    op.wait_for_log_count("forced", 1, Duration::from_secs(60))
        .await;

    let log = op.log();
    assert!(!log.contains(LITERAL), "an env value was logged:\n{log}");
    assert!(
        !log.contains("/secrets"),
        "the operator requested a Secret:\n{log}"
    );
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let reconcile_lines: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("kura_operator::reconcile"))
        })
        .collect();
    assert!(reconcile_lines.len() >= 4, "{log}");
    // Named by the reconcile's span (with the revision it decides for and
    // who originated it), not by each line again: the outermost of the
    // line's spans (a step of the pass, an apply wave, may be inside it).
    for line in reconcile_lines {
        let root = &line["spans"][0];
        assert_eq!(root["name"], "reconcile", "{line}");
        assert_eq!(root["namespace"], ns.name.as_str(), "{line}");
        assert_eq!(root["instance"], "acme", "{line}");
        assert!(root["revision"].is_string(), "{line}");
        assert!(root["origin"].is_string(), "{line}");
    }
    delete_shared_class(&classes, &ns).await;
}
