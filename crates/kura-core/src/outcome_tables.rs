//! `status::compute` and `events::notes_for` as tables: one outcome in, the status
//! and the Events out, with nothing but values.

use jiff::Timestamp;

use crate::api::conditions::{ACTIVE, FIELD_CONFLICT, READY, RECONCILING, STALLED, find};
use crate::api::{Condition, ConditionStatus, KuraInstanceStatus, Phase, RetryStatus};
use crate::events::{Note, notes_for};
use crate::outcome::Activation;
use crate::outcome::Failure;
use crate::outcome::FailureClass;
use crate::outcome::Outcome;
use crate::outcome::PruneOutcome;
use crate::outcome::Stage;
use crate::outcome::TransientStreak;
use crate::plan::fixtures::{converged, desired};
use crate::plan::{ApplyReason, Observed, RetryPolicy};
use crate::render::Desired;
use crate::render::ObjectId;
use crate::status::*;
use crate::validate::FieldError;

/// A user's change (generation moved), under operator revision "f".
const ROLLOUT: RolloutInputs = RolloutInputs {
    origin: crate::rollout::Origin::User,
    fleet_revision: "f",
    deadline: std::time::Duration::from_secs(600),
    uncounted: false,
    gate: &crate::window::Gate::Open,
};

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn failure(stage: Stage, class: FailureClass) -> Failure {
    Failure {
        stage,
        class,
        object: "StatefulSet ns/a".into(),
        verb: "apply",
        code: Some(500),
        message: "failed calling webhook \"x\" (500)".into(),
    }
}

/// The status after `outcome`, from an instance converged on r1 that now
/// desires r2 (with `force` as its token).
fn after(
    outcome: &Outcome,
    force: Option<&str>,
    activation: Option<&Activation>,
) -> (KuraInstanceStatus, KuraInstanceStatus) {
    let d = desired("r2", "img:2");
    let mut observed = converged(&desired("r1", "img:1"), Phase::Ready);
    observed.force_token = force.map(String::from);
    observed.status.conditions = vec![Condition::new(
        READY,
        ConditionStatus::True,
        "Active",
        "revision r1 is active",
    )];
    let prev = observed.status.clone();
    let s = compute(&StatusInputs {
        observed: &observed,
        desired: Some(&d),
        gateway: None,
        outcome,
        activation,
        pending_storage: None,
        rollout: ROLLOUT,
        pause: None,
        policy: &RetryPolicy::default(),
        now: now(),
    });
    (prev, s)
}

/// The status after `outcome` at `now()`, without activation.
fn compute_at(observed: &Observed, desired: &Desired, outcome: &Outcome) -> KuraInstanceStatus {
    compute(&StatusInputs {
        observed,
        desired: Some(desired),
        gateway: None,
        outcome,
        activation: None,
        pending_storage: None,
        rollout: ROLLOUT,
        pause: None,
        policy: &RetryPolicy::default(),
        now: now(),
    })
}

fn ready(s: &KuraInstanceStatus) -> (ConditionStatus, String, String) {
    let c = find(&s.conditions, READY).expect("a Ready condition");
    (c.status, c.reason.clone(), c.message.clone())
}

fn reasons_of(events: &[Note]) -> Vec<String> {
    events.iter().map(|e| e.reason.clone()).collect()
}

fn applied(pruned: PruneOutcome) -> Outcome {
    let d = desired("r2", "img:2");
    Outcome::Applied {
        reasons: vec![ApplyReason::ManifestDrift],
        sent: vec!["StatefulSet ns/a".into()],
        inventory: d.inventory(),
        pruned,
        streak: None,
        held: None,
    }
}

#[test]
fn an_apply_that_became_active_is_ready_on_the_new_revision() {
    let active = Activation::Active {
        endpoint: "http://a/".into(),
    };
    let (prev, s) = after(&applied(PruneOutcome::default()), Some("t1"), Some(&active));
    assert_eq!(s.phase, Some(Phase::Ready));
    assert_eq!(s.applied_revision.as_deref(), Some("r2"));
    assert_eq!(s.last_handled_reapply_at.as_deref(), Some("t1"));
    assert_eq!(s.retry, None);
    assert_eq!(ready(&s).0, ConditionStatus::True);
    let events = notes_for(&prev, &s, &applied(PruneOutcome::default()));
    assert_eq!(reasons_of(&events), ["Applied", "ForcedReapply"]);
    assert!(
        events[0].note.contains("StatefulSet ns/a"),
        "the Applied Event names what was sent"
    );
}

