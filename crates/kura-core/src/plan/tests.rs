//! The decision table: every reason, every phase, every owner.

mod fuzz;

use std::time::Duration;

use jiff::Timestamp;

use super::*;
use crate::api::{ConflictStatus, InventoryEntry, Phase, RetryStatus};
use crate::keys::ANNOTATION_REVISION;
use crate::render::{Desired, Manifest, RenderedObject};
use crate::rollout::Admission;
use crate::validate::{FieldError, ValidationErrors};

pub(crate) use super::fixtures::{converged, desired, object};

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn reasons(p: Plan) -> Vec<ApplyReason> {
    match p {
        Plan::Apply { reasons, .. } => reasons,
        other => panic!("expected Apply, got {other:?}"),
    }
}

/// The names of the objects an Apply sends.
fn sent(p: &Plan) -> Vec<String> {
    match p {
        Plan::Apply { apply, .. } => apply.iter().map(|op| op.id.name.clone()).collect(),
        other => panic!("expected Apply, got {other:?}"),
    }
}

fn run(o: &Observed, d: &Desired) -> Plan {
    plan(o, Ok(d), &RetryPolicy::default(), now())
}

fn sts(d: &Desired) -> ObjectId {
    d.objects
        .iter()
        .find(|o| o.id.kind == ChildKind::StatefulSet)
        .unwrap()
        .id
        .clone()
}

#[test]
fn converged_instance_plans_nothing_in_every_settled_phase() {
    let d = desired("r1", "img:1");
    for phase in [Phase::Ready, Phase::Activating] {
        assert_eq!(run(&converged(&d, phase), &d), Plan::Converged);
    }
}

#[test]
fn nothing_applied_yet_is_initial_and_sends_everything_as_creates() {
    let d = desired("r1", "img:1");
    let o = Observed::default();
    let p = run(&o, &d);
    assert_eq!(reasons(p.clone()), vec![ApplyReason::Initial]);
    let Plan::Apply { apply, .. } = p else {
        unreachable!()
    };
    assert_eq!(apply.len(), 2);
    assert!(apply.iter().all(|op| op.create));
}

#[test]
fn manifest_drift_applies_in_every_phase_including_wedged_activation() {
    // docs/incidents.md #1: the drift check must not be skipped while activation waits.
    let old = desired("r1", "img:1");
    let new = desired("r2", "img:1");
    for phase in [
        Phase::Activating,
        Phase::Ready,
        Phase::Retrying,
        Phase::Stalled,
        Phase::Applying,
    ] {
        let p = run(&converged(&old, phase), &new);
        assert_eq!(sent(&p), ["a", "a-config"], "{phase:?}");
        assert!(
            reasons(p).contains(&ApplyReason::ManifestDrift),
            "{phase:?}"
        );
    }
}

#[test]
fn a_revision_already_on_every_object_is_recorded_without_sending_anything() {
    // An apply whose status write never happened (a crash, a failed write).
    let d = desired("r2", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.status.applied_revision = Some("r1".into());
    let p = run(&o, &d);
    assert_eq!(sent(&p), Vec::<String>::new());
    assert_eq!(reasons(p), vec![ApplyReason::ManifestDrift]);
}

#[test]
fn a_retry_after_a_half_applied_revision_sends_only_what_still_differs() {
    // The ConfigMap of r2 went through, the StatefulSet was rejected.
    let old = desired("r1", "img:1");
    let d = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Retrying);
    let cm = d
        .objects
        .iter()
        .find(|x| x.id.kind == ChildKind::ConfigMap)
        .unwrap();
    o.children
        .insert(cm.id.clone(), LiveChild::ours(&cm.hash, "f1"));
    assert_eq!(sent(&run(&o, &d)), ["a"]);
}

#[test]
fn image_drift_sends_the_workload_only() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.running_image = Some("img:0".into());
    let p = run(&o, &d);
    assert_eq!(sent(&p), ["a"]);
    assert_eq!(reasons(p), vec![ApplyReason::ImageDrift(vec![])]);
}

