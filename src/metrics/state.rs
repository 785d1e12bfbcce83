//! The process's own state: its role, its configuration, the CRDs it found,
//! how its caches are filtered.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{ResultLabel, registered};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrdLabel {
    crd: String,
}

/// `kura_leader`, `kura_config_valid`, `kura_crd_compatible`,
/// `kura_shards_filtered_by_server`, `kura_config_reloads`.
pub(crate) struct State {
    leader: Gauge,
    config_valid: Gauge,
    crd_compatible: Family<CrdLabel, Gauge>,
    shards_filtered_by_server: Gauge,
    config_reloads: Family<ResultLabel, Counter>,
}

impl State {
    pub(crate) fn register(r: &mut Registry) -> Self {
        State {
            leader: registered(
                r,
                "leader",
                "1 while this process leads (or runs without leader election), 0 on standby",
                Gauge::default(),
            ),
            config_valid: registered(
                r,
                "config_valid",
                "1 while the operator configuration file is valid and in force, 0 while it is invalid (the last valid configuration stays in force)",
                Gauge::default(),
            ),
            crd_compatible: registered(
                r,
                "crd_compatible",
                "Per CRD: 1 while the installed CRD serves every field this operator reads and writes, 0 while it does not (missing, or an older schema): nothing is reconciled then",
                Family::default(),
            ),
            shards_filtered_by_server: registered(
                r,
                "shards_filtered_by_server",
                "1 while the apiserver filters the shard-local caches to the shards this process holds (server-side sharded list and watch), 0 while they hold the whole fleet",
                Gauge::default(),
            ),
            config_reloads: registered(
                r,
                "config_reloads",
                "Changes of the operator configuration file read at runtime, by result: valid (in force) or invalid (ignored)",
                Family::default(),
            ),
        }
    }

    pub(crate) fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub(crate) fn set_shards_filtered_by_server(&self, on: bool) {
        self.shards_filtered_by_server.set(i64::from(on));
    }

    pub(crate) fn set_config_valid(&self, valid: bool) {
        self.config_valid.set(i64::from(valid));
    }

    pub(crate) fn set_crd_compatible(&self, crd: &str, compatible: bool) {
        self.crd_compatible
            .get_or_create(&CrdLabel { crd: crd.into() })
            .set(i64::from(compatible));
    }

    pub(crate) fn count_config_reload(&self, valid: bool) {
        let result = if valid { "valid" } else { "invalid" };
        self.config_reloads
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}
