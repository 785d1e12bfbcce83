//! Hostile input, shared by the unit tests (what `validate` says,
//! `render/tests/hostile/`) and the cluster tests (what the apiserver says,
//! through the feature `fixtures`): the corpus in
//! `render/tests/hostile/corpus.yaml`, and a generator of specs at and past
//! every limit.

use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

const CORPUS: &str = include_str!("tests/hostile/corpus.yaml");

/// The corpus: a base configuration and instance, and the cases that edit them.
#[derive(Deserialize)]
pub struct Corpus {
    config: Value,
    instance: Value,
    pub cases: Vec<Case>,
}

/// One case of `corpus.yaml` (its header says what each field means).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub case: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    pub valid: bool,
    #[serde(default)]
    pub rejected: Option<String>,
    #[serde(default)]
    pub says: Option<String>,
    #[serde(default)]
    pub admission: Option<String>,
}

pub fn corpus() -> Corpus {
    let raw: Value = serde_yaml::from_str(CORPUS).expect("corpus.yaml is YAML");
    serde_json::from_value(expand(raw)).expect("corpus.yaml has the corpus's fields")
}

impl Corpus {
    /// The instance of `case` (the base one without), as JSON.
    pub fn instance(&self, case: Option<&Case>) -> Value {
        let mut instance = self.instance.clone();
        if let Some(name) = case.and_then(|c| c.name.as_ref()) {
            instance["metadata"]["name"] = json!(name);
        }
        if let Some(spec) = case.and_then(|c| c.spec.as_ref()) {
            merge(&mut instance["spec"], spec);
        }
        instance
    }

    /// The operator configuration of `case` (the base one without), as YAML.
    pub fn config(&self, case: Option<&Case>) -> String {
        let mut config = self.config.clone();
        if let Some(patch) = case.and_then(|c| c.config.as_ref()) {
            merge(&mut config, patch);
        }
        serde_yaml::to_string(&config).expect("JSON converts to YAML")
    }