#[test]
fn a_new_image_in_the_spec_is_a_new_revision_not_a_taken_image() {
    let old = desired("r1", "img:1");
    let mut o = converged(&old, Phase::Ready);
    o.status.applied_image = Some("img:1".into());
    let d = desired("r2", "img:2");
    let r = reasons(run(&o, &d));
    assert!(r.contains(&ApplyReason::ManifestDrift), "{r:?}");
    assert!(!r.iter().any(ApplyReason::is_contested), "{r:?}");
    // Another writer's image while a new one is desired was taken all the same.
    o.running_image = Some("img:rival".into());
    o.image_managers = vec!["kubectl-set".into()];
    let r = reasons(run(&o, &d));
    assert!(
        r.contains(&ApplyReason::ImageDrift(vec!["kubectl-set".into()])),
        "{r:?}"
    );
}

#[test]
fn a_taken_field_names_its_holders_or_says_there_is_none() {
    let taken = |managers: &[&str]| {
        let m = managers.iter().map(ToString::to_string).collect();
        ApplyReason::FieldDrift("StatefulSet ns/a".into(), m).to_string()
    };
    assert_eq!(
        taken(&["kubectl (scale subresource)", "rival"]),
        "fields of StatefulSet ns/a taken by kubectl (scale subresource), rival"
    );
    let nobody = taken(&[]);
    assert!(
        nobody.contains("no other field manager holds them") && !nobody.contains("taken by"),
        "{nobody}"
    );
}

#[test]
fn a_digest_pinned_form_of_the_desired_tag_is_the_same_image() {
    let digest = "a".repeat(64);
    let d = desired("r1", "registry.example/kura:1.2");
    let mut o = converged(&d, Phase::Ready);
    o.running_image = Some(format!("registry.example/kura:1.2@sha256:{digest}"));
    assert_eq!(run(&o, &d), Plan::Converged);
    for (want, running, same) in [
        ("r/k:1", "r/k:1", true),
        ("r/k:1", &format!("r/k:1@sha256:{digest}"), true),
        ("r/k:1", &format!("r/k:2@sha256:{digest}"), false),
        ("r/k:1", "r/k@sha256:short", false),
        (
            &format!("r/k:1@sha256:{digest}"),
            &format!("r/k@sha256:{digest}"),
            true,
        ),
        (
            &format!("r/k:1@sha256:{digest}"),
            &format!("other/k@sha256:{digest}"),
            false,
        ),
        (
            "host:5000/k:1",
            &format!("host:5000/k:1@sha256:{digest}"),
            true,
        ),
        ("r/k:1", "r/k:10", false),
    ] {
        assert_eq!(same_image(want, running), same, "{want} vs {running}");
    }
}

#[test]
fn image_taken_back_counts_against_the_conflict_window_and_then_holds() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.running_image = Some("img:other".into());
    o.image_managers = vec!["kubectl-set".into()];
    assert_eq!(
        reasons(run(&o, &d)),
        vec![ApplyReason::ImageDrift(vec!["kubectl-set".into()])]
    );
    o.status.conflict = Some(ConflictStatus {
        take_backs: MAX_TAKE_BACKS,
        window_start: (now() - jiff::SignedDuration::from_secs(10)).to_string(),
        managers: vec!["kubectl-set".into()],
    });
    assert!(matches!(run(&o, &d), Plan::ConflictHold { .. }));
    // A user's own change is never held: a new revision applies at once.
    assert!(matches!(
        run(&o, &desired("r2", "img:2")),
        Plan::Apply { .. }
    ));
}

#[test]
fn new_force_token_sends_everything_and_a_handled_one_nothing() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.force_token = Some("t1".into());
    let p = run(&o, &d);
    assert_eq!(sent(&p).len(), d.objects.len());
    assert_eq!(reasons(p), vec![ApplyReason::Forced]);
    o.status.last_handled_reapply_at = Some("t1".into());
    assert_eq!(run(&o, &d), Plan::Converged);
}

#[test]
fn missing_child_is_created_alone() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.children.remove(&sts(&d));
    let p = run(&o, &d);
    assert!(matches!(
        reasons(p.clone())[..],
        [ApplyReason::ChildMissing(_)]
    ));
    let Plan::Apply { apply, .. } = p else {
        unreachable!()
    };
    assert_eq!(apply.len(), 1);
    assert!(apply[0].create);
}

