//! What `helm template` renders, checked against the operator's own code: the
//! Deployment's args parse as `kura-operator run` flags, the ConfigMap parses as
//! the operator configuration, and the schema rejects what the operator would.

use std::time::Duration;

use clap::Parser;
use kura_core::config::OperatorConfig;
use kura_operator::run::RunArgs;
use serde_yaml::Value;

use super::*;

/// `kura-operator run` as main.rs parses it.
#[derive(Parser)]
struct Run {
    #[command(flatten)]
    args: RunArgs,
}

fn container(objects: &[Value]) -> &Value {
    let deployments = of_kind(objects, "Deployment");
    assert_eq!(deployments.len(), 1);
    &deployments[0]["spec"]["template"]["spec"]["containers"][0]
}

fn run_args(objects: &[Value]) -> RunArgs {
    let args: Vec<String> = container(objects)["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect();
    match Run::try_parse_from(std::iter::once("run".to_string()).chain(args.clone())) {
        Ok(run) => run.args,
        Err(e) => panic!("the chart's args {args:?} are not `kura-operator run` flags: {e}"),
    }
}

#[test]
fn deployment_args_are_run_flags_from_values() {
    let defaults = template("rel", "ops", &[]);
    let args = run_args(&defaults);
    assert_eq!(args.config.to_str(), Some("/etc/kura-operator/config.yaml"));
    assert_eq!(args.metrics_addr.port(), 8080);
    assert_eq!(args.namespace, None, "all namespaces by default");
    // On by default: a rolling update runs the old and the new pod at once.
    assert!(args.leader_elect, "one replica elects too (helm upgrade)");
    assert_eq!(args.log_format, "text");
    assert_eq!(args.status_refresh_rate, 5.0);

    let custom = template(
        "rel",
        "ops",
        &[
            "--set",
            "watchNamespace=apps,logFormat=json,resync=90s,concurrency=4,retryBudget=7,stallWindow=1h,statusRefreshRate=0.5",
            "--set",
            "leaderElection.enabled=true,leaderElection.leaseName=kura-lock,leaderElection.leaseDuration=30s",
        ],
    );
    let args = run_args(&custom);
    assert_eq!(args.namespace.as_deref(), Some("apps"));
    assert_eq!(args.log_format, "json");
    assert_eq!(args.resync, Duration::from_secs(90));
    assert_eq!(args.concurrency, 4);
    assert_eq!(args.retry_budget, 7);
    assert_eq!(args.stall_window, Duration::from_secs(3600));
    assert_eq!(args.status_refresh_rate, 0.5);
    assert!(args.leader_elect);
    assert_eq!(args.lease_namespace.as_deref(), Some("ops"));
    assert_eq!(args.lease_name, "kura-lock");
    assert_eq!(args.lease_duration, Duration::from_secs(30));

    // Several replicas elect a leader even when not asked to.
    let args = run_args(&template("rel", "ops", &["--set", "replicas=2"]));
    assert!(args.leader_elect);
    assert_eq!(args.lease_namespace.as_deref(), Some("ops"));
}

/// `shards` reaches `--shards` with leader election and the Leases and
/// ledgers it needs in the release namespace; one shard renders none of it.
#[test]
fn shards_render_the_flag_the_strategy_and_their_rbac() {
    let objects = template("rel", "ops", &["--set", "shards=4,replicas=2"]);
    let args = run_args(&objects);
    assert_eq!(args.shards, 4);
    assert!(args.leader_elect);
    let deployment = &of_kind(&objects, "Deployment")[0];
    assert_eq!(
        deployment["spec"]["strategy"]["type"].as_str(),
        Some("Recreate")
    );
    let rules = |objects: &[Value]| {
        let election = objects
            .iter()
            .find(|o| {
                o["kind"] == "Role" && o["metadata"]["name"] == "rel-kura-operator-leader-election"
            })
            .expect("the leader-election Role");
        serde_yaml::to_string(&election["rules"]).unwrap()
    };
    let text = rules(&objects);
    assert!(
        text.contains("kura-operator-budget") && text.contains("kura-operator-hosts"),
        "the two ledgers, by name: {text}"
    );
    assert!(
        text.contains("delete"),
        "stale membership Leases are deleted: {text}"
    );

    let one = template("rel", "ops", &["--set", "replicas=2"]);
    assert_eq!(run_args(&one).shards, 1);
    let text = rules(&one);
    assert!(
        !text.contains("budget") && !text.contains("delete"),
        "one shard: {text}"
    );
}

#[test]
fn deployment_probes_config_mount_and_security_context() {
    let objects = template("rel", "ops", &[]);
    let c = container(&objects);
    assert_eq!(c["ports"][0]["name"], "metrics");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());

    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    let pod = &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["automountServiceAccountToken"], true);
    assert_eq!(pod["serviceAccountName"], "rel-kura-operator");

    // --config points into the mounted ConfigMap.
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/etc/kura-operator");
    let volume = &pod["volumes"][0];
    assert_eq!(volume["name"], c["volumeMounts"][0]["name"]);
    let config_map = &of_kind(&objects, "ConfigMap")[0];
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    assert!(config_map["data"]["config.yaml"].is_string());
}

