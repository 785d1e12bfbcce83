//! `spec.env`: variables reach the pod verbatim, so a bad name, a clash with the
//! operator's own `KURA_` variables, an ambiguous source or a Secret reference the
//! apiserver refuses must be caught before rendering.

use std::collections::BTreeSet;

use super::{FieldError, matches, rules, subdomain_field};
use crate::api::instance::{ENV_NAME, EnvVar, MAX_ENV, MAX_ENV_VALUE};

pub(super) fn check(env: &[EnvVar], errs: &mut Vec<FieldError>) {
    if env.len() > MAX_ENV {
        errs.push(FieldError::new(
            "spec.env",
            format!("at most {MAX_ENV} variables, got {}", env.len()),
        ));
    }
    let mut names = BTreeSet::new();
    for (i, var) in env.iter().enumerate() {
        let at = |f: &str| format!("spec.env[{i}].{f}");
        if var.name.is_empty() || var.name.len() > 128 || !matches(ENV_NAME, &var.name) {
            errs.push(FieldError::new(
                at("name"),
                format!("{:?} is not a valid variable name", var.name),
            ));
        } else if var.name.starts_with("KURA_") {
            errs.push(FieldError::new(
                at("name"),
                "the KURA_ prefix is reserved for the operator",
            ));
        }
        if !names.insert(var.name.as_str()) {
            errs.push(FieldError::new(
                at("name"),
                format!("duplicate variable {:?}", var.name),
            ));
        }
        match (&var.value, &var.secret_key_ref) {
            (Some(_), Some(_)) | (None, None) => {
                errs.push(FieldError::new(
                    format!("spec.env[{i}]"),
                    "exactly one of value or secretKeyRef must be set",
                ));
            }
            (Some(v), None) if v.len() > MAX_ENV_VALUE => {
                errs.push(FieldError::new(
                    at("value"),
                    format!("at most {MAX_ENV_VALUE} characters, got {}", v.len()),
                ));
            }
            // The apiserver takes it; the container could never start with it.
            (Some(v), None) if v.contains('\0') => {
                errs.push(FieldError::new(
                    at("value"),
                    "must not contain NUL characters (a process environment cannot carry them)",
                ));
            }
            (None, Some(r)) => {
                subdomain_field(&at("secretKeyRef.name"), &r.name, errs);
                if let Err(why) = rules::config_map_key(&r.key) {
                    let message = format!("{:?} {why}", r.key);
                    errs.push(FieldError::new(at("secretKeyRef.key"), message));
                }
            }
            _ => {}
        }
    }
}
