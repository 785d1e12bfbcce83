//! Carrying out a gateway's `Plan::Apply`: apply what plan chose under the
//! gateway's field manager, release what the instances' manager still holds,
//! and turn what happened into an `Outcome`, as `reconcile::carry_out` does
//! for an instance (a name conflict stalls both kinds the same way).

use std::time::Duration;

use jiff::Timestamp;

use super::migrate;
use crate::context::Context;
use crate::pass::Error;
use crate::reconcile::apply::{self};
use crate::reconcile::name_wait;
use kura_core::api::KuraGateway;
use kura_core::gateway::observed::Observed;
use kura_core::gateway::plan;
use kura_core::gateway::status::Outcome;
use kura_core::keys::GATEWAY_FIELD_MANAGER;
use kura_core::outcome::{Failure, FailureClass};
use kura_core::plan::{ApplyOp, ApplyReason, drift};
use kura_core::render::{Desired, ObjectId};

pub struct Steps<'a> {
    pub reasons: Vec<ApplyReason>,
    pub apply: Vec<ApplyOp>,
    pub release: Vec<ObjectId>,
    /// The inputs key (the revision) failures belong to.
    pub key: &'a str,
}

/// Applies what plan chose under the gateway's field manager, then releases
/// what the instances' manager still holds of children of an earlier release.
pub async fn carry_out(
    ctx: &Context,
    gw: &KuraGateway,
    observed: &Observed,
    desired: &Desired,
    steps: Steps<'_>,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let Steps {
        reasons,
        apply: ops,
        release,
        key,
    } = steps;
    let target = apply::For {
        uid: gw.metadata.uid.as_deref().unwrap_or_default(),
        name: gw.metadata.name.as_deref().unwrap_or_default(),
    };
    let applied = match apply::apply_as(
        &ctx.client,
        &ctx.stores,
        desired,
        &ops,
        &target,
        GATEWAY_FIELD_MANAGER,
    )
    .await
    {
        Ok(fingerprints) => migrate::release_old_manager(&ctx.client, &release)
            .await
            .map(|released| (fingerprints, released)),
        Err(failure) => Err(failure),
    };
    match applied {
        Ok((fingerprints, released)) => {
            ctx.memory.gateways.applied(gw, key);
            let inventory = drift::inventory_after(
                &desired.objects,
                &observed.children,
                &observed.status.inventory,
                &fingerprints,
            );
            let sent = ops.iter().map(|op| op.id.to_string()).collect();
            let outcome = Outcome::Applied {
                reasons,
                sent,
                released,
                inventory,
            };
            Ok((outcome, ctx.settings.resync))
        }
        Err(failure) => failed(ctx, gw, (observed, desired), key, reasons, failure, now),
    }
}

/// A failed apply or release: a transient one quietly retried until it is
/// old enough to report, a name conflict stalled at once until its names are
/// free (`reconcile::name_wait`, as an instance is), any other under the
/// retry budget.
fn failed(
    ctx: &Context,
    gw: &KuraGateway,
    (observed, desired): (&Observed, &Desired),
    key: &str,
    reasons: Vec<ApplyReason>,
    failure: Failure,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let delay = if failure.is_transient() {
        let streak = ctx.memory.gateways.transient_failure(gw, key, now);
        if streak.age() < ctx.settings.policy.transient_report_after {
            return Err(Error::Transient {
                failure,
                failures: streak.failures,
            });
        }
        let jitter = kura_core::time::jitter(gw, streak.failures);
        ctx.settings
            .policy
            .transient_backoff(streak.failures, jitter)
    } else if failure.class == FailureClass::NameConflict {
        let waiter = name_wait::gateway_waiter(gw);
        name_wait::stall_on_names(ctx, desired, &observed.children, &waiter)
    } else {
        let failures = plan::failures_for(&observed.status, key).saturating_add(1);
        ctx.settings.policy.wait_after(failures).0
    };
    Ok((Outcome::ApplyFailed { reasons, failure }, delay))
}