fn rendered_config(objects: &[Value]) -> OperatorConfig {
    let text = of_kind(objects, "ConfigMap")[0]["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    OperatorConfig::parse(&text).unwrap_or_else(|e| {
        panic!("the chart's config is not a valid operator config: {e}\n{text}")
    })
}

#[test]
fn config_map_is_the_operator_config_from_values() {
    // The defaults are a configuration the operator accepts.
    rendered_config(&template("rel", "ops", &[]));

    // examples/config.yaml given as `config:` comes out as the same configuration.
    let example = std::fs::read_to_string(repo().join("examples/config.yaml")).unwrap();
    let values =
        std::env::temp_dir().join(format!("kura-chart-values-{}.yaml", std::process::id()));
    let indented: String = example.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(&values, format!("config:\n{indented}")).unwrap();
    let objects = template("rel", "ops", &["-f", values.to_str().unwrap()]);
    let _ = std::fs::remove_file(&values);
    assert_eq!(
        rendered_config(&objects),
        OperatorConfig::parse(&example).unwrap()
    );
}

/// The endpoint check is on in the chart's default configuration (its
/// example region says nothing of it), and the value the chart README gives
/// turns it off in the rendered configuration, the region otherwise as it was.
#[test]
fn the_endpoint_check_is_on_by_default_and_the_readmes_value_turns_it_off() {
    let default = rendered_config(&template("rel", "ops", &[]));
    assert!(default.regions["eu-west-1"].endpoint_check.enabled);
    let set = "config.regions.eu-west-1.endpointCheck.enabled=false";
    let off = rendered_config(&template("rel", "ops", &["--set", set]));
    let region = &off.regions["eu-west-1"];
    assert!(!region.endpoint_check.enabled, "{set}");
    assert_eq!(region.domain, default.regions["eu-west-1"].domain);
}

#[test]
fn optional_objects_render_only_when_enabled() {
    let kinds = |extra: &[&str]| -> Vec<String> {
        template("rel", "ops", extra)
            .iter()
            .map(|o| o["kind"].as_str().unwrap().to_string())
            .collect()
    };
    let defaults = kinds(&[]);
    for kind in [
        "Deployment",
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "ClusterRole",
        // Leader election is on by default: its Lease Role comes with it.
        "Role",
    ] {
        assert!(
            defaults.contains(&kind.to_string()),
            "{kind} missing: {defaults:?}"
        );
    }
    for kind in ["ServiceMonitor", "PodDisruptionBudget"] {
        assert!(
            !defaults.contains(&kind.to_string()),
            "{kind} rendered by default: {defaults:?}"
        );
    }
    // Without leader election, its Lease Role goes; the configuration's stays.
    let roles = |extra: &[&str]| -> Vec<String> {
        template("rel", "ops", extra)
            .iter()
            .filter(|o| o["kind"] == "Role")
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        roles(&["--set", "leaderElection.enabled=false"]),
        ["rel-kura-operator-config"]
    );
    assert!(kinds(&["--set", "serviceMonitor.enabled=true"]).contains(&"ServiceMonitor".into()));
    assert!(kinds(&["--set", "replicas=2"]).contains(&"PodDisruptionBudget".into()));
}

