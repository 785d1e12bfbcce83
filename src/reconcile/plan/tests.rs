//! The decision table: every reason, every phase.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::*;
use crate::api::{InventoryEntry, Phase, RetryStatus};
use crate::keys::ANNOTATION_REVISION;
use crate::render::object::expected_stamp;
use crate::render::{Desired, Manifest, RenderedObject};
use crate::validate::{FieldError, ValidationErrors};

fn desired(revision: &str, image: &str) -> Desired {
    let id = ObjectId {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        namespace: Some("ns".into()),
        name: "a".into(),
    };
    let mut manifest = Manifest::bare("apps/v1", "StatefulSet", "ns", "a");
    manifest.metadata.annotations = Some([(ANNOTATION_REVISION, revision.to_string())].into());
    Desired {
        objects: vec![RenderedObject {
            id,
            manifest,
            hash: "h1".into(),
        }],
        revision: revision.into(),
        pod_template_hash: "p".into(),
        image: image.into(),
    }
}

/// An instance fully converged on `d`, in `phase`.
fn converged(d: &Desired, phase: Phase) -> Observed {
    let mut status = KuraInstanceStatus {
        applied_revision: Some(d.revision.clone()),
        phase: Some(phase),
        inventory: d.inventory(),
        ..Default::default()
    };
    status.inventory[0].owned_fields = Some("f1".into());
    let children: BTreeMap<_, _> = d
        .objects
        .iter()
        .map(|o| {
            let stamp = expected_stamp(&o.id, &o.hash, &d.revision).to_string();
            (
                o.id.clone(),
                LiveChild {
                    revision: Some(stamp),
                    owned_fields: Some("f1".into()),
                    other_managers: vec![],
                },
            )
        })
        .collect();
    Observed {
        generation: Some(1),
        status,
        children,
        running_image: Some(d.image.clone()),
        ..Default::default()
    }
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn reasons(p: Plan) -> Vec<ApplyReason> {
    match p {
        Plan::Apply { reasons, .. } => reasons,
        other => panic!("expected Apply, got {other:?}"),
    }
}

fn run(o: &Observed, d: &Desired) -> Plan {
    plan(o, Ok(d), &RetryPolicy::default(), now())
}

#[test]
fn converged_instance_plans_nothing_in_every_settled_phase() {
    let d = desired("r1", "img:1");
    for phase in [Phase::Ready, Phase::Activating] {
        assert_eq!(run(&converged(&d, phase), &d), Plan::Converged);
    }
}

#[test]
fn nothing_applied_yet_is_initial() {
    let d = desired("r1", "img:1");
    let o = Observed::default();
    assert_eq!(reasons(run(&o, &d)), vec![ApplyReason::Initial]);
}

#[test]
fn manifest_drift_applies_in_every_phase_including_wedged_activation() {
    // INCIDENTS.md #1: the drift check must not be skipped while activation waits.
    let old = desired("r1", "img:1");
    let new = desired("r2", "img:1");
    for phase in [
        Phase::Activating,
        Phase::Ready,
        Phase::Retrying,
        Phase::Stalled,
        Phase::Applying,
    ] {
        let r = reasons(run(&converged(&old, phase), &new));
        assert!(r.contains(&ApplyReason::ManifestDrift), "{phase:?}: {r:?}");
    }
}

#[test]
fn image_drift_applies() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.running_image = Some("img:0".into());
    assert_eq!(reasons(run(&o, &d)), vec![ApplyReason::ImageDrift]);
}

#[test]
fn new_force_token_applies_and_a_handled_one_does_not() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.force_token = Some("t1".into());
    assert_eq!(reasons(run(&o, &d)), vec![ApplyReason::Forced]);
    o.status.last_handled_reapply_at = Some("t1".into());
    assert_eq!(run(&o, &d), Plan::Converged);
}

#[test]
fn missing_child_applies() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.children.clear();
    assert!(matches!(
        reasons(run(&o, &d))[..],
        [ApplyReason::ChildMissing(_)]
    ));
}

#[test]
fn child_with_another_revision_applies() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.children
        .values_mut()
        .for_each(|c| c.revision = Some("r0".into()));
    assert!(matches!(
        reasons(run(&o, &d))[..],
        [ApplyReason::ChildRevision(_)]
    ));
}

#[test]
fn fields_taken_by_another_manager_apply() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.children
        .values_mut()
        .for_each(|c| c.owned_fields = Some("f2".into()));
    assert!(matches!(
        reasons(run(&o, &d))[..],
        [ApplyReason::FieldDrift(..)]
    ));
}

