//! One test per rule of `spec.env`: variables reach the pod verbatim, so a bad
//! name, a clash with the operator's own `KURA_` variables or an ambiguous source
//! must be refused before rendering.

use super::*;

#[test]
fn rejects_more_than_64_env_vars() {
    let vars: Vec<EnvVar> = (0..65).map(|n| env(&format!("VAR_{n}"), "x")).collect();
    assert_rejected(
        |i| i.spec.env = vars,
        "spec.env",
        "at most 64 variables, got 65",
    );
}

#[test]
fn rejects_env_name_that_is_not_a_variable_name() {
    let vars = vec![env("GOOD", "x"), env("1BAD", "x")];
    let needle = r#""1BAD" is not a valid variable name"#;
    assert_rejected(|i| i.spec.env = vars, "spec.env[1].name", needle);
}

#[test]
fn rejects_env_name_with_the_reserved_kura_prefix() {
    let vars = vec![env("KURA_DEBUG", "1")];
    let needle = "the KURA_ prefix is reserved for the operator";
    assert_rejected(|i| i.spec.env = vars, "spec.env[0].name", needle);
}

#[test]
fn rejects_duplicate_env_name() {
    let vars = vec![env("LOG_LEVEL", "info"), env("LOG_LEVEL", "debug")];
    let needle = r#"duplicate variable "LOG_LEVEL""#;
    assert_rejected(|i| i.spec.env = vars, "spec.env[1].name", needle);
}

#[test]
fn rejects_env_with_both_value_and_secret_key_ref() {
    let mut var = env("TOKEN", "plain");
    var.secret_key_ref = secret_ref("token-secret");
    let needle = "exactly one of value or secretKeyRef must be set";
    assert_rejected(|i| i.spec.env = vec![var], "spec.env[0]", needle);
}

#[test]
fn rejects_env_with_neither_value_nor_secret_key_ref() {
    let mut var = env("TOKEN", "");
    var.value = None;
    let needle = "exactly one of value or secretKeyRef must be set";
    assert_rejected(|i| i.spec.env = vec![var], "spec.env[0]", needle);
}

#[test]
fn rejects_env_value_longer_than_4096_characters() {
    let vars = vec![env("BIG", &"x".repeat(4097))];
    let needle = "at most 4096 characters, got 4097";
    assert_rejected(|i| i.spec.env = vars, "spec.env[0].value", needle);
}

#[test]
fn rejects_secret_key_ref_name_that_is_not_a_dns_subdomain() {
    let mut var = env("TOKEN", "");
    (var.value, var.secret_key_ref) = (None, secret_ref("Token_Secret"));
    let needle = r#""Token_Secret" must be a DNS subdomain"#;
    assert_rejected(
        |i| i.spec.env = vec![var],
        "spec.env[0].secretKeyRef.name",
        needle,
    );
}
