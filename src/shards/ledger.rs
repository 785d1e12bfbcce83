//! The ledgers of a sharded fleet (`shard::ledger` has the rules): a
//! ConfigMap each, in the Leases' namespace, written only with the
//! resourceVersion that was read. Unsharded, there is none: one process
//! serializes its own reservations in memory.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::keys::LABEL_SHARDS_OF;
use crate::shard::ledger::{self, DATA_KEY, Entry};

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
    /// Reads the entries that still count, asks `decide`, and writes the
    /// entries it returns (if any) with the resourceVersion read. Of two
    /// replicas deciding at the same moment one is refused, reads the other's
    /// entry and decides again.
    pub async fn reserve<T>(
        &self,
        now: Timestamp,
        mut decide: impl FnMut(&[Entry]) -> (T, Vec<Entry>),
    ) -> Result<T, kube::Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let found = self.api.get_opt(&self.name).await?;
            let text = found
                .as_ref()
                .and_then(|cm| cm.data.as_ref()?.get(DATA_KEY).cloned());
            let entries = ledger::live(ledger::parse(text.as_deref()), now, ledger::TTL);
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
                Err(e) => return Err(e),
            }
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
