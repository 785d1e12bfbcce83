//! Follows the operator configuration: in a pod, the chart's ConfigMap through
//! the API (`Source::ConfigMap`: a change takes effect as soon as the apiserver
//! has it, where the mounted file follows only after the kubelet's refresh);
//! otherwise the file, watched for changes (`Source::File`). Texts are compared,
//! not events: a ConfigMap-mounted file changes by a symlink swap, and an
//! unchanged text is nothing new. A valid new configuration replaces the old
//! one and reconciles every instance (its rendered output, and so its
//! revision, may change).
//!
//! An invalid file (or one that cannot be read) is never used, not even in part:
//! the last valid configuration stays in force, so a bad edit never reaches the
//! cluster. The next start-up would exit on it, so it is reported at once where
//! an administrator looks, for as long as the file on disk is invalid:
//! - `/readyz` answers 503 naming the file and its first error (why readiness:
//!   see `server`);
//! - `kura_config_valid` is 0; `kura_config_reloads_total{result="invalid"}` counts it;
//! - a Warning Event `InvalidConfig` on the operator's own Pod (`POD_NAME`,
//!   `POD_NAMESPACE`, `POD_UID` from the downward API), once per distinct error;
//! - an error in the log.
//!
//! A valid file clears all of it, with a Normal Event `ConfigReloaded`, and
//! takes effect.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Reporter};
use tokio::sync::{mpsc, watch};

use crate::metrics::Metrics;
use kura_core::accepted::Accepted;
use kura_core::config::{ConfigError, OperatorConfig};

mod source;

use kura_core::keys::CONFIG_MAP_KEY;

/// Whether the file on disk is the configuration in force.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FileState {
    #[default]
    Valid,
    /// Why not: the file and its first error.
    Invalid(String),
}

/// What one read of the file says.
#[derive(Debug, PartialEq)]
pub enum Reading {
    /// The bytes last read: nothing new.
    Unchanged,
    Valid(OperatorConfig),
    /// Unreadable or invalid: the file and its first error, and the file and every error.
    Invalid {
        first: String,
        all: String,
    },
}

/// `source`: where the text is from, as the messages name it; `last`: the
/// text of the last successful read.
pub fn assess(source: &str, last: Option<&str>, read: &std::io::Result<String>) -> Reading {
    let shown = source;
    let text = match read {
        Ok(text) if Some(text.as_str()) == last => return Reading::Unchanged,
        Ok(text) => text,
        Err(e) => {
            let why = format!("operator config {shown}: cannot read: {e}");
            return Reading::Invalid {
                first: why.clone(),
                all: why,
            };
        }
    };
    match OperatorConfig::parse(text) {
        Ok(config) => Reading::Valid(config),
        Err(e) => {
            let (first, all) = first_and_all(&e);
            Reading::Invalid {
                first: format!("operator config {shown}: {first}"),
                all: format!("operator config {shown}: {all}"),
            }
        }
    }
}

/// The errors without `parse`'s placeholder path (the caller names the file).
fn first_and_all(e: &ConfigError) -> (String, String) {
    let one = |s: String| (s.lines().next().unwrap_or_default().to_string(), s);
    match e {
        ConfigError::Invalid { errors, .. } => {
            let mut first = errors
                .0
                .first()
                .map(ToString::to_string)
                .unwrap_or_default();
            if errors.0.len() > 1 {
                first.push_str(&format!(" (and {} more)", errors.0.len() - 1));
            }
            (first, errors.to_string())
        }
        ConfigError::Parse { source, .. } => one(source.to_string()),
        ConfigError::Read { source, .. } => one(format!("cannot read: {source}")),
    }
}

/// What to do after a reading.
#[derive(Debug, PartialEq)]
pub struct Step {
    pub state: FileState,
    /// A new configuration to put in force (and reconcile every instance with).
    pub apply: Option<OperatorConfig>,
    /// A change of the file to count, valid or not.
    pub reload: Option<bool>,
    pub notice: Option<Notice>,
}

