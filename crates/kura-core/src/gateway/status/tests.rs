//! Gateway status and Events, computed from outcomes.

use jiff::Timestamp;

use super::*;
use crate::outcome::Stage;
use crate::render::gateway::render_gateway;
use crate::validate::FieldError;

fn desired() -> Desired {
    render_gateway(&crate::gateway::plan::tests::gateway(), &Default::default())
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn compute_for(
    observed: &Observed,
    d: &Desired,
    outcome: &Outcome,
    user: Option<&str>,
) -> KuraGatewayStatus {
    compute(&StatusInputs {
        observed,
        desired: Some(d),
        outcome,
        user,
        policy: &RetryPolicy::default(),
        now: now(),
    })
}

fn cond<'a>(s: &'a KuraGatewayStatus, t: &str) -> &'a Condition {
    find(&s.conditions, t).unwrap_or_else(|| panic!("no {t} in {:?}", s.conditions))
}

#[test]
fn an_apply_records_revision_and_inventory_and_says_ready() {
    let d = desired();
    let observed = Observed {
        managed: true,
        ..Default::default()
    };
    let outcome = Outcome::Applied {
        reasons: vec![ApplyReason::Initial],
        sent: vec!["Service ns/gw-acme".into()],
        released: vec![],
        inventory: d.inventory(),
    };
    let s = compute_for(&observed, &d, &outcome, Some("KuraInstance a"));
    assert_eq!(s.applied_revision.as_deref(), Some(d.revision.as_str()));
    // Its class, ServiceAccount, RoleBinding, ClusterRoleBinding, Deployment, Service.
    assert_eq!(s.inventory.len(), 6);
    assert_eq!(cond(&s, READY).status, ConditionStatus::True);
    assert!(cond(&s, READY).message.contains("kura-gw.ns.gw-acme"));
    assert_eq!(cond(&s, MANAGED).status, ConditionStatus::True);
    assert_eq!(cond(&s, IN_USE).message, "used by KuraInstance a");
    let events = notes_for(&observed.status, &s, &outcome);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "Applied");
}

#[test]
fn the_same_state_computed_again_writes_nothing() {
    let d = desired();
    let observed = Observed::default();
    let first = compute_for(&observed, &d, &Outcome::Converged, Some("KuraInstance a"));
    let again = Observed {
        status: first.clone(),
        ..Default::default()
    };
    let second = compute_for(&again, &d, &Outcome::Converged, Some("KuraInstance a"));
    assert!(!crate::status::worth_writing(&first, &second, None));
}

#[test]
fn a_hand_made_gateway_says_it_is_never_collected() {
    let d = desired();
    let s = compute_for(&Observed::default(), &d, &Outcome::Converged, None);
    let managed = cond(&s, MANAGED);
    assert_eq!(managed.status, ConditionStatus::False);
    assert!(managed.message.contains("never collected"));
    assert_eq!(cond(&s, IN_USE).status, ConditionStatus::False);
}

#[test]
fn an_invalid_spec_is_reported_once_naming_the_field() {
    let d = desired();
    let errors = ValidationErrors(vec![FieldError::new(
        "spec.ingressClassName",
        "not this gateway's class",
    )]);
    let outcome = Outcome::Invalid(errors);
    let observed = Observed::default();
    let s = compute_for(&observed, &d, &outcome, None);
    assert_eq!(cond(&s, VALID).status, ConditionStatus::False);
    assert!(
        cond(&s, VALID)
            .message
            .starts_with("spec.ingressClassName: ")
    );
    assert_eq!(cond(&s, READY).status, ConditionStatus::False);
    let events = notes_for(&observed.status, &s, &outcome);
    assert_eq!(events[0].reason, "InvalidSpec");
    assert!(
        notes_for(&s, &s, &outcome).is_empty(),
        "not again while unchanged"
    );
}

#[test]
fn a_rejected_apply_counts_against_the_budget_and_a_name_conflict_stalls() {
    let d = desired();
    let failure = Failure {
        stage: Stage::Apply,
        class: FailureClass::Rejected,
        object: "Deployment ns/gw-acme".into(),
        verb: "apply",
        code: Some(422),
        message: "invalid".into(),
    };
    let outcome = Outcome::ApplyFailed {
        reasons: vec![],
        failure,
    };
    let s = compute_for(&Observed::default(), &d, &outcome, Some("i"));
    assert_eq!(s.retry.as_ref().unwrap().failures, 1);
    assert_eq!(cond(&s, STALLED).status, ConditionStatus::False);
    assert_eq!(cond(&s, RECONCILING).status, ConditionStatus::True);
    let conflict = Outcome::NameConflict(vec![
        "IngressClass x exists and belongs to another KuraGateway".into(),
    ]);
    let s = compute_for(&Observed::default(), &d, &conflict, Some("i"));
    assert_eq!(cond(&s, STALLED).status, ConditionStatus::True);
    assert_eq!(cond(&s, READY).reason, "NameConflict");
    let events = notes_for(&KuraGatewayStatus::default(), &s, &conflict);
    assert_eq!(events[0].reason, "NameConflict");
}

