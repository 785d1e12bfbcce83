//! Every label, annotation and name the operator writes or reads, in one place.

/// The one field manager for server-side apply: the operator owns exactly the
/// fields it renders, and fields other actors write survive every re-apply
/// (docs/incidents.md #4).
pub const FIELD_MANAGER: &str = "kura-operator";

/// The field manager of a gateway's children (its Deployment, Service and
/// IngressClass) and of its status: one writer per set of objects, so that the
/// instances' manager never co-owns what the gateway controller renders.
/// Children applied by an earlier release under [`FIELD_MANAGER`] are moved
/// over once (`gateway::migrate`).
pub const GATEWAY_FIELD_MANAGER: &str = "kura-operator-gateway";

pub const GROUP: &str = "kura.dev";

pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "kura-operator";
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "kura.dev/instance";
pub const LABEL_GATEWAY: &str = "kura.dev/gateway";
pub const LABEL_ACCOUNT: &str = "kura.dev/account";
pub const LABEL_REGION: &str = "kura.dev/region";

/// Stamped on every child after hashing: the child's own content hash (its
/// entry's `hash` in `status.inventory`). A change elsewhere in the set leaves
/// it alone, so a new instance revision sends only the objects that changed.
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

/// On a gateway's IngressClass (cluster-scoped, so it cannot be owned by the
/// namespaced gateway): the uid of the KuraGateway that created it. Written
/// by the create-only apply that creates the class; a class is the gateway's
/// only if it carries its uid, which no other object can have. A class whose
/// uid names no live gateway is collected (`gateway::sweep`).
pub const ANNOTATION_GATEWAY_UID: &str = "kura.dev/gateway-uid";
/// On a gateway's IngressClass: the gateway's namespace (with
/// [`LABEL_GATEWAY`], its name), so that a class maps back to its gateway and
/// a namespaced operator sweeps the classes of its own namespace only.
pub const LABEL_GATEWAY_NAMESPACE: &str = "kura.dev/gateway-namespace";

/// The finalizer earlier releases put on every KuraGateway (to delete its
/// IngressClass). It held a namespace's deletion until the operator ran; the
/// operator now removes it wherever it finds it (`gateway::migrate`).
pub const LEGACY_GATEWAY_FINALIZER: &str = "kura.dev/ingress-class";

/// The name of the cache's container in the pod template (the image drift
/// check reads its image).
pub const KURA_CONTAINER: &str = "kura";

/// Port the Kura cache serves HTTP (and `GET /up`) on.
pub const CACHE_PORT: i32 = 8080;

/// The key of the operator configuration in the chart's ConfigMap
/// (charts/kura-operator/templates/configmap.yaml).
pub const CONFIG_MAP_KEY: &str = "config.yaml";

/// On the Leases of a sharded fleet (one per shard, one per replica): the
/// name of the fleet's base Lease (`--lease-name`), so that every replica
/// watches exactly these.
pub const LABEL_SHARDS_OF: &str = "kura.dev/shards-of";

/// On the Leases of a fleet with leader election: how many shards the
/// replica that wrote it splits the fleet into (`--shards`). Replicas of
/// different counts map namespaces to shards differently; one that sees a
/// live replica of another count acts for nothing.
pub const LABEL_SHARD_COUNT: &str = "kura.dev/shard-count";

/// The annotation on the generated CRDs naming the release that generated
/// them, so that a message can name the installed CRD's version beside this
/// build's (`crd_compat`).
pub const CRD_VERSION_ANNOTATION: &str = "kura.dev/operator-version";

/// This build's version: the one stamped into its CRDs.
pub const OPERATOR_VERSION: &str = env!("CARGO_PKG_VERSION");
