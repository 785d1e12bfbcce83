//! The gateway's decision table: collection, validity, conflicts, each kind
//! of drift, the move to the gateway's field manager, backoff.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::*;
use crate::api::{KuraGateway, KuraGatewaySpec, RetryStatus};
use crate::kind::ChildKind;
use crate::plan::{LiveChild, Owner};
use crate::render::gateway::render_gateway;
use crate::validate::FieldError;

/// One gateway of namespace `ns` (the status tests use it too).
pub(crate) fn gateway() -> KuraGateway {
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

fn desired() -> Desired {
    render_gateway(&gateway(), &Default::default())
}

/// The operator's gateway, fully converged on `d`.
fn converged(d: &Desired) -> Observed {
    let mut inventory = d.inventory();
    for e in &mut inventory {
        e.owned_fields = Some("f1".into());
    }
    let children: BTreeMap<_, _> = d
        .objects
        .iter()
        .map(|o| (o.id.clone(), LiveChild::ours(o.stamp().unwrap(), "f1")))
        .collect();
    Observed {
        generation: Some(1),
        status: crate::api::KuraGatewayStatus {
            applied_revision: Some(d.revision.clone()),
            inventory,
            ..Default::default()
        },
        managed: true,
        children,
        ..Default::default()
    }
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn decide(o: &Observed, d: &Desired, user: Option<&str>) -> Plan {
    plan(o, Ok(d), user, &RetryPolicy::default(), now())
}

fn id(d: &Desired, kind: ChildKind) -> ObjectId {
    d.objects
        .iter()
        .find(|o| o.id.kind == kind)
        .unwrap()
        .id
        .clone()
}

fn sent(p: &Plan) -> Vec<ChildKind> {
    match p {
        Plan::Apply { apply, .. } => apply.iter().map(|op| op.id.kind).collect(),
        other => panic!("expected Apply, got {other:?}"),
    }
}

#[test]
fn a_converged_gateway_in_use_does_nothing() {
    let d = desired();
    assert_eq!(
        decide(&converged(&d), &d, Some("KuraInstance a")),
        Plan::Converged
    );
}

#[test]
fn the_operators_gateway_that_nothing_uses_is_collected_whatever_its_state() {
    let d = desired();
    assert_eq!(decide(&converged(&d), &d, None), Plan::Collect);
    let fresh = Observed {
        managed: true,
        ..Default::default()
    };
    assert_eq!(decide(&fresh, &d, None), Plan::Collect);
    let invalid = ValidationErrors(vec![FieldError::new("spec.ingressClassName", "x")]);
    assert_eq!(
        plan(&fresh, Err(&invalid), None, &RetryPolicy::default(), now()),
        Plan::Collect
    );
}

#[test]
fn a_hand_made_gateway_is_never_collected_and_is_served() {
    let d = desired();
    let mut o = converged(&d);
    o.managed = false;
    assert_eq!(decide(&o, &d, None), Plan::Converged);
    // Never applied: served all the same.
    let fresh = Observed::default();
    assert_eq!(sent(&decide(&fresh, &d, None)).len(), d.objects.len());
}

#[test]
fn an_invalid_gateway_in_use_applies_nothing() {
    let invalid = ValidationErrors(vec![FieldError::new("spec.ingressClassName", "x")]);
    let o = Observed {
        managed: true,
        ..Default::default()
    };
    assert_eq!(
        plan(
            &o,
            Err(&invalid),
            Some("KuraInstance a"),
            &RetryPolicy::default(),
            now()
        ),
        Plan::Invalid(invalid.clone())
    );
}

#[test]
fn a_class_of_the_name_that_is_not_the_gateways_is_a_conflict_and_nothing_is_sent() {
    let d = desired();
    let mut o = converged(&d);
    o.children
        .get_mut(&id(&d, ChildKind::IngressClass))
        .unwrap()
        .owner = Owner::Foreign("belongs to another KuraGateway (uid u-2)".into());
    match decide(&o, &d, Some("KuraInstance a")) {
        Plan::NameConflict(c) => assert!(c[0].contains("uid u-2"), "{c:?}"),
        other => panic!("expected NameConflict, got {other:?}"),
    }
}

/// Drift, one child at a time: only that child is sent.
#[test]
fn each_kind_of_drift_sends_that_child_only() {
    let d = desired();
    let deployment = id(&d, ChildKind::Deployment);
    let service = id(&d, ChildKind::Service);
    let class = id(&d, ChildKind::IngressClass);
    type Edit<'a> = Box<dyn Fn(&mut Observed) + 'a>;
    let cases: Vec<(&str, Edit, ChildKind, &str)> = vec![
        (
            "scaled or re-imaged by another manager",
            Box::new(|o| {
                let live = o.children.get_mut(&deployment).unwrap();
                live.owned_fields = Some("f2".into());
                live.other_managers = vec!["kubectl".into()];
            }),
            ChildKind::Deployment,
            "field-drift",
        ),
        (
            "Service deleted",
            Box::new(|o| {
                o.children.remove(&service);
            }),
            ChildKind::Service,
            "missing",
        ),
        (
            "IngressClass deleted",
            Box::new(|o| {
                o.children.remove(&class);
            }),
            ChildKind::IngressClass,
            "missing",
        ),
        (
            "another revision on the Service",
            Box::new(|o| {
                o.children.get_mut(&service).unwrap().revision = Some("old".into());
            }),
            ChildKind::Service,
            "child-revision",
        ),
    ];
    for (case, edit, kind, label) in cases {
        let mut o = converged(&d);
        edit(&mut o);
        let p = decide(&o, &d, Some("KuraInstance a"));
        assert_eq!(sent(&p), vec![kind], "{case}");
        let Plan::Apply { reasons, apply, .. } = p else {
            unreachable!()
        };
        assert_eq!(
            reasons.iter().map(|r| r.label()).collect::<Vec<_>>(),
            [label],
            "{case}"
        );
        assert_eq!(
            apply[0].create,
            label == "missing",
            "{case}: create only what is missing"
        );
    }
}

#[test]
fn a_first_apply_sends_everything_and_says_initial_only() {
    let d = desired();
    let o = Observed::default();
    let p = decide(&o, &d, Some("KuraInstance a"));
    assert_eq!(sent(&p).len(), d.objects.len());
    let Plan::Apply { reasons, .. } = p else {
        unreachable!()
    };
    assert_eq!(reasons, vec![ApplyReason::Initial]);
}

#[test]
fn a_legacy_class_is_adopted_and_children_of_the_old_manager_are_moved() {
    let d = desired();
    let mut o = converged(&d);
    let class = id(&d, ChildKind::IngressClass);
    let deployment = id(&d, ChildKind::Deployment);
    o.children.get_mut(&class).unwrap().owner = Owner::Adopt;
    o.old_manager.insert(deployment.clone());
    let p = decide(&o, &d, Some("KuraInstance a"));
    let Plan::Apply {
        apply,
        release,
        reasons,
    } = p
    else {
        panic!("expected Apply")
    };
    let sent: BTreeSet<_> = apply.iter().map(|op| op.id.clone()).collect();
    assert_eq!(sent, BTreeSet::from([class.clone(), deployment.clone()]));
    assert_eq!(release, vec![deployment]);
    assert_eq!(
        reasons.iter().map(|r| r.label()).collect::<Vec<_>>(),
        ["adopt"]
    );
}

#[test]
fn right_after_an_apply_what_the_caches_do_not_show_yet_settles() {
    let d = desired();
    let mut o = converged(&d);
    o.children.remove(&id(&d, ChildKind::Service));
    o.just_applied = true;
    assert_eq!(decide(&o, &d, Some("KuraInstance a")), Plan::Settling);
}

#[test]
fn a_rejected_apply_backs_off_then_stalls_and_new_inputs_try_at_once() {
    let d = desired();
    let mut o = converged(&d);
    o.children.remove(&id(&d, ChildKind::Service));
    let policy = RetryPolicy::default();
    let failed = |failures: i64, key: &str| RetryStatus {
        failures,
        inputs_key: key.into(),
        last_error: "rejected".into(),
        last_failure_time: "2026-01-01T00:09:58Z".into(),
    };
    let key = inputs_key(&d.revision, None);
    o.status.retry = Some(failed(1, &key));
    assert!(matches!(decide(&o, &d, Some("i")), Plan::Backoff { .. }));
    o.status.retry = Some(failed(i64::from(policy.budget), &key));
    assert!(matches!(decide(&o, &d, Some("i")), Plan::Stalled { .. }));
    o.status.retry = Some(failed(9, "another-revision/"));
    assert!(matches!(decide(&o, &d, Some("i")), Plan::Apply { .. }));
    // Waited long enough: tried again.
    o.status.retry = Some(failed(1, &key));
    let later = now() + Duration::from_secs(60);
    assert!(matches!(
        plan(&o, Ok(&d), Some("i"), &policy, later),
        Plan::Apply { .. }
    ));
}

/// An autoscaler (or `kubectl scale`) on the gateway's Deployment is taken
/// back at most `MAX_TAKE_BACKS` times a window, then held and named, as an
/// instance's StatefulSet is (issue 22, item 8).
#[test]
fn a_contested_field_is_held_once_the_windows_take_backs_are_spent() {
    use crate::plan::{CONFLICT_WINDOW, MAX_TAKE_BACKS};
    let d = desired();
    let deployment = id(&d, ChildKind::Deployment);
    let scaled = |take_backs: i64, since: &str| {
        let mut o = converged(&d);
        let live = o.children.get_mut(&deployment).unwrap();
        live.owned_fields = Some("f2".into());
        live.other_managers = vec!["hpa".into()];
        o.status.conflict = Some(crate::api::ConflictStatus {
            take_backs,
            window_start: since.into(),
            managers: vec!["hpa".into()],
        });
        o
    };
    let window_start = "2026-01-01T00:09:30Z";
    // Take-backs left in the window: taken back.
    let o = scaled(MAX_TAKE_BACKS - 1, window_start);
    assert_eq!(
        sent(&decide(&o, &d, Some("KuraInstance a"))),
        [ChildKind::Deployment]
    );
    // Spent: held until the window ends, naming the other manager.
    let o = scaled(MAX_TAKE_BACKS, window_start);
    let end = crate::time::later(window_start.parse().unwrap(), CONFLICT_WINDOW);
    assert_eq!(
        decide(&o, &d, Some("KuraInstance a")),
        Plan::ConflictHold {
            at: end,
            managers: vec!["hpa".into()]
        }
    );
    // The window over: taken back again.
    let o = scaled(MAX_TAKE_BACKS, "2026-01-01T00:09:00Z");
    assert_eq!(
        sent(&decide(&o, &d, Some("KuraInstance a"))),
        [ChildKind::Deployment]
    );
    // Something else to send besides: it goes, the contested field with it.
    let mut o = scaled(MAX_TAKE_BACKS, window_start);
    o.children.remove(&id(&d, ChildKind::Service));
    assert_eq!(
        sent(&decide(&o, &d, Some("KuraInstance a"))),
        [ChildKind::Deployment, ChildKind::Service]
    );
}
