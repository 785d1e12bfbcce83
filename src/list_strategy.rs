//! How the reflectors fill their caches: a streaming list where the API
//! server serves one (`sendInitialEvents`, its WatchList feature), else paged
//! lists. A streaming list sends the objects one by one as watch events from
//! the server's watch cache, so neither the server nor the operator holds a
//! page of the fleet as one response; a paged list (500 objects a page) works
//! everywhere.
//!
//! Which one is served depends on the server's version and feature gates
//! (WatchList is on by default in 1.32, off in 1.33, on again from 1.34, and
//! an administrator can turn it off), and kube-runtime's watcher has no
//! fallback of its own: a watcher asking for a streaming list of a server
//! that refuses it would retry forever. So the operator asks once, at start,
//! with the kind it reads first, and says which it uses.

use futures::StreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::watcher;

use kura_core::api::KuraInstance;

/// `--list-strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Choice {
    /// Streaming where the server serves it, paged lists elsewhere.
    Auto,
    Streaming,
    Paged,
}

/// The strategy in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    Streaming,
    Paged,
}

impl ListStrategy {
    pub fn name(self) -> &'static str {
        match self {
            ListStrategy::Streaming => "streaming",
            ListStrategy::Paged => "paged",
        }
    }

    /// `config` set to list this way.
    pub fn apply(self, config: watcher::Config) -> watcher::Config {
        match self {
            ListStrategy::Streaming => config.streaming_lists(),
            ListStrategy::Paged => config,
        }
    }
}

/// What the probe saw, the pure part of the choice.
#[derive(Debug)]
pub enum Probe {
    /// The server started a streaming list (an event or a bookmark came).
    Served,
    /// It refused one (HTTP status, or an error event first).
    Refused(u16),
    /// Nothing conclusive (a transport error, a timeout with no event).
    Unknown,
}

/// The strategy for `choice` given what the probe saw: a refusal or an
/// inconclusive probe falls back to paged lists, which every server serves.
pub fn strategy_for(choice: Choice, probe: Option<&Probe>) -> ListStrategy {
    match (choice, probe) {
        (Choice::Streaming, _) => ListStrategy::Streaming,
        (Choice::Paged, _) => ListStrategy::Paged,
        (Choice::Auto, Some(Probe::Served)) => ListStrategy::Streaming,
        (Choice::Auto, _) => ListStrategy::Paged,
    }
}

/// Ask the server for a streaming list of the instances this process watches
/// (bounded: a one-second server-side timeout, the first event is enough).
pub async fn probe(api: &Api<KuraInstance>) -> Probe {
    let params = WatchParams::streaming_lists()
        .timeout(1)
        .labels("kura.dev/list-strategy-probe=none");
    let stream = match api.watch(&params, "0").await {
        Ok(stream) => stream,
        Err(kube::Error::Api(status)) => return Probe::Refused(status.code),
        Err(_) => return Probe::Unknown,
    };
    let mut stream = std::pin::pin!(stream);
    match stream.next().await {
        Some(Ok(WatchEvent::Error(status))) => Probe::Refused(status.code),
        Some(Ok(_)) => Probe::Served,
        Some(Err(kube::Error::Api(status))) => Probe::Refused(status.code),
        _ => Probe::Unknown,
    }
}

/// Probe when `choice` asks for it, choose, and say which strategy is used.
pub async fn choose(choice: Choice, api: &Api<KuraInstance>) -> ListStrategy {
    let probed = match choice {
        Choice::Auto => Some(probe(api).await),
        _ => None,
    };
    let strategy = strategy_for(choice, probed.as_ref());
    tracing::info!(strategy = strategy.name(), probe = ?probed, "list strategy");
    strategy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_streams_only_where_the_server_served_a_streaming_list() {
        assert_eq!(
            strategy_for(Choice::Auto, Some(&Probe::Served)),
            ListStrategy::Streaming
        );
        // A 1.33 server answers 422; an older one may answer 400.
        assert_eq!(
            strategy_for(Choice::Auto, Some(&Probe::Refused(422))),
            ListStrategy::Paged
        );
        assert_eq!(
            strategy_for(Choice::Auto, Some(&Probe::Unknown)),
            ListStrategy::Paged
        );
        assert_eq!(strategy_for(Choice::Auto, None), ListStrategy::Paged);
    }

    #[test]
    fn an_explicit_choice_is_kept_whatever_the_probe() {
        assert_eq!(
            strategy_for(Choice::Paged, Some(&Probe::Served)),
            ListStrategy::Paged
        );
        assert_eq!(
            strategy_for(Choice::Streaming, Some(&Probe::Refused(422))),
            ListStrategy::Streaming
        );
    }
}
