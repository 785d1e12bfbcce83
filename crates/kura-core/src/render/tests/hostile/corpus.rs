//! The hostile corpus (corpus.yaml): every case gets exactly its verdict, from
//! `validate` or from the configuration's own validation, at the field it names;
//! what passes renders only what the apiserver accepts (`kube_rules`). Generated
//! specs at and past every limit hold to the same.

use proptest::prelude::*;

use crate::api::KuraInstance;
use crate::config::ConfigError;
use crate::config::OperatorConfig;
use crate::render::hostile::{Case, Corpus, corpus, specs};
use crate::render::render;
use crate::render::tests::kube_rules::violations;
use crate::validate::validate;

/// Why `case` did not get its verdict, if it did not.
fn verdict(corpus: &Corpus, case: &Case) -> Result<(), String> {
    let errors = match OperatorConfig::parse(&corpus.config(Some(case))) {
        Err(ConfigError::Invalid { errors, .. }) => errors.0,
        Err(other) => return Err(format!("the configuration does not parse: {other}")),
        Ok(config) => {
            let instance: KuraInstance = serde_json::from_value(corpus.instance(Some(case)))
                .map_err(|e| format!("not a KuraInstance: {e}"))?;
            match validate(&instance, &config) {
                Err(errors) => errors.0,
                Ok(_) if !case.valid => return Err("accepted".into()),
                Ok(valid) => {
                    let found = violations(&render(&valid, &config));
                    return if found.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("renders what the apiserver refuses: {found:?}"))
                    };
                }
            }
        }
    };
    let (Some(path), Some(says)) = (&case.rejected, &case.says) else {
        return Err(format!("rejected: {errors:?}"));
    };
    let only_there = errors.iter().all(|e| &e.path == path);
    if only_there && errors.iter().any(|e| e.message.contains(says.as_str())) {
        Ok(())
    } else {
        Err(format!(
            "expected only {path} saying {says:?}, got {errors:?}"
        ))
    }
}

#[test]
fn every_corpus_case_gets_its_verdict_at_its_field() {
    let corpus = corpus();
    let failures: Vec<String> = corpus
        .cases
        .iter()
        .filter_map(|case| {
            verdict(&corpus, case)
                .err()
                .map(|e| format!("{}: {e}", case.case))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A case is valid or names its verdict, never both; and the corpus tries every field.
#[test]
fn the_corpus_is_well_formed_and_tries_every_field() {
    let corpus = corpus();
    for case in &corpus.cases {
        let rejected = case.rejected.is_some() && case.says.is_some();
        assert!(
            case.valid != rejected,
            "{}: valid, or rejected with says",
            case.case
        );
        assert!(!case.valid || case.admission.is_none(), "{}", case.case);
    }
    let tried = |field: &str| {
        corpus
            .cases
            .iter()
            .any(|c| c.rejected.as_deref().is_some_and(|p| p.starts_with(field)))
    };
    for field in [
        "metadata.name",
        "spec.account",
        "spec.region",
        "spec.image",
        "spec.replicas",
        "spec.host",
        "spec.aliases",
        "spec.storage.size",
        "spec.storage.class",
        "spec.resources.requests.cpu",
        "spec.resources.limits.memory",
        "spec.env[0].name",
        "spec.env[0].value",
        "spec.env[0].secretKeyRef.name",
        "spec.env[0].secretKeyRef.key",
        "spec.gateway.mode",
        "gateway.image",
        "gateway.controller",
        "regions.eu-west-1.domain",
        "regions.eu-west-1.sharedIngressClass",
        "regions.eu-west-1.storageClass",
        "regions.eu-west-1.defaultResources",
    ] {
        assert!(tried(field), "no corpus case rejects {field}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// What passes validation renders only what the apiserver accepts.
    #[test]
    fn generated_specs_that_pass_render_only_what_the_apiserver_accepts(spec in specs(&corpus())) {
        let config = OperatorConfig::parse(&corpus().config(None)).unwrap();
        let instance: KuraInstance = serde_json::from_value(spec).unwrap();
        if let Ok(valid) = validate(&instance, &config) {
            let found = violations(&render(&valid, &config));
            prop_assert!(found.is_empty(), "{:#?}", found);
        }
    }
}
