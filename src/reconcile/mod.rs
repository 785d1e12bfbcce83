//! One reconcile of a `KuraInstance`, as a pipeline:
//!
//! recall → decide → execute (rollout: apply, prune) → probe → status → write
//!
//! `crate::reconcile::decide` is the decision the preview (`kura-operator diff`) makes
//! too: validate, render, observe the caches, host claims, the fleet budget,
//! plan. Only `execute` (through `rollout`'s apply and prune) and
//! `report::write` talk to the apiserver; probe reads the caches, and
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
        }
    }

    /// Consecutive transient failures, for the error policy's backoff: the
    /// same count memory keeps (one count, not one per caller).
    pub fn failures(&self) -> u32 {
        match self {
            Error::Transient { failures, .. } | Error::Status { failures, .. } => *failures,
            Error::Unnamed => 1,
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
    let decision = decide(&Inputs {
        instance: &instance,
        config: &config,
        stores: &ctx.stores,
        status: recall.status.clone(),
        recently_applied: recall.recently_applied.as_deref(),
        memory: &ctx.memory,
        policy: &ctx.policy,
        now,
        mode: Mode::Operate,
    });
    let span = tracing::info_span!(
        "reconcile",
        %namespace,
        instance = %name,
        revision = decision.revision().map(short).unwrap_or_default(),
        origin = ?budget::origin(&decision.observed),
    );
    async {
        let (outcome, requeue) = execute::execute(&ctx, &instance, &decision, &config, now).await?;
        let activation = report::activation(&outcome, &decision, &ctx.stores);
        let new_status = report::status(
            &instance,
            &decision,
            &outcome,
            activation.as_ref(),
            &ctx,
            &config,
            now,
        );
        report::log_outcome(&outcome, &new_status);
        ctx.metrics.record(&outcome, new_status.phase);
        report::write(
            &ctx,
            &instance,
            &decision.observed,
            &new_status,
            &outcome,
            &recall,
            now,
        )
        .await?;
        report::after(
            &ctx,
            &instance,
            &decision.observed.status,
            &new_status,
            &outcome,
            &config,
            now,
        );
        let requeue = match activation {
            Some(probe::Activation::Waiting { .. }) => requeue.min(ACTIVATION_RECHECK),
            _ => requeue,
        };
        Ok(Action::requeue(requeue))
    }
    .instrument(span)
    .await
}