#[test]
fn a_child_being_deleted_is_waited_for_and_nothing_is_sent() {
    let d = desired("r1", "img:1");
    let cm = d
        .objects
        .iter()
        .find(|x| x.id.kind == ChildKind::ConfigMap)
        .unwrap()
        .id
        .clone();
    let mut o = converged(&d, Phase::Ready);
    o.children.remove(&cm);
    o.terminating
        .insert(cm.clone(), vec!["example.com/hold".into()]);
    let expected = Plan::ChildTerminating(vec![format!(
        "{cm} is being deleted, held by finalizers example.com/hold"
    )]);
    assert_eq!(run(&o, &d), expected);
    // Whatever else would be sent waits with it: a new revision, a force, a
    // first apply, and even a recent failure of these inputs (nothing to retry).
    let d2 = desired("r2", "img:2");
    let mut o2 = o.clone();
    o2.children.clear();
    o2.force_token = Some("t".into());
    failing(&mut o2, &d2, 9, 1);
    let cm2 = d2
        .objects
        .iter()
        .find(|x| x.id.kind == ChildKind::ConfigMap)
        .unwrap();
    assert_eq!(cm2.id, cm);
    assert!(matches!(run(&o2, &d2), Plan::ChildTerminating(_)));
    assert_eq!(intent(&o, Ok(&d)), expected, "the preview says the same");
    // Without finalizers (a graceful deletion under way): said so.
    o.terminating.insert(cm.clone(), Vec::new());
    assert_eq!(
        run(&o, &d),
        Plan::ChildTerminating(vec![format!("{cm} is being deleted")])
    );
    // Gone: missing, and created again.
    o.terminating.clear();
    assert_eq!(sent(&run(&o, &d)), ["a-config"]);
    // Another instance's object of the name, being deleted, is a name
    // conflict first (nothing waits on it to be sent).
    let mut foreign = LiveChild::ours("", "x");
    foreign.owner = Owner::Foreign("is controlled by KuraInstance other".into());
    o.children.insert(sts(&d), foreign);
    o.terminating.insert(cm, vec!["x".into()]);
    assert!(matches!(run(&o, &d), Plan::NameConflict(_)));
    // Paused: nothing to wait for.
    o.paused = true;
    assert_eq!(run(&o, &d), Plan::Paused);
}

#[test]
fn child_with_another_revision_is_sent_alone() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.children.get_mut(&sts(&d)).unwrap().revision = Some("r0-a".into());
    let p = run(&o, &d);
    assert_eq!(sent(&p), ["a"]);
    assert!(matches!(reasons(p)[..], [ApplyReason::ChildRevision(_)]));
}

#[test]
fn fields_taken_by_another_manager_are_taken_back_on_that_child_only() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.children.get_mut(&sts(&d)).unwrap().owned_fields = Some("f2".into());
    let p = run(&o, &d);
    assert_eq!(sent(&p), ["a"]);
    assert!(matches!(reasons(p)[..], [ApplyReason::FieldDrift(..)]));
}

/// An apply whose status write never landed (a kill between the two; after a
/// failover, another replica decides next): the live objects carry the new
/// revision with the fingerprint of that apply, the record still describes
/// the old one. Nothing is sent again (before, every object the apply had
/// changed read as fields taken, and was written a second time); another
/// manager holding fields of it is still drift.
#[test]
fn an_apply_whose_record_never_landed_is_not_drift() {
    let old = desired("r1", "img:1");
    let new = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Ready);
    let changed: Vec<_> = new
        .objects
        .iter()
        .filter(|n| old.objects.iter().any(|p| p.id == n.id && p.hash != n.hash))
        .collect();
    assert!(!changed.is_empty());
    for n in &changed {
        o.children.insert(
            n.id.clone(),
            LiveChild::ours(&n.hash, "fingerprint-of-the-new-apply"),
        );
    }
    assert!(
        super::drift::child_reasons(&new.objects, &o.children, &o.status.inventory).is_empty(),
        "the killed apply's own fields are not drift"
    );
    let sts_id = sts(&new);
    o.children.get_mut(&sts_id).unwrap().other_managers = vec!["kubectl".into()];
    let reasons = super::drift::child_reasons(&new.objects, &o.children, &o.status.inventory);
    assert!(
        matches!(&reasons[..], [ApplyReason::FieldDrift(id, who)] if *id == sts_id.to_string() && who == &["kubectl"]),
        "{reasons:?}"
    );
}