fn crds_of(objects: &[Value]) -> Vec<&Value> {
    of_kind(objects, "CustomResourceDefinition")
}

/// The CRDs are templates of the release, rendered by default from the
/// chart's copies of crds/ with nothing changed but the keep annotation and
/// the chart's labels; `crds.enabled=false` renders none, `crds.keep=false`
/// no keep annotation.
#[test]
fn crds_render_by_default_kept_on_uninstall_and_only_when_enabled() {
    let defaults = template("rel", "ops", &[]);
    let crds = crds_of(&defaults);
    let mut names: Vec<&str> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["kuragateways.kura.dev", "kurainstances.kura.dev"]);
    for crd in &crds {
        let name = crd["metadata"]["name"].as_str().unwrap();
        let annotations = &crd["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/resource-policy"], "keep", "{name}");
        assert_eq!(
            annotations["kura.dev/operator-version"],
            env!("CARGO_PKG_VERSION"),
            "{name}: the generated CRD's version stamp"
        );
        assert_eq!(
            crd["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        // The rest is crds/ as generated.
        let file = repo()
            .join("crds")
            .join(format!("kura.dev_{}.yaml", name.split('.').next().unwrap()));
        let generated: Value =
            serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            numbers_as_floats(&crd["spec"]),
            numbers_as_floats(&generated["spec"]),
            "{name}"
        );
    }

    assert!(crds_of(&template("rel", "ops", &["--set", "crds.enabled=false"])).is_empty());

    let unkept = template(
        "rel",
        "ops",
        &[
            "--set",
            "crds.keep=false",
            "--set",
            "crds.annotations.example\\.com/owner=platform",
        ],
    );
    let unkept = crds_of(&unkept);
    assert_eq!(unkept.len(), 2);
    for crd in unkept {
        let annotations = &crd["metadata"]["annotations"];
        assert!(
            annotations["helm.sh/resource-policy"].is_null(),
            "{annotations:?}"
        );
        assert_eq!(annotations["example.com/owner"], "platform");
        assert_eq!(
            annotations["kura.dev/operator-version"],
            env!("CARGO_PKG_VERSION")
        );
    }
}

