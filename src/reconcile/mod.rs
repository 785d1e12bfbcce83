//! One reconcile of a `KuraInstance`, as a pipeline:
//!
//! recall → snapshot → judge → execute (rollout: apply, prune) → probe → status → write
//!
//! `snapshot` reads what the pass decides from (the caches, host claims, the
//! fleet budget, memory); `kura_core::judge` decides from it, purely, the
//! verdict and its effects, as the preview (`kura-operator diff`) does too.
//! Only `execute` (through `rollout`'s apply and prune) and
//! `report::Pass::write` talk to the apiserver; probe reads the caches, and
//! status::compute is pure.

pub mod apply;
pub mod budget;
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
mod rollout;
pub mod snapshot;
pub mod status;
/// Storage the live StatefulSet keeps (pure, in `kura-core`).
pub use crate::stores::{self, labelled};

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::controller::Action;

use tracing::Instrument;

use crate::context::Context;
use crate::reconcile::snapshot::{Inputs, decide_from};
use kura_core::api::KuraInstance;
use kura_core::judge::Mode;
use kura_core::judge::instance::{InstanceDecision, Verdict};
use kura_core::outcome::Failure;
use kura_core::plan::SETTLE;
use kura_core::render::hash::short;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A transient failure not reported in status yet (see
    /// `RetryPolicy::transient_report_after`); retried after the transient backoff.
    #[error("transient: {failure}")]
    Transient { failure: Failure, failures: u32 },
    #[error("writing status: {source}")]
    Status {
        #[source]
        source: kube::Error,
        failures: u32,
    },
    #[error("the instance has no namespace or name")]
    Unnamed,
    /// The shared ledger of a sharded fleet (a budget slot, a host) could
    /// not be read or written: nothing was reserved; retried.
    #[error("reserving in the shared ledger: {0}")]
    Ledger(#[source] kube::Error),
}

impl Error {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Transient { failure, .. } => match failure.stage {
                kura_core::outcome::Stage::Apply => "transient",
                kura_core::outcome::Stage::Prune => "prune",
            },
            Error::Status { .. } => "status",
            Error::Unnamed => "unnamed",
            Error::Ledger(_) => "ledger",
        }
    }

    /// Consecutive transient failures, for the error policy's backoff: the
    /// same count memory keeps (one count, not one per caller).
    pub fn failures(&self) -> u32 {
        match self {
            Error::Transient { failures, .. } | Error::Status { failures, .. } => *failures,
            Error::Unnamed | Error::Ledger(_) => 1,
        }
    }
}

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
    let recall = ctx.memory.recall(&instance, SETTLE);
    if !recall.behind {
        return (instance, recall);
    }
    match ctx
        .stores
        .instances
        .get(&kube::runtime::reflector::ObjectRef::from_obj(&*instance))
    {
        Some(newer) => {
            let recall = ctx.memory.recall(&newer, SETTLE);
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
    let origin = budget::origin(&decision.observed);
    span.record(
        "revision",
        decision.revision().map(short).unwrap_or_default().as_str(),
    );
    span.record("origin", tracing::field::debug(origin));
    if crate::traces::exporting() && rolling_out(&decision, origin) {
        crate::traces::link_rollout(span, &config.fleet_revision());
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
        ctx.metrics.record(&outcome, new_status.phase);
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
    config: &kura_core::config::OperatorConfig,
    recall: &crate::memory::Recall,
    now: Timestamp,
) -> InstanceDecision {
    let inputs = Inputs {
        instance,
        config,
        stores: &ctx.stores,
        status: recall.status.clone(),
        recently_applied: recall.recently_applied.as_deref(),
        memory: &ctx.memory,
        now,
    };
    decide_from(&inputs, &ctx.policy, Mode::Operate)
}