    /// The base configuration's region names.
    pub fn regions(&self) -> Vec<String> {
        let regions = self.config["regions"].as_object();
        regions
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// JSON merge patch (RFC 7386): objects merge key by key, null removes, the rest replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("an object");
    for (key, value) in fields {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// `{x*N}` in every key and string stands for N copies of x.
fn expand(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(expand_str(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(expand).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (expand_str(&k), expand(v)))
                .collect(),
        ),
        other => other,
    }
}

fn expand_str(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let repeat = after.find('}').and_then(|close| {
            let (unit, count) = after[..close].split_once('*')?;
            Some((unit.repeat(count.parse().ok()?), close))
        });
        match repeat {
            Some((repeated, close)) => {
                out.push_str(&repeated);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Mostly a value at or near a limit that must pass, sometimes one that must not.
fn either<T: std::fmt::Debug + 'static>(
    valid: impl Strategy<Value = T> + 'static,
    hostile: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![12 => valid, 1 => hostile].boxed()
}

fn strings(values: &[&str]) -> impl Strategy<Value = String> + use<> {
    let values: Vec<String> = values.iter().map(|v| expand_str(v)).collect();
    proptest::sample::select(values)
}

/// Hosts of 1 to 5 DNS labels, up to 253 characters, never ending in a numeric label.
fn host() -> impl Strategy<Value = String> {
    let label = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?";
    let last = "[a-z]([-a-z0-9]{0,61}[a-z0-9])?";
    let generated =
        (proptest::collection::vec(label, 0..5), last).prop_map(|(mut labels, last)| {
            labels.push(last);
            // At most 253 characters: drop leading labels (not filter: too many rejects).
            while labels.iter().map(|l| l.len() + 1).sum::<usize>() > 254 {
                labels.remove(0);
            }
            labels.join(".")
        });
    prop_oneof![
        4 => generated,
        1 => strings(&["{a*63}.{b*63}.{c*63}.{d*61}", "1.2.3.example.com", "xn--kse-qla.example", "cache"]),
    ]
}

fn hostile_host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,3}(\\.[0-9]{1,3}){3}",
        strings(&[
            "010.001.001.001",
            "cache.123",
            "*.example.com",
            "{a*64}.example.com",
            "{a*63}.{b*63}.{c*63}.{d*62}",
            "cache.example.com.",
            "Cache.example.com",
            "käse.example.com",
            "cache..example.com",
        ]),
    ]
}

fn name() -> impl Strategy<Value = String> {
    either(
        prop_oneof![
            "[a-z]([-a-z0-9]{0,38}[a-z0-9])?",
            "[a-z]{40}",
            "[a-z][a-z0-9]{0,3}-gw-[a-z0-9]{1,4}",
        ],
        prop_oneof![
            "gw-[a-z0-9]{1,8}",
            "[0-9][a-z0-9]{0,6}",
            "[a-z]{41}",
            "[a-z]{1,6}\\.[0-9a-f]{8}",
        ],
    )
}

fn account() -> impl Strategy<Value = String> {
    either(
        prop_oneof![
            "[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?",
            "[a-z]{40}",
            "[0-9]{1,5}"
        ],
        prop_oneof!["[A-Z][a-z]{0,4}", "[a-z]{41}", "[a-z]{1,4}-"],
    )
}

fn image() -> impl Strategy<Value = String> {
    either(
        prop_oneof![
            "ghcr\\.io/kura-dev/kura:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}",
            "[a-z0-9]{1,20}(/[a-z0-9]{1,20}){0,3}@sha256:[a-f0-9]{64}",
            "registry\\.example:[0-9]{1,5}/kura:[0-9]\\.[0-9]",
        ],
        strings(&["ghcr.io/kura-dev/kura", "GHCR.io/kura:1", "kura:"]),
    )
}

fn storage() -> impl Strategy<Value = Value> {
    let size = either(
        prop_oneof!["[1-9][0-9]{0,5}(Mi|Gi|Ti)", strings(&["999999Ti", "1Mi"])],
        strings(&["0Gi", "10GB", "1.5Gi", "1000000Gi"]),
    );
    let class = proptest::option::weighted(0.5, either(host(), "[A-Z][a-z_]{1,6}"));
    (size, class).prop_map(|(size, class)| match class {
        Some(class) => json!({"size": size, "class": class}),
        None => json!({"size": size}),
    })
}

fn amounts() -> impl Strategy<Value = Value> {
    let cpu = either(
        prop_oneof!["[1-9][0-9]{0,5}m", "[0-9]{1,3}(\\.[0-9]{1,3})?"],
        strings(&["-1", "1e3", "0.0001", "1.5m"]),
    );
    let memory = either(
        prop_oneof![
            "[1-9][0-9]{0,8}(Ki|Mi|Gi|Ti)?",
            strings(&["999999999Ti", "1"])
        ],
        strings(&["1GB", "0", "1.5Gi"]),
    );
    (proptest::option::of(cpu), proptest::option::of(memory))
        .prop_map(|(cpu, memory)| json!({"cpu": cpu, "memory": memory}))
        .prop_map(without_nulls)
}

fn resources() -> impl Strategy<Value = Option<Value>> {
    let both = (
        proptest::option::of(amounts()),
        proptest::option::of(amounts()),
    );
    let resources = both.prop_map(|(requests, limits)| {
        without_nulls(json!({"requests": requests, "limits": limits}))
    });
    proptest::option::weighted(0.5, resources)
}

fn env_var() -> impl Strategy<Value = Value> {
    let value = either(
        prop_oneof![
            "[ -~]{0,40}",
            "\\PC{0,20}",
            "[a-z\n]{0,20}",
            strings(&["{x*4096}", "$(KURA_ACCOUNT)", ""]),
        ],
        strings(&["a\0b", "{x*4097}"]),
    )
    .prop_map(|value| json!({"value": value}));
    let key = either(
        prop_oneof![
            "[-_a-zA-Z0-9][-._a-zA-Z0-9]{0,40}",
            strings(&[".token", "a..b", "{k*253}"])
        ],
        strings(&[".", "..", "..data", "a/b", ""]),
    );
    let secret =
        (host(), key).prop_map(|(name, key)| json!({"secretKeyRef": {"name": name, "key": key}}));
    prop_oneof![3 => value, 1 => secret]
}

fn env() -> impl Strategy<Value = Value> {
    let name = either(
        prop_oneof![20 => "[A-J_][A-Z0-9_]{0,15}", 1 => strings(&["{A*128}", "_"])],
        strings(&["KURA_X", "1BAD", "A-B", "{A*129}"]),
    );
    let vars = |sizes| proptest::collection::btree_map(name.clone(), env_var(), sizes);
    prop_oneof![3 => vars(0..=3), 1 => vars(60..=64)].prop_map(|vars| {
        let vars = vars.into_iter().map(|(name, mut var)| {
            var["name"] = json!(name);
            var
        });
        Value::Array(vars.collect())
    })
}

fn without_nulls(mut value: Value) -> Value {
    if let Value::Object(fields) = &mut value {
        fields.retain(|_, v| !v.is_null());
    }
    value
}

/// Instances of the corpus's base shape with every field generated: mostly values
/// at or near a limit that must pass, now and then one that must not.
pub fn specs(corpus: &Corpus) -> impl Strategy<Value = Value> + use<> {
    let base = corpus.instance(None);
    let region = either(
        proptest::sample::select(corpus.regions()),
        Just("nowhere".to_string()),
    );
    let replicas = either(1..=16i32, prop_oneof![Just(0), Just(17), Just(-1)]);
    let own_host = proptest::option::weighted(0.3, either(host(), hostile_host()));
    let aliases = proptest::collection::vec(either(host(), hostile_host()), 0..=8);
    let mode = strings(&["Auto", "Dedicated", "Shared"]);
    (
        (name(), account(), region, image(), replicas),
        (own_host, aliases, storage(), resources()),
        (env(), mode),
    )
        .prop_map(
            move |(
                (name, account, region, image, replicas),
                (host, aliases, storage, resources),
                (env, mode),
            )| {
                let mut instance = base.clone();
                instance["metadata"]["name"] = json!(name);
                instance["spec"] = without_nulls(json!({
                    "account": account, "region": region, "image": image, "replicas": replicas,
                    "host": host, "aliases": aliases, "storage": storage, "resources": resources,
                    "env": env, "gateway": {"mode": mode},
                }));
                instance
            },
        )
}