/// An Event (and a log line) about the file.
#[derive(Debug, PartialEq)]
pub struct Notice {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// `state`: the source's state so far; `in_force`: the configuration in use.
pub fn next_step(
    source: &str,
    state: &FileState,
    reading: Reading,
    in_force: &OperatorConfig,
) -> Step {
    let same = |state: FileState| Step {
        state,
        apply: None,
        reload: None,
        notice: None,
    };
    match reading {
        Reading::Unchanged => same(state.clone()),
        // The same error as before (an unreadable file is read again every poll).
        Reading::Invalid { first, .. } if *state == FileState::Invalid(first.clone()) => {
            same(state.clone())
        }
        Reading::Invalid { first, all } => Step {
            state: FileState::Invalid(first),
            apply: None,
            reload: Some(false),
            notice: Some(Notice {
                warning: true,
                reason: "InvalidConfig",
                note: format!("{all}; the last valid configuration stays in force"),
            }),
        },
        Reading::Valid(config) => {
            let changed = config != *in_force;
            let note = match (changed, state) {
                (true, _) => "changed; reconciling every instance",
                (false, FileState::Invalid(_)) => {
                    "valid again; the configuration in force is unchanged"
                }
                // Another text, the same configuration (a comment, say).
                (false, FileState::Valid) => "",
            };
            Step {
                state: FileState::Valid,
                apply: changed.then_some(config),
                reload: Some(true),
                notice: (!note.is_empty()).then(|| Notice {
                    warning: false,
                    reason: "ConfigReloaded",
                    note: format!("operator config {source} {note}"),
                }),
            }
        }
    }
}

/// Where the file's state is reported besides `/readyz` and the log.
pub struct Report {
    pub metrics: Arc<Metrics>,
    /// Events on the operator's own Pod, when it runs in one.
    pub events: Option<PodEvents>,
}

/// Publishes Events on the operator's own Pod.
#[derive(Clone)]
pub struct PodEvents {
    client: kube::Client,
    reporter: Reporter,
    pod: ObjectReference,
}

impl PodEvents {
    /// From the downward API's `POD_NAME`, `POD_NAMESPACE` and `POD_UID`;
    /// `None` outside a pod.
    pub fn from_env(client: kube::Client, reporter: Reporter) -> Option<PodEvents> {
        let var = |name: &str| std::env::var(name).ok();
        let pod = pod_reference(var("POD_NAME"), var("POD_NAMESPACE"), var("POD_UID"))?;
        Some(PodEvents {
            client,
            reporter,
            pod,
        })
    }

    /// Without holding up the poll (`recorder::publish`); a failure is logged only.
    fn publish(&self, notice: &Notice) {
        let event = Event {
            type_: if notice.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: notice.reason.into(),
            note: Some(notice.note.chars().take(1000).collect()),
            action: "ReloadConfig".into(),
            secondary: None,
        };
        let (client, reporter) = (self.client.clone(), self.reporter.clone());
        crate::recorder::publish(client, reporter, self.pod.clone(), vec![event]);
    }
}

/// The Pod this process runs in. The uid is what `kubectl describe pod`
/// matches Events by; without it they are still listed by name.
pub fn pod_reference(
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
) -> Option<ObjectReference> {
    let present = |v: Option<String>| v.filter(|v| !v.is_empty());
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(present(name)?),
        namespace: Some(present(namespace)?),
        uid: present(uid),
        ..Default::default()
    })
}

/// Where the configuration is followed from after start-up.
pub enum Source {
    /// A file, watched for changes (a ConfigMap-mounted one changes by a
    /// symlink swap in its directory, which is what is watched): read again
    /// on every change, and every `FILE_FALLBACK` in case the filesystem
    /// reports none.
    File(PathBuf),
    /// The chart's ConfigMap, key `config.yaml`, watched through the API (a
    /// list and watch of that one object): a change takes effect as soon as
    /// the apiserver has it, not after the kubelet refreshes the mounted file.
    ConfigMap {
        client: kube::Client,
        namespace: String,
        name: String,
    },
}

impl Source {
    /// How the messages name it.
    pub fn shown(&self) -> String {
        match self {
            Source::File(path) => path.display().to_string(),
            Source::ConfigMap {
                namespace, name, ..
            } => format!("ConfigMap {namespace}/{name} key {CONFIG_MAP_KEY}"),
        }
    }

