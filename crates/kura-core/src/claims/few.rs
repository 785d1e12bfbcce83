//! A set of a few elements, kept as a sorted vector of exactly that many.
//!
//! The host-claims index keeps five sets per instance (its hosts, the uids
//! asking for each host, the Ingresses serving it, the hosts granted to it),
//! and each usually holds one element. A `BTreeSet` allocates a whole node
//! (room for eleven) for its first element: about 280 bytes for a `String`,
//! 540 for a pair of them, against 24 and 48 here. By that count about 1.5 MB
//! of the index's 3.3 MB at N=1000 (the 3.3 MB measured by heaptrack,
//! docs/benchmarks.md; the 1.5 MB estimated, not profiled again). Lookups are
//! a binary search; inserts and removes move at most a few elements.

use std::borrow::Borrow;

/// A sorted set of a few elements (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Few<T: Ord>(Vec<T>);

impl<T: Ord> Default for Few<T> {
    fn default() -> Self {
        Few(Vec::new())
    }
}

impl<T: Ord> Few<T> {
    pub fn new() -> Few<T> {
        Few::default()
    }

    /// Adds `value`; false if it was there. The vector grows by one, not by
    /// the doubling a `Vec` would reserve.
    pub fn insert(&mut self, value: T) -> bool {
        match self.0.binary_search(&value) {
            Ok(_) => false,
            Err(at) => {
                self.0.reserve_exact(1);
                self.0.insert(at, value);
                true
            }
        }
    }

    /// Removes `value`; false if it was not there.
    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        match self.0.binary_search_by(|e| e.borrow().cmp(value)) {
            Ok(at) => {
                self.0.remove(at);
                self.0.shrink_to_fit();
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains<Q: Ord + ?Sized>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.0.binary_search_by(|e| e.borrow().cmp(value)).is_ok()
    }

    /// Keeps the elements `keep` is true of.
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.0.retain(keep);
        self.0.shrink_to_fit();
    }

    /// In order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The elements of either set, in order, once each.
    pub fn union<'a>(&'a self, other: &'a Few<T>) -> impl Iterator<Item = &'a T> {
        let mut all: Vec<&T> = self.0.iter().chain(&other.0).collect();
        all.sort();
        all.dedup();
        all.into_iter()
    }

    /// The elements of exactly one of the sets, in order.
    pub fn symmetric_difference<'a>(&'a self, other: &'a Few<T>) -> impl Iterator<Item = &'a T> {
        let only_self = self.0.iter().filter(|e| !other.contains(*e));
        let only_other = other.0.iter().filter(|e| !self.contains(*e));
        let mut out: Vec<&T> = only_self.chain(only_other).collect();
        out.sort();
        out.into_iter()
    }
}

impl<T: Ord> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut all: Vec<T> = iter.into_iter().collect();
        all.sort();
        all.dedup();
        all.shrink_to_fit();
        Few(all)
    }
}

impl<'a, T: Ord> IntoIterator for &'a Few<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::Few;

    #[test]
    fn holds_exactly_its_elements_with_no_spare_room() {
        let mut few = Few::new();
        assert!(few.insert("b".to_string()));
        assert!(few.insert("a".to_string()));
        assert!(!few.insert("a".to_string()));
        assert_eq!(few.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(few.0.capacity(), 2, "one slot per element, not a doubling");
        assert!(few.contains("a"));
        assert!(few.remove("a"));
        assert!(!few.remove("a"));
        assert_eq!(few.0.capacity(), 1);
        few.retain(|_| false);
        assert!(few.is_empty());
    }

    proptest! {
        /// The same answers as a `BTreeSet` for any sequence of inserts and
        /// removes, and the same union and symmetric difference.
        #[test]
        fn answers_as_a_btreeset_does(
            ops in proptest::collection::vec((any::<bool>(), 0u8..8), 0..40),
            other in proptest::collection::btree_set(0u8..8, 0..6),
        ) {
            let (mut few, mut set) = (Few::new(), BTreeSet::new());
            for (add, v) in ops {
                if add {
                    prop_assert_eq!(few.insert(v), set.insert(v));
                } else {
                    prop_assert_eq!(few.remove(&v), set.remove(&v));
                }
                prop_assert_eq!(few.len(), set.len());
            }
            for v in 0u8..8 {
                prop_assert_eq!(few.contains(&v), set.contains(&v));
            }
            let other_few: Few<u8> = other.iter().copied().collect();
            prop_assert_eq!(
                few.union(&other_few).copied().collect::<Vec<_>>(),
                set.union(&other).copied().collect::<Vec<_>>()
            );
            prop_assert_eq!(
                few.symmetric_difference(&other_few).copied().collect::<Vec<_>>(),
                set.symmetric_difference(&other).copied().collect::<Vec<_>>()
            );
        }
    }
}
