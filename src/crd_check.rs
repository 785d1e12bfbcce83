//! The installed CRDs, checked at start and whenever they change, against the
//! CRDs this build generates (`api::crds`; the comparison is
//! `crd_compat::compare`).
//!
//! Why: the apiserver prunes every field its CRD does not know, silently, on
//! every write. An operator running against an older CRD (Helm never
//! upgrades a chart's `crds/` directory) lost `status.appliedSpecHash` and
//! `status.shard` on each of its own status writes, and decided from objects
//! missing what it had written. So while an installed CRD is not compatible
//! this process acts on nothing (`shards::Gate::hold`: no reconcile starts,
//! those in flight are dropped) and says so where an administrator looks:
//! - `/readyz` answers 503 with the reason (`server::Probes`);
//! - one log line per change, naming both versions and the fix;
//! - a Warning Event `IncompatibleCRD` on the operator's Pod;
//! - `kura_crd_compatible{crd}` 0.
//!
//! Both CRDs are watched (each by the field selector `metadata.name`, which
//! RBAC authorizes by resource name); once they are compatible again the
//! process resumes without a restart: the gate reopens, and every instance
//! and gateway is reconciled (`Gate::acquired`).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use kura_core::crd_compat::{self, Problem};

/// How to fix an incompatible CRD, in the words of the log line and Event.
pub const FIX: &str = "kubectl apply --server-side -f crds/ (this release's), or `kura-operator crd | kubectl apply --server-side -f -` with this release's CLI, or helm upgrade the release with a chart of this appVersion (crds.enabled=true)";

/// This build's CRD and the one installed under its name.
pub type Pair = (CustomResourceDefinition, CustomResourceDefinition);

/// The client, the reporter and the operator's own Pod, for Events.
pub type EventTarget = (
    kube::Client,
    Reporter,
    k8s_openapi::api::core::v1::ObjectReference,
);

/// What this process reports through.
pub struct Report {
    pub gate: Arc<crate::shards::Gate>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Events on the operator's own Pod; none outside a pod.
    pub events: Option<EventTarget>,
}

/// The installed CRDs at start: each of this build's, by name, with what is
/// installed under that name. A CRD that is not installed at all fails
/// start-up in one line (as before this check watched them); an older or
/// otherwise incompatible one does not: the process waits, unready, for it
/// to be fixed.
pub async fn installed(client: &kube::Client) -> Result<Vec<Pair>, String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut pairs = Vec::new();
    for ours in kura_core::api::crds() {
        let name = ours.metadata.name.clone().unwrap_or_default();
        match api.get_opt(&name).await {
            Ok(Some(theirs)) => pairs.push((ours, theirs)),
            Ok(None) => {
                return Err(format!("CRD {name} is not installed: {FIX}"));
            }
            Err(e) => {
                return Err(format!(
                    "cannot reach the apiserver to check CRD {name}: {e}"
                ));
            }
        }
    }
    Ok(pairs)
}

/// Judges `installed` now (before anything may act), then follows both CRDs
/// for the life of the process. The receiver says why the CRDs keep this
/// process from acting (`None`: they do not), for `/readyz`.
pub fn follow(
    client: kube::Client,
    installed: Vec<Pair>,
    report: Report,
) -> watch::Receiver<Option<String>> {
    let mut judge = Judge::new(report);
    let mut changes = Vec::new();
    for (ours, theirs) in installed {
        let name = ours.metadata.name.clone().unwrap_or_default();
        judge.set(&ours, Some(&theirs));
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        changes.push(
            watcher(api, config)
                .default_backoff()
                .map(move |e| (ours.clone(), e))
                .boxed(),
        );
    }
    let state = judge.state.subscribe();
    tokio::spawn(async move {
        let mut changes = futures::stream::select_all(changes);
        // Per CRD, what a re-list (Init .. InitDone) found so far.
        let mut relisted: BTreeMap<String, Option<CustomResourceDefinition>> = BTreeMap::new();
        while let Some((ours, event)) = changes.next().await {
            let name = ours.metadata.name.clone().unwrap_or_default();
            match event {
                Ok(watcher::Event::Init) => {
                    relisted.insert(name, None);
                }
                Ok(watcher::Event::InitApply(crd)) => {
                    relisted.insert(name, Some(crd));
                }
                Ok(watcher::Event::InitDone) => {
                    let found = relisted.remove(&name).flatten();
                    judge.set(&ours, found.as_ref());
                }
                Ok(watcher::Event::Apply(crd)) => judge.set(&ours, Some(&crd)),
                Ok(watcher::Event::Delete(_)) => judge.set(&ours, None),
                Err(e) => {
                    tracing::warn!(crd = %name, error = %e, "watching the CRD failed; retrying");
                }
            }
        }
    });
    state
}

