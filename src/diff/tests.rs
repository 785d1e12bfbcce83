//! The pure core of `diff`: what is written, created, pruned and restarted,
//! from live objects built the way the apiserver returns them after the
//! operator's apply (the desired manifests, with an apply entry in managedFields).

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use super::*;
use kura_core::api::KuraInstanceStatus;
use kura_core::fields::owned_fields;
use kura_core::keys::FIELD_MANAGER;
use kura_core::render::render;
use kura_core::validate::validate;

const CONFIG: &str = "\
gateway:
  image: registry.example/gateway:1.0.0
  controller: example.com/gw
  replicas: 1
regions:
  r1:
    network: host
    sharedIngressClass: shared
    domain: kura.test
  r2:
    network: cloud
    sharedIngressClass: shared
    domain: kura.test
";

fn config() -> Accepted {
    Accepted::new(OperatorConfig::parse(CONFIG).unwrap())
}

fn edited(from: &str, to: &str) -> Accepted {
    Accepted::new(OperatorConfig::parse(&CONFIG.replace(from, to)).unwrap())
}

fn instance(name: &str, spec: Value) -> KuraInstance {
    let mut base = json!({
        "account": name, "region": "r1", "image": "registry.example/kura:1.0.0",
        "storage": {"size": "1Gi"},
    });
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "generation": 1},
        "spec": base,
    }))
    .unwrap()
}

/// A fieldsV1 set owning every field of `value` (lists whole, as atomic).
fn field_set(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (format!("f:{k}"), field_set(v)))
                .collect::<Map<_, _>>(),
        ),
        _ => json!({}),
    }
}

/// `body` as the apiserver returns it after an apply by `manager`.
fn applied_by(body: &Value, manager: &str) -> Value {
    let mut owned = body.clone();
    let owned_map = owned.as_object_mut().unwrap();
    owned_map.remove("apiVersion");
    owned_map.remove("kind");
    let meta = owned_map["metadata"].as_object_mut().unwrap();
    meta.remove("name");
    meta.remove("namespace");
    let mut live = body.clone();
    live["metadata"]["uid"] = json!(format!("uid-of-{}", body["metadata"]["name"]));
    live["metadata"]["resourceVersion"] = json!("7");
    live["metadata"]["managedFields"] = json!([{
        "manager": manager, "operation": "Apply", "apiVersion": body["apiVersion"],
        "fieldsType": "FieldsV1", "fieldsV1": field_set(&owned),
    }]);
    live
}

/// An instance converged under `config`: its children live as the operator
/// applied them, its status recording the revision and inventory.
struct Fleet {
    instance: KuraInstance,
    objects: Vec<(ChildKind, Value)>,
    /// Other instances `diff` reads (they may hold hosts).
    others: Vec<KuraInstance>,
}

impl Fleet {
    fn converged(instance: KuraInstance, config: &OperatorConfig) -> Fleet {
        let desired = render(&validate(&instance, config).unwrap(), config);
        let objects: Vec<(ChildKind, Value)> = desired
            .objects
            .iter()
            .map(|o| (o.id.kind, applied_by(&o.body(), FIELD_MANAGER)))
            .collect();
        let mut inventory = desired.inventory();
        for (entry, (_, live)) in inventory.iter_mut().zip(&objects) {
            let object: DynamicObject = serde_json::from_value(live.clone()).unwrap();
            entry.owned_fields = owned_fields(&object.metadata);
        }
        let mut instance = instance;
        instance.status = Some(KuraInstanceStatus {
            applied_revision: Some(desired.revision.clone()),
            desired_revision: Some(desired.revision.clone()),
            inventory,
            ..Default::default()
        });
        Fleet {
            instance,
            objects,
            others: Vec::new(),
        }
    }

