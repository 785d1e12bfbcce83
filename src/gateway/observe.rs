//! What a gateway's decision needs from the reflector caches.

use std::collections::BTreeSet;

use crate::reconcile::observe::{live_child_as, owner};
use crate::stores::Stores;
use kura_core::api::{KuraGateway, KuraGatewayStatus};
use kura_core::fields::applied_by;
use kura_core::keys::{FIELD_MANAGER, GATEWAY_FIELD_MANAGER, LEGACY_GATEWAY_FINALIZER};
use kura_core::kind::ChildKind;
use kura_core::plan::Owner;
use kura_core::render::{Desired, ObjectId};

use kura_core::gateway::observed::Observed;

pub fn observe(
    gw: &KuraGateway,
    status: Option<KuraGatewayStatus>,
    desired: Option<&Desired>,
    stores: &Stores,
) -> Observed {
    let mut status = status.unwrap_or_default();
    // A take-back record another manager wrote would hold the gateway's
    // repairs (or lift the bound): only the operator's own counts.
    if !kura_core::status_trust::written_by_operator(&gw.metadata, "conflict") {
        status.conflict = None;
    }
    let uid = gw.metadata.uid.as_deref().unwrap_or_default();
    let name = gw.metadata.name.as_deref().unwrap_or_default();
    let mut ids: Vec<ObjectId> = status
        .inventory
        .iter()
        .filter_map(ObjectId::from_inventory)
        .collect();
    ids.extend(
        desired
            .iter()
            .flat_map(|d| d.objects.iter().map(|o| o.id.clone())),
    );
    let mut old_manager = BTreeSet::new();
    let children = ids
        .into_iter()
        .filter_map(|id| {
            let meta = stores.meta(&id)?;
            if meta
                .managed_fields
                .iter()
                .flatten()
                .any(|m| applied_by(m, FIELD_MANAGER))
            {
                old_manager.insert(id.clone());
            }
            let owner = owner(&meta, id.kind, uid, name);
            let rendered = desired
                .and_then(|d| d.objects.iter().find(|o| o.id == id))
                .map(|o| &o.manifest);
            let live = live_child_as(&meta, owner, GATEWAY_FIELD_MANAGER, rendered);
            Some((id, live))
        })
        .collect();
    let namespace = gw.metadata.namespace.as_deref().unwrap_or_default();
    Observed {
        name: name.to_string(),
        unschedulable: stores.unschedulable_gateway_pods(namespace, name),
        generation: gw.metadata.generation,
        status,
        managed: owner(&gw.metadata, ChildKind::KuraGateway, "", "") == Owner::Ours,
        children,
        old_manager,
        just_applied: false,
    }
}

/// Earlier releases' finalizer, which held namespace deletion until the
/// operator ran.
pub fn has_legacy_finalizer(gw: &KuraGateway) -> bool {
    gw.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == LEGACY_GATEWAY_FINALIZER)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use crate::reconcile::observe::owner;
    use kura_core::kind::ChildKind;
    use kura_core::plan::Owner;

    fn meta(value: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap()
    }

    fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> serde_json::Value {
        json!({"manager": manager, "operation": operation, "subresource": subresource,
               "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}})
    }

    const LABELS: &str = "app.kubernetes.io/managed-by";

    #[test]
    fn a_class_is_the_gateways_when_it_carries_the_gateways_uid() {
        let class = |uid: &str| {
            meta(
                json!({"name": "kura-gw.a.g", "annotations": {"kura.dev/gateway-uid": uid},
                        "labels": {LABELS: "kura-operator", "kura.dev/gateway": "g"}}),
            )
        };
        assert_eq!(
            owner(&class("u-1"), ChildKind::IngressClass, "u-1", "g"),
            Owner::Ours
        );
        // A class of the same name and labels, made for another gateway (a
        // predecessor of the same name, deleted): not this one's.
        assert!(matches!(
            owner(&class("u-0"), ChildKind::IngressClass, "u-1", "g"),
            Owner::Foreign(why) if why.contains("u-0")
        ));
    }

    #[test]
    fn a_class_an_earlier_release_made_for_the_gateway_is_claimed_and_nothing_else_is() {
        let legacy = json!({"name": "kura-gw.a.g",
            "labels": {LABELS: "kura-operator", "kura.dev/gateway": "g"},
            "managedFields": [entry("kura-operator", "Apply", None)]});
        assert_eq!(
            owner(&meta(legacy.clone()), ChildKind::IngressClass, "u-1", "g"),
            Owner::Adopt
        );
        // Labelled alike, written by someone else.
        let mut by_hand = legacy.clone();
        by_hand["managedFields"] = json!([entry("kubectl", "Apply", None)]);
        assert!(matches!(
            owner(&meta(by_hand), ChildKind::IngressClass, "u-1", "g"),
            Owner::Foreign(_)
        ));
        // Made for another gateway name.
        let mut other = legacy;
        other["labels"]["kura.dev/gateway"] = json!("h");
        assert!(matches!(
            owner(&meta(other), ChildKind::IngressClass, "u-1", "g"),
            Owner::Foreign(_)
        ));
    }

    /// The gateway controller writes gateways' status: that makes no hand-made
    /// gateway the operator's.
    #[test]
    fn a_gateway_is_the_operators_only_when_its_spec_was_applied_by_the_operator() {
        let gw = |entries: serde_json::Value| {
            meta(
                json!({"name": "g", "labels": {LABELS: "kura-operator"}, "managedFields": entries}),
            )
        };
        let ours = gw(json!([entry("kura-operator", "Apply", None)]));
        assert_eq!(owner(&ours, ChildKind::KuraGateway, "", ""), Owner::Ours);
        let status_only = gw(json!([
            entry("platform-team", "Apply", None),
            entry("kura-operator", "Apply", Some("status")),
            entry("kura-operator-gateway", "Apply", Some("status")),
        ]));
        assert!(matches!(
            owner(&status_only, ChildKind::KuraGateway, "", ""),
            Owner::Foreign(_)
        ));
        let unlabelled =
            meta(json!({"name": "g", "managedFields": [entry("kura-operator", "Apply", None)]}));
        assert!(matches!(
            owner(&unlabelled, ChildKind::KuraGateway, "", ""),
            Owner::Foreign(_)
        ));
    }
}
