//! One reconcile of a `KuraInstance`, as a pipeline:
//!
//! recall → decide → execute (rollout: apply, prune) → probe → status → write
//!
//! `crate::reconcile::decide` is the decision the preview (`kura-operator diff`) makes
//! too: validate, render, observe the caches, host claims, the fleet budget,
//! plan. Only `execute` (through `rollout`'s apply and prune) and
//! `report::Pass::write` talk to the apiserver; probe reads the caches, and
//! status::compute is pure.

pub mod apply;
pub mod budget;
pub mod decide;
pub mod events;
pub mod execute;
pub mod observe;
/// The instance's state machine, pure (in `kura-core`).
pub use kura_core::plan;
pub mod probe;
pub mod prune;
mod report;
mod rollout;
pub mod status;
/// Storage the live StatefulSet keeps (pure, in `kura-core`).
pub use kura_core::storage;

pub use crate::stores::{self, labelled};

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::controller::Action;

use tracing::Instrument;

use self::apply::Failure;
use self::plan::SETTLE;
use crate::api::KuraInstance;
use crate::context::Context;
use crate::reconcile::decide::{Inputs, Mode, decide};
use crate::render::hash::short;

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
                apply::Stage::Apply => "transient",
                apply::Stage::Prune => "prune",
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

/// One pass for one instance: decide → execute → probe → status → write,
/// inside a span naming the instance, the revision it decides for and who
/// originated it.
pub async fn reconcile(instance: Arc<KuraInstance>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(name), Some(namespace)) = (&instance.metadata.name, &instance.metadata.namespace)
    else {
        return Err(Error::Unnamed);
    };
    let config = ctx.config();
    let now = Timestamp::now();
    let recall = ctx.memory.recall(&instance, SETTLE);
    let decision = decide_now(&ctx, &instance, &config, &recall, now);
    let span = tracing::info_span!(
        "reconcile",
        %namespace,
        instance = %name,
        revision = decision.revision().map(short).unwrap_or_default(),
        origin = ?budget::origin(&decision.observed),
    );
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
        let activation = pass.activation(&outcome);
        let new_status = pass.status(&outcome, activation.as_ref());
        report::log_outcome(&outcome, &new_status);
        ctx.metrics.record(&outcome, new_status.phase);
        pass.write(&new_status, &outcome).await?;
        pass.after(&new_status, &outcome).await;
        Ok(Action::requeue(match activation {
            Some(probe::Activation::Waiting { .. }) => requeue.min(ACTIVATION_RECHECK),
            _ => requeue,
        }))
    }
    .instrument(span)
    .await
}

/// This pass's decision, from the caches, this process's memory and the clock.
fn decide_now(
    ctx: &Context,
    instance: &KuraInstance,
    config: &crate::config::OperatorConfig,
    recall: &crate::memory::Recall,
    now: Timestamp,
) -> decide::Decision {
    decide(&Inputs {
        instance,
        config,
        stores: &ctx.stores,
        status: recall.status.clone(),
        recently_applied: recall.recently_applied.as_deref(),
        memory: &ctx.memory,
        policy: &ctx.policy,
        now,
        mode: Mode::Operate,
    })
}
