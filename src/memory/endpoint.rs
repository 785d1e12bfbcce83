//! What this process knows of an instance's endpoint (part of its memory
//! record, with the record's lifetime): the last answer for the instance's
//! current [`Target`], and whether a check of it is running. The rules of
//! when to ask again are here and pure (the clock is passed in).
//!
//! The check itself runs beside the reconcile (`reconcile::endpoint_check`),
//! so a reconcile decides from the last answer it has; the answer of a check
//! that ends after its reconcile has moved on wakes the instance if it differs
//! from the one before.

use std::time::{Duration, Instant};

use kura_core::endpoint::Answer;
use kura_core::endpoint::Target;

/// How long an answer stands before the next reconcile asks again.
#[derive(Clone, Copy, Debug)]
pub struct Refresh {
    /// An instance that answered is asked again once per resync (its
    /// converged reconcile comes once per resync: one request per instance
    /// per resync).
    pub answered: Duration,
    /// One that did not is asked at each activation recheck.
    pub not_answered: Duration,
}

impl Refresh {
    fn after(&self, answer: &Answer) -> Duration {
        if answer.answered() {
            self.answered
        } else {
            self.not_answered
        }
    }
}

#[derive(Clone, Debug)]
pub struct EndpointMemo {
    target: Target,
    /// The last answer for `target`, and when the request that got it began
    /// (the age counts from there: the next reconcile comes a requeue after
    /// the one that began it).
    answer: Option<(Answer, Instant)>,
    /// A check of `target` is running, begun then: no second one.
    running: Option<Instant>,
}

/// What a reconcile learns from memory about its instance's endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointRecall {
    /// The last answer for this target, however old.
    pub last: Option<Answer>,
    /// Ask now: no answer for this target, or it is older than its refresh,
    /// and none is running. The caller must run the check and hand its answer
    /// to [`EndpointMemo::answered`].
    pub ask: bool,
}

impl EndpointMemo {
    pub fn new(target: &Target) -> EndpointMemo {
        EndpointMemo {
            target: target.clone(),
            answer: None,
            running: None,
        }
    }

    /// A reconcile's look at `target` at `now`. A target other than the one
    /// remembered (the Ingress's address moved, the region's port changed)
    /// starts over: an answer from another address says nothing of this one.
    pub fn look(&mut self, target: &Target, now: Instant, refresh: Refresh) -> EndpointRecall {
        if self.target != *target {
            *self = EndpointMemo::new(target);
        }
        let due = match &self.answer {
            None => true,
            Some((answer, asked)) => now.saturating_duration_since(*asked) >= refresh.after(answer),
        };
        let ask = due && self.running.is_none();
        if ask {
            self.running = Some(now);
        }
        EndpointRecall {
            last: self.answer.as_ref().map(|(a, _)| a.clone()),
            ask,
        }
    }

    /// A check of `target` ended with `answer`. Whether it changes what is
    /// known: a first answer, or one unlike the last. An answer for a target
    /// no longer remembered changes nothing and is dropped.
    pub fn answered(&mut self, target: &Target, answer: Answer, now: Instant) -> bool {
        if self.target != *target {
            return false;
        }
        let asked = self.running.take().unwrap_or(now);
        let changed = self.answer.as_ref().map(|(a, _)| a) != Some(&answer);
        self.answer = Some((answer, asked));
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(address: &str) -> Target {
        Target {
            address: address.into(),
            port: 80,
            host: "acme.r1.kura.test".into(),
            path: "/up".into(),
            account: "acme".into(),
        }
    }

    const REFRESH: Refresh = Refresh {
        answered: Duration::from_secs(300),
        not_answered: Duration::from_secs(15),
    };

    fn recall(last: Option<Answer>, ask: bool) -> EndpointRecall {
        EndpointRecall { last, ask }
    }

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn the_first_look_asks_and_a_second_waits_for_the_running_check() {
        let t0 = Instant::now();
        let t = target("10.0.0.1");
        let mut memo = EndpointMemo::new(&t);
        let first = memo.look(&t, t0, REFRESH);
        assert_eq!(first, recall(None, true));
        // A second reconcile while it runs (its answer is slow): no second request.
        let second = memo.look(&t, at(t0, 20), REFRESH);
        assert_eq!(second, recall(None, false));
        assert!(memo.answered(&t, Answer::Answered, at(t0, 21)));
        assert_eq!(
            memo.look(&t, at(t0, 22), REFRESH),
            recall(Some(Answer::Answered), false)
        );
    }

    #[test]
    fn an_answer_stands_for_one_resync_and_a_failure_for_one_recheck() {
        let t0 = Instant::now();
        let t = target("10.0.0.1");
        let mut memo = EndpointMemo::new(&t);
        assert!(memo.look(&t, t0, REFRESH).ask);
        memo.answered(&t, Answer::Answered, at(t0, 2));
        // Counted from when the request began, not when it ended.
        assert!(!memo.look(&t, at(t0, 299), REFRESH).ask);
        let stale = memo.look(&t, at(t0, 300), REFRESH);
        assert_eq!(stale, recall(Some(Answer::Answered), true));
        let refused = Answer::Refused {
            error: "connection refused".into(),
        };
        memo.answered(&t, refused.clone(), at(t0, 300));
        assert!(!memo.look(&t, at(t0, 314), REFRESH).ask);
        let again = memo.look(&t, at(t0, 315), REFRESH);
        assert_eq!(again, recall(Some(refused), true));
    }

    #[test]
    fn only_an_answer_unlike_the_last_is_a_change() {
        let t0 = Instant::now();
        let t = target("10.0.0.1");
        let mut memo = EndpointMemo::new(&t);
        memo.look(&t, t0, REFRESH);
        assert!(
            memo.answered(&t, Answer::Status { code: 503 }, t0),
            "first answer"
        );
        memo.look(&t, at(t0, 15), REFRESH);
        assert!(!memo.answered(&t, Answer::Status { code: 503 }, at(t0, 15)));
        memo.look(&t, at(t0, 30), REFRESH);
        assert!(memo.answered(&t, Answer::Status { code: 502 }, at(t0, 30)));
        memo.look(&t, at(t0, 45), REFRESH);
        assert!(memo.answered(&t, Answer::Answered, at(t0, 45)));
    }

    #[test]
    fn a_new_address_forgets_the_old_answer_and_the_old_checks_end() {
        let t0 = Instant::now();
        let (old, new) = (target("10.0.0.1"), target("10.0.0.2"));
        let mut memo = EndpointMemo::new(&old);
        memo.look(&old, t0, REFRESH);
        memo.answered(&old, Answer::Answered, t0);
        // A check of the old address is running when the address moves.
        memo.look(&old, at(t0, 300), REFRESH);
        let moved = memo.look(&new, at(t0, 301), REFRESH);
        assert_eq!(moved, recall(None, true), "asked at once");
        assert!(
            !memo.answered(&old, Answer::Answered, at(t0, 302)),
            "dropped"
        );
        assert_eq!(memo.look(&new, at(t0, 303), REFRESH).last, None);
        assert!(memo.answered(&new, Answer::Status { code: 404 }, at(t0, 303)));
    }
}