/// `value` with every number a float: Helm's fromYaml/toYaml writes the
/// `maximum: 8.0` of a generated schema as `8` (the apiserver reads both as
/// the same float64).
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => Value::from(n.as_f64().unwrap()),
        Value::Sequence(items) => Value::Sequence(items.iter().map(numbers_as_floats).collect()),
        Value::Mapping(map) => Value::Mapping(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_as_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Every `shards` and leader-election setting recreates the operator's pods
/// on an upgrade: a rolling update ran the single-Lease pod of `shards=1`
/// beside the pods of `shards=2` (two generations acting at once).
#[test]
fn the_deployment_is_recreated_whatever_the_shards() {
    for set in [
        "shards=1",
        "shards=1,replicas=2",
        "shards=2,replicas=2",
        "shards=1,leaderElection.enabled=false",
    ] {
        let objects = template("rel", "ops", &["--set", set]);
        let deployment = &of_kind(&objects, "Deployment")[0];
        assert_eq!(
            deployment["spec"]["strategy"]["type"].as_str(),
            Some("Recreate"),
            "{set}"
        );
    }
}

#[test]
fn schema_rejects_bad_values_naming_the_field() {
    let chart = chart_dir();
    let render_with = |set: &str| {
        helm(&[
            "template",
            "rel",
            chart.to_str().unwrap(),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            set,
        ])
    };
    for (set, field) in [
        ("replicas=0", "/replicas"),
        ("logFormat=xml", "/logFormat"),
        ("replicaz=2", "'replicaz' not allowed"),
        (
            "config.regions.eu-west-1.network=metal",
            "/config/regions/eu-west-1/network",
        ),
        ("resync=10x", "/resync"),
        ("watchNamespace=Not_A_Namespace", "/watchNamespace"),
        ("config.gateway.replicas=9", "/config/gateway/replicas"),
        ("statusRefreshRate=0", "/statusRefreshRate"),
        ("statusRefreshRate=0.0", "/statusRefreshRate"),
    ] {
        let out = render_with(set);
        assert!(!out.ok, "--set {set} must be rejected");
        assert!(
            out.stderr.contains("schema") && out.stderr.contains(field),
            "--set {set}: the error must name {field}: {}",
            out.stderr
        );
    }
    // The control: the same keys with good values render.
    let out =
        render_with("replicas=1,logFormat=json,config.regions.eu-west-1.network=host,resync=30s");
    assert!(out.ok, "{}", out.stderr);
}

/// The operator's own roles: wildcards, Secrets and PersistentVolumeClaims
/// never appear, in any mode; Pods only to be listed and watched (the
/// operator reports a dedicated gateway's pod the scheduler cannot place: it
/// caches the gateways' pods by label, their name, labels and `PodScheduled`
/// condition, and nothing else of a pod: no get, no write, no `exec` or `log`
/// subresource); and `bind` only on the two ClusterRoles of dedicated
/// gateways, by name, never `escalate`. Those two are the gateways' (bound by
/// the operator to each gateway's ServiceAccount, never to the operator's):
/// the namespaced one may read Secrets (Traefik's TLS), the cluster one only
/// reads IngressClasses and Nodes.
#[test]
fn operator_rbac_has_no_wildcards_secrets_or_claims_and_binds_only_the_gateway_roles() {
    for extra in [&[][..], &["--set", "watchNamespace=apps,replicas=2"][..]] {
        let objects = template("rel", "ops", extra);
        let gateway_roles = [
            "ops-rel-kura-operator-gateway",
            "ops-rel-kura-operator-gateway-cluster",
        ];
        let roles: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
            .collect();
        let names: Vec<&str> = roles
            .iter()
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        for gateway_role in gateway_roles {
            assert!(
                names.contains(&gateway_role),
                "{gateway_role} missing: {names:?}"
            );
        }
        assert_eq!(gateway_bound_to_operator(&objects, &gateway_roles), None);
        let mut bindable = Vec::new();
        for role in roles {
            let name = role["metadata"]["name"].as_str().unwrap();
            let of_gateway = gateway_roles.contains(&name);
            for rule in role["rules"].as_sequence().unwrap() {
                let items = |key: &str| -> Vec<String> {
                    rule[key]
                        .as_sequence()
                        .into_iter()
                        .flatten()
                        .map(|i| i.as_str().unwrap().to_string())
                        .collect()
                };
                for key in ["apiGroups", "resources", "verbs", "resourceNames"] {
                    for item in items(key) {
                        assert!(!item.contains('*'), "wildcard in {rule:?}");
                    }
                }
                let verbs = items("verbs");
                assert!(
                    !verbs.iter().any(|v| v == "escalate" || v == "impersonate"),
                    "{name}: {verbs:?}"
                );
                if of_gateway {
                    let writes = ["create", "patch", "delete", "deletecollection", "bind"];
                    assert!(
                        verbs.iter().all(|v| !writes.contains(&v.as_str())),
                        "{name} (a gateway's) writes: {verbs:?}"
                    );
                    continue;
                }
                for resource in items("resources") {
                    let forbidden = ["secrets", "persistentvolumeclaims"];
                    let base = resource.split('/').next().unwrap();
                    assert!(!forbidden.contains(&base), "{resource} granted in {name}");
                    if base == "pods" {
                        assert_eq!(resource, "pods", "a pod subresource in {name}");
                        assert!(
                            verbs.iter().all(|v| v == "list" || v == "watch"),
                            "pods may only be listed and watched, {name} grants {verbs:?}"
                        );
                    }
                    if base == "clusterroles" || base == "roles" {
                        assert_eq!(verbs, ["bind"], "{name}: {resource} beyond bind");
                        let by_name = items("resourceNames");
                        assert!(!by_name.is_empty(), "{name}: bind without resourceNames");
                        bindable.extend(by_name);
                    }
                }
            }
        }
        bindable.sort();
        assert_eq!(bindable, gateway_roles, "what the operator may bind");
    }
}

/// A binding in the chart that grants one of the gateways' roles to anyone
/// (the operator's ServiceAccount included): the chart binds neither, the
/// operator binds them per gateway.
fn gateway_bound_to_operator(objects: &[Value], gateway_roles: &[&str]) -> Option<String> {
    objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .find(|b| gateway_roles.contains(&b["roleRef"]["name"].as_str().unwrap_or_default()))
        .map(|b| b["metadata"]["name"].as_str().unwrap().to_string())
}

/// The monitoring objects are off by default; enabled, each carries its
/// shipped file as it is (the file promtool and the Prometheus test read).
#[test]
fn monitoring_objects_render_only_when_enabled_and_carry_the_shipped_files() {
    let files = chart_dir().join("files");
    let read = |name: &str| std::fs::read_to_string(files.join(name)).unwrap();
    let defaults = template("rel", "ops", &[]);
    assert!(of_kind(&defaults, "PrometheusRule").is_empty());
    let config_maps = |objects: &[Value]| -> Vec<String> {
        of_kind(objects, "ConfigMap")
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(config_maps(&defaults), ["rel-kura-operator-config"]);
    let all = template(
        "rel",
        "ops",
        &[
            "--set",
            "prometheusRule.enabled=true,grafanaDashboard.enabled=true,kubeStateMetrics.enabled=true,grafanaDashboard.namespace=grafana",
        ],
    );
    let rule = of_kind(&all, "PrometheusRule");
    let alerts: Value = serde_yaml::from_str(&read("alerts.yaml")).unwrap();
    assert_eq!(rule[0]["spec"], alerts);
    let data = |name: &str, key: &str| -> (String, String) {
        let cm = of_kind(&all, "ConfigMap")
            .into_iter()
            .find(|c| c["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("ConfigMap {name}"));
        (
            cm["metadata"]["namespace"].as_str().unwrap().to_string(),
            cm["data"][key].as_str().unwrap().to_string(),
        )
    };
    let (ns, dashboard) = data("rel-kura-operator-dashboard", "kura-operator.json");
    assert_eq!(ns, "grafana");
    assert_eq!(dashboard, read("dashboard.json").trim_end());
    let (_, ksm) = data("rel-kura-operator-kube-state-metrics", "kura.yaml");
    assert_eq!(ksm, read("kube-state-metrics.yaml").trim_end());

    // Runbooks of one's own: every alert's runbook_url under the value, and
    // nothing else of the rules changed.
    let own = template(
        "rel",
        "ops",
        &[
            "--set",
            "prometheusRule.enabled=true,prometheusRule.runbookBaseUrl=https://wiki.example/ops/kura/",
        ],
    );
    let spec = &of_kind(&own, "PrometheusRule")[0]["spec"];
    let mut expected = alerts.clone();
    let mut links = 0;
    for group in expected["groups"].as_sequence_mut().unwrap() {
        for rule in group["rules"].as_sequence_mut().unwrap() {
            let alert = rule["alert"].as_str().unwrap().to_string();
            rule["annotations"]["runbook_url"] =
                Value::from(format!("https://wiki.example/ops/kura/{alert}.md"));
            links += 1;
        }
    }
    assert!(links >= 9);
    assert_eq!(spec, &expected);
}

/// `kubeVersion` admits the tested minors, 1.33 to 1.37 (with vendor
/// suffixes), and refuses the ones around them, naming the range.
#[test]
fn the_chart_installs_on_the_tested_kubernetes_minors_only() {
    let chart = chart_dir();
    let render = |version: &str| {
        helm(&[
            "template",
            "rel",
            chart.to_str().unwrap(),
            "--kube-version",
            version,
        ])
    };
    for ok in ["1.33.0", "1.34.2-eks-1234", "1.37.9"] {
        let out = render(ok);
        assert!(out.ok, "{ok}: {}", out.stderr);
    }
    for refused in ["1.32.9", "1.38.0"] {
        let out = render(refused);
        assert!(
            !out.ok && out.stderr.contains(">=1.33.0-0 <1.38.0-0"),
            "{refused}: {}",
            out.stderr
        );
    }
}
