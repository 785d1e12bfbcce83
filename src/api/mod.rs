//! The `kura.dev/v1alpha1` API: `KuraInstance` and `KuraGateway`.

pub mod conditions;
pub mod gateway;
pub mod instance;

pub use conditions::{Condition, ConditionStatus};
pub use gateway::{KuraGateway, KuraGatewaySpec, KuraGatewayStatus};
pub use instance::*;

use kube::CustomResourceExt;

/// The CRDs as YAML documents, in a stable order: the single source of truth for
/// `crds/` and the Helm chart.
pub fn crd_documents() -> Vec<(&'static str, String)> {
    vec![
        ("kura.dev_kurainstances.yaml", to_yaml(&KuraInstance::crd())),
        ("kura.dev_kuragateways.yaml", to_yaml(&KuraGateway::crd())),
    ]
}

fn to_yaml<T: serde::Serialize>(value: &T) -> String {
    // Serialising a CRD built from our own types cannot fail.
    serde_yaml::to_string(value).expect("CRD serialises to YAML")
}
