//! `KuraInstance`: one Kura cache instance for one account in one region.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// DNS-1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric.
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// DNS-1035 label: a DNS label starting with a letter (Service names).
pub const DNS1035_LABEL: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// DNS-1123 subdomain: dot-separated DNS labels.
pub const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A label value (without its length limit of 63), possibly empty.
pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A key of a Secret or ConfigMap (without the rule about leading dots).
pub const SECRET_KEY: &str = r"^[-._a-zA-Z0-9]+$";
/// An image reference with an explicit tag or digest (no implicit `latest`).
pub const IMAGE_REF: &str = r"^[a-z0-9]+([._-][a-z0-9]+)*(\.[a-z0-9]+([._-][a-z0-9]+)*)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*((:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})(@sha256:[a-f0-9]{64})?|@sha256:[a-f0-9]{64})$";
/// Storage sizes in binary units, e.g. `10Gi`.
pub const STORAGE_SIZE: &str = r"^[1-9][0-9]{0,5}(Mi|Gi|Ti)$";
pub const CPU_QUANTITY: &str = r"^([1-9][0-9]{0,5}m|[0-9]{1,3}(\.[0-9]{1,3})?)$";
pub const MEMORY_QUANTITY: &str = r"^[1-9][0-9]{0,8}(Ki|Mi|Gi|Ti)?$";
pub const ENV_NAME: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";

pub const MAX_INSTANCE_NAME: usize = 40;
pub const MAX_ACCOUNT: usize = 40;
pub const MAX_REGION: usize = 32;
pub const MAX_REPLICAS: i32 = 16;
pub const MAX_ENV: usize = 64;
pub const MAX_ENV_VALUE: usize = 4096;
pub const MAX_ALIASES: usize = 8;

/// A Kura cache instance. The operator renders its children from this spec and the
/// operator's region configuration; the content hash of that rendering is the
/// instance's revision.
// Several printer columns repeat `type_ = "string"`; that is not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kura.dev",
    version = "v1alpha1",
    kind = "KuraInstance",
    namespaced,
    status = "KuraInstanceStatus",
    shortname = "kura",
    shortname = "ki",
    category = "kura",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", priority = "1"),
    printcolumn(name = "Desired", type_ = "string", json_path = ".status.desiredRevisionShort"),
    printcolumn(name = "Applied", type_ = "string", json_path = ".status.appliedRevisionShort"),
    printcolumn(name = "Class", type_ = "string", json_path = ".status.gateway.ingressClassName"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Rollout", type_ = "string", json_path = ".status.rollout.state"),
    printcolumn(name = "Shard", type_ = "string", json_path = ".status.shard"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 40").message("metadata.name: must be at most 40 characters (children append suffixes)"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name: must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it names the instance's Service"),
    validation = Rule::new("!self.metadata.name.startsWith('gw-')").message("metadata.name: the prefix gw- is reserved for the names of dedicated gateways"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.host) || !has(self.aliases) || !(self.host in self.aliases)").message("aliases must not repeat spec.host").field_path(".aliases"))]
pub struct KuraInstanceSpec {
    /// Account this instance serves. Immutable.
    #[schemars(length(min = 1, max = 40), regex(pattern = DNS_LABEL))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("account is immutable"))]
    pub account: String,

    /// Region, one of the operator configuration's regions. Immutable.
    #[schemars(length(min = 1, max = 32), regex(pattern = DNS_LABEL))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("region is immutable"))]
    pub region: String,

    /// Container image with an explicit tag or digest.
    #[schemars(length(min = 1, max = 255), regex(pattern = IMAGE_REF))]
    pub image: String,

    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 16))]
    pub replicas: i32,

    /// Public host name; defaults to `<account>.<region>.<region domain>`. A DNS
    /// name (not an IP address, no wildcard) with labels of at most 63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    #[x_kube(
        validation = Rule::new("!self.matches('[^.]{64}')").message("host: each DNS label has at most 63 characters"),
        validation = Rule::new("!self.matches('(^|[.])[0-9]+$')").message("host: must be a DNS name, not an IP address (its last label must not be numeric)"),
    )]
    pub host: Option<String>,

    /// Further host names, each served by an Ingress of its own; the same rules as `host`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "set"), inner(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN)))]
    #[x_kube(
        validation = Rule::new("self.all(h, !h.matches('[^.]{64}'))").message("aliases: each DNS label has at most 63 characters"),
        validation = Rule::new("self.all(h, !h.matches('(^|[.])[0-9]+$'))").message("aliases: each must be a DNS name, not an IP address (its last label must not be numeric)"),
    )]
    pub aliases: Vec<String>,

    pub storage: StorageSpec,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesSpec>,

    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Vec<EnvVar>,

    #[serde(default)]
    pub gateway: GatewaySpec,

    /// While paused the operator observes and reports but applies and deletes nothing.
    #[serde(default)]
    pub paused: bool,

    /// Who paused, why, and until when (read only while `paused` is true): a
    /// pause whose `until` has passed is over, and the instance resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseSpec>,

    /// When the operator may restart this instance's pods for a change of its
    /// own (a new configuration or release); the region's default when absent,
    /// and at any time when neither is set. Changes of this spec never wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<MaintenanceWindow>,
}