    /// Starts following: every text read (or why none could be) is sent.
    fn start(self, texts: mpsc::Sender<std::io::Result<String>>) {
        match self {
            Source::File(path) => source::watch_file(path, texts, FILE_FALLBACK),
            Source::ConfigMap {
                client,
                namespace,
                name,
            } => source::watch_config_map(client, namespace, name, texts),
        }
    }
}

/// A file is also read this often, whatever its watch says: the safety net
/// for a filesystem that reports no changes.
pub const FILE_FALLBACK: Duration = Duration::from_secs(60);

/// Returns the stream of "configuration changed" ticks for `reconcile_all_on`,
/// and the source's state for `/readyz`.
pub fn follow(
    source: Source,
    initial_text: String,
    tx: watch::Sender<Arc<Accepted>>,
    report: Report,
) -> (impl Stream<Item = ()>, watch::Receiver<FileState>) {
    let (changed_tx, changed_rx) = mpsc::channel(1);
    // The start-up configuration is valid: an invalid one ends the start-up.
    let (state_tx, state_rx) = watch::channel(FileState::Valid);
    let shown = source.shown();
    let (texts_tx, mut texts) = mpsc::channel(4);
    source.start(texts_tx);
    tokio::spawn(async move {
        let mut last = Some(initial_text);
        while let Some(read) = texts.recv().await {
            let reading = assess(&shown, last.as_deref(), &read);
            last = read.ok();
            let step = {
                let in_force = tx.borrow();
                next_step(&shown, &state_tx.borrow(), reading, &in_force)
            };
            report_step(&shown, &step, &report);
            if let Some(config) = step.apply {
                tx.send_replace(Arc::new(Accepted::new(config)));
                let _ = changed_tx.try_send(());
            }
            state_tx.send_if_modified(|s| {
                let modified = *s != step.state;
                *s = step.state;
                modified
            });
        }
    });
    (tokio_stream_from(changed_rx), state_rx)
}

/// The metrics, the log line and the Event of one step.
fn report_step(shown: &str, step: &Step, report: &Report) {
    if let Some(valid) = step.reload {
        report.metrics.count_config_reload(valid);
    }
    report
        .metrics
        .set_config_valid(step.state == FileState::Valid);
    match (&step.notice, &step.apply) {
        (Some(n), _) if n.warning => {
            tracing::error!(source = %shown, error = %n.note, "ignoring invalid operator configuration")
        }
        (_, Some(_)) => {
            tracing::info!(source = %shown, "operator configuration changed; reconciling every instance")
        }
        (Some(_), None) => {
            tracing::info!(source = %shown, "operator configuration valid again; the configuration in force is unchanged")
        }
        (None, None) => {}
    }
    if let (Some(notice), Some(events)) = (&step.notice, &report.events) {
        events.publish(notice);
    }
}

