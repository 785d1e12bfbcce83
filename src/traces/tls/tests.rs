use std::collections::HashMap;
use std::path::PathBuf;

use super::client_config;

/// A self-signed certificate and its key (P-256, made with openssl for these
/// tests only; valid for a century, which rustls does not check here).
fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/traces/tls")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn config(vars: &[(&str, String)]) -> Result<rustls::ClientConfig, String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    client_config(|k| map.get(k).cloned())
}

#[test]
fn without_variables_the_system_roots_verify_and_no_client_certificate_is_sent() {
    let config = config(&[]).unwrap();
    assert!(!config.client_auth_cert_resolver.has_certs());
}

#[test]
fn a_private_ca_is_trusted_and_the_traces_variant_wins() {
    config(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", fixture("test-cert.pem"))]).unwrap();
    config(&[
        (
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            fixture("test-cert.pem"),
        ),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "/nonexistent/ca.pem".into(),
        ),
    ])
    .unwrap();
}

#[test]
fn a_missing_or_empty_certificate_file_names_the_variable() {
    let missing = config(&[(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "/nonexistent/ca.pem".into(),
    )])
    .unwrap_err();
    assert!(
        missing.starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent/ca.pem"),
        "{missing}"
    );
    let empty =
        config(&[("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", fixture("tests.rs"))]).unwrap_err();
    assert!(
        empty.starts_with("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=")
            && empty.ends_with("no PEM certificate in the file"),
        "{empty}"
    );
}

#[test]
fn a_client_certificate_goes_with_its_key() {
    let both = config(&[
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            fixture("test-cert.pem"),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", fixture("test-key.pem")),
    ])
    .unwrap();
    assert!(both.client_auth_cert_resolver.has_certs());
    let alone = config(&[(
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        fixture("test-cert.pem"),
    )])
    .unwrap_err();
    assert!(
        alone.starts_with("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is set alone"),
        "{alone}"
    );
    let no_key = config(&[
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            fixture("test-cert.pem"),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", fixture("test-cert.pem")),
    ])
    .unwrap_err();
    assert!(
        no_key.starts_with("OTEL_EXPORTER_OTLP_CLIENT_KEY="),
        "{no_key}"
    );
}
