//! The addresses of ingress controllers, watched on a cadence of their own.
//!
//! An instance's own endpoint check asks once per resync while it answers
//! (ten minutes at the chart's default): alone, a controller that stops
//! would leave every instance it serves Ready that long. So every address
//! where instances answered is asked again every few seconds, once per
//! address (through one of its instances' hosts, in turn), whatever the
//! number of instances behind it: ten thousand instances behind one shared
//! class cost one request per round. When nothing accepts or answers the
//! connection there (refused, timed out, not HTTP), asked twice in a row
//! through two instances' hosts, the address is down for every instance
//! watched there: each is given that answer (the same address and port
//! refused the same connection) and reconciled, and leaves the watch (its own
//! checks, at each activation recheck, follow it from there and bring it back
//! when it answers).
//!
//! An address where an instance's own check answered within half a round
//! needs no request of the watch's: that answer is as new. A round asks at
//! most [`MAX_PER_ROUND`] addresses, those asked longest ago first: with more
//! (a dedicated gateway per instance, each its own address) each is asked
//! every few rounds, and the requests stay bounded whatever the fleet.
//!
//! An HTTP answer, whatever its status, comes from a controller that runs:
//! whether one instance's route or backend works is that instance's own
//! check's question, asked at its resync, not the watch's.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::{Answer, Target};

/// The most addresses one round asks.
pub const MAX_PER_ROUND: usize = 300;

/// Where instances' checks are sent: an ingress controller's address and port.
pub type Address = (String, u16);

/// An instance watched at an address: the last check of its own answered there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    pub namespace: String,
    pub name: String,
    pub target: Target,
}

#[derive(Debug)]
struct Watch {
    /// Uid → the instance.
    instances: BTreeMap<String, Watched>,
    /// When an instance's own check last answered there.
    answered: Instant,
    /// When the watch last asked it.
    asked: Option<Instant>,
}

impl Watch {
    /// The newest word on the address.
    fn heard(&self) -> Instant {
        self.asked.map_or(self.answered, |a| a.max(self.answered))
    }
}

/// One address to ask this round: through `first`'s host, and `second`'s
/// (another instance's, when there is one) to confirm a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub address: Address,
    pub first: Watched,
    pub second: Watched,
}

#[derive(Debug, Default)]
pub struct Addresses {
    /// Address → its instances, and when one of them last answered there.
    at: BTreeMap<Address, Watch>,
    /// Uid → where it is watched.
    of: HashMap<String, Address>,
    /// Rounds so far: picks the instances asked, in turn.
    round: usize,
}

impl Addresses {
    /// An instance's own check of `target` ended with `answer`: watched at
    /// the address if it answered, not watched otherwise (its own checks
    /// follow it until it answers again).
    pub fn answered(&mut self, watched: Watched, uid: &str, answer: &Answer, now: Instant) {
        self.forget(uid);
        if !answer.answered() {
            return;
        }
        let address = (watched.target.address.clone(), watched.target.port);
        let watch = self.at.entry(address.clone()).or_insert_with(|| Watch {
            instances: BTreeMap::new(),
            answered: now,
            asked: None,
        });
        watch.answered = watch.answered.max(now);
        watch.instances.insert(uid.to_string(), watched);
        self.of.insert(uid.to_string(), address);
    }

    pub fn forget(&mut self, uid: &str) {
        let Some(address) = self.of.remove(uid) else {
            return;
        };
        if let Some(watch) = self.at.get_mut(&address) {
            watch.instances.remove(uid);
            if watch.instances.is_empty() {
                self.at.remove(&address);
            }
        }
    }

    /// Keeps the instances `alive` is true of (the others were deleted).
    pub fn retain(&mut self, alive: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.of.keys().filter(|uid| !alive(uid)).cloned().collect();
        for uid in gone {
            self.forget(&uid);
        }
    }

    /// How many addresses are watched (one request each per round).
    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// This round's probes at `now`, a round being `every`: one per address
    /// where no instance's own check answered within half a round (so that
    /// an address goes at most a round and a half unasked), its instances
    /// taken in turn; at most [`MAX_PER_ROUND`], those heard of longest ago.
    pub fn round(&mut self, now: Instant, every: Duration) -> Vec<Probe> {
        let round = self.round;
        self.round = self.round.wrapping_add(1);
        let mut due: Vec<(&Address, &mut Watch)> = self
            .at
            .iter_mut()
            .filter(|(_, watch)| now.saturating_duration_since(watch.answered) >= every / 2)
            .collect();
        due.sort_by_key(|(_, watch)| watch.heard());
        due.truncate(MAX_PER_ROUND);
        due.into_iter()
            .map(|(address, watch)| {
                watch.asked = Some(now);
                let n = watch.instances.len();
                let nth = |k: usize| {
                    let at = k % n;
                    watch
                        .instances
                        .values()
                        .nth(at)
                        .cloned()
                        .expect("never empty")
                };
                Probe {
                    address: address.clone(),
                    first: nth(round),
                    second: nth(round + 1),
                }
            })
            .collect()
    }

    /// `address` does not serve: every instance watched there leaves the
    /// watch, returned with its uid (to be given the answer and reconciled).
    pub fn down(&mut self, address: &Address) -> Vec<(String, Watched)> {
        let Some(watch) = self.at.remove(address) else {
            return Vec::new();
        };
        for uid in watch.instances.keys() {
            self.of.remove(uid);
        }
        watch.instances.into_iter().collect()
    }
}

