//! One test per rule of the operator configuration, through `OperatorConfig::parse`
//! (the path the operator takes at start-up): each breaks one field of the example
//! configuration.

use serde_yaml::Value;

use super::*;
use crate::config::ConfigError;

/// The example configuration as a YAML tree, after `edit`.
fn edited(edit: impl FnOnce(&mut Value)) -> String {
    let mut tree: Value = serde_yaml::from_str(EXAMPLE_CONFIG).unwrap();
    edit(&mut tree);
    serde_yaml::to_string(&tree).unwrap()
}

#[track_caller]
fn assert_config_rejected(edit: impl FnOnce(&mut Value), path: &str, needle: &str) {
    match OperatorConfig::parse(&edited(edit)) {
        Err(ConfigError::Invalid { errors, .. }) => assert_only_error_at(&errors.0, path, needle),
        other => panic!("expected a validation error at {path}, got {other:?}"),
    }
}

/// Errors serde reports before validation: the message must name the culprit.
#[track_caller]
fn assert_unparsable(edit: impl FnOnce(&mut Value), needle: &str) {
    match OperatorConfig::parse(&edited(edit)) {
        Err(e @ ConfigError::Parse { .. }) => {
            let shown = e.to_string();
            assert!(shown.contains(needle), "{shown:?} must contain {needle:?}");
        }
        other => panic!("expected a parse error mentioning {needle:?}, got {other:?}"),
    }
}

fn eu(tree: &mut Value) -> &mut Value {
    &mut tree["regions"]["eu-west-1"]
}

#[test]
fn rejects_empty_gateway_image() {
    let edit = |c: &mut Value| c["gateway"]["image"] = "".into();
    assert_config_rejected(edit, "gateway.image", "explicit tag or digest");
}

#[test]
fn rejects_gateway_controller_without_a_domain_prefix() {
    let edit = |c: &mut Value| c["gateway"]["controller"] = "nginx".into();
    assert_config_rejected(edit, "gateway.controller", "must be a domain-prefixed path");
}

#[test]
fn rejects_zero_gateway_replicas() {
    let edit = |c: &mut Value| c["gateway"]["replicas"] = 0.into();
    assert_config_rejected(edit, "gateway.replicas", "must be between 1 and 8");
}

#[test]
fn rejects_nine_gateway_replicas() {
    let edit = |c: &mut Value| c["gateway"]["replicas"] = 9.into();
    assert_config_rejected(edit, "gateway.replicas", "must be between 1 and 8");
}

#[test]
fn rejects_empty_regions() {
    let edit = |c: &mut Value| c["regions"] = Value::Mapping(Default::default());
    assert_config_rejected(edit, "regions", "at least one region is required");
}

#[test]
fn rejects_region_name_that_is_not_a_dns_label() {
    let edit = |c: &mut Value| {
        let regions = c["regions"].as_mapping_mut().unwrap();
        let eu = regions.remove("eu-west-1").unwrap();
        regions.insert("EU_West".into(), eu);
    };
    assert_config_rejected(edit, "regions.EU_West", "region name must be a DNS label");
}

#[test]
fn rejects_shared_ingress_class_that_is_not_a_dns_subdomain() {
    let edit = |c: &mut Value| eu(c)["sharedIngressClass"] = "Kura_Shared".into();
    let path = "regions.eu-west-1.sharedIngressClass";
    assert_config_rejected(
        edit,
        path,
        "must be a DNS subdomain of at most 253 characters",
    );
}

#[test]
fn rejects_domain_that_is_not_a_dns_subdomain() {
    let edit = |c: &mut Value| eu(c)["domain"] = "kura..example.com".into();
    let needle = "must be a DNS subdomain";
    assert_config_rejected(edit, "regions.eu-west-1.domain", needle);
}

#[test]
fn rejects_storage_class_that_is_not_a_dns_subdomain() {
    let edit = |c: &mut Value| eu(c)["storageClass"] = "Standard SSD".into();
    let path = "regions.eu-west-1.storageClass";
    assert_config_rejected(edit, path, "must be a DNS subdomain");
}