fn tokio_stream_from(mut rx: mpsc::Receiver<()>) -> impl Stream<Item = ()> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "regions:\n  r1:\n    network: host\n    sharedIngressClass: shared\n    domain: kura.test\n";

    fn path() -> String {
        "/etc/kura-operator/config.yaml".into()
    }

    fn good() -> OperatorConfig {
        OperatorConfig::parse(GOOD).unwrap()
    }

    fn invalid(first: &str) -> Reading {
        Reading::Invalid {
            first: first.into(),
            all: format!("{first}; more"),
        }
    }

    #[test]
    fn the_same_bytes_are_unchanged_whatever_they_hold() {
        assert_eq!(
            assess(&path(), Some(GOOD), &Ok(GOOD.into())),
            Reading::Unchanged
        );
        assert_eq!(
            assess(&path(), Some("regions: ["), &Ok("regions: [".into())),
            Reading::Unchanged
        );
    }

    #[test]
    fn an_invalid_file_is_named_with_its_first_error() {
        let text = GOOD.replace("domain: kura.test", "domain: Not_A_Domain")
            + "gateway:\n  image: gw:1\n  controller: example.com/gw\n  replicas: 0\n";
        let Reading::Invalid { first, all } = assess(&path(), Some(GOOD), &Ok(text)) else {
            panic!("invalid")
        };
        assert_eq!(
            first,
            "operator config /etc/kura-operator/config.yaml: gateway.replicas: must be between 1 and 8 (and 1 more)"
        );
        assert!(
            all.contains("gateway.replicas") && all.contains("regions.r1.domain"),
            "{all}"
        );
        assert!(!all.contains("<inline>"), "{all}");
    }

    #[test]
    fn a_yaml_error_and_an_unreadable_file_are_named_too() {
        let bad = GOOD.replace("network: host", "network: moon");
        let Reading::Invalid { first, .. } = assess(&path(), None, &Ok(bad)) else {
            panic!("invalid")
        };
        assert!(
            first.starts_with("operator config /etc/kura-operator/config.yaml: ")
                && first.contains("moon")
                && !first.contains('\n'),
            "{first}"
        );
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        let Reading::Invalid { first, .. } = assess(&path(), Some(GOOD), &Err(gone)) else {
            panic!("invalid")
        };
        assert!(first.contains("config.yaml: cannot read"), "{first}");
    }

    #[test]
    fn an_invalid_file_is_reported_once_and_nothing_is_applied() {
        let s = next_step(&path(), &FileState::Valid, invalid("bad"), &good());
        assert_eq!(s.state, FileState::Invalid("bad".into()));
        assert_eq!(s.apply, None);
        assert_eq!(s.reload, Some(false));
        let notice = s.notice.expect("a notice");
        assert!(notice.warning);
        assert_eq!(notice.reason, "InvalidConfig");
        assert!(notice.note.contains("bad; more"), "{}", notice.note);
        // The same error again (an unreadable file, read every poll): nothing new.
        let again = next_step(&path(), &s.state, invalid("bad"), &good());
        assert_eq!(again.state, s.state);
        assert_eq!((again.reload, again.notice), (None, None));
        let unchanged = next_step(&path(), &s.state, Reading::Unchanged, &good());
        assert_eq!(unchanged.state, s.state);
        // Another error: reported.
        let other = next_step(&path(), &s.state, invalid("worse"), &good());
        assert_eq!(other.state, FileState::Invalid("worse".into()));
        assert!(other.notice.is_some());
    }

    #[test]
    fn a_valid_file_clears_the_state_and_applies_only_what_changed() {
        let bad = FileState::Invalid("bad".into());
        let mut changed = good();
        changed.regions.get_mut("r1").unwrap().domain = "kura.example".into();
        let s = next_step(&path(), &bad, Reading::Valid(changed.clone()), &good());
        assert_eq!(s.state, FileState::Valid);
        assert_eq!(s.apply, Some(changed.clone()));
        assert_eq!(s.reload, Some(true));
        let notice = s.notice.expect("a notice");
        assert_eq!((notice.warning, notice.reason), (false, "ConfigReloaded"));
        assert_eq!(
            notice.note,
            "operator config /etc/kura-operator/config.yaml changed; reconciling every instance"
        );
        // Reverted to the configuration in force: cleared, nothing to reconcile.
        let s = next_step(&path(), &bad, Reading::Valid(good()), &good());
        assert_eq!((s.state, s.apply), (FileState::Valid, None));
        assert!(s.notice.unwrap().note.contains("valid again"));
        // A new text, the same configuration: counted, nothing else.
        let s = next_step(&path(), &FileState::Valid, Reading::Valid(good()), &good());
        assert_eq!((s.apply, s.reload, s.notice), (None, Some(true), None));
    }

    #[test]
    fn the_pod_is_known_from_name_and_namespace_uid_when_given() {
        let s = |v: &str| Some(v.to_string());
        let pod = pod_reference(s("op-0"), s("kura-system"), s("1234")).unwrap();
        assert_eq!(pod.kind.as_deref(), Some("Pod"));
        assert_eq!(pod.api_version.as_deref(), Some("v1"));
        assert_eq!(pod.name.as_deref(), Some("op-0"));
        assert_eq!(pod.namespace.as_deref(), Some("kura-system"));
        assert_eq!(pod.uid.as_deref(), Some("1234"));
        assert_eq!(
            pod_reference(s("op-0"), s("kura-system"), None)
                .unwrap()
                .uid,
            None
        );
        assert_eq!(pod_reference(None, s("kura-system"), None), None);
        assert_eq!(pod_reference(s("op-0"), s(""), s("1234")), None);
    }
}
