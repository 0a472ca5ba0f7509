//! The hold and order ids a show's owner knows, readable by request tasks without going
//! through the owner's queue: a request naming an id the show never had (a bot's made-up
//! hold or order of the hot show) is answered `404` at once, and takes neither a queue slot
//! nor a batch slot from the fans whose holds are real.
//!
//! The set is a superset of the show's ids: an id is added the moment a command that made it
//! is decided (before its commit; a commit that fails leaves it in, which only sends a later
//! request for it to the owner, whose state answers), and the set is rebuilt from the state
//! when the owner loads the show and at each snapshot (what the show forgot is dropped then).
//! So "not in the set" always means "not in the show".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dashmap::DashSet;
use onsale_domain::{HoldId, OrderId, Show, ShowEvent};

#[derive(Debug, Default)]
pub(crate) struct KnownIds {
    holds: DashSet<HoldId>,
    orders: DashSet<OrderId>,
    /// The owner has the show loaded and the sets are complete.
    ready: AtomicBool,
    /// Odd while a rebuild empties and refills the sets: a lookup that saw it change during
    /// its read does not trust what it read (a sequence lock).
    generation: AtomicU64,
}

impl KnownIds {
    /// The sets become exactly the show's ids.
    pub(crate) fn rebuild(&self, show: &Show) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.holds.clear();
        self.orders.clear();
        for (id, _) in show.holds() {
            self.holds.insert(*id);
        }
        for (id, _) in show.orders() {
            self.orders.insert(*id);
        }
        self.holds.shrink_to_fit();
        self.orders.shrink_to_fit();
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.ready.store(true, Ordering::SeqCst);
    }

    /// The owner dropped its state (a failed append, a reload): nothing is answered from the
    /// sets until they are rebuilt.
    pub(crate) fn unknown(&self) {
        self.ready.store(false, Ordering::SeqCst);
    }

    /// `lookup` read against complete sets, or `None`.
    fn read(&self, lookup: impl FnOnce() -> bool) -> Option<bool> {
        let before = self.generation.load(Ordering::SeqCst);
        if !before.is_multiple_of(2) || !self.ready.load(Ordering::SeqCst) {
            return None;
        }
        let found = lookup();
        (self.generation.load(Ordering::SeqCst) == before).then_some(found)
    }

    /// Adds the ids a decided command's events name.
    pub(crate) fn note(&self, events: &[ShowEvent]) {
        for e in events {
            if let ShowEvent::SeatsHeld { hold_id, .. } = e {
                self.holds.insert(*hold_id);
            }
            if let ShowEvent::OrderPlaced { order_id, .. } = e {
                self.orders.insert(*order_id);
            }
        }
    }

    /// `Some(false)`: the show certainly has no such hold; `None`: the owner must say.
    pub(crate) fn hold(&self, id: &HoldId) -> Option<bool> {
        self.read(|| self.holds.contains(id))
    }

    /// `Some(false)`: the show certainly has no such order; `None`: the owner must say.
    pub(crate) fn order(&self, id: &OrderId) -> Option<bool> {
        self.read(|| self.orders.contains(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onsale_domain::ShowId;

    #[test]
    fn only_a_complete_set_says_an_id_is_unknown() {
        let known = KnownIds::default();
        let show = ShowId::random();
        let (h, o) = (HoldId::new(show), OrderId::new(show));
        assert_eq!(known.hold(&h), None, "nothing loaded: the owner says");
        known.rebuild(&Show::default());
        assert_eq!(known.hold(&h), Some(false));
        assert_eq!(known.order(&o), Some(false));
        known.note(&[ShowEvent::HoldReleased { hold_id: h }]);
        assert_eq!(known.hold(&h), Some(false), "a release makes no hold");
        known.unknown();
        assert_eq!(known.order(&o), None, "state dropped: the owner says");
    }
}