    fn object(&mut self, kind: ChildKind, name: &str) -> &mut Value {
        &mut self
            .objects
            .iter_mut()
            .find(|(k, o)| *k == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .1
    }

    fn remove(&mut self, kind: ChildKind, name: &str) {
        self.objects
            .retain(|(k, o)| !(*k == kind && o["metadata"]["name"] == name));
    }

    fn live(&self, keep_owned: bool) -> Live {
        let mut builder = LiveBuilder::new(keep_owned);
        for (kind, object) in &self.objects {
            builder
                .add(*kind, serde_json::from_value(object.clone()).unwrap())
                .unwrap();
        }
        let mut instances = vec![self.instance.clone()];
        instances.extend(self.others.iter().cloned());
        builder.finish(&instances)
    }

    fn diff(&self, config: &Accepted) -> InstanceDiff {
        diff_instance(&self.instance, config, &self.live(false), false)
    }
}

/// `<sign> <kind> <name>` of every object of a diff, sorted.
fn changes(d: &InstanceDiff) -> Vec<String> {
    let mut out: Vec<String> = d
        .objects
        .iter()
        .map(|o| format!("{} {} {}", o.action.sign(), o.kind, o.name))
        .collect();
    out.sort();
    out
}

#[test]
fn a_converged_instance_is_unchanged() {
    let fleet = Fleet::converged(instance("acme", json!({})), &config());
    let d = fleet.diff(&config());
    assert_eq!(d.state, State::Unchanged, "{d:?}");
    assert!(d.objects.is_empty());
    assert!(
        d.effects.is_empty(),
        "an unchanged instance shows no effect"
    );
    assert!(!d.pod_restart);
    assert_eq!(d.applied_revision, d.desired_revision);
}

#[test]
fn a_domain_change_writes_the_ingress_config_and_workload_and_restarts_pods() {
    let fleet = Fleet::converged(instance("acme", json!({})), &config());
    let d = fleet.diff(&edited("domain: kura.test", "domain: kura2.test"));
    assert_eq!(d.state, State::Changes);
    assert_ne!(d.applied_revision, d.desired_revision);
    assert_eq!(
        changes(&d),
        [
            "~ ConfigMap acme-config",
            "~ Ingress acme",
            "~ StatefulSet acme"
        ]
    );
    assert!(d.objects.iter().all(|o| o.why == "content changed"));
    assert!(d.pod_restart, "the pods mount the configuration file");
    // The decision's effects, a line each: the config map in the first wave,
    // the workload and the Ingress after it.
    assert_eq!(d.effects.len(), 3, "{:?}", d.effects);
    assert_eq!(d.effects[0], "claim the hosts");
    assert_eq!(
        d.effects[1],
        "apply wave 0: ConfigMap ns/acme-config; wave 1: StatefulSet ns/acme, Ingress ns/acme"
    );
    assert_eq!(d.effects[2], "write status and its Events");
}

#[test]
fn an_ingress_class_change_does_not_restart_pods() {
    let fleet = Fleet::converged(instance("acme", json!({})), &config());
    let d = fleet.diff(&edited(
        "sharedIngressClass: shared\n    domain: kura.test\n  r2",
        "sharedIngressClass: other\n    domain: kura.test\n  r2",
    ));
    assert_eq!(changes(&d), ["~ Ingress acme"]);
    assert!(
        !d.pod_restart,
        "docs/incidents.md #4: an ingress class does not roll the pods"
    );
}

#[test]
fn a_missing_child_is_created_and_nothing_else_written() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.remove(ChildKind::NetworkPolicy, "acme");
    let d = fleet.diff(&config());
    assert_eq!(changes(&d), ["+ NetworkPolicy acme"]);
    assert_eq!(d.objects[0].why, "missing");
    assert!(!d.pod_restart);
}

#[test]
fn a_new_workload_is_not_a_restart() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.remove(ChildKind::StatefulSet, "acme");
    let d = fleet.diff(&edited("domain: kura.test", "domain: kura2.test"));
    assert!(
        d.objects
            .iter()
            .any(|o| o.action == Action::Create && o.kind == ChildKind::StatefulSet)
    );
    assert!(!d.pod_restart);
}

