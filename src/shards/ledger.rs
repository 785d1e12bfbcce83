//! The ledgers of a sharded fleet (`shard::ledger` has the rules): a
//! ConfigMap each, in the Leases' namespace, written only with the
//! resourceVersion that was read. Unsharded, there is none: one process
//! serializes its own reservations in memory.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::api::KuraInstance;
use crate::keys::LABEL_SHARDS_OF;
use crate::shard::ledger::{self, DATA_KEY, Entry, Seen};

/// How often a reservation refused by a concurrent write is decided again
/// before the reconcile gives up and is retried.
const ATTEMPTS: usize = 5;

/// The two ledgers: admissions to the fleet budget, and host grants.
pub struct Ledgers {
    pub budget: Ledger,
    pub hosts: Ledger,
}

impl Ledgers {
    pub fn new(client: kube::Client, namespace: &str, base: &str) -> Ledgers {
        let ledger = |what: &str| Ledger {
            api: Api::namespaced(client.clone(), namespace),
            name: format!("{base}-{what}"),
            base: base.to_string(),
        };
        Ledgers {
            budget: ledger("budget"),
            hosts: ledger("hosts"),
        }
    }
}

pub struct Ledger {
    api: Api<ConfigMap>,
    name: String,
    base: String,
}

impl Ledger {
    /// Reads the entries that still count (live, and standing against the
    /// instance cache: `seen` says what it shows of an entry's instance),
    /// asks `decide`, and writes the entries it returns (if any) with the
    /// resourceVersion read, leaving out those that no longer count. Of two
    /// replicas deciding at the same moment one is refused, reads the other's
    /// entry and decides again.
    pub async fn reserve<T>(
        &self,
        now: Timestamp,
        seen: impl Fn(&Entry) -> Seen,
        mut decide: impl FnMut(&[Entry]) -> (T, Vec<Entry>),
    ) -> Result<T, kube::Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let found = self.api.get_opt(&self.name).await?;
            let text = found
                .as_ref()
                .and_then(|cm| cm.data.as_ref()?.get(DATA_KEY).cloned());
            let entries: Vec<Entry> =
                ledger::live(ledger::parse(text.as_deref()), now, ledger::TTL)
                    .into_iter()
                    .filter(|e| ledger::stands(e, seen(e), now))
                    .collect();
            let (answer, new) = decide(&entries);
            if new.is_empty() {
                return Ok(answer);
            }
            let entries = new.into_iter().fold(entries, ledger::with);
            let written = match found {
                Some(cm) => self.replace(cm, &entries).await,
                None => self.create(&entries).await,
            };
            match written {
                Ok(()) => return Ok(answer),
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < ATTEMPTS => continue,
                Err(kube::Error::Api(s)) if s.code == 422 && attempt < ATTEMPTS => {
                    tracing::warn!(ledger = %self.name, error = %s.message, "the shared ledger refuses writes; replacing it");
                    self.delete().await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes a ledger that refuses every write (someone made it immutable,
    /// or grew it past what the apiserver accepts): the next attempt creates
    /// it again with the entries that still count, which it was read for.
    async fn delete(&self) -> Result<(), kube::Error> {
        match self.api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Ends the entry of `key` for `uid`, if it is there.
    pub async fn remove(&self, key: &str, uid: &str) -> Result<(), kube::Error> {
        for attempt in 1..=ATTEMPTS {
            let Some(cm) = self.api.get_opt(&self.name).await? else {
                return Ok(());
            };
            let text = cm.data.as_ref().and_then(|d| d.get(DATA_KEY).cloned());
            let mut entries = ledger::parse(text.as_deref());
            let before = entries.len();
            entries.retain(|e| !(e.key == key && e.uid == uid));
            if entries.len() == before {
                return Ok(());
            }
            match self.replace(cm, &entries).await {
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < ATTEMPTS => continue,
                done => return done,
            }
        }
        Ok(())
    }

    async fn replace(&self, mut cm: ConfigMap, entries: &[Entry]) -> Result<(), kube::Error> {
        cm.data = Some(BTreeMap::from([(
            DATA_KEY.to_string(),
            ledger::render(entries),
        )]));
        // The ledger's content is its one key; anything else is someone's.
        cm.binary_data = None;
        cm.metadata.managed_fields = None;
        self.api
            .replace(&self.name, &PostParams::default(), &cm)
            .await
            .map(|_| ())
    }

    async fn create(&self, entries: &[Entry]) -> Result<(), kube::Error> {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some([(LABEL_SHARDS_OF.to_string(), self.base.clone())].into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                ledger::render(entries),
            )])),
            ..Default::default()
        };
        self.api
            .create(&PostParams::default(), &cm)
            .await
            .map(|_| ())
    }
}

/// What the instance cache shows of an entry's instance (`ledger::stands`).
pub fn seen(instances: &[std::sync::Arc<KuraInstance>], entry: &Entry) -> Seen {
    let named = ledger::instance_of(entry).split_once('/');
    let mut seen = Seen::Nothing;
    for i in instances {
        if i.metadata.uid.as_deref() == Some(entry.uid.as_str()) {
            return Seen::Instance;
        }
        let key = (i.metadata.namespace.as_deref(), i.metadata.name.as_deref());
        if named.is_some_and(|(ns, name)| key == (Some(ns), Some(name))) {
            seen = Seen::Replaced;
        }
    }
    seen
}
