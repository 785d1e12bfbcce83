//! One test per validation rule: each breaks exactly one thing in a valid instance
//! and checks the field path and a distinctive part of the message, because both end
//! up in the Event a user reads. Env rules are in `env_rules`, configuration rules
//! in `config_rules`, the resolved values of valid input in `resolution`.

use super::*;
use crate::api::{GatewaySpec, KuraInstance, KuraInstanceSpec, SecretKeyRef, StorageSpec};

mod config_rules;
mod env_rules;
mod resolution;

const EXAMPLE_CONFIG: &str = include_str!("../../../../examples/config.yaml");

fn config() -> OperatorConfig {
    OperatorConfig::parse(EXAMPLE_CONFIG).expect("the example configuration is valid")
}

/// A valid instance in the cloud region `eu-west-1`; each test breaks one thing.
fn instance() -> KuraInstance {
    let mut instance = KuraInstance::new(
        "acme-eu",
        KuraInstanceSpec {
            account: "acme".into(),
            region: "eu-west-1".into(),
            image: "ghcr.io/kura-dev/kura:1.8.2".into(),
            replicas: 1,
            host: None,
            aliases: vec![],
            storage: StorageSpec {
                size: "10Gi".into(),
                class: None,
            },
            resources: None,
            env: vec![],
            gateway: GatewaySpec::default(),
            paused: false,
            pause: None,
            maintenance_window: None,
        },
    );
    instance.metadata.namespace = Some("kura-demo".into());
    instance
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        secret_key_ref: None,
    }
}

fn secret_ref(name: &str) -> Option<SecretKeyRef> {
    Some(SecretKeyRef {
        name: name.into(),
        key: "token".into(),
    })
}

fn amounts(cpu: Option<&str>, memory: Option<&str>) -> Option<ResourceAmounts> {
    Some(ResourceAmounts {
        cpu: cpu.map(Into::into),
        memory: memory.map(Into::into),
    })
}

fn resources(requests: Option<ResourceAmounts>, limits: Option<ResourceAmounts>) -> ResourcesSpec {
    ResourcesSpec { requests, limits }
}

/// Validate the example instance after `edit` and return what was rejected.
fn rejected(edit: impl FnOnce(&mut KuraInstance)) -> Vec<FieldError> {
    let mut broken = instance();
    edit(&mut broken);
    validate(&broken, &config())
        .expect_err("the edited instance must be rejected")
        .0
}

/// The rule under test fired at `path` with a message containing `needle`, and no
/// rule fired anywhere else (so the test proves this rule, not a neighbour).
#[track_caller]
fn assert_only_error_at(errors: &[FieldError], path: &str, needle: &str) {
    assert!(
        errors.iter().all(|e| e.path == path),
        "only {path} may be rejected: {errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.message.contains(needle)),
        "an error at {path} must say {needle:?}: {errors:?}"
    );
}

#[track_caller]
fn assert_rejected(edit: impl FnOnce(&mut KuraInstance), path: &str, needle: &str) {
    assert_only_error_at(&rejected(edit), path, needle);
}

#[test]
fn rejects_metadata_name_longer_than_40_characters() {
    let long = "a".repeat(41);
    assert_rejected(
        |i| i.metadata.name = Some(long),
        "metadata.name",
        "at most 40 characters",
    );
}

#[test]
fn rejects_metadata_name_that_is_not_a_dns_label() {
    let name = Some("acme.eu".to_string());
    assert_rejected(
        |i| i.metadata.name = name,
        "metadata.name",
        "must be a DNS-1035 label",
    );
}

/// The name of an instance's Service; Kubernetes before 1.36 refuses a leading digit.
#[test]
fn rejects_metadata_name_starting_with_a_digit() {
    let name = Some("1acme".to_string());
    assert_rejected(
        |i| i.metadata.name = name,
        "metadata.name",
        "must be a DNS-1035 label",
    );
}

/// An instance named `gw-acme-c1` took over the dedicated gateway `gw-acme-c1`'s
/// Service. An instance that predates the CRD rule is Invalid: nothing is applied.
#[test]
fn rejects_metadata_name_with_the_reserved_gateway_prefix() {
    let name = Some("gw-acme-c1".to_string());
    let needle = "the prefix gw- is reserved for the names of dedicated gateways";
    assert_rejected(|i| i.metadata.name = name, "metadata.name", needle);
}

