//! What the line needs to know of the sale behind it (002, sold-out signals; provider outages):
//! whether seats are left, may come back, or are gone; and whether the card processor is
//! failing, since an admitted fan could hold seats but not pay for them. Read from the read
//! models and the payment work list, so any admitter replica, on any node, sees the same.

use onsale_domain::ShowId;
use sqlx::PgPool;

/// A show's seats as the line is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Available => "AVAILABLE",
            Self::SeatsMayReturn => "SEATS_MAY_RETURN",
            Self::SoldOut => "SOLD_OUT",
            Self::Unknown => "UNKNOWN",
        }
    }

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
    let row: Result<(Option<i64>, Option<i64>, i64), sqlx::Error> = sqlx::query_as(
        "SELECT (SELECT sum(available)::bigint FROM seat_map_sections WHERE show_id = $1),
                (SELECT sum(held)::bigint FROM seat_map_sections WHERE show_id = $1),
                (SELECT COALESCE(sum(cardinality(seat_ids)), 0)::bigint FROM orders_view
                  WHERE show_id = $1 AND status = 'PENDING_PAYMENT')",
    )
    .bind(show.to_string())
    .fetch_one(pool)
    .await;
    match row {
        Ok((Some(available), held, pending)) => {
            Availability::of(available, held.unwrap_or(0), pending)
        }
        Ok((None, ..)) => Availability::Unknown,
        Err(e) => {
            tracing::warn!(%show, error = %e, "availability not read");
            Availability::Unknown
        }
    }
}

/// Payments failing at the processor now: at least `FAILING_PAYMENTS` open payments have been
/// refused or left unanswered twice or more, and none resolved in the last 30 s. A processor
/// that answers some calls is not down; one that answers none while payments queue is.
pub async fn processor_failing(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let (failing, resolved): (i64, bool) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM payments
                  WHERE state <> 'done' AND attempts >= 2 AND last_error IS NOT NULL),
                EXISTS (SELECT 1 FROM payments WHERE resolved_at > now() - interval '30 seconds')",
    )
    .fetch_one(pool)
    .await?;
    Ok(failing >= FAILING_PAYMENTS && !resolved)
}

/// How many payments failing together make an outage (one bad card is not).
pub const FAILING_PAYMENTS: i64 = 3;

#[cfg(test)]
mod tests {
    use super::*;

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