/// Whether `answer` says nothing serves at the address: the connection was
/// refused, timed out, or did not speak HTTP. Any HTTP answer comes from a
/// running controller.
pub fn address_fails(answer: &Answer) -> bool {
    matches!(
        answer,
        Answer::Refused { .. } | Answer::TimedOut { .. } | Answer::Failed { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(name: &str, address: &str) -> Watched {
        Watched {
            namespace: "ns".into(),
            name: name.into(),
            target: Target {
                address: address.into(),
                port: 80,
                host: format!("{name}.r1.kura.test"),
                path: "/up".into(),
                account: name.into(),
            },
        }
    }

    const ROUND: Duration = Duration::from_secs(10);

    fn refused() -> Answer {
        Answer::Refused {
            error: "Connection refused".into(),
        }
    }

    #[test]
    fn one_request_per_address_whatever_the_instances_behind_it() {
        let t0 = Instant::now();
        let mut a = Addresses::default();
        for i in 0..1000 {
            a.answered(
                watched(&format!("i{i}"), "10.0.0.1"),
                &format!("u{i}"),
                &Answer::Answered,
                t0,
            );
        }
        a.answered(watched("solo", "10.0.0.2"), "solo", &Answer::Answered, t0);
        assert_eq!(a.len(), 2);
        let later = t0 + ROUND;
        let probes = a.round(later, ROUND);
        assert_eq!(probes.len(), 2);
        // Two instances' hosts for the shared address, in turn from round to round.
        let shared = &probes[0];
        assert_eq!(shared.address, ("10.0.0.1".to_string(), 80));
        assert_ne!(shared.first, shared.second);
        let next = a.round(later, ROUND);
        assert_eq!(next[0].first, shared.second);
        // An instance alone is asked twice through its own host.
        assert_eq!(probes[1].first, probes[1].second);
    }

    #[test]
    fn a_round_asks_a_bounded_number_of_addresses_those_heard_of_longest_ago_first() {
        let t0 = Instant::now();
        let mut a = Addresses::default();
        let n = MAX_PER_ROUND * 2 + 10;
        for i in 0..n {
            let address = format!("10.1.{}.{}", i / 256, i % 256);
            a.answered(
                watched(&format!("i{i}"), &address),
                &format!("u{i}"),
                &Answer::Answered,
                t0,
            );
        }
        let mut asked = std::collections::BTreeSet::new();
        for round in 1..=3u32 {
            let probes = a.round(t0 + ROUND * round, ROUND);
            assert!(probes.len() <= MAX_PER_ROUND);
            asked.extend(probes.into_iter().map(|p| p.address));
        }
        // Three rounds: every address once.
        assert_eq!(asked.len(), n);
    }

    #[test]
    fn an_address_where_an_instance_answered_within_half_a_round_is_not_asked() {
        let t0 = Instant::now();
        let mut a = Addresses::default();
        a.answered(watched("acme", "10.0.0.1"), "u1", &Answer::Answered, t0);
        assert!(a.round(t0 + ROUND / 4, ROUND).is_empty());
        a.answered(
            watched("acme", "10.0.0.1"),
            "u1",
            &Answer::Answered,
            t0 + ROUND / 4,
        );
        assert!(a.round(t0 + ROUND / 2, ROUND).is_empty());
        assert_eq!(a.round(t0 + ROUND, ROUND).len(), 1);
    }

    #[test]
    fn an_instance_that_does_not_answer_moves_or_is_gone_leaves_its_address() {
        let t0 = Instant::now();
        let mut a = Addresses::default();
        a.answered(watched("acme", "10.0.0.1"), "u1", &Answer::Answered, t0);
        a.answered(watched("beta", "10.0.0.1"), "u2", &Answer::Answered, t0);
        // Its own check failed: its own checks follow it from here.
        a.answered(
            watched("acme", "10.0.0.1"),
            "u1",
            &Answer::Status { code: 503 },
            t0,
        );
        let probes = a.round(t0 + ROUND, ROUND);
        assert_eq!((probes[0].first.name.as_str(), probes.len()), ("beta", 1));
        // Moved to another address: watched there only.
        a.answered(watched("beta", "10.0.0.9"), "u2", &Answer::Answered, t0);
        let probes = a.round(t0 + ROUND, ROUND);
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].address.0, "10.0.0.9");
        // Deleted.
        a.retain(|uid| uid != "u2");
        assert!(a.is_empty());
    }

    #[test]
    fn a_down_address_hands_back_every_instance_watched_there() {
        let t0 = Instant::now();
        let mut a = Addresses::default();
        a.answered(watched("acme", "10.0.0.1"), "u1", &Answer::Answered, t0);
        a.answered(watched("beta", "10.0.0.1"), "u2", &Answer::Answered, t0);
        a.answered(watched("gamma", "10.0.0.2"), "u3", &Answer::Answered, t0);
        let down = a.down(&("10.0.0.1".to_string(), 80));
        let names: Vec<&str> = down.iter().map(|(_, w)| w.name.as_str()).collect();
        assert_eq!(names, ["acme", "beta"]);
        assert_eq!(a.len(), 1);
        // Answering again, they are watched again.
        a.answered(watched("acme", "10.0.0.1"), "u1", &Answer::Answered, t0);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn only_a_connection_nothing_answers_says_the_address_is_down() {
        assert!(address_fails(&refused()));
        assert!(address_fails(&Answer::TimedOut {
            after: Duration::from_secs(3)
        }));
        assert!(address_fails(&Answer::Failed {
            error: "not HTTP".into()
        }));
        // An HTTP answer comes from a running controller.
        for answer in [
            Answer::Answered,
            Answer::Status { code: 502 },
            Answer::Status { code: 404 },
            Answer::WrongInstance {
                account: "other".into(),
            },
        ] {
            assert!(!address_fails(&answer), "{answer:?}");
        }
    }
}