#[test]
fn an_apply_still_activating_says_what_it_waits_for() {
    let waiting = Activation::Waiting {
        reason: "IngressNoAddress",
        message: "ingress a has no address".into(),
    };
    let (_, s) = after(&applied(PruneOutcome::default()), None, Some(&waiting));
    assert_eq!(s.phase, Some(Phase::Activating));
    assert_eq!(
        ready(&s),
        (
            ConditionStatus::False,
            "IngressNoAddress".into(),
            "ingress a has no address".into()
        )
    );
}

#[test]
fn a_refused_prune_keeps_the_revision_applied_and_the_object_inventoried_and_is_reported() {
    let left = ObjectId {
        kind: crate::kind::ChildKind::Ingress,
        namespace: Some("ns".into()),
        name: "a.1234abcd".into(),
    };
    let d = desired("r2", "img:2");
    let mut inventory = d.inventory();
    inventory.push(left.inventory_entry("h".into(), None));
    let pruned = PruneOutcome {
        remaining: vec![left],
        failure: Some(Failure {
            verb: "delete",
            object: "Ingress ns/a.1234abcd".into(),
            code: Some(403),
            message: "denied by policy (403)".into(),
            ..failure(Stage::Prune, FailureClass::Rejected)
        }),
        ..PruneOutcome::default()
    };
    let outcome = Outcome::Applied {
        reasons: vec![ApplyReason::ManifestDrift],
        sent: vec![],
        inventory,
        pruned,
        streak: None,
        held: None,
    };
    let (prev, s) = after(&outcome, None, None);
    assert_eq!(s.applied_revision.as_deref(), Some("r2"));
    assert!(s.inventory.iter().any(|e| e.name == "a.1234abcd"));
    let (status, reason, message) = ready(&s);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "PruneFailed")
    );
    assert!(
        message.contains("delete Ingress ns/a.1234abcd"),
        "{message}"
    );
    assert_eq!(s.retry.as_ref().unwrap().failures, 1);
    assert!(reasons_of(&notes_for(&prev, &s, &outcome)).contains(&"PruneFailed".to_string()));
}

#[test]
fn a_rejected_apply_counts_against_the_budget_of_its_inputs_and_stalls_at_the_end() {
    let outcome = Outcome::ApplyFailed {
        reasons: vec![ApplyReason::Forced],
        failure: failure(Stage::Apply, FailureClass::Rejected),
        streak: None,
    };
    let (prev, s) = after(&outcome, Some("t1"), None);
    assert_eq!(s.phase, Some(Phase::Retrying));
    let retry = s.retry.clone().unwrap();
    assert_eq!((retry.failures, retry.inputs_key.as_str()), (1, "r2/t1"));
    // A force whose apply failed is not handled.
    assert_eq!(s.last_handled_reapply_at, None);
    assert_eq!(ready(&s).1, "ApplyFailed");
    assert_eq!(reasons_of(&notes_for(&prev, &s, &outcome)), ["ApplyFailed"]);
    // The same failure again: counted, but no new Event for the same message.
    let mut observed = converged(&desired("r1", "img:1"), Phase::Retrying);
    observed.status = s.clone();
    observed.force_token = Some("t1".into());
    for _ in 0..4 {
        let next = compute_at(&observed, &desired("r2", "img:2"), &outcome);
        let events = reasons_of(&notes_for(&observed.status, &next, &outcome));
        observed.status = next;
        assert!(!events.contains(&"ApplyFailed".to_string()), "{events:?}");
    }
    assert_eq!(observed.status.phase, Some(Phase::Stalled));
    assert_eq!(observed.status.retry.as_ref().unwrap().failures, 5);
}

#[test]
fn a_failure_of_new_inputs_starts_its_own_count() {
    let outcome = Outcome::ApplyFailed {
        reasons: vec![ApplyReason::ManifestDrift],
        failure: failure(Stage::Apply, FailureClass::Rejected),
        streak: None,
    };
    let d = desired("r2", "img:2");
    let mut observed = converged(&desired("r1", "img:1"), Phase::Stalled);
    observed.status.retry = Some(RetryStatus {
        failures: 4,
        inputs_key: "r1/".into(),
        last_error: "old".into(),
        last_failure_time: now().to_string(),
    });
    let s = compute_at(&observed, &d, &outcome);
    assert_eq!(s.retry.unwrap().failures, 1);
}