#[test]
fn rejects_missing_metadata_name() {
    assert_rejected(
        |i| i.metadata.name = None,
        "metadata.name",
        "must be a DNS-1035 label",
    );
}

#[test]
fn rejects_account_that_is_not_a_dns_label() {
    let needle = r#""Acme" must be a DNS label"#;
    assert_rejected(|i| i.spec.account = "Acme".into(), "spec.account", needle);
}

#[test]
fn rejects_account_longer_than_40_characters() {
    let long = "a".repeat(41);
    assert_rejected(
        |i| i.spec.account = long,
        "spec.account",
        "of 1 to 40 characters",
    );
}

#[test]
fn rejects_region_name_that_is_not_a_dns_label() {
    let needle = "of 1 to 32 characters";
    assert_rejected(|i| i.spec.region = "EU_WEST".into(), "spec.region", needle);
}

#[test]
fn rejects_unknown_region_listing_the_known_ones() {
    let needle =
        r#"region "us-east-9" is not in the operator configuration (known: eu-west-1, fra-metal)"#;
    assert_rejected(
        |i| i.spec.region = "us-east-9".into(),
        "spec.region",
        needle,
    );
}

#[test]
fn rejects_image_without_tag() {
    let needle = "is not an image reference with an explicit tag or digest";
    assert_rejected(
        |i| i.spec.image = "ghcr.io/kura-dev/kura".into(),
        "spec.image",
        needle,
    );
}

#[test]
fn rejects_image_longer_than_255_characters() {
    let long = format!("ghcr.io/{}:1", "a".repeat(250));
    assert_rejected(
        |i| i.spec.image = long,
        "spec.image",
        "explicit tag or digest",
    );
}

#[test]
fn rejects_zero_replicas() {
    assert_rejected(
        |i| i.spec.replicas = 0,
        "spec.replicas",
        "between 1 and 16, got 0",
    );
}

#[test]
fn rejects_17_replicas() {
    assert_rejected(
        |i| i.spec.replicas = 17,
        "spec.replicas",
        "between 1 and 16, got 17",
    );
}

#[test]
fn rejects_host_that_is_not_a_dns_subdomain() {
    let host = Some("Cache.Example.com".to_string());
    assert_rejected(
        |i| i.spec.host = host,
        "spec.host",
        "must be a DNS subdomain",
    );
}

/// The apiserver refuses an Ingress rule for an IP address.
#[test]
fn rejects_host_that_is_an_ip_address() {
    let host = Some("10.0.0.1".to_string());
    let needle = r#""10.0.0.1" is an IP address or ends in a numeric label"#;
    assert_rejected(|i| i.spec.host = host, "spec.host", needle);
}

/// A default host longer than 253 characters failed at apply with 422, then stalled.
#[test]
fn rejects_a_default_host_longer_than_253_characters() {
    // The longest region name with the longest domain the configuration allows.
    let (mut config, region) = (config(), "r".repeat(32));
    let mut long = config.regions["eu-west-1"].clone();
    long.domain = format!("{}.{}.{}", "d".repeat(63), "o".repeat(63), "m".repeat(52));
    config.regions.insert(region.clone(), long);
    let mut instance = instance();
    (instance.spec.account, instance.spec.region) = ("a".repeat(40), region.clone());
    let errors = validate(&instance, &config).unwrap_err().0;
    let path = format!("spec.host (defaulted from account, region and regions.{region}.domain)");
    assert_only_error_at(&errors, &path, "is 254 characters; a host has at most 253");
    instance.spec.host = Some("cache.example.com".into());
    assert!(
        validate(&instance, &config).is_ok(),
        "an own host resolves it"
    );
}

#[test]
fn rejects_more_than_8_aliases() {
    let aliases: Vec<String> = (0..9).map(|n| format!("a{n}.example.com")).collect();
    assert_rejected(
        |i| i.spec.aliases = aliases,
        "spec.aliases",
        "at most 8 aliases, got 9",
    );
}

#[test]
fn rejects_alias_that_is_not_a_dns_subdomain() {
    let aliases = vec!["ok.example.com".to_string(), "bad_alias".to_string()];
    let needle = r#""bad_alias" must be a DNS subdomain"#;
    assert_rejected(|i| i.spec.aliases = aliases, "spec.aliases[1]", needle);
}

#[test]
fn rejects_duplicate_alias() {
    let aliases = vec!["a.example.com".to_string(), "a.example.com".to_string()];
    let needle = r#"duplicate alias "a.example.com""#;
    assert_rejected(|i| i.spec.aliases = aliases, "spec.aliases[1]", needle);
}

