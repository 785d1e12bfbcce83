//! A KuraGateway's spec, checked before anything is rendered from it. The CRD
//! refuses most bad input at admission, but CRD validation rules cannot see
//! the namespace, and objects can predate a CRD upgrade.

use crate::api::KuraGateway;
use crate::names;
use crate::validate::{FieldError, ValidationErrors, rules};

pub fn validate(gw: &KuraGateway) -> Result<(), ValidationErrors> {
    let name = gw.metadata.name.as_deref().unwrap_or_default();
    let namespace = gw.metadata.namespace.as_deref().unwrap_or_default();
    let mut errors = Vec::new();
    if let Err(why) = rules::dns1035_label(name) {
        errors.push(FieldError::new(
            "metadata.name",
            format!("{why}: it names the gateway's Service"),
        ));
    }
    // The class is cluster-scoped: a name derived from the namespace is what
    // keeps one namespace's gateway from claiming another namespace's class.
    let class = names::gateway_ingress_class(namespace, name);
    if gw.spec.ingress_class_name != class {
        errors.push(FieldError::new(
            "spec.ingressClassName",
            format!(
                "{:?} is not this gateway's class: a KuraGateway {name} in namespace {namespace} serves {class:?} only",
                gw.spec.ingress_class_name
            ),
        ));
    }
    ValidationErrors::from_vec(errors)
}

#[cfg(test)]
mod tests {
    use super::validate;
    use crate::api::{KuraGateway, KuraGatewaySpec};

    fn gateway(namespace: &str, name: &str, class: &str) -> KuraGateway {
        let mut gw = KuraGateway::new(
            name,
            KuraGatewaySpec {
                account: "acme".into(),
                region: "r1".into(),
                ingress_class_name: class.into(),
                controller: "example.com/c".into(),
                image: "registry.example/gw:1".into(),
                host_ports: false,
                replicas: 1,
            },
        );
        gw.metadata.namespace = Some(namespace.into());
        gw
    }

    #[test]
    fn a_gateway_serves_the_class_of_its_own_namespace_and_name() {
        assert_eq!(validate(&gateway("a", "gw-x", "kura-gw.a.gw-x")), Ok(()));
    }

    /// The reported attack: a tenant of `b` names `a`'s class.
    #[test]
    fn another_namespaces_class_is_refused_naming_the_field_and_the_allowed_class() {
        let errors = validate(&gateway("b", "gw-x", "kura-gw.a.gw-x")).unwrap_err();
        assert_eq!(errors.0.len(), 1);
        assert_eq!(errors.0[0].path, "spec.ingressClassName");
        assert!(
            errors.0[0].message.contains("\"kura-gw.b.gw-x\""),
            "{errors}"
        );
    }

    #[test]
    fn any_other_class_is_refused() {
        for class in [
            "shared",
            "kura-gw.b.other",
            "kura-gw.b.gw-x.extra",
            "kura-gw.b",
        ] {
            assert!(validate(&gateway("b", "gw-x", class)).is_err(), "{class}");
        }
    }

    #[test]
    fn a_name_that_cannot_name_a_service_is_refused() {
        let errors = validate(&gateway("b", "a.b", "kura-gw.b.a.b")).unwrap_err();
        assert_eq!(errors.0[0].path, "metadata.name");
    }
}
