//! Every label, annotation and name the operator writes or reads, in one place.

/// The one field manager for server-side apply: the operator owns exactly the
/// fields it renders, and fields other actors write survive every re-apply
/// (INCIDENTS.md #4).
pub const FIELD_MANAGER: &str = "kura-operator";

pub const GROUP: &str = "kura.dev";

pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "kura-operator";
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "kura.dev/instance";
pub const LABEL_GATEWAY: &str = "kura.dev/gateway";
pub const LABEL_ACCOUNT: &str = "kura.dev/account";
pub const LABEL_REGION: &str = "kura.dev/region";

/// Stamped on every child after hashing: the revision that produced it.
pub const ANNOTATION_REVISION: &str = "kura.dev/revision";
/// On the pod template only: a hash of the pod-relevant inputs, so that a change
/// that does not concern the pods (an ingress class, a PDB) does not roll them.
pub const ANNOTATION_POD_TEMPLATE_HASH: &str = "kura.dev/pod-template-hash";
/// The force re-apply token users set with `kubectl annotate`.
pub const ANNOTATION_REAPPLY_AT: &str = "kura.dev/reapply-at";

/// Finalizer on a KuraGateway: its IngressClass is cluster-scoped and cannot be
/// owned by a namespaced object, so the garbage collector cannot remove it.
pub const GATEWAY_FINALIZER: &str = "kura.dev/ingress-class";

/// Port the Kura cache serves HTTP (and `GET /up`) on.
pub const CACHE_PORT: i32 = 8080;