#[test]
fn an_object_of_the_desired_name_that_is_not_ours_is_reported_and_nothing_is_sent() {
    let d = desired("r1", "img:1");
    let mut o = Observed::default();
    let cm = d
        .objects
        .iter()
        .find(|x| x.id.kind == ChildKind::ConfigMap)
        .unwrap();
    let mut foreign = LiveChild::ours("", "x");
    foreign.owner = Owner::Foreign("is controlled by KuraInstance other".into());
    o.children.insert(cm.id.clone(), foreign);
    match run(&o, &d) {
        Plan::NameConflict(c) => {
            assert_eq!(c.len(), 1);
            assert!(
                c[0].contains("a-config") && c[0].contains("KuraInstance other"),
                "{c:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Even a force token never takes it over.
    o.force_token = Some("t".into());
    assert!(matches!(run(&o, &d), Plan::NameConflict(_)));
}

/// The caches show `d`'s ConfigMap as someone else's, handed over to the
/// instance with `kura.dev/adopt`.
fn hand_over_config_map(d: &Desired, o: &mut Observed) {
    let cm = d
        .objects
        .iter()
        .find(|x| x.id.kind == ChildKind::ConfigMap)
        .unwrap();
    o.children.get_mut(&cm.id).unwrap().owner = Owner::Adopt;
}

#[test]
fn an_object_handed_over_with_the_adopt_annotation_is_taken_over() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    hand_over_config_map(&d, &mut o);
    let Plan::Apply { apply, .. } = run(&o, &d) else {
        panic!("adopting applies")
    };
    assert_eq!(apply.len(), 1);
    assert!(
        !apply[0].create,
        "an existing object is applied, not created"
    );
}

#[test]
fn right_after_its_own_apply_an_adopted_object_the_cache_shows_unlabelled_waits_for_the_cache() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Activating);
    hand_over_config_map(&d, &mut o);
    // The apply that took it over has just been sent: the cache lags.
    o.just_applied = true;
    assert_eq!(run(&o, &d), Plan::Settling);
    // Once settled, an object still shown handed over is taken over again.
    o.just_applied = false;
    assert!(matches!(run(&o, &d), Plan::Apply { .. }));
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
fn one_failure_count_belongs_to_its_inputs() {
    let d = desired("r2", "img:1");
    let mut o = converged(&d, Phase::Stalled);
    failing(&mut o, &d, 4, 1);
    assert_eq!(failures_for(&o.status, &inputs_key("r2", None)), 4);
    // A new revision or force token starts from nothing: its first retry
    // waits the base backoff, not the old inputs' fourth.
    assert_eq!(failures_for(&o.status, &inputs_key("r3", None)), 0);
    assert_eq!(failures_for(&o.status, &inputs_key("r2", Some("t"))), 0);
    let p = RetryPolicy::default();
    assert_eq!(p.wait_after(1), (p.base_backoff, false));
    assert_eq!(p.wait_after(5), (p.stall_window(), true));
}

#[test]
fn a_forced_reapply_that_failed_stays_forced_until_it_succeeds() {
    // The token is recorded as handled only by a successful apply (status).
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Retrying);
    o.force_token = Some("t1".into());
    failing(&mut o, &d, 1, 1);
    assert!(matches!(run(&o, &d), Plan::Backoff { .. }));
    failing(&mut o, &d, 1, 10);
    assert!(reasons(run(&o, &d)).contains(&ApplyReason::Forced));
}

fn entry(kind: ChildKind, name: &str) -> InventoryEntry {
    ObjectId {
        kind,
        namespace: Some("ns".into()),
        name: name.into(),
    }
    .inventory_entry("x".into(), None)
}

