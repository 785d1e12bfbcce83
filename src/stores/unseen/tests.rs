use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use super::Unseen;
use kura_core::kind::ChildKind;
use kura_core::render::ObjectId;

fn id(name: &str) -> ObjectId {
    ObjectId {
        kind: ChildKind::ConfigMap,
        namespace: Some("ns".into()),
        name: name.into(),
    }
}

fn meta(name: &str, rv: &str, revision: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        resource_version: Some(rv.into()),
        annotations: Some([("kura.dev/revision".to_string(), revision.to_string())].into()),
        ..ObjectMeta::default()
    }
}

fn config_map(name: &str, rv: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, rv, "seen"),
        ..ConfigMap::default()
    }
}

fn rv(meta: Option<ObjectMeta>) -> Option<String> {
    meta?.resource_version
}

#[test]
fn a_write_the_cache_has_not_shown_stands_in_for_it_until_the_watch_shows_it() {
    let unseen = Unseen::default();
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    // Not in the cache at all (created a moment ago), or an older version.
    assert_eq!(rv(unseen.fresher(&id("a"), None)).as_deref(), Some("20"));
    let older = Some(meta("a", "10", "old"));
    assert_eq!(rv(unseen.fresher(&id("a"), older)).as_deref(), Some("20"));
    // Other objects are the cache's.
    assert_eq!(unseen.fresher(&id("b"), None), None);

    // The watch delivers an older event: still waiting.
    unseen.event(ChildKind::ConfigMap, &Event::Apply(config_map("a", "15")));
    assert_eq!(unseen.len(), 1);
    // The write itself (or anything after it): the cache wins from now on.
    unseen.event(ChildKind::ConfigMap, &Event::Apply(config_map("a", "20")));
    assert!(unseen.is_empty());
    let cached = Some(meta("a", "10", "old"));
    assert_eq!(rv(unseen.fresher(&id("a"), cached)).as_deref(), Some("10"));
}

#[test]
fn a_cache_already_past_the_write_wins() {
    let unseen = Unseen::default();
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    let later = Some(meta("a", "25", "someone else's"));
    assert_eq!(rv(unseen.fresher(&id("a"), later)).as_deref(), Some("25"));
}

#[test]
fn a_deletion_after_the_write_ends_the_wait_and_one_before_it_does_not() {
    let unseen = Unseen::default();
    // Deleted by someone at 15, created again by this process at 20: the
    // deletion's event, late, says nothing of the new object.
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    unseen.event(ChildKind::ConfigMap, &Event::Delete(config_map("a", "15")));
    assert_eq!(rv(unseen.fresher(&id("a"), None)).as_deref(), Some("20"));
    // Deleted after the write: missing, to be created again.
    unseen.event(ChildKind::ConfigMap, &Event::Delete(config_map("a", "25")));
    assert_eq!(unseen.fresher(&id("a"), None), None);
}

#[test]
fn a_relist_started_after_the_write_decides_and_one_started_before_does_not() {
    let unseen = Unseen::default();
    // A relist that was under way when the write was made may not hold it.
    unseen.event::<ConfigMap>(ChildKind::ConfigMap, &Event::Init);
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    unseen.event::<ConfigMap>(ChildKind::ConfigMap, &Event::InitDone);
    assert_eq!(unseen.len(), 1);
    // One that started after it holds it, or its deletion: what that list
    // shows is the truth, the object missing from it included.
    unseen.event::<ConfigMap>(ChildKind::ConfigMap, &Event::Init);
    assert_eq!(unseen.len(), 1, "nothing is decided until the list ends");
    unseen.event::<ConfigMap>(ChildKind::ConfigMap, &Event::InitDone);
    assert!(unseen.is_empty());
}

#[test]
fn a_relist_of_another_kind_decides_nothing() {
    let unseen = Unseen::default();
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    unseen.event::<ConfigMap>(ChildKind::Service, &Event::Init);
    unseen.event::<ConfigMap>(ChildKind::Service, &Event::InitDone);
    assert_eq!(unseen.len(), 1);
}

#[test]
fn an_answer_without_a_numeric_version_is_not_kept() {
    let unseen = Unseen::default();
    unseen.wrote(&id("a"), meta("a", "opaque", "new"));
    assert!(unseen.is_empty());
    // And a cache version that does not parse wins.
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    let opaque = Some(meta("a", "opaque", "cached"));
    assert_eq!(
        rv(unseen.fresher(&id("a"), opaque)).as_deref(),
        Some("opaque")
    );
}

#[test]
fn a_write_no_watch_ever_reports_is_forgotten_and_the_cache_taken_as_it_is() {
    let unseen = Unseen::default();
    unseen.wrote(&id("a"), meta("a", "20", "new"));
    unseen.backdate(super::FORGET_AFTER - std::time::Duration::from_secs(1));
    assert!(unseen.fresher(&id("a"), None).is_some());
    unseen.backdate(std::time::Duration::from_secs(1));
    assert_eq!(unseen.fresher(&id("a"), None), None);
    assert!(unseen.is_empty());
}

#[test]
fn kinds_whose_watch_does_not_report_here_are_not_kept() {
    let unseen = Unseen::default();
    let deployment = ObjectId {
        kind: ChildKind::Deployment,
        ..id("a")
    };
    unseen.wrote(&deployment, meta("a", "20", "new"));
    assert!(unseen.is_empty());
}
