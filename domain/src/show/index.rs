//! Lookups derived from the layout and the seats (seat ids, rows, sections, prices, free and
//! held counts, each account's holds and orders, hold expiries); rebuilt after a snapshot load.

use super::*;

#[derive(Debug, Clone, Copy)]
pub(super) struct RowSpan {
    pub(super) section: u32,
    pub(super) start: u32,
    pub(super) len: u32,
}

/// Lookup structures derived from the layout and the seats; rebuilt after a snapshot load.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    pub(super) seat_by_id: HashMap<SeatId, u32>,
    pub(super) seat_names: Vec<SeatId>,
    pub(super) seat_row: Vec<u32>,
    pub(super) rows: Vec<RowSpan>,
    pub(super) section_by_name: HashMap<String, u32>,
    pub(super) section_rows: Vec<std::ops::Range<u32>>,
    pub(super) section_price: Vec<i64>,
    /// Per row, whether it is a bucket of a general-admission section.
    pub(super) row_ga: Vec<bool>,
    pub(super) row_available: Vec<u32>,
    /// Per row, its held seats counted by their hold's expiry: best available counts a row's
    /// seats of lapsed holds as free without looking at each, and skips a row whose holds are
    /// all live in one lookup (on a filling show or a busy floor, most rows are like that).
    pub(super) row_holds: Vec<BTreeMap<DateTime<Utc>, u32>>,
    // The maps by account grow with every new fan of an on-sale: persistent maps, so that none
    // rehashes a whole table on the owner's task as it grows (ADR 026).
    /// Per account, its active holds (ended ones are dropped as they end).
    pub(super) account_holds: imbl::HashMap<AccountId, Vec<HoldId>>,
    pub(super) account_orders: imbl::HashMap<AccountId, Vec<OrderId>>,
    pub(super) expiry: BTreeSet<(DateTime<Utc>, HoldId)>,
    /// Per account, its finished holds made without a key (oldest id first: ids sort by
    /// creation), at most [`FINISHED_HOLDS_KEPT_PER_ACCOUNT`].
    pub(super) account_finished: imbl::HashMap<AccountId, BTreeSet<HoldId>>,
    /// Per account, its finished holds made under a key (oldest first), at most
    /// [`KEYED_FINISHED_HOLDS_KEPT_PER_ACCOUNT`].
    pub(super) account_keyed_finished: imbl::HashMap<AccountId, BTreeSet<HoldId>>,
    /// Every remembered idempotency key by when it was used, oldest first.
    pub(super) key_ages: BTreeSet<(DateTime<Utc>, AccountId, IdempotencyKey)>,
}

impl Show {
    pub(super) fn rebuild_index(&mut self) {
        let mut ix = Index::default();
        let mut seat = 0u32;
        for (s, section) in self.layout.sections().iter().enumerate() {
            let first_row = ix.rows.len() as u32;
            ix.section_by_name.insert(section.section.clone(), s as u32);
            let price = self
                .info
                .as_ref()
                .and_then(|i| i.prices.get(&section.price_tier).copied())
                .unwrap_or(0);
            ix.section_price.push(price);
            for row in &section.rows {
                let r = ix.rows.len() as u32;
                ix.rows.push(RowSpan {
                    section: s as u32,
                    start: seat,
                    len: row.seats,
                });
                ix.row_ga.push(section.general_admission);
                ix.row_available.push(0);
                ix.row_holds.push(BTreeMap::new());
                for n in 1..=row.seats {
                    let name = seat_id(&section.section, &row.row, n);
                    ix.seat_by_id.insert(name.clone(), seat);
                    ix.seat_names.push(name);
                    ix.seat_row.push(r);
                    seat += 1;
                }
            }
            ix.section_rows.push(first_row..ix.rows.len() as u32);
        }
        if self.seats.len() != seat as usize {
            self.seats = vec![Seat::Available; seat as usize];
        }
        for (i, s) in self.seats.iter().enumerate() {
            let row = ix.seat_row[i] as usize;
            match s {
                Seat::Available => ix.row_available[row] += 1,
                Seat::Held(h) => *ix.row_holds[row].entry(self.held_until(h)).or_default() += 1,
                _ => {}
            }
        }
        for (id, hold) in &self.holds {
            if hold.state == HoldState::Active {
                ix.account_holds
                    .entry(hold.account.clone())
                    .or_default()
                    .push(*id);
                ix.expiry.insert((hold.expires_at, *id));
            } else if hold.forgettable() {
                ix.account_finished
                    .entry(hold.account.clone())
                    .or_default()
                    .insert(*id);
            } else if hold.finished() && hold.key.is_some() {
                ix.account_keyed_finished
                    .entry(hold.account.clone())
                    .or_default()
                    .insert(*id);
            }
        }
        for r in self.idempotency.values() {
            ix.key_ages.insert((r.at, r.account.clone(), r.key.clone()));
        }
        for (id, order) in &self.orders {
            ix.account_orders
                .entry(order.account.clone())
                .or_default()
                .push(*id);
        }
        self.index = ix;
    }
}

impl Show {
    /// Whether the counts kept up to date event by event (free and held seats per row, by
    /// expiry; the expiry queue) equal those rebuilt from the seats: what best available and
    /// the sweeper trust. Property tests check it after every step.
    pub fn index_matches_rebuild(&self) -> bool {
        let mut fresh = self.clone();
        fresh.rebuild_index();
        let (now, then) = (&self.index, &fresh.index);
        now.row_available == then.row_available
            && now.row_holds == then.row_holds
            && now.expiry == then.expiry
            && now.account_finished == then.account_finished
            && now.account_keyed_finished == then.account_keyed_finished
            && now.key_ages == then.key_ages
    }
}