#[test]
fn transient_failures_reported_after_a_while_never_stall_and_keep_a_stable_message() {
    // The first failure of a streak on these inputs, as the operator's memory
    // starts one.
    let streak = TransientStreak::start("r2/", now());
    let outcome = Outcome::ApplyFailed {
        reasons: vec![ApplyReason::ManifestDrift],
        failure: failure(Stage::Apply, FailureClass::Transient),
        streak: Some(streak),
    };
    let (prev, s) = after(&outcome, None, None);
    assert_eq!(s.phase, Some(Phase::Retrying));
    assert_eq!(s.retry, prev.retry, "transient failures spend no budget");
    let reconciling = find(&s.conditions, RECONCILING).unwrap();
    assert_eq!(reconciling.reason, "TransientFailure");
    assert!(
        reconciling
            .message
            .contains("failing since 2026-01-01T00:10:00Z")
    );
    assert!(ready(&s).2.contains("webhook"));
    assert_eq!(reasons_of(&notes_for(&prev, &s, &outcome)), ["ApplyFailed"]);
}

#[test]
fn a_name_conflict_stalls_at_once_and_is_announced_once() {
    let outcome = Outcome::ApplyFailed {
        reasons: vec![ApplyReason::Initial],
        failure: Failure {
            verb: "create",
            message: "ConfigMap ns/a-config exists and was not created by this instance".into(),
            ..failure(Stage::Apply, FailureClass::NameConflict)
        },
        streak: None,
    };
    let (prev, s) = after(&outcome, None, None);
    assert_eq!(s.phase, Some(Phase::Stalled));
    assert_eq!(ready(&s).1, "NameConflict");
    assert_eq!(s.retry.as_ref().unwrap().failures, 5);
    let events = reasons_of(&notes_for(&prev, &s, &outcome));
    assert!(events.contains(&"NameConflict".to_string()), "{events:?}");

    // Found in the caches (someone else's labelled object): the same report.
    let cached = Outcome::NameConflict(vec![
        "Service ns/a exists and is controlled by KuraInstance b".into(),
    ]);
    let (prev, s) = after(&cached, None, None);
    assert_eq!(s.phase, Some(Phase::Stalled));
    assert_eq!(ready(&s).1, "NameConflict");
    assert!(ready(&s).2.contains("KuraInstance b"));
    assert_eq!(reasons_of(&notes_for(&prev, &s, &cached)), ["NameConflict"]);
    assert!(notes_for(&s, &s, &cached).is_empty(), "announced once");
}

#[test]
fn a_child_being_deleted_is_waited_for_reported_once_and_never_stalls() {
    let outcome = Outcome::ChildTerminating(vec![
        "ConfigMap ns/a-config is being deleted, held by finalizers example.com/hold".into(),
    ]);
    let (mut prev, s) = after(&outcome, None, None);
    assert_eq!(s.phase, Some(Phase::Applying));
    let (status, reason, message) = ready(&s);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "ChildTerminating")
    );
    assert!(
        message.contains("ConfigMap ns/a-config") && message.contains("example.com/hold"),
        "{message}"
    );
    let reconciling = find(&s.conditions, RECONCILING).unwrap();
    assert_eq!(reconciling.status, ConditionStatus::True);
    assert_eq!(reconciling.reason, "ChildTerminating");
    let stalled = find(&s.conditions, STALLED).unwrap();
    assert_eq!(stalled.status, ConditionStatus::False);
    // Nothing was applied: the records of the last apply stand.
    assert_eq!(s.applied_revision, prev.applied_revision);
    assert_eq!(s.inventory, prev.inventory);
    assert_eq!(s.retry, None);
    assert_eq!(
        reasons_of(&notes_for(&prev, &s, &outcome)),
        ["ChildTerminating"]
    );
    // The next pass while it hangs: the same status (no write), no Event.
    let again = compute_at(
        &Observed {
            status: s.clone(),
            ..converged(&desired("r1", "img:1"), Phase::Ready)
        },
        &desired("r2", "img:2"),
        &outcome,
    );
    assert_eq!(again, s);
    assert!(!worth_writing(&s, &again, None));
    assert!(notes_for(&s, &again, &outcome).is_empty(), "announced once");
    // The Active condition (the workload may serve meanwhile) is kept.
    prev.conditions
        .push(Condition::new(ACTIVE, ConditionStatus::True, "Active", ""));
    let kept = compute_at(
        &Observed {
            status: prev,
            ..converged(&desired("r1", "img:1"), Phase::Ready)
        },
        &desired("r2", "img:2"),
        &outcome,
    );
    assert!(find(&kept.conditions, ACTIVE).is_some_and(|c| c.status == ConditionStatus::True));
}

