//! What both controllers do around one pass of their kind, written once:
//! the error a pass ends with and its metric label, the gate that lets only
//! the leader (or the holder of the object's shard) run a pass, the pass's
//! span and work-queue metrics, and the error policy's backoff. A kind
//! ([`Kind`]: `KuraInstance`, `KuraGateway`) brings its span and its pass
//! (`reconcile::reconcile`, `gateway::reconcile`); the rest is here.

use std::future::Future;
use std::sync::Arc;

use kube::runtime::controller::Action;

use crate::context::Context;
use crate::metrics::Metrics;
use crate::metrics::reconciles::ReconcileTimer;
use kura_core::outcome::{Failure, Stage};
use kura_core::time::jitter;

/// How one pass of either kind failed, when it did not report it in status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A transient failure not reported in status yet (see
    /// `RetryPolicy::transient_report_after`); retried after the transient backoff.
    #[error("transient: {failure}")]
    Transient { failure: Failure, failures: u32 },
    /// Reading who uses a gateway, or deleting it, failed.
    #[error("collecting: {failure}")]
    Collect { failure: Failure, failures: u32 },
    /// Removing an earlier release's finalizer from a gateway failed.
    #[error("migrating: {failure}")]
    Migrate { failure: Failure, failures: u32 },
    #[error("writing status: {source}")]
    Status {
        #[source]
        source: kube::Error,
        failures: u32,
    },
    #[error("the object has no namespace or name")]
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
                Stage::Apply => "transient",
                Stage::Prune => "prune",
            },
            Error::Collect { .. } => "collect",
            Error::Migrate { .. } => "migrate",
            Error::Status { .. } => "status",
            Error::Unnamed => "unnamed",
            Error::Ledger(_) => "ledger",
        }
    }

    /// Consecutive transient failures, for the error policy's backoff: the
    /// same count memory keeps (one count, not one per caller).
    pub fn failures(&self) -> u32 {
        match self {
            Error::Transient { failures, .. }
            | Error::Collect { failures, .. }
            | Error::Migrate { failures, .. }
            | Error::Status { failures, .. } => *failures,
            Error::Unnamed | Error::Ledger(_) => 1,
        }
    }

    /// The failure of an apply, a prune or a read, if that is what it is.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Error::Transient { failure, .. }
            | Error::Collect { failure, .. }
            | Error::Migrate { failure, .. } => Some(failure),
            Error::Status { .. } | Error::Unnamed | Error::Ledger(_) => None,
        }
    }
}

/// A kind the operator reconciles.
pub trait Kind: kube::Resource<DynamicType = ()> + Send + Sync + 'static {
    /// The controller's name in the work-queue metrics.
    const CONTROLLER: &'static str;
    /// How the log names an object of the kind.
    const NOUN: &'static str;

    /// The span of one pass: a trace of its own (no parent), named by the
    /// object; the pass records what it decides in it.
    fn span(&self) -> tracing::Span;

    /// One pass, inside `span`.
    fn reconcile(
        self: Arc<Self>,
        ctx: Arc<Context>,
        span: &tracing::Span,
    ) -> impl Future<Output = Result<Action, Error>> + Send;

    /// Counts a pass that ended in `error` (its label) in the kind's family.
    fn count_error(metrics: &Metrics, label: &'static str);

    /// The kind's own duration histogram, if it has one.
    fn timer(_metrics: &Arc<Metrics>) -> Option<ReconcileTimer> {
        None
    }
}

/// A standby reconciles nothing (everything is reconciled when it starts
/// leading); the leader's passes are timed, and cancelled when it stops
/// leading. Sharded: the same per shard, by the object's namespace
/// (`shards::Gate::run`), so an object is acted on only by the replica that
/// holds its shard.
pub async fn reconcile_if_leading<K: Kind>(
    object: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let in_progress = ctx
        .report
        .metrics
        .runtime
        .start(K::CONTROLLER, object.as_ref());
    let namespace = object.meta().namespace.clone().unwrap_or_default();
    if !ctx.acting.shards.acts_for(&namespace) {
        return Ok(Action::await_change());
    }
    let _timer = K::timer(&ctx.report.metrics);
    let span = object.span();
    let work = K::reconcile(object, ctx.clone(), &span);
    let result = ctx
        .acting
        .shards
        .run(&namespace, work)
        .await
        .unwrap_or(Ok(Action::await_change()));
    // Its trace is the exemplar of the reconcile histogram.
    in_progress.done(&result, crate::traces::trace_id(&span));
    result
}

/// Error policy: the errors that reach here are transient (a server error,
/// throttling, a failed prune, read or status write); apply failures of the
/// input itself are recorded in status and retried by the plan. Backoff is
/// exponential per object (`RetryPolicy::transient_backoff`: 0.5 s doubling
/// to 60 s, jittered) and resets on the next pass that gets through.
pub fn error_policy<K: Kind>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = error.failures();
    let delay = ctx
        .settings
        .policy
        .transient_backoff(failures, jitter(object.as_ref(), failures));
    tracing::warn!(
        namespace = ?object.meta().namespace,
        name = ?object.meta().name,
        kind = K::NOUN,
        error = %error,
        retry_in = ?delay,
        "reconcile failed; retrying"
    );
    K::count_error(&ctx.report.metrics, error.label());
    if let Some(failure) = error.failure() {
        ctx.report.metrics.record_failure(failure);
    }
    Action::requeue(delay)
}

/// Runs `controller` with the generic pass and error policy until it ends
/// (its graceful shutdown): an object triggered and deleted before its turn
/// leaves the work-queue metrics without a reconcile; other controller
/// events are traced only.
pub async fn run<K>(
    controller: kube::runtime::Controller<K>,
    ctx: Arc<Context>,
    runtime: Arc<crate::metrics::runtime::RuntimeMetrics>,
) where
    K: Kind + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    use futures::StreamExt;
    controller
        .run(reconcile_if_leading::<K>, error_policy::<K>, ctx)
        .for_each(move |result| {
            if let Err(kube::runtime::controller::Error::ObjectNotFound(r)) = &result {
                runtime.forget(K::CONTROLLER, r.namespace.as_deref(), &r.name);
            }
            if let Err(e) = result {
                tracing::trace!(error = %e, controller = K::CONTROLLER, "controller event");
            }
            std::future::ready(())
        })
        .await;
}