#[test]
fn rejects_default_cpu_request_that_is_not_a_quantity() {
    let edit = |c: &mut Value| eu(c)["defaultResources"]["requests"]["cpu"] = "2 cores".into();
    let path = "regions.eu-west-1.defaultResources.requests.cpu";
    assert_config_rejected(edit, path, r#""2 cores" is not a CPU quantity"#);
}

#[test]
fn rejects_default_memory_limit_that_is_not_a_quantity() {
    let edit = |c: &mut Value| eu(c)["defaultResources"]["limits"]["memory"] = "1GB".into();
    let path = "regions.eu-west-1.defaultResources.limits.memory";
    assert_config_rejected(edit, path, r#""1GB" is not a memory quantity"#);
}

/// A typo must not silently fall back to a default.
#[test]
fn rejects_unknown_field_naming_it() {
    assert_unparsable(
        |c| eu(c)["sharedIngresClass"] = "x".into(),
        "sharedIngresClass",
    );
}

#[test]
fn rejects_unknown_network_mode_naming_the_known_ones() {
    let needle = "unknown variant `metal`, expected `cloud` or `host`";
    assert_unparsable(|c| eu(c)["network"] = "metal".into(), needle);
}

#[test]
fn rejects_a_configuration_without_regions() {
    let edit = |c: &mut Value| _ = c.as_mapping_mut().unwrap().remove("regions");
    assert_unparsable(edit, "missing field `regions`");
}

#[test]
fn gateway_defaults_apply_when_the_gateway_section_is_absent() {
    let text = edited(|c| _ = c.as_mapping_mut().unwrap().remove("gateway"));
    let parsed = OperatorConfig::parse(&text).unwrap();
    assert_eq!(parsed.gateway, crate::config::GatewayDefaults::default());
}

#[test]
fn rejects_an_endpoint_check_path_that_is_not_absolute() {
    let edit = |c: &mut Value| {
        eu(c)["endpointCheck"] = serde_yaml::from_str("{enabled: true, path: up}").unwrap()
    };
    assert_config_rejected(
        edit,
        "regions.eu-west-1.endpointCheck.path",
        "an absolute path",
    );
}

#[test]
fn rejects_endpoint_check_port_zero() {
    let edit = |c: &mut Value| {
        eu(c)["endpointCheck"] = serde_yaml::from_str("{enabled: true, port: 0}").unwrap()
    };
    assert_config_rejected(edit, "regions.eu-west-1.endpointCheck.port", "1 to 65535");
}

/// On by default: a region that says nothing of the check (the example
/// configuration's) is checked on port 80 at /up, and one that names only a
/// port or a path is checked too. Only `enabled: false` turns it off.
#[test]
fn an_omitted_endpoint_check_or_enabled_means_on() {
    let example = OperatorConfig::parse(EXAMPLE_CONFIG).unwrap();
    for (name, region) in &example.regions {
        assert_eq!(
            region.endpoint_check,
            crate::config::EndpointCheck {
                enabled: true,
                port: 80,
                path: "/up".into()
            },
            "region {name} omits endpointCheck"
        );
    }
    let moved = |check: &str| {
        let text = edited(|c| eu(c)["endpointCheck"] = serde_yaml::from_str(check).unwrap());
        OperatorConfig::parse(&text).unwrap().regions["eu-west-1"]
            .endpoint_check
            .clone()
    };
    let port = moved("{port: 8080}");
    assert!(port.enabled && port.port == 8080, "{port:?}");
    let path = moved("{path: /health}");
    assert!(path.enabled && path.path == "/health", "{path:?}");
    assert!(!moved("{enabled: false}").enabled);
}

/// Serialised, the default check is left out and anything else is written:
/// read back, an explicit `enabled: false` stays off (left out, it would
/// come back on).
#[test]
fn an_endpoint_check_turned_off_survives_serialisation() {
    let off = OperatorConfig::parse(&edited(|c| {
        eu(c)["endpointCheck"] = serde_yaml::from_str("{enabled: false}").unwrap()
    }))
    .unwrap();
    let text = serde_yaml::to_string(&off).unwrap();
    assert!(text.contains("enabled: false"), "{text}");
    assert_eq!(OperatorConfig::parse(&text).unwrap(), off);
    let example = OperatorConfig::parse(EXAMPLE_CONFIG).unwrap();
    let text = serde_yaml::to_string(&example).unwrap();
    assert!(!text.contains("endpointCheck"), "{text}");
    assert_eq!(OperatorConfig::parse(&text).unwrap(), example);
}

fn with_rollout(rollout: &str) -> impl FnOnce(&mut Value) {
    let rollout: Value = serde_yaml::from_str(rollout).unwrap();
    move |c: &mut Value| c["rollout"] = rollout
}

/// Every duration and time of the configuration reads as `time` reads it:
/// `1h30m`, ISO 8601, and a deadline at the end of the year 9999 (past
/// jiff's range: never).
#[test]
fn durations_and_times_read_in_every_form() {
    let config = OperatorConfig::parse(&edited(|c| {
        with_rollout(
            "{progressDeadline: 1h30m, windowDeadline: {at: '9999-12-31T23:59:59Z', after: PT72H}}",
        )(c);
        eu(c)["maintenanceWindow"] =
            serde_yaml::from_str("{start: '02:00', duration: 1h30m}").unwrap();
    }))
    .unwrap();
    assert_eq!(
        config.rollout.deadline(),
        std::time::Duration::from_secs(5400)
    );
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    assert_eq!(
        config
            .rollout
            .window_deadline
            .unwrap()
            .for_change(None, now),
        Some(now + jiff::SignedDuration::from_hours(72))
    );
}

#[test]
fn rejects_a_negative_or_unreadable_duration_naming_the_field() {
    assert_config_rejected(
        with_rollout("{progressDeadline: -10m}"),
        "rollout.progressDeadline",
        "is negative",
    );
    assert_config_rejected(
        with_rollout("{progressDeadline: 10 parsecs}"),
        "rollout.progressDeadline",
        "is not a duration such as 90s, 10m or 1h30m",
    );
    assert_config_rejected(
        with_rollout("{progressDeadline: 9s}"),
        "rollout.progressDeadline",
        "at least 10s",
    );
    assert_config_rejected(
        with_rollout("{windowDeadline: {after: 1h ago}}"),
        "rollout.windowDeadline.after",
        "is negative",
    );
    assert_config_rejected(
        with_rollout("{windowDeadline: {at: '2016-12-31T25:00:00Z'}}"),
        "rollout.windowDeadline.at",
        "is not an RFC 3339 time",
    );
    assert_config_rejected(
        |c| {
            eu(c)["maintenanceWindow"] =
                serde_yaml::from_str("{start: '02:00', duration: 90s}").unwrap()
        },
        "regions.eu-west-1.maintenanceWindow.duration",
        "whole minutes or hours",
    );
}