#[test]
fn invalid_paused_and_waiting_say_so_and_touch_nothing_else() {
    let errors = crate::validate::ValidationErrors(vec![FieldError::new("spec.region", "unknown")]);
    let invalid = Outcome::Invalid(errors);
    let (prev, s) = after(&invalid, None, None);
    assert_eq!(s.phase, Some(Phase::Invalid));
    assert_eq!(s.applied_revision, prev.applied_revision);
    assert_eq!(ready(&s).1, "InvalidSpec");
    assert_eq!(reasons_of(&notes_for(&prev, &s, &invalid)), ["InvalidSpec"]);

    // Paused: no Ready verdict, nothing in progress, nothing stalled.
    let (_, s) = after(&Outcome::Paused, None, None);
    assert_eq!(s.phase, Some(Phase::Paused));
    assert_eq!(find(&s.conditions, READY), None);
    for t in [RECONCILING, STALLED] {
        let c = find(&s.conditions, t).expect(t);
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "Paused")
        );
    }

    let waiting = Outcome::Waiting { stalled: true };
    let (prev, s) = after(&waiting, None, None);
    assert_eq!(s.conditions, prev.conditions);
    assert_eq!(s.retry, prev.retry);
    assert!(notes_for(&prev, &s, &waiting).is_empty());
}

#[test]
fn take_backs_of_contested_values_are_counted_and_reported_from_the_second() {
    let contested = Outcome::Applied {
        reasons: vec![ApplyReason::ImageDrift(vec!["kubectl-set".into()])],
        sent: vec!["StatefulSet ns/a".into()],
        inventory: desired("r2", "img:2").inventory(),
        pruned: PruneOutcome::default(),
        streak: None,
        held: None,
    };
    let (_, first) = after(&contested, None, None);
    assert_eq!(first.conflict.as_ref().unwrap().take_backs, 1);
    assert!(find(&first.conditions, FIELD_CONFLICT).is_none());
    let mut observed = converged(&desired("r2", "img:2"), Phase::Ready);
    observed.status = first;
    let second = compute_at(&observed, &desired("r2", "img:2"), &contested);
    let c = find(&second.conditions, FIELD_CONFLICT).expect("reported at two");
    assert!(c.message.contains("kubectl-set"), "{}", c.message);
    let events = reasons_of(&notes_for(&observed.status, &second, &contested));
    assert!(events.contains(&"FieldConflict".to_string()));
}

#[test]
fn the_same_state_later_is_the_same_status_and_is_not_written() {
    let active = Activation::Active {
        endpoint: "http://a/".into(),
    };
    let d = desired("r1", "img:1");
    let mut observed = converged(&d, Phase::Ready);
    let at = |observed: &Observed, t: &str| -> KuraInstanceStatus {
        compute(&StatusInputs {
            observed,
            desired: Some(&d),
            gateway: None,
            outcome: &Outcome::Converged,
            activation: Some(&active),
            pending_storage: None,
            rollout: ROLLOUT,
            pause: None,
            policy: &RetryPolicy::default(),
            now: t.parse().unwrap(),
        })
    };
    observed.status = at(&observed, "2026-01-01T00:00:00Z");
    let later = at(&observed, "2026-01-01T05:00:00Z");
    assert_eq!(later, observed.status);
    assert!(!worth_writing(&observed.status, &later, None));
}

/// The status after `outcome` under an operator-originated change.
fn after_operator(
    observed: &Observed,
    outcome: &Outcome,
    activation: Option<&Activation>,
    at: Timestamp,
) -> KuraInstanceStatus {
    compute(&StatusInputs {
        observed,
        desired: Some(&desired("r2", "img:2")),
        gateway: None,
        outcome,
        activation,
        pending_storage: None,
        rollout: RolloutInputs {
            origin: crate::rollout::Origin::Operator,
            ..ROLLOUT
        },
        pause: None,
        policy: &RetryPolicy::default(),
        now: at,
    })
}

