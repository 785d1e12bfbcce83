//! Host claims in the running operator: the index, fed by the instance and
//! Ingress watches, and the one call a reconcile makes. Whom a change may
//! concern is sent on the instance controller's one wake channel
//! (`Context::wake`, shared with the fleet budget), which reconciles them.

use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use kura_core::api::KuraInstance;
use kura_core::claims::index::Index;
use kura_core::claims::{Claimant, Conflict, HostClaim, HostInputs, check, hosts, not_served};
use kura_core::config::OperatorConfig;

/// Where the instances to reconcile now are sent.
pub type WakeSender = tokio::sync::mpsc::UnboundedSender<ObjectRef<KuraInstance>>;

pub struct Claims {
    index: Mutex<Index>,
    /// None in a preview, which reconciles nothing.
    wake: Option<WakeSender>,
}

impl Claims {
    /// The claims, a deleted holder's hosts reserved for `reservation`;
    /// instances to reconcile because a host they wait for may have been
    /// freed go to `wake` (None: nowhere, for a preview).
    pub fn new(reservation: Duration, wake: Option<WakeSender>) -> Claims {
        Claims {
            index: Mutex::new(Index::new(reservation)),
            wake,
        }
    }

    /// After the reflector applied `event` to `store`.
    pub fn instance_event(
        &self,
        store: &Store<KuraInstance>,
        event: &watcher::Event<KuraInstance>,
    ) {
        let now = Timestamp::now();
        let mut index = self.index.lock().unwrap();
        let wakes = match event {
            watcher::Event::Apply(i) => index.upsert_instance(i, now),
            watcher::Event::Delete(i) => index.remove_instance(i, now),
            watcher::Event::InitDone => {
                let all = store.state();
                index.reset_instances(all.iter().map(|i| i.as_ref()), now)
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
        };
        drop(index);
        self.send(wakes);
    }

    /// After the reflector applied `event` to `store`.
    /// `listed`: every Ingress of the cache, asked for after a re-list only.
    pub fn ingress_event(
        &self,
        event: &watcher::Event<Ingress>,
        listed: impl FnOnce() -> Vec<Ingress>,
    ) {
        let mut index = self.index.lock().unwrap();
        let wakes = match event {
            watcher::Event::Apply(i) => index.upsert_ingress(i),
            watcher::Event::Delete(i) => index.remove_ingress(i),
            watcher::Event::InitDone => {
                let all = listed();
                index.reset_ingresses(all.iter())
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
        };
        drop(index);
        self.send(wakes);
    }

    /// Whether `instance` (valid under `config`) holds every host it asks
    /// for. Read-only: the decision asks this; [`Claims::claim`] takes them.
    pub fn check(
        &self,
        instance: &KuraInstance,
        config: &OperatorConfig,
        now: Timestamp,
    ) -> Result<(), Conflict> {
        self.judge(instance, config, now, false)
    }

    /// Checks again and, if `instance` holds every host it asks for, grants
    /// them to it in this process, in one step under the index's lock: called
    /// right before its objects are applied, so that an instance reconciled
    /// meanwhile sees them held before the caches show its Ingresses, and two
    /// instances never both take a host.
    pub fn claim(
        &self,
        instance: &KuraInstance,
        config: &OperatorConfig,
        now: Timestamp,
    ) -> Result<(), Conflict> {
        self.judge(instance, config, now, true)
    }

    fn judge(
        &self,
        instance: &KuraInstance,
        config: &OperatorConfig,
        now: Timestamp,
        grant: bool,
    ) -> Result<(), Conflict> {
        let Some(me) = Claimant::of(instance) else {
            return Ok(());
        };
        let wanted = self.wanted(instance, config);
        let names: Vec<String> = wanted.iter().map(|h| h.host.clone()).collect();
        let mut index = self.index.lock().unwrap();
        index.set_config(config);
        check(&me, &wanted, &index.standings(&names), now)?;
        if grant {
            index.grant(&me, &names, now);
        }
        Ok(())
    }

    /// The hosts `instance` asks for and serves by no Ingress of its own yet.
    pub fn not_served(&self, instance: &KuraInstance, config: &OperatorConfig) -> Vec<HostClaim> {
        let Some(me) = Claimant::of(instance) else {
            return Vec::new();
        };
        let wanted = self.wanted(instance, config);
        let names: Vec<String> = wanted.iter().map(|h| h.host.clone()).collect();
        let standings = self.index.lock().unwrap().standings(&names);
        not_served(&me, &wanted, &standings)
    }

    fn wanted(&self, instance: &KuraInstance, config: &OperatorConfig) -> Vec<HostClaim> {
        let domain = config
            .regions
            .get(&instance.spec.region)
            .map(|r| r.domain.as_str());
        hosts(&HostInputs::from(&instance.spec), domain)
    }

    /// A preview's stand-in for an apply that rewrites the rules of our
    /// Ingress `namespace/name` to `hosts` (`Index::rewrite_hosts`): returns
    /// the instances waiting for a host it frees, which the operator would
    /// reconcile once the write's watch event came.
    pub fn rewrite_hosts(
        &self,
        namespace: &str,
        name: &str,
        hosts: impl IntoIterator<Item = String>,
    ) -> Vec<(String, String)> {
        let mut index = self.index.lock().unwrap();
        index.rewrite_hosts(namespace, name, hosts)
    }

    /// `instance` is invalid: it asks for no host until it is decided again,
    /// so that input nobody can apply keeps nobody waiting.
    pub fn stand_down(&self, instance: &KuraInstance) {
        let Some(uid) = instance.metadata.uid.as_deref() else {
            return;
        };
        let wakes = self.index.lock().unwrap().stand_down(uid);
        self.send(wakes);
    }

    fn send(&self, wakes: Vec<(String, String)>) {
        let Some(wake) = &self.wake else { return };
        for (namespace, name) in wakes {
            // The receiver is gone only when the controller stopped.
            let _ = wake.send(ObjectRef::new(&name).within(&namespace));
        }
    }
}
