//! What the line needs to know of the sale behind it (design.md §7.10):
//! whether seats are left, may come back, or are gone; how many fans the sale can use at once
//! (its conversion and seats left, by Little's law); and whether the card processor is
//! failing, since an admitted fan could hold seats but not pay for them. Read from the read
//! models, the log and the payment work list, so any admitter replica, on any node, sees the
//! same.

use std::collections::HashMap;

use onsale_domain::ShowId;
use sqlx::PgPool;

/// A show's seats as the line is told.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Availability {
    /// Seats are available now.
    Available,
    /// None available now, but holds or payments still pending could free some.
    SeatsMayReturn,
    /// None available, none held, none pending: only a cancellation brings one back.
    SoldOut,
    /// The read model cannot say (not folded yet, or not readable).
    Unknown,
}

impl Availability {
    /// Admitting more fans can help only while seats are available (or the read model cannot
    /// say: the controller pauses on an unreachable store itself).
    pub fn admits(self) -> bool {
        matches!(self, Self::Available | Self::Unknown)
    }

    /// From the seats available and held now and the seats of orders still paying.
    pub fn of(available: i64, held: i64, pending: i64) -> Self {
        if available > 0 {
            Self::Available
        } else if held > 0 || pending > 0 {
            Self::SeatsMayReturn
        } else {
            Self::SoldOut
        }
    }
}

/// The show's availability from the seat map's section counts (whose `sold` includes the
/// seats of orders still paying) and the orders projection's pending orders.
pub async fn availability(pool: &PgPool, show: ShowId) -> Availability {
    availabilities(pool, &[show])
        .await
        .remove(&show)
        .unwrap_or(Availability::Unknown)
}