fn prune_of(p: Plan) -> Vec<String> {
    match p {
        Plan::Apply { prune, .. } => prune.into_iter().map(|id| id.name).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn stale_objects_are_pruned_whether_inventoried_or_found_by_label() {
    let d = desired("r2", "img:1");
    let mut o = converged(&d, Phase::Ready);
    // Inventoried and still in the cache, ours.
    let gw = ObjectId::from_inventory(&entry(ChildKind::KuraGateway, "gw")).unwrap();
    o.status.inventory.push(entry(ChildKind::KuraGateway, "gw"));
    o.children.insert(gw, LiveChild::ours("x", "f"));
    // Inventoried, but the cache does not show it: asked for, never assumed gone.
    o.status.inventory.push(entry(ChildKind::Ingress, "unseen"));
    // Not inventoried (an apply that failed half-way created it), found by its
    // labels and created by this instance.
    let orphan = ObjectId::from_inventory(&entry(ChildKind::Ingress, "a.1234abcd")).unwrap();
    o.children.insert(orphan, LiveChild::ours("r1", "f"));
    // Labelled as ours but someone else's object: never a candidate.
    let foreign = ObjectId::from_inventory(&entry(ChildKind::Ingress, "lookalike")).unwrap();
    let mut live = LiveChild::ours("r1", "f");
    live.owner = Owner::Foreign("was not created by this instance".into());
    o.children.insert(foreign, live);
    // Inventoried but someone else's now: dropped, not deleted.
    o.status.inventory.push(entry(ChildKind::Service, "taken"));
    let taken = ObjectId::from_inventory(&entry(ChildKind::Service, "taken")).unwrap();
    let mut live = LiveChild::ours("r1", "f");
    live.owner = Owner::Foreign("is controlled by Deployment x".into());
    o.children.insert(taken, live);
    let p = run(&o, &d);
    assert_eq!(prune_of(p.clone()), ["gw", "a.1234abcd", "unseen"]);
    assert!(
        reasons(p)
            .iter()
            .all(|r| matches!(r, ApplyReason::Stale(_)))
    );
}

#[test]
fn inventory_entries_of_kinds_we_never_render_are_ignored() {
    let d = desired("r1", "img:1");
    let mut o = converged(&d, Phase::Ready);
    o.status.inventory.push(InventoryEntry {
        api_version: "v1".into(),
        kind: "PersistentVolumeClaim".into(),
        name: "data-a-0".into(),
        namespace: Some("ns".into()),
        hash: "x".into(),
        owned_fields: None,
    });
    assert_eq!(run(&o, &d), Plan::Converged);
}

#[test]
fn an_ingress_moving_to_another_class_has_its_old_address_cleared() {
    let mut d = desired("r2", "img:1");
    let mut manifest = Manifest::bare(ChildKind::Ingress, "ns", "a");
    manifest.content = crate::render::manifest::Content::Spec(crate::render::kinds::Spec::Ingress(
        crate::render::kinds::IngressSpec {
            ingress_class_name: "new".into(),
            rules: vec![],
        },
    ));
    manifest.metadata.annotations = Some([(ANNOTATION_REVISION, "r2-a".to_string())].into());
    let ingress = RenderedObject {
        id: ObjectId::of(&manifest),
        manifest,
        hash: "r2-a".into(),
    };
    d.objects.push(ingress.clone());
    let mut o = converged(&d, Phase::Ready);
    let mut live = LiveChild::ours("r1-a", "f1");
    live.ingress_class = Some("old".into());
    o.children.insert(ingress.id.clone(), live);
    let Plan::Apply { apply, .. } = run(&o, &d) else {
        panic!()
    };
    assert_eq!(apply.len(), 1);
    assert!(apply[0].clear_address);
    // The same class: the address stands.
    o.children.get_mut(&ingress.id).unwrap().ingress_class = Some("new".into());
    let Plan::Apply { apply, .. } = run(&o, &d) else {
        panic!()
    };
    assert!(!apply[0].clear_address);
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
    o.children.remove(&sts(&d));
    o.just_applied = true;
    assert_eq!(run(&o, &d), Plan::Settling);
    // Once settled, a child still missing is applied again.
    o.just_applied = false;
    assert!(matches!(run(&o, &d), Plan::Apply { .. }));
    // A force token is never mistaken for cache lag.
    o.just_applied = true;
    o.force_token = Some("again".into());
    assert!(matches!(run(&o, &d), Plan::Apply { .. }));
}

#[test]
fn times_from_status_at_the_end_of_time_neither_panic_nor_hold_longer_than_the_policy() {
    let d = desired("r2", "img:1");
    let mut o = converged(&desired("r1", "img:1"), Phase::Stalled);
    // The latest time jiff can represent, and beyond it.
    let far = "9999-12-30T21:59:59Z";
    o.status.retry = Some(RetryStatus {
        failures: i64::MAX,
        inputs_key: inputs_key("r2", None),
        last_error: String::new(),
        last_failure_time: far.into(),
    });
    o.status.conflict = Some(ConflictStatus {
        take_backs: i64::MAX,
        window_start: far.into(),
        managers: vec![],
    });
    let p = RetryPolicy::default();
    match plan(&o, Ok(&d), &p, now()) {
        Plan::Stalled { at } => assert!(at <= later(now(), p.stall_window())),
        other => panic!("{other:?}"),
    }
    assert_eq!(later(Timestamp::MAX, Duration::MAX), Timestamp::MAX);
    // Beyond what can be represented: as if absent, so it is tried now (and
    // the status written then carries a real time).
    o.status.retry.as_mut().unwrap().last_failure_time = "9999-12-31T23:59:59Z".into();
    assert!(matches!(plan(&o, Ok(&d), &p, now()), Plan::Apply { .. }));
}

/// `d` adds an Ingress to the plain desired set, for changes that restart no pod.
fn with_ingress(mut d: Desired) -> Desired {
    d.objects.push(object(ChildKind::Ingress, "a", &d.revision));
    d.objects.sort_by(|a, b| a.id.cmp(&b.id));
    d
}

fn budgeted(o: &mut Observed, admission: Option<Admission>) {
    o.budget = BudgetView {
        budgeted: true,
        admission,
        gate: Default::default(),
    };
}

#[test]
fn an_operator_change_that_restarts_pods_is_admitted_before_it_is_applied() {
    let old = with_ingress(desired("r1", "img:1"));
    let new = with_ingress(desired("r2", "img:1"));
    let mut o = converged(&old, Phase::Ready);
    budgeted(&mut o, Some(Admission::Admit { counted: true }));
    assert_eq!(run(&o, &new), Plan::Admit);
    // Once the admission is recorded for this revision, it goes whole.
    o.status.rollout = Some(crate::rollout::record(
        crate::api::RolloutState::Admitted,
        "f",
        "r2",
        true,
        now(),
    ));
    o.budget.admission = None;
    assert_eq!(sent(&run(&o, &new)), ["a", "a", "a-config"]);
}

/// Outside its window an operator change holds what restarts pods, like a
/// budget wait; admitted inside the window (its record), it goes whole
/// though the window has closed since: a window shorter than the rollout
/// cuts nothing in half.
#[test]
fn a_window_holds_the_admission_and_never_an_admitted_rollout() {
    let old = with_ingress(desired("r1", "img:1"));
    let new = with_ingress(desired("r2", "img:1"));
    let mut o = converged(&old, Phase::Ready);
    let wait = crate::window::WindowWait {
        window: "Monday 02:00 for 2h (UTC)".into(),
        source: "spec.maintenanceWindow".into(),
        opens: later(now(), Duration::from_secs(3600)),
        deadline: None,
    };
    budgeted(&mut o, Some(Admission::Window(Box::new(wait.clone()))));
    o.budget.gate = crate::window::Gate::Closed(wait.clone());
    let p = run(&o, &new);
    let Plan::Apply { apply, held, .. } = &p else {
        panic!("{p:?}")
    };
    assert_eq!(
        held.as_ref(),
        Some(&Admission::Window(Box::new(wait.clone())))
    );
    assert!(
        apply.iter().all(|op| !op.id.kind.restarts_pods()),
        "{apply:?}"
    );
    o.status.rollout = Some(crate::rollout::record(
        crate::api::RolloutState::Admitted,
        "f",
        "r2",
        true,
        now(),
    ));
    o.budget.admission = None;
    assert_eq!(sent(&run(&o, &new)), ["a", "a", "a-config"]);
}

#[test]
fn a_held_change_sends_what_restarts_no_pod_and_holds_the_rest() {
    let old = with_ingress(desired("r1", "img:1"));
    let new = with_ingress(desired("r2", "img:1"));
    let mut o = converged(&old, Phase::Ready);
    let wait = Admission::Wait {
        ahead: 4,
        in_flight: vec![],
        budget: 3,
    };
    budgeted(&mut o, Some(wait.clone()));
    let p = run(&o, &new);
    let Plan::Apply { apply, held, .. } = &p else {
        panic!("{p:?}")
    };
    assert_eq!(held.as_ref(), Some(&wait));
    assert_eq!(apply.len(), 1);
    assert_eq!(apply[0].id.kind, ChildKind::Ingress);
    // The Ingress went: what remains waits, with nothing to send.
    let ingress = new
        .objects
        .iter()
        .find(|x| x.id.kind == ChildKind::Ingress)
        .unwrap();
    o.children
        .insert(ingress.id.clone(), LiveChild::ours(&ingress.hash, "f1"));
    assert_eq!(run(&o, &new), Plan::Held(wait));
}

/// A held change sent what restarts no pod; the next pass comes before the
/// cache has seen that apply (a slow watch): it still shows the Ingress of
/// the old revision. The hold's own reasons (the old applied revision, the
/// held StatefulSet's stamp) never go away while held, so without a rule of
/// its own the pass sent the Ingress again (found by the perturbation
/// harness: a lagged watch, a ServiceAccount applied twice in 40 ms).
#[test]
fn a_held_change_just_sent_waits_for_the_cache_instead_of_sending_it_again() {
    let old = with_ingress(desired("r1", "img:1"));
    let new = with_ingress(desired("r2", "img:1"));
    let mut o = converged(&old, Phase::Ready);
    let wait = Admission::Wait {
        ahead: 4,
        in_flight: vec![],
        budget: 3,
    };
    budgeted(&mut o, Some(wait.clone()));
    assert!(matches!(run(&o, &new), Plan::Apply { held: Some(_), .. }));
    // Sent by this process within the settle time; the cache not caught up.
    o.just_applied = true;
    assert_eq!(run(&o, &new), Plan::Held(wait.clone()));
    // A force is not the cache's lag: it is sent.
    o.force_token = Some("t2".into());
    o.just_applied = false;
    assert!(matches!(run(&o, &new), Plan::Apply { held: Some(_), .. }));
}

#[test]
fn what_is_not_budgeted_or_goes_uncounted_is_never_held() {
    let old = desired("r1", "img:1");
    let new = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Ready);
    // Not an operator change of a running pod template (a user's, say).
    o.budget = BudgetView::default();
    assert!(matches!(run(&o, &new), Plan::Apply { held: None, .. }));
    // Not Ready: it goes at once.
    budgeted(&mut o, Some(Admission::Admit { counted: false }));
    assert!(matches!(run(&o, &new), Plan::Apply { held: None, .. }));
    // Drift of a held instance is repaired at once: a missing Service.
    let mut d = with_ingress(desired("r2", "img:1"));
    d.objects.push(object(ChildKind::Service, "a", "r2"));
    let mut o = converged(&with_ingress(desired("r1", "img:1")), Phase::Ready);
    budgeted(&mut o, Some(Admission::Halted { failed: vec![] }));
    let Plan::Apply { apply, held, .. } = run(&o, &d) else {
        panic!()
    };
    assert!(held.is_some());
    assert!(
        apply
            .iter()
            .any(|op| op.id.kind == ChildKind::Service && op.create)
    );
    assert!(!apply.iter().any(|op| op.id.kind.restarts_pods()));
}

/// A held workload whose fields another writer took (`kubectl scale`) is
/// repaired at once, on the pod template it runs: sent with
/// `keep_live_template`, so the held change restarts nothing.
#[test]
fn a_held_workload_whose_fields_were_taken_is_repaired_on_its_running_template() {
    let old = desired("r1", "img:1");
    let new = desired("r2", "img:1");
    let mut o = converged(&old, Phase::Ready);
    budgeted(&mut o, Some(Admission::Halted { failed: vec![] }));
    let untouched = run(&o, &new);
    assert!(
        matches!(untouched, Plan::Held(_)),
        "nothing taken: held whole, {untouched:?}"
    );
    let live = o.children.get_mut(&sts(&old)).unwrap();
    live.owned_fields = Some("f2".into());
    live.other_managers = vec!["kubectl (scale subresource)".into()];
    let Plan::Apply {
        apply,
        held,
        reasons,
        ..
    } = run(&o, &new)
    else {
        panic!("a repair is applied")
    };
    assert!(held.is_some());
    let workload: Vec<&ApplyOp> = apply
        .iter()
        .filter(|op| op.id.kind.restarts_pods())
        .collect();
    assert_eq!(workload.len(), 1, "only the StatefulSet: {apply:?}");
    assert!(workload[0].keep_live_template && workload[0].id.kind == ChildKind::StatefulSet);
    assert!(reasons.iter().any(ApplyReason::is_contested), "{reasons:?}");
}
