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
/// Set by a user on an existing object that carries no controller owner, with
/// the name of an instance of its namespace as the value: that instance may
/// take the object over. The only way the operator ever writes to an object it
/// did not create.
pub const ANNOTATION_ADOPT: &str = "kura.dev/adopt";
/// The resourceVersion sent with the apply that creates an object: no live
/// object has it (etcd's first revision is spent before any object of ours can
/// exist), so the apiserver answers 409 instead of taking over an object that
/// already has the name, and creates the object when the name is free.
pub const CREATE_ONLY_RESOURCE_VERSION: &str = "1";

/// Finalizer on a KuraGateway: its IngressClass is cluster-scoped and cannot be
/// owned by a namespaced object, so the garbage collector cannot remove it.
pub const GATEWAY_FINALIZER: &str = "kura.dev/ingress-class";

/// The name of the cache's container in the pod template (the image drift
/// check reads its image).
pub const KURA_CONTAINER: &str = "kura";

/// Port the Kura cache serves HTTP (and `GET /up`) on.
pub const CACHE_PORT: i32 = 8080;