/// [`availability`] of many shows in one query (the admitter asks it of every show with a line
/// on every tick). A show the read models cannot say anything of is `Unknown`.
pub async fn availabilities(pool: &PgPool, shows: &[ShowId]) -> HashMap<ShowId, Availability> {
    let ids: Vec<String> = shows.iter().map(ToString::to_string).collect();
    let rows = onsale_projections::seat_map::availability(pool, &ids).await;
    let mut out: HashMap<ShowId, Availability> =
        shows.iter().map(|s| (*s, Availability::Unknown)).collect();
    match rows {
        Ok(rows) => {
            for (id, available, held, pending) in rows {
                if let Ok(show) = id.parse::<ShowId>() {
                    out.insert(show, Availability::of(available, held, pending));
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "availability not read"),
    }
    out
}

/// What a show's recent sale says: seats that can still be sold (available, or held and so
/// perhaps coming back), and over its last [`RECENT_EVENTS`] events the holds made, the seats
/// they took and the orders placed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SaleMeasure {
    pub seats_left: i64,
    pub holds: i64,
    pub seats_held: i64,
    pub orders: i64,
}

/// How far back the measure looks in a show's log (by sequence: one index range, however long
/// the show's history is).
pub const RECENT_EVENTS: i64 = 5_000;
/// Fewer recent holds than this say nothing yet: N stays the configured target.
pub const MIN_HOLDS: i64 = 8;
/// Conversion is taken as at least this: a sale where nearly no hold converts would otherwise
/// ask for an unbounded N (the upper bound still applies).
pub const MIN_CONVERSION: f64 = 0.05;

impl SaleMeasure {
    /// Orders per hold.
    pub fn conversion(&self) -> f64 {
        if self.holds == 0 {
            return 0.0;
        }
        self.orders as f64 / self.holds as f64
    }

    /// Seats per hold.
    pub fn seats_per_hold(&self) -> f64 {
        if self.holds == 0 {
            return 0.0;
        }
        self.seats_held as f64 / self.holds as f64
    }

    /// The fans the sale can use at once (before the health factor), between `min` and `max`.
    /// Little's law: fans in the sale N = the rate they are admitted at x the time each spends
    /// in it (about one hold's duration: pick, hold, pay or let go). In one such cycle N fans
    /// take N x k seats (k seats per hold) and keep a share c of them (the conversion), so the
    /// seats left are sold in about one cycle by N = left / (k x c): fewer leaves seats unsold
    /// while the line waits, more only adds fans racing for seats that are not there (409s, a
    /// hold storm). Until the sale has made [`MIN_HOLDS`] recent holds, N is `target`.
    pub fn target(&self, target: u64, min: u64, max: u64) -> u64 {
        let (min, max) = (min.min(max), max.max(min));
        if self.holds < MIN_HOLDS {
            return target.clamp(min, max);
        }
        let cycle = self.seats_per_hold().max(1.0) * self.conversion().clamp(MIN_CONVERSION, 1.0);
        let n = (self.seats_left.max(0) as f64 / cycle).ceil();
        // A float past u64's range saturates; the clamp keeps it within the bounds.
        (n as u64).clamp(min, max)
    }
}

/// The show's [`SaleMeasure`]: seats left from the seat map, the rest from the show's last
/// [`RECENT_EVENTS`] events in its log (through the catalog's: it may live on another shard).
/// `None` when the seat map has not folded the show yet or either cannot be read (N then stays
/// the target).
pub async fn measure(
    pool: &PgPool,
    catalog: &onsale_eventlog::Catalog,
    show: ShowId,
) -> Option<SaleMeasure> {
    let left = onsale_projections::seat_map::seats_left(pool, show).await;
    let seats_left = match left {
        Ok(Some(left)) => left,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(%show, error = %e, "the sale's seats left not read");
            return None;
        }
    };
    match catalog.log().recent_activity(show, RECENT_EVENTS).await {
        Ok(a) => Some(SaleMeasure {
            seats_left,
            holds: a.holds,
            seats_held: a.seats_held,
            orders: a.orders,
        }),
        Err(e) => {
            tracing::warn!(%show, error = %e, "the sale's recent events not read");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sale(seats_left: i64, holds: i64, seats_held: i64, orders: i64) -> SaleMeasure {
        SaleMeasure {
            seats_left,
            holds,
            seats_held,
            orders,
        }
    }

    #[test]
    fn n_follows_the_seats_left_the_seats_per_hold_and_the_conversion() {
        // Too few holds to judge: the configured target, within the bounds.
        assert_eq!(sale(10_000, 3, 6, 3).target(2_000, 100, 5_000), 2_000);
        assert_eq!(sale(10_000, 3, 6, 3).target(2_000, 100, 1_000), 1_000);
        // 10,000 seats left, 2 seats a hold, every hold bought: 5,000 fans sell them.
        assert_eq!(
            sale(10_000, 100, 200, 100).target(2_000, 100, 50_000),
            5_000
        );
        // Half the holds lapse: twice the fans, since half the seats come back.
        assert_eq!(
            sale(10_000, 100, 200, 50).target(2_000, 100, 50_000),
            10_000
        );
        // 4 seats a hold: half as many fans.
        assert_eq!(
            sale(10_000, 100, 400, 100).target(2_000, 100, 50_000),
            2_500
        );
        // The end of the sale: 30 seats left, N shrinks to the fans who can still buy.
        assert_eq!(sale(30, 100, 200, 100).target(2_000, 1, 50_000), 15);
        // A sale where nothing converts asks for the upper bound, not for infinity.
        assert_eq!(sale(10_000, 100, 200, 0).target(2_000, 100, 50_000), 50_000);
        // Bounds given the wrong way round are still bounds.
        assert_eq!(sale(30, 100, 200, 100).target(2_000, 500, 100), 100);
    }

    proptest! {
        /// N never leaves the bounds, and never falls as more seats are left.
        #[test]
        fn n_stays_within_the_bounds_and_grows_with_the_seats_left(
            left in 0i64..1_000_000, more in 0i64..1_000_000,
            holds in 0i64..10_000, per_hold in 1i64..8, orders_pct in 0i64..=100,
            target in 0u64..100_000, min in 0u64..10_000, span in 0u64..100_000,
        ) {
            let max = min + span;
            let orders = holds * orders_pct / 100;
            let a = sale(left, holds, holds * per_hold, orders).target(target, min, max);
            let b = sale(left + more, holds, holds * per_hold, orders).target(target, min, max);
            prop_assert!((min..=max).contains(&a));
            prop_assert!(b >= a);
        }
    }

    #[test]
    fn the_line_is_told_seats_may_return_while_holds_or_payments_could_free_them() {
        assert_eq!(Availability::of(3, 0, 0), Availability::Available);
        assert_eq!(Availability::of(0, 2, 0), Availability::SeatsMayReturn);
        assert_eq!(Availability::of(0, 0, 1), Availability::SeatsMayReturn);
        assert_eq!(Availability::of(0, 0, 0), Availability::SoldOut);
        assert!(Availability::Available.admits());
        assert!(!Availability::SeatsMayReturn.admits());
        assert!(!Availability::SoldOut.admits());
    }
}