#[test]
fn an_object_no_longer_desired_is_pruned_and_one_no_longer_labelled_kept() {
    let fleet = Fleet::converged(
        instance(
            "acme",
            json!({"aliases": ["a.example.com", "b.example.com"]}),
        ),
        &config(),
    );
    let ingresses: Vec<String> = fleet
        .objects
        .iter()
        .filter(|(k, _)| *k == ChildKind::Ingress)
        .map(|(_, o)| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ingresses.len(), 3, "{ingresses:?}");
    // One alias goes; of the two Ingresses that are then stale (aliases are
    // numbered), one lost the operator's label to someone: it stays.
    let mut fleet = fleet;
    fleet.instance.spec.aliases = vec!["a.example.com".into()];
    let desired = render(&validate(&fleet.instance, &config()).unwrap(), &config());
    let stale: Vec<&String> = ingresses
        .iter()
        .filter(|n| !desired.objects.iter().any(|o| &o.id.name == *n))
        .collect();
    assert_eq!(stale.len(), 1, "{stale:?}");
    let d = fleet.diff(&config());
    assert!(
        d.objects.iter().any(|o| o.action == Action::Prune
            && o.kind == ChildKind::Ingress
            && &o.name == stale[0]),
        "{:?}",
        changes(&d)
    );
    assert!(d.pruned().all(|o| o.why == "no longer desired"));

    let name = stale[0].clone();
    fleet.object(ChildKind::Ingress, &name)["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("kura.dev/instance");
    let d = fleet.diff(&config());
    assert_eq!(d.pruned().count(), 0, "{:?}", changes(&d));
    assert!(
        d.kept
            .iter()
            .any(|k| k.contains(&name) && k.contains("no longer labelled")),
        "{:?}",
        d.kept
    );
}

#[test]
fn fields_taken_by_another_manager_rewrite_that_object_only() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    let service = fleet.object(ChildKind::Service, "acme");
    let fields = service["metadata"]["managedFields"][0].clone();
    // The rival's forced apply took the name label: the operator's set shrank.
    let mut ours = fields.clone();
    ours["fieldsV1"]["f:metadata"]["f:labels"]
        .as_object_mut()
        .unwrap()
        .remove("f:app.kubernetes.io/name");
    let mut rival = fields;
    rival["manager"] = json!("rival");
    rival["fieldsV1"] = json!({"f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}}});
    service["metadata"]["managedFields"] = json!([ours, rival]);
    let d = fleet.diff(&config());
    assert_eq!(changes(&d), ["~ Service acme"]);
    assert_eq!(d.objects[0].why, "fields taken by rival");
    assert_eq!(d.applied_revision, d.desired_revision);
}

#[test]
fn an_image_changed_on_the_cluster_is_taken_back_with_a_restart() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.object(ChildKind::StatefulSet, "acme")["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.example/kura:6.6.6");
    let d = fleet.diff(&config());
    assert_eq!(changes(&d), ["~ StatefulSet acme"]);
    assert!(d.objects[0].why.contains("image"), "{}", d.objects[0].why);
    assert!(d.pod_restart);
}

#[test]
fn a_force_token_writes_everything_and_restarts_nothing() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.instance.metadata.annotations =
        Some([("kura.dev/reapply-at".to_string(), "now".to_string())].into());
    let d = fleet.diff(&config());
    assert_eq!(d.objects.len(), fleet.objects.len());
    assert!(d.written().all(|o| o.why == "forced (kura.dev/reapply-at)"));
    assert!(!d.pod_restart);
}

#[test]
fn an_invalid_instance_lists_its_errors_with_their_fields() {
    let fleet = Fleet::converged(instance("acme", json!({})), &config());
    let mut i = fleet.instance.clone();
    i.spec.region = "mars".into();
    let d = diff_instance(&i, &config(), &fleet.live(false), false);
    assert_eq!(d.state, State::Invalid);
    assert!(d.objects.is_empty());
    assert_eq!(d.desired_revision, None);
    assert!(
        d.problems
            .iter()
            .any(|p| p.field.as_deref() == Some("spec.region") && p.message.contains("mars")),
        "{:?}",
        d.problems
    );
}

#[test]
fn a_paused_instance_writes_nothing() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.instance.spec.paused = true;
    let d = fleet.diff(&edited("domain: kura.test", "domain: kura2.test"));
    assert_eq!(d.state, State::Paused);
    assert!(d.objects.is_empty());
}

#[test]
fn a_child_being_deleted_is_waited_for_as_the_operator_waits() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    let meta = &mut fleet.object(ChildKind::ConfigMap, "acme-config")["metadata"];
    meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    meta["finalizers"] = json!(["example.com/hold"]);
    let d = fleet.diff(&config());
    assert_eq!(d.state, State::ChildTerminating);
    assert!(d.objects.is_empty(), "nothing written: {:?}", d.objects);
    assert!(
        d.problems[0].message.contains("ConfigMap ns/acme-config")
            && d.problems[0].message.contains("example.com/hold"),
        "{:?}",
        d.problems
    );
    let report = super::report::Report::new(vec![d]);
    assert_eq!(report.summary.terminating, 1);
    assert_eq!(report.exit_code(), 1);
    assert!(
        report.text().contains("objects being deleted"),
        "{}",
        report.text()
    );
}

