//! The KuraGateway controller: applies a gateway's IngressClass, Deployment and
//! Service; deletes a gateway no instance references any more (this also covers
//! instances that were deleted); and, through a finalizer, removes the
//! cluster-scoped IngressClass that owner references cannot reach.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};

use crate::api::conditions::{self, READY};
use crate::api::{Condition, ConditionStatus, KuraGateway, KuraGatewayStatus, KuraInstance};
use crate::context::Context;
use crate::controller::Scope;
use crate::keys::{FIELD_MANAGER, LABEL_GATEWAY, LEGACY_GATEWAY_FINALIZER};
use crate::kind::ChildKind;
use crate::reconcile::plan::ApplyOp;
use crate::reconcile::{apply, prune::gateway_user};
use crate::render::ObjectId;
use crate::render::gateway::render_gateway;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Apply(#[from] apply::Failure),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

async fn reconcile(gw: Arc<KuraGateway>, ctx: Arc<Context>) -> Result<Action, GatewayError> {
    // A standby writes nothing, not even the finalizer; it reconciles all on taking over.
    if !ctx.leading() {
        return Ok(Action::await_change());
    }
    let ns = gw.metadata.namespace.clone().unwrap_or_default();
    let api: Api<KuraGateway> = Api::namespaced(ctx.client.clone(), &ns);
    let work = finalizer(&api, LEGACY_GATEWAY_FINALIZER, gw, |event| async {
        match event {
            Event::Apply(gw) => apply_gateway(&gw, &ctx, &api).await,
            Event::Cleanup(gw) => cleanup(&gw, &ctx).await,
        }
    });
    // Cancelled when this process stops leading: it writes nothing more.
    crate::leader::while_leading(&ctx.leader, work)
        .await
        .unwrap_or(Ok(Action::await_change()))
        .map_err(|e| GatewayError::Finalizer(e.to_string()))
}

async fn apply_gateway(
    gw: &KuraGateway,
    ctx: &Context,
    api: &Api<KuraGateway>,
) -> Result<Action, GatewayError> {
    let name = gw.metadata.name.clone().unwrap_or_default();
    let ns = gw.metadata.namespace.clone().unwrap_or_default();
    let config = ctx.config();
    let cached: Vec<KuraInstance> = ctx
        .stores
        .instances
        .state()
        .iter()
        .map(|i| (**i).clone())
        .collect();
    let class = gw.spec.ingress_class_name.clone();
    if gateway_user(&name, &class, &ns, &cached, &[], "", &config).is_none() {
        // Confirm with live reads before deleting: the cache may lag a new instance.
        let live = Api::<KuraInstance>::namespaced(ctx.client.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let on_class = crate::reconcile::prune::ingress_classes(&ctx.client, &ns, "").await?;
        if gateway_user(&name, &class, &ns, &live.items, &on_class, "", &config).is_none() {
            tracing::info!(gateway = %name, namespace = %ns, "no instance references this gateway; deleting it");
            api.delete(&name, &DeleteParams::background()).await?;
            return Ok(Action::await_change());
        }
    }
    let desired = render_gateway(gw);
    let applied = gw
        .status
        .as_ref()
        .and_then(|s| s.applied_revision.as_deref())
        == Some(desired.revision.as_str());
    let present = desired
        .objects
        .iter()
        .all(|o| ctx.stores.meta(&o.id).is_some());
    if applied && present {
        return Ok(Action::requeue(ctx.resync));
    }
    let ops: Vec<ApplyOp> = desired
        .objects
        .iter()
        .map(|o| ApplyOp {
            id: o.id.clone(),
            create: ctx.stores.meta(&o.id).is_none(),
            clear_address: false,
        })
        .collect();
    let uid = gw.metadata.uid.clone().unwrap_or_default();
    let target = apply::For {
        uid: &uid,
        name: &name,
    };
    apply::apply(&ctx.client, &desired, &ops, &target).await?;
    let prev = gw.status.clone().unwrap_or_default();
    let now = jiff::Timestamp::now().to_string();
    let ready = Condition::new(
        READY,
        ConditionStatus::True,
        "Applied",
        format!("serves ingress class {}", gw.spec.ingress_class_name),
    );
    let status = KuraGatewayStatus {
        observed_generation: gw.metadata.generation,
        applied_revision: Some(desired.revision.clone()),
        conditions: conditions::merge(&prev.conditions, vec![ready], &now),
    };
    let body = serde_json::json!({ "apiVersion": "kura.dev/v1alpha1", "kind": "KuraGateway", "status": status });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(Action::requeue(ctx.resync))
}

async fn cleanup(gw: &KuraGateway, ctx: &Context) -> Result<Action, GatewayError> {
    let class = ObjectId {
        kind: ChildKind::IngressClass,
        namespace: None,
        name: gw.spec.ingress_class_name.clone(),
    };
    let ours = ctx
        .stores
        .meta(&class)
        .and_then(|m| m.labels)
        .is_some_and(|l| l.get(LABEL_GATEWAY) == gw.metadata.name.as_ref());
    if ours {
        match apply::dynamic_api(&ctx.client, &class)
            .delete(&class.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::await_change())
}

fn error_policy(gw: Arc<KuraGateway>, error: &GatewayError, _ctx: Arc<Context>) -> Action {
    let namespace = gw.metadata.namespace.as_deref().unwrap_or_default();
    let name = gw.metadata.name.as_deref().unwrap_or_default();
    tracing::warn!(%namespace, gateway = %name, error = %error, "gateway reconcile failed; retrying");
    Action::requeue(Duration::from_secs(10))
}

pub fn gateway_controller(
    scope: &Scope,
    deployments: crate::controller::Shared<
        kube::core::PartialObjectMeta<k8s_openapi::api::apps::v1::Deployment>,
    >,
    ctx: Arc<Context>,
    leading: impl futures::Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> {
    // Its own gateway watch (the instance controller consumes the other), with
    // errors handled per watch as in every `reflect`.
    let (store, gateways) =
        crate::controller::reflect(scope.api::<KuraGateway>(), scope.watch_config());
    Controller::for_stream(gateways, store)
        .owns_stream(deployments)
        .reconcile_all_on(leading)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}
