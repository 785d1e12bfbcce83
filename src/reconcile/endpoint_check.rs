//! The hook of the endpoint check (`crate::endpoint`) into activation: an
//! activation the caches call active (workload available on the revision,
//! every Ingress with an address) stays active only if the instance's
//! endpoint answers through its primary Ingress, unless the region turns the
//! check off (it is on by default). Everything else passes through unchanged.
//!
//! The request runs in a task of its own, never inside the reconcile: a
//! reconcile that asks waits [`ANSWER_WAIT`] at most for the answer, then
//! decides from the last one this process has (`memory::endpoint`). An answer
//! that comes later is remembered, and wakes the instance if it changes what
//! was known. So an address that drops packets costs its own instance a
//! timeout in the background, and every reconcile worker stays free. One
//! request per instance per resync once it answers (per activation recheck
//! while it does not), and never two at once.
//!
//! A resync is long (ten minutes at the chart's default): the addresses where
//! instances answered are asked on a cadence of their own besides
//! ([`watch_addresses`], one request per address per [`ADDRESS_ROUND`]), and
//! an address where nothing serves any more (a stopped ingress controller)
//! gives its answer to every instance that answered there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::memory::Refresh;
use kura_core::api::KuraInstance;
use kura_core::config::RegionConfig;
use kura_core::endpoint::Answer;
use kura_core::endpoint::Target;
use kura_core::endpoint::addresses::Probe;
use kura_core::endpoint::addresses::Watched;
use kura_core::endpoint::addresses::address_fails;
use kura_core::render::Desired;

use super::probe::{self, IngressFacts};
use kura_core::outcome::Activation;
use kura_core::outcome::ENDPOINT_CHECKING;
use kura_core::outcome::ENDPOINT_NOT_ANSWERING;

/// How long a reconcile waits for the answer of a check it began: enough for
/// an endpoint that answers at once (the common case: decided in the same
/// pass), short enough that workers are never held by endpoints that do not.
const ANSWER_WAIT: Duration = Duration::from_millis(250);

/// What the check needs of the pass that calls it.
pub struct Asker<'a> {
    pub ctx: &'a Arc<Context>,
    pub instance: &'a KuraInstance,
    /// The instance was Ready: its endpoint answered before. With no answer
    /// yet for its target (this process just started, or the address
    /// moved), it stays active until the check says otherwise, rather than
    /// flapping to not Ready for the length of a request.
    pub was_ready: bool,
    /// How long an answer stands (`memory::Refresh`).
    pub refresh: Refresh,
}

