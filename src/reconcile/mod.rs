//! One reconcile of a `KuraInstance`, as a pipeline:
//!
//! recall → snapshot → judge → execute (carry_out: apply, prune) → probe → status → write
//!
//! `snapshot` reads what the pass decides from (the caches, host claims, the
//! fleet budget, memory); `kura_core::judge` decides from it, purely, the
//! verdict and its effects, as the preview (`kura-operator diff`) does too.
//! Only `execute` (through `carry_out`'s apply and prune) and
//! `report::Pass::write` talk to the apiserver; probe reads the caches, and
//! status::compute is pure.

pub mod apply;
pub mod budget;
mod carry_out;
pub mod endpoint_check;
pub mod events;
pub mod execute;
pub mod name_wait;
pub mod observe;
/// The instance's state machine, pure (in `kura-core`).
pub mod probe;
pub mod prune;
mod report;
pub mod reservations;
pub mod snapshot;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::controller::Action;

use tracing::Instrument;

use crate::context::Context;
use crate::pass::Error;
use crate::reconcile::snapshot::{Inputs, decide_from};
use kura_core::api::KuraInstance;
use kura_core::judge::Mode;
use kura_core::judge::instance::{InstanceDecision, Verdict};
use kura_core::plan::SETTLE;
use kura_core::render::hash::short;

/// While waiting for activation, look again this often (watch events on the
/// workload and ingresses usually come sooner).
const ACTIVATION_RECHECK: Duration = Duration::from_secs(15);

/// The span of one reconcile of `instance`: a trace of its own (no parent),
/// named by the instance. The revision it decides for and who originated it
/// are recorded once decided; its trace id, when traces are exported, names
/// it in the log (`traces`).
pub fn span(instance: &KuraInstance) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "reconcile",
        namespace = instance.metadata.namespace.as_deref().unwrap_or_default(),
        instance = instance.metadata.name.as_deref().unwrap_or_default(),
        revision = tracing::field::Empty,
        origin = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    crate::traces::record_trace_id(&span);
    crate::traces::name_object(
        &span,
        "kura.instance.name",
        instance.metadata.namespace.as_deref().unwrap_or_default(),
        instance.metadata.name.as_deref().unwrap_or_default(),
    );
    span
}

/// The instance to decide from, and what memory adds to it. The controller
/// hands a pass the instance as the cache held it when the pass was
/// scheduled; the watch can deliver this process's own status write before
/// the pass starts, and memory then no longer keeps a copy of that write. So
/// when memory says the instance given is behind, the cache's (which held the
/// write before memory let its copy go) is read instead.
fn recall_newest(
    ctx: &Context,
    instance: Arc<KuraInstance>,
) -> (Arc<KuraInstance>, crate::memory::Recall) {
    let recall = ctx.memory.instances.recall(&instance, SETTLE);
    if !recall.behind {
        return (instance, recall);
    }
    match ctx
        .stores
        .instances
        .get(&kube::runtime::reflector::ObjectRef::from_obj(&*instance))
    {
        Some(newer) => {
            let recall = ctx.memory.instances.recall(&newer, SETTLE);
            (newer, recall)
        }
        None => (instance, recall),
    }
}

/// One pass for one instance: decide → execute → probe → status → write,
/// inside `span` ([`span`]), each step a span of its own.
pub async fn reconcile(
    instance: Arc<KuraInstance>,
    ctx: Arc<Context>,
    span: &tracing::Span,
) -> Result<Action, Error> {
    if instance.metadata.name.is_none() || instance.metadata.namespace.is_none() {
        return Err(Error::Unnamed);
    }
    let config = ctx.config();
    let now = Timestamp::now();
    let (instance, recall) = recall_newest(&ctx, instance);
    let decision = span.in_scope(|| {
        tracing::info_span!("decide")
            .in_scope(|| decide_now(&ctx, &instance, &config, &recall, now))
    });
    let origin = kura_core::budget::origin(&decision.observed);
    span.record(
        "revision",
        decision.revision().map(short).unwrap_or_default().as_str(),
    );
    span.record("origin", tracing::field::debug(origin));
    if rolling_out(&decision, origin) {
        // A new revision, not a repair of the one applied.
        let applied = decision.observed.status.applied_revision.as_deref();
        if decision.revision().is_some_and(|r| Some(r) != applied) {
            ctx.report.fleet.announce(config.fleet_revision());
        }
        if crate::traces::exporting() {
            crate::traces::link_rollout(span, config.fleet_revision());
        }
    }
    let pass = report::Pass {
        ctx: &ctx,
        instance: &instance,
        config: &config,
        decision: &decision,
        recall: &recall,
        now,
    };
    async {
        let (outcome, requeue) = execute::execute(&ctx, &instance, &decision, &config, now).await?;
        let activation = pass
            .activation(&outcome)
            .instrument(tracing::info_span!("probe"))
            .await;
        let new_status = pass.status(&outcome, activation.as_ref());
        report::log_outcome(&outcome, &new_status);
        ctx.report.metrics.record(&outcome, new_status.phase);
        pass.write(&new_status, &outcome).await?;
        pass.after(&new_status, &outcome);
        Ok(Action::requeue(match activation {
            Some(kura_core::outcome::Activation::Waiting { .. }) => requeue.min(ACTIVATION_RECHECK),
            _ => requeue,
        }))
    }
    .instrument(span.clone())
    .await
}

/// Whether this pass carries a fleet rollout: the operator's change (its
/// configuration or release), still to be applied or waiting for the budget.
fn rolling_out(decision: &InstanceDecision, origin: kura_core::api::Origin) -> bool {
    let Verdict::Valid(valid) = &decision.verdict else {
        return false;
    };
    origin == kura_core::api::Origin::Operator
        && matches!(
            valid.plan,
            kura_core::plan::Plan::Apply { .. }
                | kura_core::plan::Plan::Admit
                | kura_core::plan::Plan::Held(_)
        )
}

/// This pass's decision, from the caches, this process's memory and the clock.
fn decide_now(
    ctx: &Context,
    instance: &KuraInstance,
    config: &kura_core::accepted::Accepted,
    recall: &crate::memory::Recall,
    now: Timestamp,
) -> InstanceDecision {
    let inputs = Inputs {
        instance,
        config,
        stores: &ctx.stores,
        status: recall.status.clone(),
        recently_applied: recall.recently_applied.as_deref(),
        memory: &ctx.memory.instances,
        now,
    };
    decide_from(&inputs, &ctx.settings.policy, Mode::Operate)
}