/// The verdict per CRD, and what follows from it.
struct Judge {
    report: Report,
    /// Per CRD name: why it is not compatible (`None`: compatible).
    verdicts: BTreeMap<String, Option<String>>,
    state: watch::Sender<Option<String>>,
}

impl Judge {
    fn new(report: Report) -> Judge {
        Judge {
            report,
            verdicts: BTreeMap::new(),
            state: watch::channel(None).0,
        }
    }

    /// `installed` is now what the cluster has under `ours`'s name.
    fn set(
        &mut self,
        ours: &CustomResourceDefinition,
        installed: Option<&CustomResourceDefinition>,
    ) {
        let name = ours.metadata.name.clone().unwrap_or_default();
        let problems = crd_compat::compare(ours, installed);
        let verdict = (!problems.is_empty()).then(|| incompatible(&name, installed, &problems));
        let before = self.verdicts.insert(name.clone(), verdict.clone());
        self.report
            .metrics
            .set_crd_compatible(&name, verdict.is_none());
        if before.as_ref() == Some(&verdict) {
            return;
        }
        let installed_version = installed.and_then(crd_compat::version_of);
        match &verdict {
            Some(why) => {
                tracing::error!(crd = %name, installed = installed_version.unwrap_or("unknown"), operator = crd_compat::VERSION, "{why}");
                self.publish(EventType::Warning, "IncompatibleCRD", why.clone());
            }
            // The first verdict of a compatible CRD is the normal start: quiet.
            None if before.is_some() => {
                let note = format!(
                    "CRD {name} (version {}) is compatible with this operator ({}) again; reconciling",
                    installed_version.unwrap_or("unknown"),
                    crd_compat::VERSION
                );
                tracing::info!(crd = %name, "{note}");
                self.publish(EventType::Normal, "CompatibleCRD", note);
            }
            None => {}
        }
        // Held while any CRD is not compatible (at start the first CRD's
        // verdict is applied before the second's: nothing acts yet then).
        let why: Vec<&str> = self
            .verdicts
            .values()
            .flatten()
            .map(String::as_str)
            .collect();
        let held = !why.is_empty();
        self.report.gate.hold(held);
        self.state.send_replace(held.then(|| why.join("; ")));
    }

    /// Without holding up the check (`recorder::publish`).
    fn publish(&self, type_: EventType, reason: &str, note: String) {
        let Some((client, reporter, pod)) = &self.report.events else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "CheckCRD".into(),
            secondary: None,
        };
        crate::recorder::publish(client.clone(), reporter.clone(), pod.clone(), vec![event]);
    }
}

/// The one line saying what is wrong with `name`, both versions and the fix.
pub fn incompatible(
    name: &str,
    installed: Option<&CustomResourceDefinition>,
    problems: &[Problem],
) -> String {
    let installed_version = installed
        .and_then(crd_compat::version_of)
        .map_or("an unknown version".to_string(), |v| format!("version {v}"));
    let what = if problems == [Problem::NotInstalled] {
        format!("CRD {name} is not installed")
    } else {
        format!(
            "CRD {name} ({installed_version}) is not compatible with this operator (version {}): {}",
            crd_compat::VERSION,
            crd_compat::describe(problems)
        )
    };
    format!("{what}; nothing is reconciled until it is fixed: {FIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_both_versions_what_is_missing_and_the_fix() {
        let mut old = kura_core::api::crds().remove(0);
        old.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(crd_compat::VERSION_ANNOTATION.into(), "0.0.9".into());
        let problems = [
            Problem::Missing("spec.pause".into()),
            Problem::Missing("status.appliedSpecHash".into()),
        ];
        let line = incompatible("kurainstances.kura.dev", Some(&old), &problems);
        assert!(
            line.starts_with(&format!(
                "CRD kurainstances.kura.dev (version 0.0.9) is not compatible with this operator (version {}): missing spec.pause, status.appliedSpecHash;",
                crd_compat::VERSION
            )),
            "{line}"
        );
        assert!(
            line.contains("kubectl apply --server-side -f crds/") && line.contains("helm upgrade"),
            "{line}"
        );
        old.metadata.annotations = None;
        let line = incompatible("kurainstances.kura.dev", Some(&old), &problems);
        assert!(line.contains("(an unknown version)"), "{line}");
    }
}