#[test]
fn rejects_alias_equal_to_host() {
    let edit = |i: &mut KuraInstance| {
        i.spec.host = Some("a.example.com".into());
        i.spec.aliases = vec!["a.example.com".into()];
    };
    let needle = r#""a.example.com" is already the instance's host"#;
    assert_rejected(edit, "spec.aliases[0]", needle);
}

/// Alias Ingresses are named `<instance>.<8 hex digits of sha256(host)>`; these two
/// hosts were found by search to share their digits.
#[test]
fn rejects_aliases_whose_ingress_names_collide() {
    let (a, b) = ("c39633.example.com", "c65521.example.com");
    assert_eq!(
        names::alias_ingress("acme-eu", a),
        names::alias_ingress("acme-eu", b)
    );
    let needle =
        r#""c65521.example.com" gets the same Ingress name "acme-eu.fe0427b6" as spec.aliases[0]"#;
    assert_rejected(
        |i| i.spec.aliases = vec![a.into(), b.into()],
        "spec.aliases[1]",
        needle,
    );
}

#[test]
fn rejects_storage_size_in_decimal_units() {
    let needle = r#""10GB" is not a size such as 10Gi"#;
    assert_rejected(
        |i| i.spec.storage.size = "10GB".into(),
        "spec.storage.size",
        needle,
    );
}

#[test]
fn rejects_storage_class_that_is_not_a_dns_subdomain() {
    let class = Some("Fast_SSD".to_string());
    let needle = r#""Fast_SSD" must be a DNS subdomain"#;
    assert_rejected(
        |i| i.spec.storage.class = class,
        "spec.storage.class",
        needle,
    );
}

#[test]
fn rejects_cpu_request_that_is_not_a_quantity() {
    let r = resources(amounts(Some("lots"), None), None);
    let needle = r#""lots" is not a CPU quantity"#;
    assert_rejected(
        |i| i.spec.resources = Some(r),
        "spec.resources.requests.cpu",
        needle,
    );
}

#[test]
fn rejects_memory_limit_that_is_not_a_quantity() {
    let r = resources(None, amounts(None, Some("1GB")));
    let needle = r#""1GB" is not a memory quantity"#;
    assert_rejected(
        |i| i.spec.resources = Some(r),
        "spec.resources.limits.memory",
        needle,
    );
}

#[test]
fn rejects_cpu_limit_below_request() {
    let r = resources(amounts(Some("500m"), None), amounts(Some("0.25"), None));
    let needle = "0.25 must be at least spec.resources.requests.cpu (500m)";
    assert_rejected(
        |i| i.spec.resources = Some(r),
        "spec.resources.limits.cpu",
        needle,
    );
}

#[test]
fn rejects_memory_limit_below_request() {
    let r = resources(amounts(None, Some("1Gi")), amounts(None, Some("512Mi")));
    let needle = "512Mi must be at least spec.resources.requests.memory (1Gi)";
    assert_rejected(
        |i| i.spec.resources = Some(r),
        "spec.resources.limits.memory",
        needle,
    );
}

/// docs/incidents.md #1: a dedicated gateway can never bind :80/:443 on a bare-metal node.
#[test]
fn rejects_dedicated_gateway_in_a_host_network_region() {
    let edit = |i: &mut KuraInstance| {
        i.spec.region = "fra-metal".into();
        i.spec.gateway.mode = GatewayMode::Dedicated;
    };
    let needle = r#"Dedicated is not possible in region "fra-metal": it uses host networking"#;
    assert_rejected(edit, "spec.gateway.mode", needle);
}

/// A user fixes everything in one edit only if every error is reported at once.
#[test]
fn reports_every_broken_field_at_once_in_field_order() {
    let errors = rejected(|i| {
        (i.spec.image, i.spec.replicas) = ("kura".into(), 0);
        i.spec.storage.size = "10GB".into();
    });
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["spec.image", "spec.replicas", "spec.storage.size"]);
}

