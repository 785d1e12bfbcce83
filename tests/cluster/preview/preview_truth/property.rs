//! Generated fleets and edits: for every edit, what `diff` predicted is what
//! the operator wrote, and afterwards `diff` has nothing left to change.
//!
//! A fleet is three instances over two namespaces (random regions, accounts
//! from a small pool so that two may ask for one host, random specs from the
//! valid space); its creation is the first step, then edits of spec fields,
//! region configuration fields, force tokens, pause, deletes of children and
//! a rival manager's write to a child. Each step is previewed with `-A` or
//! with `-n` per namespace (the generator picks).
//!
//! `KURA_PREVIEW_SEED` replays a run (the failure message gives it);
//! `KURA_PREVIEW_CASES` sets the number of steps (default 12, six per fleet,
//! about 2 minutes here; the longer job runs 96: `KURA_PREVIEW_CASES=96 cargo
//! test --test cluster -- preview::preview_truth::property`). Nothing is shrunk: a live cluster is too slow for it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::{Bench, Writes, config_yaml, predicted, shown, written};
use crate::support::apply_json;
use kura_core::api::KuraInstance;
use kura_core::kind::ChildKind;

const STEPS_PER_FLEET: usize = 6;

/// splitmix64: small, seeded, the same sequence everywhere.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[derive(Clone, Debug)]
pub struct Region {
    domain: &'static str,
    class: &'static str,
    cpu: Option<&'static str>,
}

impl Region {
    pub fn random(rng: &mut Rng) -> Region {
        Region {
            domain: ["kura.test", "kura2.test"][rng.below(2)],
            class: super::CLASSES[rng.below(2)],
            cpu: *rng.pick(&[None, Some("100m")]),
        }
    }
}

pub fn config(regions: &[Region; 2]) -> String {
    config_yaml(&[
        ("r1", regions[0].domain, regions[0].class, regions[0].cpu),
        ("r2", regions[1].domain, regions[1].class, regions[1].cpu),
    ])
}

#[derive(Clone, Debug)]
pub struct Instance {
    pub namespace: String,
    pub name: String,
    pub account: String,
    pub region: &'static str,
    pub spec: Value,
}

impl Instance {
    /// The mutable fields, from the valid space.
    fn random_field(&mut self, rng: &mut Rng, fleet: usize) -> String {
        let spec = &mut self.spec;
        match rng.below(6) {
            0 => {
                spec["image"] =
                    json!(rng.pick(&["registry.example/kura:1.0.0", "registry.example/kura:1.1.0"]))
            }
            1 => spec["replicas"] = json!(1 + rng.below(2)),
            2 => match rng.below(3) {
                0 => _ = spec.as_object_mut().unwrap().remove("host"),
                n => spec["host"] = json!(format!("h{n}-f{fleet}.custom.test")),
            },
            3 => {
                spec["aliases"] = if rng.chance(50) {
                    json!([format!("{}-f{fleet}.alias.test", self.name)])
                } else {
                    json!([])
                }
            }
            4 => {
                spec["env"] = if rng.chance(50) {
                    json!([{"name": "MODE", "value": rng.pick(&["fast", "slow"])}])
                } else {
                    json!([])
                }
            }
            _ => match rng.below(2) {
                0 => _ = spec.as_object_mut().unwrap().remove("resources"),
                _ => spec["resources"] = json!({"requests": {"cpu": rng.pick(&["200m", "300m"])}}),
            },
        }
        format!("spec of {}/{}: {}", self.namespace, self.name, self.spec)
    }

    fn manifest(&self) -> Value {
        json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self.spec,
        })
    }
}