pub async fn confirm(
    activation: Activation,
    desired: &Desired,
    region: Option<&RegionConfig>,
    asker: &Asker<'_>,
) -> Activation {
    let Activation::Active { .. } = &activation else {
        return activation;
    };
    let Some(check) = region.map(|r| &r.endpoint_check).filter(|c| c.enabled) else {
        return activation;
    };
    let (_, ingresses) = probe::gather(desired, &asker.ctx.stores);
    let Some(primary) = ingresses.first() else {
        return activation;
    };
    let address = primary
        .live
        .as_ref()
        .and_then(|i| i.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
        .and_then(|lb| {
            lb.iter()
                .find_map(|a| a.ip.clone().or_else(|| a.hostname.clone()))
        });
    let Some(address) = address else {
        // `probe` saw an address a moment ago; the next pass says which is gone.
        return activation;
    };
    let target = Target {
        address,
        port: check.port,
        host: primary.host.clone(),
        path: check.path.clone(),
        account: asker.instance.spec.account.clone(),
    };
    let recall = asker
        .ctx
        .memory
        .instances
        .endpoint_look(asker.instance, &target, asker.refresh);
    let asked = if recall.ask {
        ask(asker.ctx, asker.instance, &target).await
    } else {
        None
    };
    match asked.or(recall.last) {
        Some(answer) if answer.answered() => activation,
        Some(answer) => not_answering(primary, &target, &answer),
        None if asker.was_ready => activation,
        None => Activation::Waiting {
            reason: ENDPOINT_CHECKING,
            message: format!(
                "ingress {}: asking {}, no answer yet",
                primary.name,
                target.url()
            ),
        },
    }
}

/// Begins a check of `target` in a task of its own and waits [`ANSWER_WAIT`]
/// at most for its answer. The task remembers the answer however long it
/// takes; if this reconcile did not take it, and it changes what was known,
/// the task wakes the instance.
async fn ask(ctx: &Arc<Context>, instance: &KuraInstance, target: &Target) -> Option<Answer> {
    let uid = instance.metadata.uid.clone()?;
    let wake = ObjectRef::from_obj(instance);
    let watched = Watched {
        namespace: instance.metadata.namespace.clone().unwrap_or_default(),
        name: instance.metadata.name.clone().unwrap_or_default(),
        target: target.clone(),
    };
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let (ctx, target) = (ctx.clone(), target.clone());
    tokio::spawn(async move {
        let answer = ctx.endpoint.check(&watched.namespace, &target).await;
        ctx.report.metrics.endpoint_checked(&answer);
        tracing::debug!(answer = ?answer, "endpoint checked");
        let changed = ctx
            .memory
            .instances
            .endpoint_answered(&uid, &target, answer.clone());
        ctx.endpoint
            .addresses(|a| a.answered(watched, &uid, &answer, Instant::now()));
        if tx.send(answer).is_err() && changed {
            let _ = ctx.wake.send(wake);
        }
    });
    match tokio::time::timeout(ANSWER_WAIT, &mut rx).await {
        Ok(answer) => answer.ok(),
        Err(_) => {
            // From here the task's send fails (and it wakes the instance on a
            // change) unless the answer is already in the channel.
            rx.close();
            rx.try_recv().ok()
        }
    }
}

/// How often each watched address is asked: with a check's timeout (3 s)
/// and its confirmation, a controller that stops is found within 10 s and a
/// half plus two timeouts at worst (about 3 s when the connection is
/// refused), and its instances go not Ready in the pass that follows.
pub const ADDRESS_ROUND: Duration = Duration::from_secs(10);

/// Asks every watched address once per [`ADDRESS_ROUND`] (never returns):
/// one request per address (a second, through another instance's host, to
/// confirm a failure), whatever the number of instances behind it. An address
/// where nothing serves gives that answer to every instance watched there,
/// and reconciles them.
pub async fn watch_addresses(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(ADDRESS_ROUND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let probes = ctx.endpoint.addresses(|a| {
            a.retain(|uid| ctx.memory.instances.has_endpoint(uid));
            a.round(Instant::now(), ADDRESS_ROUND)
        });
        let ctx = &ctx;
        futures::stream::iter(probes)
            .for_each_concurrent(None, |probe| probe_address(ctx, probe))
            .await;
    }
}

async fn probe_address(ctx: &Arc<Context>, probe: Probe) {
    let mut answer = Answer::Answered;
    for watched in [&probe.first, &probe.second] {
        answer = ctx
            .endpoint
            .check(&watched.namespace, &watched.target)
            .await;
        ctx.report.metrics.endpoint_checked(&answer);
        if !address_fails(&answer) {
            return;
        }
    }
    let down = ctx.endpoint.addresses(|a| a.down(&probe.address));
    tracing::warn!(
        address = %format!("{}:{}", probe.address.0, probe.address.1),
        instances = down.len(),
        answer = %answer.message(&probe.second.target),
        "nothing serves at an ingress controller's address: its instances are not active"
    );
    for (uid, watched) in down {
        // The same address and port refused the same connection: the answer
        // is each instance's as much as the asked one's.
        if ctx
            .memory
            .instances
            .endpoint_answered(&uid, &watched.target, answer.clone())
        {
            let _ = ctx
                .wake
                .send(ObjectRef::new(&watched.name).within(&watched.namespace));
        }
    }
}

fn not_answering(primary: &IngressFacts, target: &Target, answer: &Answer) -> Activation {
    let controller = primary
        .class
        .as_ref()
        .and_then(|c| c.spec.as_ref()?.controller.clone())
        .unwrap_or_else(|| "none".into());
    let cause = match answer {
        Answer::Refused { .. } | Answer::TimedOut { .. } => format!(
            "; is the ingress controller of class {} (controller {controller}) running?",
            primary.class_name
        ),
        _ => format!(
            " (ingress class {}, controller {controller})",
            primary.class_name
        ),
    };
    Activation::Waiting {
        reason: ENDPOINT_NOT_ANSWERING,
        message: format!(
            "ingress {}: {}{cause}",
            primary.name,
            answer.message(target)
        ),
    }
}