/// The joined form is what an Event carries: every path with its message.
#[test]
fn errors_display_as_path_and_message_joined_by_semicolons() {
    let errors = ValidationErrors(rejected(|i| {
        (i.spec.replicas, i.spec.account) = (0, "A".into())
    }));
    let shown = errors.to_string();
    assert!(
        shown.starts_with(r#"spec.account: "A" must be a DNS label"#),
        "{shown}"
    );
    assert!(
        shown.ends_with("; spec.replicas: must be between 1 and 16, got 0"),
        "{shown}"
    );
}

#[test]
fn a_window_or_a_pause_end_that_cannot_be_read_is_invalid_naming_its_field() {
    let config = config();
    let mut i = instance();
    i.spec.maintenance_window = Some(crate::api::MaintenanceWindow {
        days: vec![],
        start: "02:00".into(),
        duration: "2h".into(),
        time_zone: Some("Mars/Olympus_Mons".into()),
    });
    i.spec.pause = Some(crate::api::PauseSpec {
        until: Some("tomorrow".into()),
        ..Default::default()
    });
    let errs = validate(&i, &config).unwrap_err();
    let paths: Vec<&str> = errs.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["spec.maintenanceWindow.timeZone", "spec.pause.until"]
    );
    assert!(errs.to_string().contains("Mars/Olympus_Mons"), "{errs}");
}

fn with_pause_until(until: &str) -> KuraInstance {
    let mut i = instance();
    i.spec.paused = true;
    i.spec.pause = Some(crate::api::PauseSpec {
        until: Some(until.into()),
        ..Default::default()
    });
    i
}

/// What the CRD admits in `spec.pause.until` is valid, up to the end of the
/// year 9999 (past jiff's range: a pause for ever); what it refuses is not,
/// with the field (the apiserver's answers in `time::tests`).
#[test]
fn a_pause_end_is_valid_exactly_when_admission_takes_it() {
    let config = config();
    for until in [
        "2026-12-24T18:00:00Z",
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59.999999999+14:00",
        "2000-01-01T00:00:00.000000001Z",
        "2026-12-24T18:00:00.1234567899999Z",
        "2026-12-24T18:00:00+24:00",
    ] {
        assert!(
            validate(&with_pause_until(until), &config).is_ok(),
            "{until}"
        );
    }
    for (until, needle) in [
        ("2016-12-31T23:59:60Z", "no leap second"),
        ("2026-12-24t18:00:00z", "not an RFC 3339 time"),
        ("2026-12-24T18:00Z", "not an RFC 3339 time"),
        ("9999-12-31T23:59:59-00:01", "years 1 to 9999"),
        ("2000-01-01T00:00:00Z", "must be after 2000-01-01T00:00:00Z"),
        ("1999-12-31T23:59:59Z", "must be after 2000-01-01T00:00:00Z"),
        ("0000-01-01T00:00:00Z", "years 1 to 9999"),
    ] {
        let errs = validate(&with_pause_until(until), &config).unwrap_err();
        assert_only_error_at(&errs.0, "spec.pause.until", needle);
    }
}

fn with_window(start: &str, duration: &str) -> KuraInstance {
    let mut i = instance();
    i.spec.maintenance_window = Some(crate::api::MaintenanceWindow {
        days: vec![],
        start: start.into(),
        duration: duration.into(),
        time_zone: None,
    });
    i
}

/// A window's start and duration are held to the CRD's patterns (and its
/// duration to CEL's range), so that `1h30m` is valid as at admission, and
/// what the configuration's windows may spell otherwise (`5400s`,
/// `PT1H30M`) is not, as at admission.
#[test]
fn a_window_is_valid_exactly_when_admission_takes_it() {
    let config = config();
    for (start, duration) in [
        ("02:00", "1h30m"),
        ("23:59", "1m"),
        ("00:00", "168h"),
        ("02:00", "10080m"),
        ("02:00", "167h60m"),
    ] {
        assert!(
            validate(&with_window(start, duration), &config).is_ok(),
            "{start} {duration}"
        );
    }
    for duration in [
        "5400s",
        "PT1H30M",
        "1h 30m",
        "1.5h",
        "90",
        "1h0m",
        "0h90m",
        "169h",
        "99999h99999m",
    ] {
        let errs = validate(&with_window("02:00", duration), &config).unwrap_err();
        assert_only_error_at(
            &errs.0,
            "spec.maintenanceWindow.duration",
            "is not a length of whole minutes or hours from 1m to 168h",
        );
    }
    for start in ["+1:05", "-0:30", "2:00", "24:00", "02:60"] {
        let errs = validate(&with_window(start, "1h"), &config).unwrap_err();
        assert_only_error_at(
            &errs.0,
            "spec.maintenanceWindow.start",
            "is not a time of day such as 02:00",
        );
    }
}