/// An apply refused for a name someone else's object holds stalls at once,
/// for a gateway as for an instance (`outcome_tables`): retrying cannot help
/// until someone acts on the other object.
#[test]
fn a_name_conflict_at_apply_stalls_at_once_as_an_instances_does() {
    let d = desired();
    let failure = Failure {
        stage: Stage::Apply,
        class: FailureClass::NameConflict,
        object: "RoleBinding ns/gw-acme".into(),
        verb: "create",
        code: Some(409),
        message: "RoleBinding ns/gw-acme exists and is not this gateway's".into(),
    };
    let outcome = Outcome::ApplyFailed {
        reasons: vec![],
        failure,
    };
    let s = compute_for(&Observed::default(), &d, &outcome, Some("i"));
    assert_eq!(
        s.retry.as_ref().unwrap().failures,
        i64::from(RetryPolicy::default().budget)
    );
    assert_eq!(cond(&s, STALLED).status, ConditionStatus::True);
    assert_eq!(cond(&s, STALLED).reason, "NameConflict");
}

#[test]
fn a_move_to_the_gateways_field_manager_is_on_record() {
    let d = desired();
    let outcome = Outcome::Applied {
        reasons: vec![],
        sent: vec!["Deployment ns/gw-acme".into()],
        released: vec!["Deployment ns/gw-acme".into()],
        inventory: d.inventory(),
    };
    let observed = Observed::default();
    let s = compute_for(&observed, &d, &outcome, Some("i"));
    let events = notes_for(&observed.status, &s, &outcome);
    assert!(events.iter().any(|e| e.reason == "FieldManagerMigrated"
        && e.note.contains("kura-operator-gateway")));
}

/// Each take-back is counted in the window and on record (an Event naming
/// the other manager); from the second, a FieldConflict condition names it;
/// a hold keeps everything else as it was.
#[test]
fn take_backs_are_counted_named_and_reported() {
    use crate::api::conditions::FIELD_CONFLICT;
    let d = desired();
    let scale = "kubectl (scale subresource)".to_string();
    let taken = ApplyReason::FieldDrift("Deployment ns/gw-acme".into(), vec![scale.clone()]);
    let mut observed = Observed {
        managed: true,
        ..Default::default()
    };
    observed.status = compute_for(&observed, &d, &Outcome::Converged, Some("KuraInstance a"));
    for n in 1..=3 {
        let outcome = Outcome::Applied {
            reasons: vec![taken.clone()],
            sent: vec!["Deployment ns/gw-acme".into()],
            released: vec![],
            inventory: d.inventory(),
        };
        let s = compute_for(&observed, &d, &outcome, Some("KuraInstance a"));
        let record = s.conflict.clone().unwrap();
        assert_eq!(
            (record.take_backs, &record.managers),
            (n, &vec![scale.clone()])
        );
        assert_eq!(record.window_start, now().to_string());
        let events = notes_for(&observed.status, &s, &outcome);
        assert!(
            events
                .iter()
                .any(|e| e.reason == "FieldConflict" && e.note.contains(&scale)),
            "a FieldConflict Event naming {scale} after take-back {n}"
        );
        assert_eq!(find(&s.conditions, FIELD_CONFLICT).is_some(), n >= 2);
        assert_eq!(cond(&s, READY).status, ConditionStatus::True);
        observed.status = s;
    }
    let message = cond(&observed.status, FIELD_CONFLICT).message.clone();
    assert!(
        message.contains(&scale) && message.contains("stand until"),
        "{message}"
    );
    let hold = Outcome::ConflictHold {
        managers: vec![scale.clone()],
    };
    let held = compute_for(&observed, &d, &hold, Some("KuraInstance a"));
    assert_eq!(held, observed.status, "a hold changes nothing");
    assert!(notes_for(&observed.status, &held, &hold).is_empty());
}

/// Item 2 of issue 23 (docs/incidents.md #1): an applied gateway whose pod
/// the scheduler cannot place is not Ready, naming the gateway, the pod and
/// the scheduler's message, and says it once in a Warning; placed again, it
/// is Ready. Without the pod cache's report it said Ready ("serves ingress
/// class …") with its only pod Pending.
#[test]
fn a_pod_the_scheduler_cannot_place_makes_the_gateway_not_ready_naming_it_once() {
    let d = desired();
    let reason =
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.";
    let stuck = Observed {
        name: "gw-acme".into(),
        managed: true,
        unschedulable: vec![crate::gateway::pods::Unschedulable {
            pod: "gw-acme-5d8f-x2x".into(),
            reason: reason.into(),
        }],
        ..Default::default()
    };
    let s = compute_for(&stuck, &d, &Outcome::Converged, Some("KuraInstance a"));
    let ready = cond(&s, READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, POD_UNSCHEDULABLE);
    for part in ["gateway gw-acme", "pod gw-acme-5d8f-x2x", reason] {
        assert!(
            ready.message.contains(part),
            "{part:?} in {:?}",
            ready.message
        );
    }
    let notes = notes_for(&stuck.status, &s, &Outcome::Converged);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].reason, POD_UNSCHEDULABLE);
    assert_eq!(notes[0].note, ready.message);
    // Said once: the same state again is no news.
    let again = Observed {
        status: s.clone(),
        ..stuck.clone()
    };
    let s2 = compute_for(&again, &d, &Outcome::Converged, Some("KuraInstance a"));
    assert!(notes_for(&s, &s2, &Outcome::Converged).is_empty());
    // Placed: Ready again.
    let placed = Observed {
        status: s2,
        unschedulable: vec![],
        ..stuck
    };
    let s3 = compute_for(&placed, &d, &Outcome::Converged, Some("KuraInstance a"));
    assert_eq!(cond(&s3, READY).status, ConditionStatus::True);
}
