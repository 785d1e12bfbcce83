//! `status`: the new status is computed in `kura_core::status` (pure); here it
//! is written, only when it changed (I/O), the same way for both kinds. The
//! write never triggers another reconcile: each kind's watch passes only what
//! its decision reads (spec, annotations), not its own status writes.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use tracing::Instrument;

use crate::context::Context;
use crate::memory::{Memory, Remembered};
use crate::pass::Error;
use crate::reconcile::events;

/// Writes `new_status` of `object` under `manager` ([`write_status`]), and
/// what the write leaves, the same for both kinds: memory keeps the status
/// written and its resourceVersion; a failed write is an Event of its own
/// and a transient failure of the object.
pub async fn write_and_remember<K>(
    ctx: &Context,
    memory: &Memory<K>,
    object: &Arc<K>,
    new_status: &K::Status,
    manager: &str,
    now: Timestamp,
) -> Result<(), Error>
where
    K: Remembered
        + kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + kube::CustomResourceExt
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::Status: serde::Serialize,
{
    let meta = object.meta();
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let written = write_status(&api, name, new_status, manager)
        .instrument(tracing::info_span!("status_write"))
        .await;
    ctx.report.metrics.status_write(written.as_ref().err());
    match written {
        Ok(rv) => {
            memory.status_written(object, rv, new_status);
            Ok(())
        }
        Err(source) => {
            events::publish(ctx, object, vec![events::status_write_failed(&source)]);
            let failures = memory.transient_failure(object, "status", now).failures;
            Err(Error::Status { source, failures })
        }
    }
}

/// The status of any of the operator's kinds, under `manager`; returns the
/// object's resourceVersion after the write.
///
/// Status is the operator's report, and anyone who may write the status
/// subresource can put anything there. So the write replaces the whole
/// status: a merge patch that names every field the kind's schema knows,
/// with null for each the new status lacks, at every level of objects (lists
/// are replaced whole by a merge patch; fields the schema does not know are
/// pruned by the apiserver). What another writer left cannot survive it, and
/// cannot combine with it into something the schema rejects: with a
/// server-side apply, a record another manager co-owned was left half
/// removed and every later write failed with 422.
pub async fn write_status<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    manager: &str,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource<DynamicType = ()>
        + kube::CustomResourceExt
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    S: serde::Serialize,
{
    let body = serde_json::json!({ "status": whole_status::<K>(status) });
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    };
    // Answered with the object's metadata only: the resourceVersion is all
    // that is read back, and a whole instance (its spec, the status just
    // sent) parsed per write cost memory and CPU on both sides.
    let request = kube::core::Request::new(api.resource_url())
        .patch_subresource("status", name, &params, &Patch::Merge(&body))
        .map_err(kube::Error::BuildRequest)?;
    let (mut head, payload) = request.into_parts();
    head.headers.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ONLY),
    );
    let written: kube::core::PartialObjectMeta<K> = crate::reconcile::execute::writes::request(
        api.clone().into_client(),
        http::Request::from_parts(head, payload),
    )
    .await?;
    Ok(written.metadata.resource_version)
}

/// The media type of an answer that is the object's metadata only.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// `status` as a merge patch that replaces the whole status of a `K`.
pub fn whole_status<K: kube::CustomResourceExt>(
    status: &impl serde::Serialize,
) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    null_absent(&mut value, &status_schema::<K>());
    value
}

/// The status schema of `K`'s CRD, generated once per kind.
fn status_schema<K: kube::CustomResourceExt>() -> std::sync::Arc<serde_json::Value> {
    type Schemas =
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<serde_json::Value>>>;
    static SCHEMAS: std::sync::OnceLock<Schemas> = std::sync::OnceLock::new();
    let mut schemas = SCHEMAS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    schemas
        .entry(K::crd_name().to_string())
        .or_insert_with(|| {
            let crd = K::crd();
            let schema = crd
                .spec
                .versions
                .first()
                .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref()?.get("status"))
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_default();
            std::sync::Arc::new(schema)
        })
        .clone()
}

/// Sets every property `schema` knows that `value` lacks to null, in every
/// nested object (not inside lists: a merge patch replaces a list whole).
fn null_absent(value: &mut serde_json::Value, schema: &serde_json::Value) {
    let (Some(object), Some(properties)) = (
        value.as_object_mut(),
        schema.get("properties").and_then(|p| p.as_object()),
    ) else {
        return;
    };
    for (key, property) in properties {
        match object.get_mut(key) {
            Some(present) => null_absent(present, property),
            None => {
                object.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Outcomes are counted by `Metrics::record` (here, beside `Outcome`).
    #[test]
    fn outcomes_reasons_and_pruned_objects_are_counted() {
        use crate::metrics::{Metrics, tests::value};
        use kura_core::outcome::Outcome;
        use kura_core::outcome::PruneOutcome;
        use kura_core::plan::ApplyReason;

        let m = Metrics::default();
        m.record(
            &Outcome::Applied {
                reasons: vec![ApplyReason::Forced, ApplyReason::ChildMissing("cm".into())],
                inventory: vec![],
                sent: vec![],
                pruned: PruneOutcome {
                    deleted: vec!["a".into(), "b".into()],
                    ..PruneOutcome::default()
                },
                streak: None,
                held: None,
            },
            None,
        );
        m.record(&Outcome::Converged, None);
        m.record_error("status");
        let text = m.encode(&[]);
        for (series, expected) in [
            ("kura_reconciles_total{result=\"applied\"}", 1.0),
            ("kura_reconciles_total{result=\"converged\"}", 1.0),
            ("kura_reconciles_total{result=\"status\"}", 1.0),
            ("kura_applies_total{reason=\"forced\"}", 1.0),
            ("kura_applies_total{reason=\"missing\"}", 1.0),
            ("kura_objects_pruned_total", 2.0),
            ("kura_leader", 0.0),
        ] {
            assert_eq!(value(&text, series), Some(expected), "{series} in\n{text}");
        }
    }

    use kura_core::api::{KuraInstanceStatus, Phase};

    /// Every field of the schema the new status lacks is sent as null, at
    /// every level, so a record another writer left cannot survive the write.
    #[test]
    fn a_status_write_names_every_field_it_lacks_as_null() {
        let status = KuraInstanceStatus {
            phase: Some(Phase::Ready),
            gateway: Some(kura_core::api::GatewayStatus {
                ingress_class_name: "shared".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = super::whole_status::<kura_core::api::KuraInstance>(&status);
        assert_eq!(patch["phase"], "Ready");
        assert!(patch["conflict"].is_null() && patch.get("conflict").is_some());
        assert!(patch["rollout"].is_null() && patch.get("rollout").is_some());
        assert!(patch.get("inventory").is_some_and(|v| v.is_null()));
        assert!(
            patch["gateway"]
                .get("gatewayName")
                .is_some_and(|v| v.is_null())
        );
        assert_eq!(patch["gateway"]["ingressClassName"], "shared");
    }
}