#[test]
fn the_names_the_operator_reads_before_writing_are_read_and_a_taken_one_is_a_conflict() {
    // A first apply: every object is created, so every name is read.
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    let all: Vec<(ChildKind, String)> = fleet
        .objects
        .iter()
        .map(|(k, o)| (*k, o["metadata"]["name"].as_str().unwrap().to_string()))
        .collect();
    for (kind, name) in &all {
        fleet.remove(*kind, name);
    }
    let mut d = fleet.diff(&config());
    assert_eq!(d.state, State::Changes);
    let mut read: Vec<String> = super::names_to_read(&d)
        .iter()
        .map(|id| format!("{} {}", id.kind, id.name))
        .collect();
    read.sort();
    let mut want: Vec<String> = all.iter().map(|(k, n)| format!("{k} {n}")).collect();
    want.sort();
    assert_eq!(read, want);
    // One of them is someone else's: nothing would be written.
    super::names_taken(
        &mut d,
        vec!["Service ns/acme exists and was not created by this instance".into()],
    );
    assert_eq!(d.state, State::NameConflict);
    assert!(d.objects.is_empty() && !d.pod_restart);
    assert!(d.problems[0].message.contains("Service ns/acme"));
    let report = super::report::Report::new(vec![d]);
    assert_eq!(report.exit_code(), 1);
    // None taken: the diff stands.
    let mut free = fleet.diff(&config());
    super::names_taken(&mut free, Vec::new());
    assert_eq!(free, fleet.diff(&config()));
    // Nothing of a converged instance is read; a lone missing child is (the
    // operator reads it once its create-only apply is refused).
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    assert!(super::names_to_read(&fleet.diff(&config())).is_empty());
    fleet.remove(ChildKind::NetworkPolicy, "acme");
    let read: Vec<String> = super::names_to_read(&fleet.diff(&config()))
        .iter()
        .map(|id| format!("{} {}", id.kind, id.name))
        .collect();
    assert_eq!(read, ["NetworkPolicy acme"]);
    // An object handed over is updated, not created.
    let mut d = fleet.diff(&config());
    let id = super::names_to_read(&d)[0].clone();
    super::names_found(
        &mut d,
        super::NamesFound {
            taken: Vec::new(),
            existing: vec![(id, "exists: handed over with kura.dev/adopt".into())],
        },
    );
    assert_eq!(d.state, State::Changes);
    assert_eq!(d.objects[0].action, Action::Update, "{d:?}");
}

/// An instance stalled by a name conflict: the operator tries again as soon
/// as the names are free (`reconcile::name_wait`), and waits while one is
/// held. The preview shows the attempt without the wait, and the names it
/// reads say which: free, the creates stand; held, a name conflict.
#[test]
fn a_name_conflicts_stall_is_previewed_as_the_attempt_and_its_names_read() {
    use kura_core::api::{Condition, ConditionStatus, RetryStatus};
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.remove(ChildKind::ConfigMap, "acme-config");
    let status = fleet.instance.status.as_mut().unwrap();
    status.conditions.push(Condition {
        type_: kura_core::api::conditions::STALLED.into(),
        status: ConditionStatus::True,
        reason: "NameConflict".into(),
        message: "ConfigMap ns/acme-config exists and was not created by this instance".into(),
        observed_generation: None,
        last_transition_time: None,
    });
    status.retry = Some(RetryStatus {
        failures: 1,
        inputs_key: "any".into(),
        last_error: "name conflict".into(),
        last_failure_time: jiff::Timestamp::now().to_string(),
    });
    let d = fleet.diff(&config());
    assert_eq!(changes(&d), ["+ ConfigMap acme-config"], "{d:?}");
    let read: Vec<String> = super::names_to_read(&d)
        .iter()
        .map(|id| format!("{} {}", id.kind, id.name))
        .collect();
    assert_eq!(read, ["ConfigMap acme-config"]);
    // Freed: the create stands.
    let mut freed = d.clone();
    super::names_found(&mut freed, super::NamesFound::default());
    assert_eq!(freed.state, State::Changes);
    // Still held: the stall goes on, nothing written.
    let mut held = d;
    super::names_taken(
        &mut held,
        vec!["ConfigMap ns/acme-config exists and was not created by this instance".into()],
    );
    assert_eq!(held.state, State::NameConflict);
    assert!(held.objects.is_empty());
}