#[test]
fn an_instance_waits_for_the_budget_with_a_message_that_does_not_move() {
    let mut o = converged(&desired("r1", "img:1"), Phase::Ready);
    o.status.conditions = vec![Condition::new(READY, ConditionStatus::True, "Active", "")];
    let wait = |ahead| {
        Outcome::Held(crate::rollout::Admission::Wait {
            ahead,
            in_flight: vec![],
            budget: 3,
        })
    };
    let first = after_operator(&o, &wait(7), None, now());
    let record = first.rollout.clone().unwrap();
    assert_eq!(record.state, crate::api::RolloutState::Waiting);
    assert_eq!(
        ready(&first).0,
        ConditionStatus::True,
        "still Ready on the old revision"
    );
    let held = find(&first.conditions, crate::api::conditions::ROLLOUT_HELD).unwrap();
    assert_eq!(held.reason, "WaitingForBudget");
    // Later, further ahead in line: the same status, so nothing is written.
    o.status = first.clone();
    let later = after_operator(&o, &wait(2), None, "2026-01-01T00:20:00Z".parse().unwrap());
    assert_eq!(later, first);
    assert!(!worth_writing(&first, &later, None));
}

#[test]
fn an_admission_is_recorded_kept_through_the_apply_and_cleared_when_ready_again() {
    let mut o = converged(&desired("r1", "img:1"), Phase::Ready);
    o.generation = Some(3);
    o.status.conditions = vec![Condition::new(READY, ConditionStatus::True, "Active", "")];
    let admitted = after_operator(&o, &Outcome::Admitted, None, now());
    let record = admitted.rollout.clone().unwrap();
    assert_eq!(
        (record.state, record.was_ready, record.revision.as_str()),
        (crate::api::RolloutState::Admitted, true, "r2")
    );
    assert_eq!(
        admitted.applied_revision.as_deref(),
        Some("r1"),
        "nothing applied yet"
    );
    o.status = admitted;
    let progressing = Activation::Waiting {
        reason: "WorkloadProgressing",
        message: String::new(),
    };
    let apply = applied(PruneOutcome::default());
    let went = after_operator(&o, &apply, Some(&progressing), now());
    assert_eq!(went.rollout, Some(record.clone()));
    assert_eq!(went.applied_generation, Some(3));
    assert_eq!(went.applied_origin, Some(crate::rollout::Origin::Operator));
    // The fleet's Event says it (on the operator's Pod), not the instance.
    let events = notes_for(&o.status, &went, &apply);
    assert!(events.iter().all(|e| e.reason != "Applied"), "{events:?}");
    o.status = went;
    let active = Activation::Active {
        endpoint: "http://a/".into(),
    };
    let done = after_operator(&o, &Outcome::Converged, Some(&active), now());
    assert_eq!(done.rollout, None);
    // Admitted before, not after: the operator frees the budget's slot.
    assert_eq!(
        o.status.rollout.as_ref().map(|r| r.state),
        Some(crate::api::RolloutState::Admitted)
    );
}

/// Converged on r2 and activating, admitted to the budget for r2 at
/// 2026-01-01T00:00:00Z (its deadline ten minutes later).
fn admitted_at_midnight() -> Observed {
    let mut o = converged(&desired("r2", "img:2"), Phase::Activating);
    o.status.rollout = Some(crate::rollout::record(
        crate::api::RolloutState::Admitted,
        "f",
        "r2",
        true,
        "2026-01-01T00:00:00Z".parse().unwrap(),
    ));
    o
}

#[test]
fn an_admitted_instance_not_ready_by_the_deadline_reports_it_once() {
    let o = admitted_at_midnight();
    let progressing = Activation::Waiting {
        reason: "WorkloadUnavailable",
        message: "0/1".into(),
    };
    let before = after_operator(
        &o,
        &Outcome::Converged,
        Some(&progressing),
        "2026-01-01T00:09:00Z".parse().unwrap(),
    );
    assert!(find(&before.conditions, crate::api::conditions::ROLLOUT_FAILED).is_none());
    let failed = after_operator(
        &o,
        &Outcome::Converged,
        Some(&progressing),
        "2026-01-01T00:10:01Z".parse().unwrap(),
    );
    let c = find(&failed.conditions, crate::api::conditions::ROLLOUT_FAILED).unwrap();
    assert_eq!(c.reason, "ProgressDeadlineExceeded");
    assert_eq!(
        reasons_of(&notes_for(&before, &failed, &Outcome::Converged)),
        ["RolloutFailed"]
    );
    assert!(notes_for(&failed, &failed, &Outcome::Converged).is_empty());
}