#[test]
fn invalid_input_plans_nothing_to_apply_or_delete() {
    let errors = ValidationErrors(vec![FieldError::new("spec.region", "unknown")]);
    let o = converged(&desired("r1", "img:1"), Phase::Ready);
    assert_eq!(
        plan(&o, Err(&errors), &RetryPolicy::default(), now()),
        Plan::Invalid(errors)
    );
}

#[test]
fn paused_plans_nothing() {
    let d = desired("r2", "img:1");
    let mut o = converged(&desired("r1", "img:1"), Phase::Ready);
    o.paused = true;
    assert_eq!(run(&o, &d), Plan::Paused);
}

fn failing(o: &mut Observed, d: &Desired, failures: i64, ago_secs: i64) {
    o.status.retry = Some(RetryStatus {
        failures,
        inputs_key: inputs_key(&d.revision, o.force_token.as_deref()),
        last_error: "boom".into(),
        last_failure_time: (now() - jiff::SignedDuration::from_secs(ago_secs)).to_string(),
    });
}

#[test]
fn recent_failure_of_same_inputs_backs_off_then_retries() {
    let old = desired("r1", "img:1");
    let d = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Retrying);
    failing(&mut o, &d, 1, 1);
    assert!(matches!(run(&o, &d), Plan::Backoff { .. }));
    failing(&mut o, &d, 1, 6); // past the 5 s base backoff
    assert!(matches!(run(&o, &d), Plan::Apply { .. }));
}

#[test]
fn exhausted_budget_stalls_then_retries_after_the_window() {
    let old = desired("r1", "img:1");
    let d = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Stalled);
    failing(&mut o, &d, 5, 30);
    assert!(matches!(run(&o, &d), Plan::Stalled { .. }));
    failing(&mut o, &d, 5, 601);
    assert!(matches!(run(&o, &d), Plan::Apply { .. }));
}

#[test]
fn stall_window_has_a_floor() {
    let policy = RetryPolicy {
        stall_window: Duration::from_secs(1),
        ..RetryPolicy::default()
    };
    assert_eq!(policy.stall_window(), MIN_STALL_WINDOW);
}

#[test]
fn new_inputs_or_force_token_retry_at_once_while_stalled() {
    let old = desired("r1", "img:1");
    let d = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Stalled);
    failing(&mut o, &d, 5, 30);
    // A newer revision: fresh budget.
    assert!(matches!(
        run(&o, &desired("r3", "img:1")),
        Plan::Apply { .. }
    ));
    // A force token: fresh budget.
    o.force_token = Some("now".into());
    assert!(reasons(run(&o, &d)).contains(&ApplyReason::Forced));
}

#[test]
fn stale_inventory_objects_are_pruned_and_kept_ones_are_not() {
    let d = desired("r2", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.status.applied_revision = Some("r1".into());
    let gone = InventoryEntry {
        api_version: "kura.dev/v1alpha1".into(),
        kind: "KuraGateway".into(),
        name: "gw".into(),
        namespace: Some("ns".into()),
        hash: "x".into(),
        owned_fields: None,
    };
    o.status.inventory.push(gone);
    match run(&o, &d) {
        Plan::Apply { prune, .. } => {
            assert_eq!(prune.len(), 1);
            assert_eq!(prune[0].kind, "KuraGateway");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn transient_backoff_doubles_from_half_a_second_to_a_minute_with_jitter() {
    let p = RetryPolicy::default();
    assert_eq!(p.transient_backoff(1, 1.0), Duration::from_millis(500));
    assert_eq!(p.transient_backoff(1, 0.0), Duration::from_millis(250));
    assert_eq!(p.transient_backoff(3, 1.0), Duration::from_secs(2));
    assert_eq!(p.transient_backoff(30, 1.0), Duration::from_secs(60));
    assert_eq!(p.transient_backoff(30, 0.0), Duration::from_secs(30));
    // Sooner than an apply failure's backoff, which waits on a fix of the input.
    assert!(p.transient_backoff(1, 1.0) < p.backoff(1));
}

#[test]
fn right_after_its_own_apply_a_child_the_cache_lacks_waits_for_the_cache() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Activating);
    let service = d.objects[0].id.clone();
    o.children.remove(&service);
    o.just_applied = true;
    assert_eq!(
        plan(&o, Ok(&d), &RetryPolicy::default(), now()),
        Plan::Settling
    );
    // Once settled, a child still missing is applied again.
    o.just_applied = false;
    assert!(matches!(
        plan(&o, Ok(&d), &RetryPolicy::default(), now()),
        Plan::Apply { .. }
    ));
    // A force token is never mistaken for cache lag.
    o.just_applied = true;
    o.force_token = Some("again".into());
    assert!(matches!(
        plan(&o, Ok(&d), &RetryPolicy::default(), now()),
        Plan::Apply { .. }
    ));
}
