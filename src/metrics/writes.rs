//! Writes: status writes of both kinds (and since when they fail, for
//! `/readyz`), and the shared ledgers' writes of a sharded fleet.

use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{ResultLabel, registered};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LedgerLabel {
    ledger: &'static str,
}

/// `kura_status_writes`.
pub(crate) struct StatusWrites {
    writes: Family<ResultLabel, Counter>,
    /// Since when every status write has failed (none succeeded since), and
    /// the last error: what `/readyz` reports once it lasts.
    failing: Mutex<Option<(Instant, String)>>,
}

impl StatusWrites {
    pub(crate) fn register(r: &mut Registry) -> Self {
        StatusWrites {
            writes: registered(
                r,
                "status_writes",
                "Status writes of both kinds by result (ok, failed, held: a refresh of counts alone held back by the process's refresh rate, asked again by the object's next pass); a failed one is also an Event on the object, and /readyz fails while none has succeeded for a while",
                Family::default(),
            ),
            failing: Mutex::new(None),
        }
    }

    /// A status write succeeded, or failed with `error`.
    pub(crate) fn written(&self, error: Option<&kube::Error>) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        let result = match error {
            None => {
                *failing = None;
                "ok"
            }
            Some(e) => {
                let since = failing.as_ref().map_or_else(Instant::now, |(at, _)| *at);
                *failing = Some((since, e.to_string()));
                "failed"
            }
        };
        self.writes.get_or_create(&ResultLabel { result }).inc();
    }

    /// A refresh of counts alone was held back.
    pub(crate) fn held(&self) {
        self.writes
            .get_or_create(&ResultLabel { result: "held" })
            .inc();
    }

    /// How long every status write has failed, and the last error.
    pub(crate) fn failing(&self) -> Option<(std::time::Duration, String)> {
        let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing.as_ref().map(|(at, e)| (at.elapsed(), e.clone()))
    }
}

/// `kura_shard_ledger_refused`, `kura_shard_ledger_writes`.
pub(crate) struct Ledgers {
    refused: Family<LedgerLabel, Counter>,
    writes: Family<LedgerLabel, Counter>,
}

impl Ledgers {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Ledgers {
            refused: registered(
                r,
                "shard_ledger_refused",
                "Writes to a shared ledger of a sharded fleet (budget: admissions; hosts: host grants) refused because another replica wrote first (409); each is read and decided again. A steady rate means replicas contend for one ledger",
                Family::default(),
            ),
            writes: registered(
                r,
                "shard_ledger_writes",
                "Writes to a shared ledger of a sharded fleet that succeeded; one write carries every reservation of this replica that waited for the one before it",
                Family::default(),
            ),
        }
    }

    /// The refusals of the ledger `ledger` (budget, hosts).
    pub(crate) fn refused(&self, ledger: &'static str) -> Counter {
        self.refused.get_or_create(&LedgerLabel { ledger }).clone()
    }

    /// The successful writes of the ledger `ledger`.
    pub(crate) fn writes(&self, ledger: &'static str) -> Counter {
        self.writes.get_or_create(&LedgerLabel { ledger }).clone()
    }
}