#[test]
fn a_name_taken_by_someone_else_is_a_conflict() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    fleet.object(ChildKind::ConfigMap, "acme-config")["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    let d = fleet.diff(&config());
    assert_eq!(d.state, State::NameConflict);
    assert!(d.objects.is_empty());
    assert!(
        d.problems[0].message.contains("ConfigMap ns/acme-config"),
        "{:?}",
        d.problems
    );
}

#[test]
fn a_new_storage_class_is_pinned_to_the_live_one_and_reported() {
    let fleet = Fleet::converged(instance("acme", json!({})), &config());
    let d = fleet.diff(&edited(
        "domain: kura.test\n  r2",
        "domain: kura.test\n    storageClass: fast\n  r2",
    ));
    assert_eq!(d.state, State::Unchanged, "{:?}", changes(&d));
    let pending = d.storage_pending.unwrap();
    assert!(
        pending.contains("storage class fast is configured"),
        "{pending}"
    );
}

#[test]
fn a_region_moving_to_host_network_prunes_the_gateway_without_restarting_pods() {
    let fleet = Fleet::converged(instance("acme", json!({"region": "r2"})), &config());
    assert!(
        fleet
            .objects
            .iter()
            .any(|(k, _)| *k == ChildKind::KuraGateway)
    );
    let host = edited("network: cloud", "network: host");
    let d = fleet.diff(&host);
    let got = changes(&d);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with("- KuraGateway gw-acme-r2-"), "{got:?}");
    assert_eq!(got[1], "~ Ingress acme");
    let ingress = d.written().next().unwrap();
    assert!(
        ingress
            .why
            .ends_with("its address is cleared (new ingress class)"),
        "{}",
        ingress.why
    );
    assert!(!d.pod_restart);

    // Another instance of the namespace still desires the gateway: it stays.
    let mut d = d;
    let other = instance(
        "acme-two",
        json!({"account": "acme", "region": "r2", "gateway": {"mode": "Dedicated"}}),
    );
    keep_used_gateways(&mut d, &[other], &[], &config());
    assert_eq!(changes(&d), ["~ Ingress acme"]);
    assert!(
        d.kept[0].contains("still used by KuraInstance acme-two"),
        "{:?}",
        d.kept
    );
    // Nothing uses it: it goes.
    let mut d = fleet.diff(&host);
    keep_used_gateways(
        &mut d,
        &[],
        &[("acme".into(), "kura-gw.x".into(), Some("acme".into()))],
        &host,
    );
    assert_eq!(d.pruned().count(), 1);
}

#[test]
fn show_diff_compares_the_operators_fields_only() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    // Another manager's label on the Ingress: not the operator's, never shown.
    let ingress = fleet.object(ChildKind::Ingress, "acme");
    ingress["metadata"]["labels"]["team"] = json!("blue");
    let live = fleet.live(true);
    let d = diff_instance(
        &fleet.instance,
        &edited("domain: kura.test", "domain: kura2.test"),
        &live,
        true,
    );
    let ingress = d
        .objects
        .iter()
        .find(|o| o.kind == ChildKind::Ingress)
        .unwrap();
    let diff = ingress.diff.as_deref().unwrap();
    assert!(diff.contains("-  - host: acme.r1.kura.test"), "{diff}");
    assert!(diff.contains("+  - host: acme.r1.kura2.test"), "{diff}");
    assert!(!diff.contains("team"), "{diff}");
    // Without --show-diff, no diff.
    assert!(
        fleet
            .diff(&config())
            .objects
            .iter()
            .all(|o| o.diff.is_none())
    );
}

