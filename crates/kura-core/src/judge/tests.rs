//! The decision's table: one case per verdict of an instance and of a
//! gateway, each with the effects that carry it out.

use jiff::Timestamp;

use super::gateway::{GatewaySnapshot, judge_gateway};
use super::instance::{InstanceDecision, InstanceSnapshot, Verdict, judge_instance, prepare};
use super::{Effect, Mode};
use crate::api::{
    GatewaySpec, KuraGateway, KuraGatewaySpec, KuraInstance, KuraInstanceSpec, Phase, RetryStatus,
    StorageSpec,
};
use crate::claims::{Claimant, Conflict, Lost};
use crate::config::OperatorConfig;
use crate::plan::fixtures::converged;
use crate::plan::{BudgetView, Observed, Plan, RetryPolicy, inputs_key};
use crate::render::Desired;
use crate::rollout::Admission;

const EXAMPLE_CONFIG: &str = include_str!("../../../../examples/config.yaml");

fn config() -> OperatorConfig {
    OperatorConfig::parse(EXAMPLE_CONFIG).expect("the example configuration is valid")
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn instance(image: &str) -> KuraInstance {
    let mut instance = KuraInstance::new(
        "acme-eu",
        KuraInstanceSpec {
            account: "acme".into(),
            region: "eu-west-1".into(),
            image: image.into(),
            replicas: 1,
            host: None,
            aliases: vec![],
            storage: StorageSpec {
                size: "10Gi".into(),
                class: None,
            },
            resources: None,
            env: vec![],
            gateway: GatewaySpec::default(),
            paused: false,
            pause: None,
            maintenance_window: None,
        },
    );
    instance.metadata.namespace = Some("kura-demo".into());
    instance.metadata.uid = Some("u-1".into());
    instance
}

const IMAGE: &str = "ghcr.io/kura-dev/kura:1.8.2";

fn desired(image: &str) -> Desired {
    prepare(&instance(image), &config(), None).unwrap().desired
}

/// A snapshot of the valid instance on `IMAGE`, observed as `observed`.
fn snapshot(observed: Observed) -> InstanceSnapshot {
    InstanceSnapshot {
        rendered: prepare(&instance(IMAGE), &config(), None),
        observed,
        recently_applied: None,
        paused: false,
        hosts: Ok(()),
        budget: BudgetView::default(),
    }
}

fn judge(snapshot: InstanceSnapshot) -> InstanceDecision {
    judge_instance(snapshot, &RetryPolicy::default(), now(), Mode::Operate)
}

fn plan(decision: &InstanceDecision) -> &Plan {
    &decision.valid().expect("a valid instance").plan
}

fn conflict() -> Conflict {
    Conflict(vec![Lost {
        field: "spec.host".into(),
        host: "acme.example".into(),
        holder: Claimant {
            namespace: "other".into(),
            name: "first".into(),
            uid: "u-0".into(),
            created: None,
        },
        holder_serves: true,
        also_served_here: false,
        reserved_until: None,
    }])
}

#[test]
fn invalid_input_stands_down_and_reports() {
    let mut bad = instance(IMAGE);
    bad.spec.replicas = -1;
    let mut s = snapshot(Observed::default());
    s.rendered = prepare(&bad, &config(), None);
    let decision = judge(s);
    assert!(matches!(decision.verdict, Verdict::Invalid(_)));
    assert_eq!(decision.effects, [Effect::StandDown, Effect::WriteStatus]);
}

#[test]
fn a_new_instance_claims_its_hosts_and_applies_in_waves() {
    let decision = judge(snapshot(Observed::default()));
    assert!(matches!(plan(&decision), Plan::Apply { .. }));
    // Nothing to prune: no prune.
    let [
        Effect::ClaimHosts,
        Effect::Apply { waves },
        Effect::WriteStatus,
    ] = decision.effects.as_slice()
    else {
        panic!("effects: {:?}", decision.effects);
    };
    let numbers: Vec<u8> = waves.iter().map(|w| w.wave).collect();
    assert_eq!(numbers, [0, 1], "the workload's wave after its inputs");
    assert!(waves.iter().all(|w| w.ops.iter().all(|op| op.create)));
}

#[test]
fn a_held_host_overrides_the_plan_and_takes_no_slot() {
    let mut s = snapshot(Observed::default());
    s.hosts = Err(conflict());
    s.budget = BudgetView {
        budgeted: true,
        admission: Some(Admission::Admit { counted: true }),
        gate: Default::default(),
    };
    let decision = judge(s);
    assert!(decision.valid().unwrap().host_conflict.is_some());
    assert_eq!(decision.observed.budget, BudgetView::default());
    assert_eq!(decision.effects, [Effect::WriteStatus]);
}

#[test]
fn a_paused_instance_asks_for_no_host_and_applies_nothing() {
    let mut s = snapshot(Observed::default());
    s.paused = true;
    s.hosts = Err(conflict());
    let decision = judge(s);
    assert!(decision.valid().unwrap().host_conflict.is_none());
    assert_eq!(plan(&decision), &Plan::Paused);
    assert_eq!(decision.effects, [Effect::WriteStatus]);
}

#[test]
fn a_converged_instance_only_reports() {
    let decision = judge(snapshot(converged(&desired(IMAGE), Phase::Ready)));
    assert_eq!(plan(&decision), &Plan::Converged);
    assert_eq!(decision.effects, [Effect::WriteStatus]);
}

#[test]
fn what_memory_recalls_applying_settles_instead_of_applying_again() {
    let d = desired(IMAGE);
    let mut observed = converged(&d, Phase::Ready);
    // The caches have not shown one object of this process's apply yet.
    let first = observed.children.keys().next().unwrap().clone();
    observed.children.remove(&first);
    let missing = judge(snapshot(observed.clone()));
    assert!(matches!(plan(&missing), Plan::Apply { .. }));
    let mut s = snapshot(observed);
    s.recently_applied = Some(inputs_key(&d.revision, None));
    let decision = judge(s);
    assert!(decision.observed.just_applied);
    assert_eq!(plan(&decision), &Plan::Settling);
    assert_eq!(decision.effects, [Effect::WriteStatus]);
}

#[test]
fn a_recent_failure_backs_off_but_the_preview_shows_the_apply() {
    let d = desired(IMAGE);
    let mut observed = converged(&desired("ghcr.io/kura-dev/kura:1.8.1"), Phase::Retrying);
    observed.status.retry = Some(RetryStatus {
        failures: 1,
        inputs_key: inputs_key(&d.revision, None),
        last_error: "boom".into(),
        last_failure_time: (now() - jiff::SignedDuration::from_secs(1)).to_string(),
    });
    let again = || snapshot(observed.clone());
    let decision = judge(again());
    assert!(matches!(plan(&decision), Plan::Backoff { .. }));
    assert_eq!(decision.effects, [Effect::WriteStatus]);
    let preview = judge_instance(again(), &RetryPolicy::default(), now(), Mode::Preview);
    assert!(matches!(plan(&preview), Plan::Apply { .. }));
    assert!(preview.effects.contains(&Effect::ClaimHosts));
}

/// An operator change that restarts pods of a Ready instance.
fn budgeted(admission: Admission) -> InstanceSnapshot {
    let old = desired("ghcr.io/kura-dev/kura:1.8.1");
    let mut observed = converged(&old, Phase::Ready);
    observed.running_pod_template_hash = Some(old.pod_template_hash.clone());
    let mut s = snapshot(observed);
    s.budget = BudgetView {
        budgeted: true,
        admission: Some(admission),
        gate: Default::default(),
    };
    s
}

#[test]
fn an_admission_reserves_a_slot_before_anything_restarts() {
    let decision = judge(budgeted(Admission::Admit { counted: true }));
    assert_eq!(plan(&decision), &Plan::Admit);
    assert_eq!(decision.effects, [Effect::ReserveSlot, Effect::WriteStatus]);
}

#[test]
fn a_change_waiting_for_the_budget_is_held() {
    let wait = Admission::Wait {
        ahead: 1,
        in_flight: vec![],
        budget: 1,
    };
    let decision = judge(budgeted(wait.clone()));
    let effects = &decision.effects;
    match plan(&decision) {
        // Nothing that may go without a restart differs: held whole.
        Plan::Held(held) => {
            assert_eq!(held, &wait);
            assert_eq!(effects, &[Effect::WriteStatus]);
        }
        // What restarts no pod goes now; the rest waits.
        Plan::Apply { held, .. } => {
            assert_eq!(held.as_ref(), Some(&wait));
            assert!(matches!(effects[1], Effect::Apply { .. }));
        }
        other => panic!("plan: {other:?}"),
    }
}

fn gateway() -> KuraGateway {
    let mut gw = KuraGateway::new(
        "gw-acme",
        KuraGatewaySpec {
            account: "acme".into(),
            region: "r1".into(),
            ingress_class_name: "kura-gw.ns.gw-acme".into(),
            controller: "example.com/c".into(),
            image: "registry.example/gw:1".into(),
            host_ports: false,
            replicas: 1,
        },
    );
    gw.metadata.namespace = Some("ns".into());
    gw.metadata.uid = Some("u-1".into());
    gw
}

fn gateway_snapshot(managed: bool, user: Option<&str>) -> GatewaySnapshot {
    GatewaySnapshot {
        rendered: super::gateway::prepare(&gateway(), &Default::default()),
        observed: crate::gateway::observed::Observed {
            managed,
            ..Default::default()
        },
        recently_applied: None,
        user: user.map(str::to_string),
    }
}

#[test]
fn a_gateway_nothing_uses_is_collected_and_writes_no_status() {
    let decision = judge_gateway(gateway_snapshot(true, None), &RetryPolicy::default(), now());
    assert!(decision.asks_live_user());
    assert_eq!(decision.effects, [Effect::Collect]);
}

#[test]
fn a_gateway_in_use_applies_in_waves_then_releases() {
    let decision = judge_gateway(
        gateway_snapshot(true, Some("ns/acme")),
        &RetryPolicy::default(),
        now(),
    );
    let [
        Effect::Apply { waves },
        Effect::Release { .. },
        Effect::WriteStatus,
    ] = decision.effects.as_slice()
    else {
        panic!("effects: {:?}", decision.effects);
    };
    assert!(!waves.is_empty());
}

#[test]
fn an_invalid_gateway_only_reports() {
    let mut s = gateway_snapshot(false, Some("ns/acme"));
    let mut bad = gateway();
    bad.spec.ingress_class_name = "another-class".into();
    s.rendered = super::gateway::prepare(&bad, &Default::default());
    assert!(s.rendered.is_err(), "the class is not the gateway's");
    let decision = judge_gateway(s, &RetryPolicy::default(), now());
    assert!(matches!(
        decision.plan,
        crate::gateway::plan::Plan::Invalid(_)
    ));
    assert_eq!(decision.effects, [Effect::WriteStatus]);
}

#[test]
fn the_effects_read_as_short_lines() {
    let decision = judge(snapshot(Observed::default()));
    let lines: Vec<String> = decision.effects.iter().map(ToString::to_string).collect();
    assert_eq!(lines[0], "claim the hosts");
    assert!(lines[1].starts_with("apply wave 0: "), "{}", lines[1]);
    assert!(
        lines[1].contains("; wave 1: StatefulSet kura-demo/"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2], "write status and its Events");
}

#[test]
fn an_object_no_longer_rendered_is_pruned_after_the_apply() {
    let d = desired(IMAGE);
    let mut observed = converged(&d, Phase::Ready);
    let stale = crate::plan::fixtures::object(crate::kind::ChildKind::ConfigMap, "old", "r0");
    observed.status.inventory.push(
        stale
            .id
            .inventory_entry(stale.hash.clone(), Some("f1".into())),
    );
    observed.children.insert(
        stale.id.clone(),
        crate::plan::LiveChild::ours(&stale.hash, "f1"),
    );
    let decision = judge(snapshot(observed));
    let effects = &decision.effects;
    assert_eq!(effects[0], Effect::ClaimHosts, "{effects:?}");
    assert!(matches!(effects[1], Effect::Apply { .. }), "{effects:?}");
    assert_eq!(
        effects[2],
        Effect::Prune {
            objects: vec![stale.id]
        },
        "{effects:?}"
    );
    assert_eq!(effects[3], Effect::WriteStatus);
}

#[test]
fn a_name_conflict_or_a_child_being_deleted_only_reports() {
    let d = desired(IMAGE);
    let first = d.objects[0].id.clone();
    let mut terminating = converged(&d, Phase::Ready);
    terminating.children.remove(&first);
    terminating
        .terminating
        .insert(first.clone(), vec!["example.com/hold".into()]);
    let decision = judge(snapshot(terminating));
    assert!(matches!(plan(&decision), Plan::ChildTerminating(_)));
    assert_eq!(decision.effects, [Effect::WriteStatus]);

    let mut taken = converged(&d, Phase::Ready);
    let mut foreign = crate::plan::LiveChild::ours("", "x");
    foreign.owner = crate::plan::Owner::Foreign("is controlled by KuraInstance other".into());
    taken.children.insert(first, foreign);
    let decision = judge(snapshot(taken));
    assert!(matches!(plan(&decision), Plan::NameConflict(_)));
    assert_eq!(decision.effects, [Effect::WriteStatus]);
}