pub fn random_instance(rng: &mut Rng, fleet: usize, namespaces: &[String], i: usize) -> Instance {
    let name = format!("i{i}");
    let account = format!("acct{}-f{fleet}", rng.below(2));
    let region = *rng.pick(&["r1", "r2"]);
    let mut instance = Instance {
        namespace: rng.pick(namespaces).clone(),
        spec: json!({
            "account": account, "region": region,
            "image": "registry.example/kura:1.0.0",
            "storage": {"size": "1Gi"},
        }),
        name,
        account,
        region,
    };
    for _ in 0..rng.below(3) {
        instance.random_field(rng, fleet);
    }
    instance.spec["paused"] = json!(rng.chance(10));
    instance
}

pub async fn apply_instance(client: &Client, instance: &Instance) {
    let api: Api<KuraInstance> = Api::namespaced(client.clone(), &instance.namespace);
    apply_json(&api, "test", instance.manifest())
        .await
        .unwrap_or_else(|e| panic!("apply {}: {e}", instance.manifest()));
}

/// The live children of `instance` (by its label), as (kind, name).
async fn children(client: &Client, instance: &Instance) -> Vec<(ChildKind, String)> {
    let mut out = Vec::new();
    for kind in ChildKind::ALL.into_iter().filter(|k| k.namespaced()) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &instance.namespace, &kind.api_resource());
        let params = ListParams::default().labels(&format!("kura.dev/instance={}", instance.name));
        for o in api.list(&params).await.unwrap().items {
            out.push((kind, o.metadata.name.unwrap_or_default()));
        }
    }
    out
}

/// One edit (made while the operator is stopped, here); returns what it was.
pub async fn edit(
    client: &Client,
    rng: &mut Rng,
    fleet: usize,
    instances: &mut [Instance],
    regions: &mut [Region; 2],
) -> String {
    let at = rng.below(instances.len());
    let target = &mut instances[at];
    match rng.below(6) {
        0 => {
            let what = target.random_field(rng, fleet);
            apply_instance(client, target).await;
            what
        }
        1 => {
            let r = rng.below(2);
            regions[r] = Region::random(rng);
            format!("region r{} configuration: {:?}", r + 1, regions[r])
        }
        2 => {
            let token = format!("t{}", rng.next());
            let api: Api<KuraInstance> = Api::namespaced(client.clone(), &target.namespace);
            let body = json!({"metadata": {"annotations": {"kura.dev/reapply-at": token}}});
            api.patch(&target.name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .unwrap();
            format!(
                "force token {token} on {}/{}",
                target.namespace, target.name
            )
        }
        3 => {
            let paused = target.spec["paused"] != true;
            target.spec["paused"] = json!(paused);
            apply_instance(client, target).await;
            format!("paused: {paused} on {}/{}", target.namespace, target.name)
        }
        n => {
            let live = children(client, target).await;
            if live.is_empty() {
                let what = target.random_field(rng, fleet);
                apply_instance(client, target).await;
                return format!("(no child to touch) {what}");
            }
            let (kind, name) = rng.pick(&live).clone();
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &target.namespace, &kind.api_resource());
            if n == 4 {
                api.delete(&name, &DeleteParams::default()).await.unwrap();
                format!("delete {} {}/{name}", kind.kind(), target.namespace)
            } else {
                let body = json!({
                    "apiVersion": kind.api_version(), "kind": kind.kind(),
                    "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "rival"}},
                });
                api.patch(
                    &name,
                    &PatchParams::apply("rival").force(),
                    &Patch::Apply(body),
                )
                .await
                .unwrap();
                format!(
                    "rival manager takes label app.kubernetes.io/name of {} {}/{name}",
                    kind.kind(),
                    target.namespace
                )
            }
        }
    }
}

/// The preview of one step, in the scope the generator picked.
fn preview(bench: &Bench, config: &str, all: bool, namespaces: &[String]) -> (Writes, String) {
    let scope: BTreeSet<String> = namespaces.iter().cloned().collect();
    let scopes: Vec<Vec<&str>> = if all {
        vec![vec!["-A"]]
    } else {
        namespaces.iter().map(|n| vec!["-n", n.as_str()]).collect()
    };
    let mut writes = Writes::new();
    let mut text = String::new();
    for scope_args in scopes {
        let (code, report) = bench.diff(config, &scope_args);
        let _ = write!(
            text,
            "diff {scope_args:?} (exit {code}):\n{}",
            shown(&report)
        );
        for (object, actions) in predicted(&report, &scope) {
            writes.entry(object).or_default().extend(actions);
        }
    }
    (writes, text)
}