/// `fleet`'s instance as the operator leaves it Ready after an apply of its
/// current generation.
/// The workload's pods: all available, or `available` of them.
fn workload_available(fleet: &mut Fleet, available: i64) {
    for (kind, object) in &mut fleet.objects {
        if *kind == ChildKind::StatefulSet {
            object["status"] = json!({"availableReplicas": available, "readyReplicas": available});
        }
    }
}

fn ready_on_its_generation(fleet: &mut Fleet) {
    // The budget binds only in a fleet it can hold back (of one instance, a
    // budget of one holds nobody: `kura_core::budget::never_binds`).
    if fleet.others.is_empty() {
        fleet.others = ["x1", "x2", "x3"]
            .into_iter()
            .map(|n| instance(n, json!({})))
            .collect();
    }
    let replicas = fleet
        .objects
        .iter()
        .find(|(k, _)| *k == ChildKind::StatefulSet)
        .and_then(|(_, o)| o["spec"]["replicas"].as_i64())
        .unwrap_or(1);
    workload_available(fleet, replicas);
    let generation = fleet.instance.metadata.generation;
    let status = fleet.instance.status.as_mut().unwrap();
    status.applied_generation = generation;
    status.observed_generation = generation;
    status.conditions = vec![kura_core::api::Condition::new(
        kura_core::api::conditions::READY,
        kura_core::api::ConditionStatus::True,
        "Active",
        "",
    )];
}

#[test]
fn a_configuration_change_that_restarts_a_ready_instances_pods_waits_for_the_budget() {
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config());
    ready_on_its_generation(&mut fleet);
    let domain = edited("domain: kura.test", "domain: kura2.test");
    let d = fleet.diff(&domain);
    assert!(d.pod_restart && d.waits_for_budget, "{d:?}");

    // Its pods down: it takes the change at once (it may be its fix).
    let mut down = Fleet::converged(instance("acme", json!({})), &config());
    ready_on_its_generation(&mut down);
    workload_available(&mut down, 0);
    let d = down.diff(&domain);
    assert!(d.pod_restart && !d.waits_for_budget);

    // Not Ready (say, its Ingress has no address) while its pods serve: the
    // restart takes that away, so it waits like any other, as the operator
    // decides (`rollout::admit`).
    let mut unready = Fleet::converged(instance("acme", json!({})), &config());
    ready_on_its_generation(&mut unready);
    unready.instance.status.as_mut().unwrap().conditions.clear();
    let d = unready.diff(&domain);
    assert!(d.pod_restart && d.waits_for_budget);

    // Paused: out of the budget.
    let mut paused = Fleet::converged(instance("acme", json!({})), &config());
    ready_on_its_generation(&mut paused);
    paused.instance.spec.paused = true;
    let d = paused.diff(&domain);
    assert!(!d.waits_for_budget, "{d:?}");

    // The user's change (a new generation) never waits.
    fleet.instance.metadata.generation = Some(2);
    let d = fleet.diff(&domain);
    assert!(d.pod_restart && !d.waits_for_budget);

    // A change that restarts no pod never waits.
    let mut quiet = Fleet::converged(instance("acme", json!({})), &config());
    ready_on_its_generation(&mut quiet);
    let d = quiet.diff(&edited(
        "sharedIngressClass: shared\n    domain: kura.test\n  r2",
        "sharedIngressClass: other\n    domain: kura.test\n  r2",
    ));
    assert!(!d.pod_restart && !d.waits_for_budget);
}

#[test]
fn the_budget_makes_waves_of_the_paced_restarts() {
    let mut diffs = Vec::new();
    for name in ["a", "b", "c", "d", "e", "f", "g"] {
        let mut fleet = Fleet::converged(instance(name, json!({})), &config());
        ready_on_its_generation(&mut fleet);
        diffs.push(fleet.diff(&edited("domain: kura.test", "domain: kura2.test")));
    }
    // One instance restarts at once: not Ready.
    diffs[6].waits_for_budget = false;
    let rollout = |max: &str| {
        serde_yaml::from_str::<kura_core::rollout::RolloutConfig>(&format!("maxUnavailable: {max}"))
            .unwrap()
    };
    let report = super::report::Report::new(diffs.clone()).with_budget(&rollout("2"), 7);
    let s = &report.summary;
    assert_eq!((s.pod_restarts, s.waiting_for_budget), (7, 6));
    assert_eq!((s.budget, s.waves), (2, 3));
    assert!(
        report
            .summary_line()
            .contains("6 paced by the fleet budget, 2 at a time: 3 waves"),
        "{}",
        report.summary_line()
    );
    // 25% of 7 rounds down to 1: one at a time.
    let s = super::report::Report::new(diffs.clone())
        .with_budget(&rollout("'25%'"), 7)
        .summary;
    assert_eq!((s.budget, s.waves), (1, 6));
    // The whole fleet at once: the budget holds nobody, so it paces nothing.
    let s = super::report::Report::new(diffs)
        .with_budget(&rollout("'100%'"), 7)
        .summary;
    assert_eq!((s.waiting_for_budget, s.waves), (0, 0));
}

