//! One reconcile of a `KuraGateway`, in the instance controller's shape:
//!
//! migrate → recall → snapshot (render → observe → users) → judge (plan,
//!   effects) → execute the effects (`execute`): apply and release
//!   (`carry_out`) | collect → report: status, log, write and Events (`report`)
//!
//! The files are the instance pipeline's (`reconcile/`) by the same names.
//!
//! Only `migrate`, `collect` (live reads before a deletion, the deletion, the
//! sweep of leftover classes), `apply` and the status write talk to the
//! apiserver; validate, render, observe (caches), plan and status::compute
//! are pure, and the clock is read once, here.
//!
//! A gateway carries no finalizer, so deleting its namespace never waits for
//! the operator: its Deployment and Service go with it (owner references), and
//! its cluster-scoped IngressClass, which nothing can own, is collected by the
//! sweep (`collect::sweep`) once no gateway has the uid the class carries.

mod carry_out;
pub mod collect;
mod execute;
mod migrate;
pub mod observe;
mod report;
pub mod snapshot;
use kura_core::gateway::status;

use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use tracing::Instrument;

use crate::context::Context;
use crate::memory::Recall;
use crate::pass::Error;
use crate::reconcile::events;
use kura_core::api::{KuraGateway, KuraGatewayStatus};
use kura_core::judge::gateway::GatewayDecision;
use kura_core::plan::SETTLE;
use kura_core::render::hash::short;

/// The span of one reconcile of `gw`, as the instance's (`reconcile::span`):
/// a trace of its own, the revision recorded once decided.
pub fn span(gw: &KuraGateway) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "reconcile_gateway",
        namespace = gw.metadata.namespace.as_deref().unwrap_or_default(),
        gateway = gw.metadata.name.as_deref().unwrap_or_default(),
        revision = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    crate::traces::record_trace_id(&span);
    crate::traces::name_object(
        &span,
        "kura.gateway.name",
        gw.metadata.namespace.as_deref().unwrap_or_default(),
        gw.metadata.name.as_deref().unwrap_or_default(),
    );
    span
}

/// One pass for one gateway: migrate → read and judge → execute → report,
/// inside `span` ([`span`]).
pub async fn reconcile(
    gw: Arc<KuraGateway>,
    ctx: Arc<Context>,
    span: &tracing::Span,
) -> Result<Action, Error> {
    if gw.metadata.name.is_none() || gw.metadata.namespace.is_none() {
        return Err(Error::Unnamed);
    }
    let now = Timestamp::now();
    migrate(&ctx, &gw, now).instrument(span.clone()).await?;
    if gw.metadata.deletion_timestamp.is_some() {
        ctx.report.metrics.count_gateway("deleting");
        return Ok(Action::await_change());
    }
    let recall = ctx.memory.gateways.recall(&gw, SETTLE);
    let decision = read_and_judge(&ctx, &gw, &recall, now)
        .instrument(tracing::info_span!(parent: span, "decide"))
        .await?;
    let revision = decision.desired().map(|d| short(&d.revision));
    span.record("revision", revision.unwrap_or_default().as_str());
    async {
        let Some((outcome, requeue)) = execute::execute(&ctx, &gw, &decision, now).await? else {
            ctx.report.metrics.count_gateway("collected");
            return Ok(Action::await_change());
        };
        report::report(&ctx, &gw, &decision, &outcome, &recall, now).await?;
        Ok(Action::requeue(requeue))
    }
    .instrument(span.clone())
    .await
}

/// Removes an earlier release's finalizer, once.
async fn migrate(ctx: &Context, gw: &Arc<KuraGateway>, now: Timestamp) -> Result<(), Error> {
    match migrate::drop_legacy_finalizer(&ctx.client, gw).await {
        Ok(true) => events::publish(ctx, gw, vec![events::event(status::finalizer_removed())]),
        Ok(false) => {}
        Err(failure) => {
            let failures = ctx
                .memory
                .gateways
                .transient_failure(gw, "migrate", now)
                .failures;
            return Err(Error::Migrate { failure, failures });
        }
    }
    Ok(())
}

/// The decision; a gateway about to be collected is asked about live first.
async fn read_and_judge(
    ctx: &Context,
    gw: &KuraGateway,
    recall: &Recall<KuraGatewayStatus>,
    now: Timestamp,
) -> Result<GatewayDecision, Error> {
    let config = ctx.config();
    let mut inputs = snapshot::Inputs {
        gw,
        config: &config,
        roles: &ctx.settings.gateway_roles,
        stores: &ctx.stores,
        status: recall.status.clone(),
        recently_applied: recall.recently_applied.as_deref(),
        live_user: None,
        policy: &ctx.settings.policy,
        now,
    };
    let decision = snapshot::decide_from(&inputs);
    if !decision.asks_live_user() {
        return Ok(decision);
    }
    let user = collect::live_user(&ctx.client, gw, &config)
        .await
        .map_err(|failure| execute::collect_failed(ctx, gw, failure, now))?;
    inputs.live_user = Some(user);
    Ok(snapshot::decide_from(&inputs))
}
