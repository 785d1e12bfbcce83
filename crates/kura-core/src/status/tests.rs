//! When a new status is worth a write: a new step at once, moving counts only
//! after `MESSAGE_REFRESH`, and then as a refresh the fleet rations.

use std::time::Duration;

use crate::api::conditions::READY;
use crate::api::{Condition, ConditionStatus, KuraInstanceStatus, Phase};
use crate::status::{MESSAGE_REFRESH, worth_writing};

fn waiting(reason: &str, message: &str) -> KuraInstanceStatus {
    KuraInstanceStatus {
        phase: Some(Phase::Activating),
        conditions: vec![Condition::new(
            READY,
            ConditionStatus::False,
            reason,
            message,
        )],
        ..Default::default()
    }
}

#[test]
fn a_progress_message_alone_waits_for_the_refresh_interval() {
    let prev = waiting("WorkloadUnavailable", "0/3 replicas available");
    let next = waiting("WorkloadUnavailable", "1/3 replicas available");
    let just_now = Some(Duration::from_secs(1));
    assert!(!worth_writing(&prev, &next, just_now));
    assert!(worth_writing(&prev, &next, Some(MESSAGE_REFRESH)));
    // Not written by this process yet: written.
    assert!(worth_writing(&prev, &next, None));
    // Nothing changed: never written.
    assert!(!worth_writing(&prev, &prev.clone(), None));
    // Once due, counts alone are a refresh, which the fleet rations
    // (`RefreshBudget`); not since this process started, the same.
    use crate::status::{Worth, worth};
    assert_eq!(worth(&prev, &next, just_now), Worth::Nothing);
    assert_eq!(worth(&prev, &next, Some(MESSAGE_REFRESH)), Worth::Refresh);
    assert_eq!(worth(&prev, &next, None), Worth::Refresh);
    // Another step is a write, however recent the last one.
    let step = waiting("IngressNoAddress", "0/3 replicas available");
    assert_eq!(worth(&prev, &step, just_now), Worth::Write);
    assert_eq!(worth(&prev, &step, None), Worth::Write);
}

#[test]
fn a_new_step_is_written_at_once_and_counts_wait() {
    let pods = |available: u32, updated: u32| {
        waiting(
            "WorkloadProgressing",
            &format!(
                "StatefulSet a: {available}/3 replicas available, {updated}/3 updated to revision 1a2b3c4d5e6f (image k:1.2)"
            ),
        )
    };
    let just_now = Some(Duration::from_secs(1));
    // From the apply to the pods' turn only counts move: they wait.
    assert!(!worth_writing(&pods(3, 0), &pods(0, 3), just_now));
    assert!(!worth_writing(&pods(0, 0), &pods(2, 3), just_now));
    assert!(worth_writing(
        &pods(0, 3),
        &pods(2, 3),
        Some(MESSAGE_REFRESH)
    ));
    // Another revision or image is another step, digits and all.
    let other = waiting(
        "WorkloadProgressing",
        "StatefulSet a: 0/3 replicas available, 0/3 updated to revision 9a2b3c4d5e6f (image k:1.2)",
    );
    assert!(worth_writing(&pods(0, 0), &other, just_now));
    let image = waiting(
        "WorkloadProgressing",
        "StatefulSet a: 0/3 replicas available, 3/3 updated to revision 1a2b3c4d5e6f (image k:1.3)",
    );
    assert!(worth_writing(&pods(0, 3), &image, just_now));
    // Words of another step (the workload went missing): written at once.
    let missing = waiting("WorkloadProgressing", "StatefulSet a does not exist");
    assert!(worth_writing(&pods(0, 3), &missing, just_now));
}

#[test]
fn counts_are_masked_and_nothing_else() {
    use crate::status::without_counts;
    assert_eq!(
        without_counts("a: 10/3 up, 3/3 updated to k:1/2 v2/3 r12 @1/"),
        "a: #/# up, #/# updated to k:1/2 v2/3 r12 @1/"
    );
    assert_eq!(without_counts(""), "");
}

#[test]
fn a_new_reason_status_or_phase_is_written_at_once() {
    let prev = waiting("WorkloadUnavailable", "0/3 replicas available");
    let just_now = Some(Duration::from_millis(10));
    let reason = waiting("IngressNoAddress", "0/3 replicas available");
    assert!(worth_writing(&prev, &reason, just_now));
    let mut ready = prev.clone();
    ready.conditions[0].status = ConditionStatus::True;
    assert!(worth_writing(&prev, &ready, just_now));
    let mut phase = prev.clone();
    phase.phase = Some(Phase::Ready);
    assert!(worth_writing(&prev, &phase, just_now));
    let mut revision = prev.clone();
    revision.applied_revision = Some("abc".into());
    assert!(worth_writing(&prev, &revision, just_now));
}