#[test]
fn a_host_another_instance_holds_is_a_conflict_and_nothing_is_written() {
    let config = config();
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config);
    fleet.instance.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-02-01T00:00:00Z".parse().unwrap(),
        ));
    // Same account and region in another namespace, created first: its
    // default host is the same.
    let mut first = instance("acme", json!({}));
    first.metadata.namespace = Some("other".into());
    first.metadata.uid = Some("uid-first".into());
    first.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-01-01T00:00:00Z".parse().unwrap(),
    ));
    fleet.others.push(first);
    let d = fleet.diff(&edited("domain: kura.test", "domain: kura2.test"));
    assert_eq!(d.state, State::HostConflict, "{d:?}");
    assert!(d.objects.is_empty());
    assert!(
        d.problems[0].message.contains("other/acme"),
        "{:?}",
        d.problems
    );
    let report = super::report::Report::new(vec![d]);
    assert_eq!(report.exit_code(), 1);
    assert!(
        report
            .text()
            .contains("ns/acme: host conflict, nothing applied")
    );
}

/// The holder of a host moves to another in the same change: once its
/// Ingress is written the host is free, and the operator (which wakes those
/// waiting on a host) creates the waiting instance. The preview says so,
/// also when only the waiting instance is shown.
#[test]
fn a_host_its_holder_moves_off_goes_to_the_instance_waiting_for_it() {
    let config = config();
    let mut fleet = Fleet::converged(instance("acme", json!({})), &config);
    let mut waiting = instance("waiting", json!({"host": "acme.r1.kura.test"}));
    waiting.metadata.namespace = Some("other".into());
    fleet.others.push(waiting.clone());

    // The waiting instance alone shown: decided, then after its holders.
    let shown_alone = |fleet: &Fleet| {
        let live = fleet.live(false);
        let first = diff_instance(&waiting, &config, &live, false);
        let mut diffs = vec![first.clone()];
        let shown = std::slice::from_ref(&waiting);
        follow_freed_hosts(shown, &mut diffs, &config, &live, false);
        (first, diffs.remove(0))
    };

    // Negative control: the holder keeps the host, the other waits.
    let (_, after) = shown_alone(&fleet);
    assert_eq!(after.state, State::HostConflict, "{after:?}");
    assert_eq!(after.held_by, [("ns".to_string(), "acme".to_string())]);

    // The holder's spec moves it to another host (its Ingress not yet written).
    fleet.instance.spec.host = Some("moved.example".into());
    let (first, after) = shown_alone(&fleet);
    assert_eq!(first.state, State::HostConflict, "{first:?}");
    let diffs = [after];
    assert_eq!(diffs[0].state, State::Changes, "{:?}", diffs[0]);
    assert!(
        changes(&diffs[0]).contains(&"+ Ingress waiting".to_string()),
        "{:?}",
        changes(&diffs[0])
    );

    // Both shown, the holder first: the waiting one is decided after its
    // holder's write, in the first pass already.
    let live = fleet.live(false);
    let shown = [fleet.instance.clone(), waiting.clone()];
    let mut diffs: Vec<_> = shown
        .iter()
        .map(|i| diff_instance(i, &config, &live, false))
        .collect();
    assert_eq!(diffs[1].state, State::Changes, "{:?}", diffs[1]);
    follow_freed_hosts(&shown, &mut diffs, &config, &live, false);
    assert_eq!(
        changes(&diffs[0]),
        [
            "~ ConfigMap acme-config",
            "~ Ingress acme",
            "~ StatefulSet acme"
        ]
        .map(String::from)
        .to_vec()
    );
}