/// The endpoint check (on by default) takes Ready away, not a rollout: an
/// admitted instance whose pods serve again on the revision has finished its
/// rollout though its endpoint does not answer (the record goes: it holds no
/// slot of the budget), and past the deadline it fails nothing. The same
/// record with the pods not serving fails (the negative control). So does an
/// endpoint whose first check is still running.
#[test]
fn an_endpoint_not_answering_ends_an_admitted_rollout_and_fails_nothing() {
    let o = admitted_at_midnight();
    let past_deadline: Timestamp = "2026-01-01T00:10:01Z".parse().unwrap();
    for (reason, message) in [
        (
            crate::outcome::ENDPOINT_NOT_ANSWERING,
            "ingress a: http://a/up via 127.0.0.1:80: connection refused",
        ),
        (
            crate::outcome::ENDPOINT_CHECKING,
            "ingress a: asking http://a/up via 127.0.0.1:80, no answer yet",
        ),
    ] {
        let waiting = Activation::Waiting {
            reason,
            message: message.into(),
        };
        let s = after_operator(&o, &Outcome::Converged, Some(&waiting), past_deadline);
        assert_eq!(s.rollout, None, "{reason}: the rollout is done");
        assert!(find(&s.conditions, crate::api::conditions::ROLLOUT_FAILED).is_none());
        assert_eq!(s.phase, Some(Phase::Activating));
        let (status, ready_reason, _) = ready(&s);
        assert_eq!(
            (status, ready_reason.as_str()),
            (ConditionStatus::False, reason)
        );
    }

    let unavailable = Activation::Waiting {
        reason: "WorkloadUnavailable",
        message: "0/1".into(),
    };
    let s = after_operator(&o, &Outcome::Converged, Some(&unavailable), past_deadline);
    assert!(s.rollout.is_some());
    assert!(find(&s.conditions, crate::api::conditions::ROLLOUT_FAILED).is_some());
}

#[test]
fn a_host_conflict_stalls_names_the_holder_once_and_keeps_what_was_applied() {
    use crate::claims::Claimant;
    use crate::claims::Conflict;
    use crate::claims::Lost;
    let conflict = Outcome::HostConflict(Conflict(vec![Lost {
        field: "spec.aliases[0]".into(),
        host: "shop.example".into(),
        holder: Claimant {
            namespace: "a".into(),
            name: "acme".into(),
            uid: "u".into(),
            created: Some(now()),
        },
        holder_serves: true,
        reserved_until: None,
        also_served_here: false,
    }]));
    let (prev, s) = after(&conflict, None, None);
    assert_eq!(s.phase, Some(Phase::Stalled));
    let (status, reason, message) = ready(&s);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "HostConflict")
    );
    for part in [
        "spec.aliases[0]",
        "\"shop.example\"",
        "a/acme",
        "nothing applied",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    let stalled = find(&s.conditions, STALLED).unwrap();
    assert_eq!(
        (stalled.status, stalled.reason.as_str()),
        (ConditionStatus::True, "HostConflict")
    );
    assert_eq!(
        (&s.applied_revision, &s.inventory, &s.retry),
        (&prev.applied_revision, &prev.inventory, &prev.retry),
        "what was applied stays recorded; nothing to retry"
    );
    assert_eq!(
        reasons_of(&notes_for(&prev, &s, &conflict)),
        ["HostConflict"]
    );
    // The same conflict ten minutes later: the same status (no write), no Event.
    let mut observed = converged(&desired("r1", "img:1"), Phase::Ready);
    observed.status = s.clone();
    let again = compute(&StatusInputs {
        observed: &observed,
        desired: Some(&desired("r2", "img:2")),
        gateway: None,
        outcome: &conflict,
        activation: None,
        pending_storage: None,
        rollout: ROLLOUT,
        pause: None,
        policy: &RetryPolicy::default(),
        now: now() + jiff::SignedDuration::from_secs(600),
    });
    assert_eq!(again, s);
    assert!(
        notes_for(&s, &again, &conflict).is_empty(),
        "announced once"
    );
}