#[tokio::test]
async fn preview_truth_generated_fleets_and_edits() {
    let seed: u64 = match std::env::var("KURA_PREVIEW_SEED") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("KURA_PREVIEW_SEED={v:?}: {e}")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    let cases: usize = match std::env::var("KURA_PREVIEW_CASES") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("KURA_PREVIEW_CASES={v:?}: {e}")),
        Err(_) => 12,
    };
    let replay = format!("KURA_PREVIEW_SEED={seed} KURA_PREVIEW_CASES={cases}");
    eprintln!("preview property: {replay}");
    let mut rng = Rng(seed);
    let mut regions = [Region::random(&mut rng), Region::random(&mut rng)];
    let mut bench = Bench::start("preview-prop", 24, &config(&regions), &[]).await;
    let mut failures = Vec::new();
    let mut case = 0;
    let mut fleet = 0;
    while case < cases {
        let namespaces = vec![format!("p{fleet}a"), format!("p{fleet}b")];
        for ns in &namespaces {
            bench.namespace(ns, json!({})).await;
        }
        let scope: BTreeSet<String> = namespaces.iter().cloned().collect();
        let mut instances: Vec<Instance> = (0..3)
            .map(|i| random_instance(&mut rng, fleet, &namespaces, i))
            .collect();
        for step in 0..STEPS_PER_FLEET.min(cases - case) {
            bench.pause();
            let what = if step == 0 {
                for i in &instances {
                    apply_instance(&bench.client, i).await;
                }
                let shown: Vec<String> = instances
                    .iter()
                    .map(|i| {
                        format!(
                            "{}/{} (account {}, {}): {}",
                            i.namespace, i.name, i.account, i.region, i.spec
                        )
                    })
                    .collect();
                format!("fleet {fleet} created: {}", shown.join("; "))
            } else {
                edit(&bench.client, &mut rng, fleet, &mut instances, &mut regions).await
            };
            let next_config = config(&regions);
            let since = jiff::Timestamp::now();
            let all = rng.chance(50);
            let (expected, text) = preview(&bench, &next_config, all, &namespaces);
            if next_config != bench.config {
                bench.set_config(&next_config);
            }
            bench.resume();
            let label = format!("{replay}: case {case} (fleet {fleet}, step {step}): {what}");
            eprintln!("{label}");
            let (code, after) = bench.converge(instances.len(), &label).await;
            let wrote = written(&bench.audit_log(), since, &scope);
            eprintln!(
                "  {}",
                if expected == wrote {
                    "as predicted"
                } else {
                    "NOT as predicted"
                }
            );
            if expected != wrote {
                failures.push(format!(
                    "{label}\n  predicted: {expected:?}\n  written:   {wrote:?}\n{text}"
                ));
            }
            let s = &after["summary"];
            let blocked = s["invalid"].as_u64().unwrap_or(0)
                + s["nameConflicts"].as_u64().unwrap_or(0)
                + s["hostConflicts"].as_u64().unwrap_or(0)
                + s["terminating"].as_u64().unwrap_or(0);
            // Exit 0 afterwards, or 1 only for instances that cannot be applied
            // (two asked for one host): nothing of theirs to write either.
            if code != i32::from(blocked > 0) {
                failures.push(format!(
                    "{label}\n  diff -A exits {code} after converging:\n{}",
                    shown(&after)
                ));
            }
            case += 1;
        }
        // The fleet stays (converged, in the operator's scope and in -A's):
        // deleting a namespace took minutes on a fresh plane.
        fleet += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases: the preview was not what the operator did (replay: {replay}):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