/// A time stamp such as `2026-12-24T18:00:00Z`.
pub const RFC3339: &str =
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$";
/// A window's opening, `HH:MM` on a 24-hour clock.
pub const WINDOW_START: &str = r"^([01][0-9]|2[0-3]):[0-5][0-9]$";
/// A window's length in whole hours and minutes, e.g. `90m`, `4h` or `1h30m`
/// (each read alike by CEL's `duration()` and `time::parse_duration`).
pub const WINDOW_DURATION: &str = r"^([1-9][0-9]{0,4}h)?([1-9][0-9]{0,4}m)?$";
/// The longest `WINDOW_DURATION`: `99999h99999m` (CEL then holds it to 168h).
pub const MAX_WINDOW_DURATION: usize = 12;
/// An IANA time zone name, e.g. `Europe/Berlin` or `UTC`.
pub const TIME_ZONE: &str = r"^[A-Za-z][-+A-Za-z0-9_]*(/[-+A-Za-z0-9_]+){0,2}$";

/// The details of `spec.paused: true`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PauseSpec {
    /// Why the instance is paused (status and Events repeat it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub reason: Option<String>,
    /// Who paused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub by: Option<String>,
    /// RFC 3339: the pause ends by itself then (an Event says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 40), regex(pattern = RFC3339))]
    #[x_kube(validation = Rule::new("timestamp(self) > timestamp('2000-01-01T00:00:00Z')").message("pause.until: must be an RFC 3339 time such as 2026-12-24T18:00:00Z"))]
    pub until: Option<String>,
}

/// A weekly maintenance window: it opens on each of `days` at `start` in
/// `timeZone` and stays open for `duration` (elapsed time: a window across a
/// daylight-saving change lasts as long as any other).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceWindow {
    /// The days it opens on, in its time zone; every day when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7), extend("x-kubernetes-list-type" = "set"))]
    pub days: Vec<Weekday>,
    /// Local opening time, `HH:MM` (24-hour clock). A time the clocks skip
    /// (a daylight-saving gap) opens when the clocks have moved on, one the
    /// clocks repeat opens the first time.
    #[schemars(length(min = 5, max = 5), regex(pattern = WINDOW_START))]
    pub start: String,
    /// How long it stays open: whole hours and minutes, from `1m` to `168h`
    /// (`90m`, `4h`, `1h30m`).
    #[schemars(length(min = 2, max = MAX_WINDOW_DURATION), regex(pattern = WINDOW_DURATION))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1m') && duration(self) <= duration('168h')").message("maintenanceWindow.duration: must be from 1m to 168h"))]
    pub duration: String,
    /// An IANA time zone such as `Europe/Berlin`; `UTC` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = TIME_ZONE))]
    pub time_zone: Option<String>,
}

#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum Weekday {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

fn default_replicas() -> i32 {
    1
}

/// Each replica's cache volume. Immutable: a StatefulSet's volume claim templates
/// cannot change.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
// On the object, not the optional field: a rule on the field is skipped when the old
// or the new object lacks it, so adding or removing a class got through.
#[x_kube(validation = Rule::new("has(self.class) == has(oldSelf.class) && (!has(self.class) || self.class == oldSelf.class)").message("storage.class is immutable (volume claim templates cannot change): it can be neither added, removed nor changed").field_path(".class"))]
pub struct StorageSpec {
    /// Size of each replica's cache volume, e.g. `10Gi`. Immutable: a StatefulSet's
    /// volume claim templates cannot change.
    #[schemars(length(min = 2, max = 10), regex(pattern = STORAGE_SIZE))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage.size is immutable (volume claim templates cannot change)"))]
    pub size: String,
    /// StorageClass; defaults to the region's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub class: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.requests) || !has(self.limits) || !has(self.requests.memory) || !has(self.limits.memory) || quantity(self.limits.memory).compareTo(quantity(self.requests.memory)) >= 0").message("resources.limits.memory must be at least resources.requests.memory").field_path(".limits.memory"))]
#[x_kube(validation = Rule::new("!has(self.requests) || !has(self.limits) || !has(self.requests.cpu) || !has(self.limits.cpu) || quantity(self.limits.cpu).compareTo(quantity(self.requests.cpu)) >= 0").message("resources.limits.cpu must be at least resources.requests.cpu").field_path(".limits.cpu"))]
pub struct ResourcesSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceAmounts>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 12), regex(pattern = CPU_QUANTITY))]
    pub cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 12), regex(pattern = MEMORY_QUANTITY))]
    pub memory: Option<String>,
}

