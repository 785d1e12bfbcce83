//! The series the chart README promises, from the live objects.

use kube::api::ListParams;

use super::exporter::{Labels, Sample};
use crate::support::TestNamespace;
use kura_core::api::{Condition, ConditionStatus, KuraGateway, KuraInstance, Phase, RolloutState};

fn sample(name: &str, base: &Labels, extra: &[(&str, Option<&str>)], value: f64) -> Sample {
    let mut labels = base.clone();
    for (k, v) in extra {
        // A label whose path reads nothing is left out, not empty.
        if let Some(v) = v {
            labels.insert(k.to_string(), v.to_string());
        }
    }
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

fn base_labels(kind: &str, namespace: &str, name: &str) -> Labels {
    [
        ("customresource_group", "kura.dev"),
        ("customresource_kind", kind),
        ("customresource_version", "v1alpha1"),
        ("namespace", namespace),
        ("name", name),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `kura_<kind>_condition` (1 True, else 0) per condition, and for instances
/// `_condition_since` (the last transition, Unix seconds).
fn condition_samples(prefix: &str, base: &Labels, conditions: &[Condition]) -> Vec<Sample> {
    let mut out = Vec::new();
    for c in conditions {
        let value = f64::from(u8::from(c.status == ConditionStatus::True));
        let labels = [
            ("condition", Some(c.type_.as_str())),
            ("reason", Some(c.reason.as_str())),
        ];
        out.push(sample(&format!("{prefix}_condition"), base, &labels, value));
        if prefix == "kura_instance" {
            let at: jiff::Timestamp = c.last_transition_time.as_deref().unwrap().parse().unwrap();
            let since = at.as_second() as f64;
            out.push(sample(
                &format!("{prefix}_condition_since"),
                base,
                &labels[..1],
                since,
            ));
        }
    }
    out
}

/// The series the README promises for one instance, from its live object.
fn instance_samples(i: &KuraInstance) -> Vec<Sample> {
    let meta = &i.metadata;
    let base = base_labels(
        "KuraInstance",
        meta.namespace.as_deref().unwrap(),
        meta.name.as_deref().unwrap(),
    );
    let s = i.status.clone().unwrap_or_default();
    let phase = s.phase.map(|p| serde_json::to_value(p).unwrap());
    let info = [
        ("account", Some(i.spec.account.as_str())),
        ("region", Some(i.spec.region.as_str())),
        ("phase", phase.as_ref().and_then(|p| p.as_str())),
        ("desired_revision", s.desired_revision_short.as_deref()),
        ("applied_revision", s.applied_revision_short.as_deref()),
        (
            "ingress_class",
            s.gateway.as_ref().map(|g| g.ingress_class_name.as_str()),
        ),
    ];
    let mut out = vec![
        sample("kura_instance_info", &base, &info, 1.0),
        sample(
            "kura_instance_generation",
            &base,
            &[],
            meta.generation.unwrap() as f64,
        ),
    ];
    // Paused as the operator reports it (a StateSet of one state over
    // status.phase), not spec.paused: a pause whose end has passed pauses
    // nothing. Nothing before the first status.
    if let Some(phase) = s.phase {
        let value = f64::from(u8::from(phase == Phase::Paused));
        let labels = [("phase", Some("Paused"))];
        out.push(sample("kura_instance_paused", &base, &labels, value));
    }
    if let Some(g) = s.observed_generation {
        out.push(sample(
            "kura_instance_observed_generation",
            &base,
            &[],
            g as f64,
        ));
    }
    out.extend(condition_samples("kura_instance", &base, &s.conditions));
    // A StateSet: every state, 1 for the current one; nothing without a record.
    for (state, name) in [
        (RolloutState::Waiting, "Waiting"),
        (RolloutState::Admitted, "Admitted"),
    ] {
        if let Some(r) = &s.rollout {
            let value = f64::from(u8::from(r.state == state));
            let labels = [("state", Some(name))];
            out.push(sample("kura_instance_rollout_state", &base, &labels, value));
        }
    }
    out
}

fn gateway_samples(g: &KuraGateway) -> Vec<Sample> {
    let meta = &g.metadata;
    let base = base_labels(
        "KuraGateway",
        meta.namespace.as_deref().unwrap(),
        meta.name.as_deref().unwrap(),
    );
    let class = [("ingress_class", Some(g.spec.ingress_class_name.as_str()))];
    let mut out = vec![sample("kura_gateway_info", &base, &class, 1.0)];
    let conditions = g
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    out.extend(condition_samples("kura_gateway", &base, &conditions));
    out
}

/// Every sample the namespace's objects give now, sorted.
pub async fn expected(ns: &TestNamespace) -> Option<Vec<Sample>> {
    let lp = ListParams::default();
    let instances = ns.api::<KuraInstance>().list(&lp).await.ok()?;
    let gateways = ns.api::<KuraGateway>().list(&lp).await.ok()?;
    let mut out: Vec<Sample> = instances.items.iter().flat_map(instance_samples).collect();
    out.extend(gateways.items.iter().flat_map(gateway_samples));
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some(out)
}