/// An environment variable: a literal value or a reference to a Secret key (so that
/// secret values never appear in the spec, the rendered manifests or the logs).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.value) != has(self.secretKeyRef)").message("env: exactly one of value or secretKeyRef must be set"))]
pub struct EnvVar {
    #[schemars(length(min = 1, max = 128), regex(pattern = ENV_NAME))]
    #[x_kube(validation = Rule::new("!self.startsWith('KURA_')").message("env name: the KURA_ prefix is reserved for the operator"))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    #[x_kube(validation = Rule::new("!self.contains('\\x00')").message("env value: must not contain NUL characters (a process environment cannot carry them)"))]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY))]
    #[x_kube(validation = Rule::new("self != '.' && !self.startsWith('..')").message("secretKeyRef.key must not be '.' or start with '..' (a key names a file)"))]
    pub key: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    #[serde(default)]
    pub mode: GatewayMode,
}

/// `Auto` resolves per region: `host` (bare-metal) regions use the shared ingress
/// class, `cloud` regions a dedicated per-account gateway.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum GatewayMode {
    #[default]
    Auto,
    Dedicated,
    Shared,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KuraInstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Content hash of the manifests the current spec and configuration render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_revision_short: Option<String>,
    /// The revision whose manifests were last applied successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision_short: Option<String>,
    /// The revision of the last apply attempt, successful or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_image: Option<String>,
    /// The last force token (`kura.dev/reapply-at`) that was acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reapply_at: Option<String>,
    /// Every object the applied revision consists of, with its own hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryStatus>,
    /// Fields this operator renders being taken by another manager, repeatedly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<ConflictStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` at the last successful apply: a later generation
    /// makes the next revision the user's, an unchanged one the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_generation: Option<i64>,
    /// Who originated the applied revision: `User` (spec or force token) or
    /// `Operator` (configuration or release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_origin: Option<Origin>,
    /// This instance's place in a rollout the operator originated (see the
    /// operator configuration's `rollout` section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// A hash of what the spec asks to be rendered (everything but `paused`,
    /// `pause` and `maintenanceWindow`) at the last successful apply: a spec
    /// with another one makes the next revision the user's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_spec_hash: Option<String>,
    /// The shard that reconciled the instance last, `i/N` (the operator's
    /// `--shards`; absent with one shard). A report: nothing reads it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
}

/// Where a new desired revision comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Origin {
    /// The spec (its generation moved) or a force token.
    User,
    /// The operator's configuration or renderer.
    Operator,
}

/// An operator-originated change that restarts pods, waiting for or admitted
/// to the fleet's rollout budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    pub state: RolloutState,
    /// Identifies the operator configuration and release that originated it.
    pub fleet_revision: String,
    /// The instance revision it is for.
    pub revision: String,
    /// RFC 3339: waiting since, or admitted at.
    pub since: String,
    /// Ready when admitted: its rollout counts against the budget until it is
    /// Ready again.
    pub was_ready: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RolloutState {
    Waiting,
    Admitted,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Spec or configuration is invalid; nothing is applied until it changes.
    Invalid,
    /// Manifests are being applied.
    Applying,
    /// Applied; waiting for the workload and the ingresses to become active.
    Activating,
    Ready,
    /// Apply failed; retrying with backoff.
    Retrying,
    /// The retry budget is exhausted; a bounded retry follows after a window.
    Stalled,
    Paused,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// sha256 of the object's canonical form (without the revision stamp).
    pub hash: String,
    /// Fingerprint of the fields the operator's field manager owned right after
    /// the apply; a different live fingerprint means another actor took fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_fields: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    pub mode: GatewayMode,
    pub ingress_class_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_name: Option<String>,
}

/// Failure bookkeeping, kept in status so that a restarted operator resumes the
/// same budget instead of starting a fresh hot loop.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryStatus {
    /// Consecutive failed attempts of `inputsKey`.
    pub failures: i64,
    /// Identifies the inputs the failures belong to (revision and force token); a
    /// change of inputs starts a fresh budget.
    pub inputs_key: String,
    pub last_error: String,
    /// RFC 3339 time of the last failed attempt.
    pub last_failure_time: String,
}

/// Take-backs of fields another manager keeps taking, counted per window, so that
/// two writers cannot ping-pong (docs/incidents.md #4).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictStatus {
    pub take_backs: i64,
    /// RFC 3339 start of the counting window.
    pub window_start: String,
    /// The other field managers seen holding our fields.
    pub managers: Vec<String>,
}
