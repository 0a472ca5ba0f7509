//! The one state table. Every change to a seat, a hold or an order asks [`Transition::verdict`]
//! first; anything the table does not list is refused, which is how a terminal state never
//! regresses and a late or duplicated message never moves money or inventory backwards.

use serde::{Deserialize, Serialize};

/// What the table says about applying `by` to a thing in state `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<S> {
    /// A real change: the thing moves to this state.
    To(S),
    /// The thing is already where this move leads: a duplicate, answered without a change.
    Already,
    /// Not allowed from here.
    Refused,
}

pub trait Transition: Sized + Copy {
    type Move: Copy;
    fn verdict(self, by: Self::Move) -> Verdict<Self>;
    fn is_terminal(self) -> bool;
    fn name(self) -> &'static str;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeatStatus {
    Available,
    Held,
    PendingPayment,
    Sold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeatMove {
    Hold,
    Release,
    Order,
    Pay,
    Compensate,
    /// A paid order's buyer (or an admin) cancelled it: the seat goes back on sale.
    Cancel,
    /// A capture that arrived after the order failed, while the seat was still free (the late
    /// success policy, ADR 006): the seat is sold to the order that paid for it.
    Reinstate,
}

impl SeatStatus {
    /// The status the public seat map shows: a pending payment counts as sold, a hold does not
    /// show (only in its section's `held` count).
    pub fn public(self) -> &'static str {
        match self {
            Self::Available | Self::Held => "AVAILABLE",
            Self::PendingPayment | Self::Sold => "SOLD",
        }
    }
}

impl Transition for SeatStatus {
    type Move = SeatMove;
    fn verdict(self, by: SeatMove) -> Verdict<Self> {
        use SeatMove as M;
        use SeatStatus as S;
        match (self, by) {
            (S::Available, M::Hold) => Verdict::To(S::Held),
            (S::Held, M::Release) => Verdict::To(S::Available),
            (S::Held, M::Order) => Verdict::To(S::PendingPayment),
            (S::PendingPayment, M::Pay) => Verdict::To(S::Sold),
            (S::PendingPayment, M::Compensate) => Verdict::To(S::Available),
            (S::Sold, M::Cancel) => Verdict::To(S::Available),
            (S::Available, M::Reinstate) => Verdict::To(S::Sold),
            _ => Verdict::Refused,
        }
    }
    /// Sold is terminal for the sale: no payment event moves it; only its buyer's cancellation.
    fn is_terminal(self) -> bool {
        self == Self::Sold
    }
    fn name(self) -> &'static str {
        match self {
            Self::Available => "AVAILABLE",
            Self::Held => "HELD",
            Self::PendingPayment => "PENDING_PAYMENT",
            Self::Sold => "SOLD",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HoldState {
    Active,
    Released,
    Expired,
    Ordered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldMove {
    Release,
    Expire,
    Order,
}

impl Transition for HoldState {
    type Move = HoldMove;
    fn verdict(self, by: HoldMove) -> Verdict<Self> {
        use HoldMove as M;
        use HoldState as S;
        match (self, by) {
            (S::Active, M::Release) => Verdict::To(S::Released),
            (S::Active, M::Expire) => Verdict::To(S::Expired),
            (S::Active, M::Order) => Verdict::To(S::Ordered),
            // Releasing a hold that is already gone is the idempotent DELETE.
            (S::Released | S::Expired, M::Release | M::Expire) => Verdict::Already,
            _ => Verdict::Refused,
        }
    }
    fn is_terminal(self) -> bool {
        self != Self::Active
    }
    fn name(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Released => "RELEASED",
            Self::Expired => "EXPIRED",
            Self::Ordered => "ORDERED",
        }
    }
}

/// An order's lifecycle. `PaymentFailed` is "declined, seats not yet returned": the compensation
/// is its own guarded event so that it is visible in the log and idempotent.
///
/// Money decides the exits (ADR 006): a capture that arrives after the order failed either
/// reinstates it (its seats are still free) or owes a refund and a make-good (somebody else has
/// them); a confirmed order leaves only by its cancellation, which owes a refund; `Refunded` is
/// final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OrderState {
    PendingPayment,
    PaymentFailed,
    Confirmed,
    Failed,
    /// Cancelled after payment: tickets revoked, seats returned, the refund owed.
    Cancelled,
    /// Captured after it failed while its seats went to someone else: refund owed, make-good.
    MakeGood,
    Refunded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderMove {
    Succeed,
    Fail,
    Ambiguous,
    Compensate,
    Reinstate,
    MakeGood,
    Cancel,
    Refund,
}

impl Transition for OrderState {
    type Move = OrderMove;
    fn verdict(self, by: OrderMove) -> Verdict<Self> {
        use OrderMove as M;
        use OrderState as S;
        match (self, by) {
            (S::PendingPayment, M::Succeed) => Verdict::To(S::Confirmed),
            (S::PendingPayment, M::Fail) => Verdict::To(S::PaymentFailed),
            (S::PendingPayment, M::Ambiguous) => Verdict::To(S::PendingPayment),
            (S::PaymentFailed, M::Compensate) => Verdict::To(S::Failed),
            (S::PaymentFailed | S::Failed, M::Reinstate) => Verdict::To(S::Confirmed),
            (S::PaymentFailed | S::Failed, M::MakeGood) => Verdict::To(S::MakeGood),
            (S::Confirmed, M::Cancel) => Verdict::To(S::Cancelled),
            (S::Cancelled | S::MakeGood, M::Refund) => Verdict::To(S::Refunded),
            // Duplicates: the money already moved this way.
            (S::Confirmed | S::Cancelled | S::MakeGood | S::Refunded, M::Succeed) => {
                Verdict::Already
            }
            (S::PaymentFailed | S::Failed, M::Fail) => Verdict::Already,
            (S::Failed, M::Compensate) => Verdict::Already,
            (S::Cancelled | S::Refunded, M::Cancel) => Verdict::Already,
            (S::Refunded, M::Refund) => Verdict::Already,
            _ => Verdict::Refused,
        }
    }
    fn is_terminal(self) -> bool {
        self == Self::Refunded
    }
    fn name(self) -> &'static str {
        match self {
            Self::MakeGood => "MAKE_GOOD",
            other => other.public_status(),
        }
    }
}

impl OrderState {
    /// The status clients see (docs/api.md): a declined order is FAILED as soon as it is declined.
    pub fn public_status(self) -> &'static str {
        match self {
            Self::PendingPayment => "PENDING_PAYMENT",
            Self::PaymentFailed | Self::Failed | Self::MakeGood => "FAILED",
            Self::Confirmed => "CONFIRMED",
            Self::Cancelled => "CANCELLED",
            Self::Refunded => "REFUNDED",
        }
    }

    /// The payment failed, as clients see it (`FAILED`), whatever the compensation's step.
    pub fn is_failed(self) -> bool {
        matches!(self, Self::PaymentFailed | Self::Failed | Self::MakeGood)
    }

    /// Nothing is owed on the order any more: no payment to resolve, no refund to send.
    pub fn is_resolved(self) -> bool {
        matches!(self, Self::Confirmed | Self::Failed | Self::Refunded)
    }

    /// The order still claims its seats (counts against the account's cap).
    pub fn claims_seats(self) -> bool {
        matches!(
            self,
            Self::PendingPayment | Self::PaymentFailed | Self::Confirmed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_seat_moves() -> [SeatMove; 7] {
        use SeatMove::*;
        [Hold, Release, Order, Pay, Compensate, Cancel, Reinstate]
    }

    #[test]
    fn a_failed_order_is_the_one_clients_see_failed() {
        use OrderState::*;
        for state in [
            PendingPayment,
            PaymentFailed,
            Failed,
            MakeGood,
            Confirmed,
            Cancelled,
            Refunded,
        ] {
            assert_eq!(
                state.is_failed(),
                state.public_status() == "FAILED",
                "{state:?}"
            );
        }
    }

    fn all_order_moves() -> [OrderMove; 8] {
        use OrderMove::*;
        [
            Succeed, Fail, Ambiguous, Compensate, Reinstate, MakeGood, Cancel, Refund,
        ]
    }

    #[test]
    fn terminal_states_refuse_every_move_that_would_change_them() {
        for m in all_seat_moves() {
            let expected = if m == SeatMove::Cancel {
                Verdict::To(SeatStatus::Available)
            } else {
                Verdict::Refused
            };
            assert_eq!(SeatStatus::Sold.verdict(m), expected, "sold seat by {m:?}");
        }
        for m in all_order_moves() {
            assert!(
                !matches!(OrderState::Refunded.verdict(m), Verdict::To(_)),
                "refunded moved by {m:?}"
            );
        }
        // A confirmed order leaves only by its cancellation; no payment event moves it.
        for m in all_order_moves() {
            let moved = matches!(OrderState::Confirmed.verdict(m), Verdict::To(_));
            assert_eq!(moved, m == OrderMove::Cancel, "confirmed moved by {m:?}");
        }
        // A failed order is never made pending, failed again or cancelled: only money moves it.
        for m in [
            OrderMove::Fail,
            OrderMove::Ambiguous,
            OrderMove::Compensate,
            OrderMove::Cancel,
            OrderMove::Succeed,
        ] {
            assert!(
                !matches!(OrderState::Failed.verdict(m), Verdict::To(_)),
                "failed moved by {m:?}"
            );
        }
        for s in [HoldState::Released, HoldState::Expired, HoldState::Ordered] {
            for m in [HoldMove::Release, HoldMove::Expire, HoldMove::Order] {
                assert!(
                    !matches!(s.verdict(m), Verdict::To(_)),
                    "{s:?} moved by {m:?}"
                );
            }
        }
    }

    #[test]
    fn a_confirmed_order_cannot_fail_and_a_failed_one_cannot_succeed() {
        assert_eq!(
            OrderState::Confirmed.verdict(OrderMove::Fail),
            Verdict::Refused
        );
        assert_eq!(
            OrderState::Failed.verdict(OrderMove::Succeed),
            Verdict::Refused
        );
        assert_eq!(
            OrderState::PaymentFailed.verdict(OrderMove::Succeed),
            Verdict::Refused
        );
        assert_eq!(
            OrderState::Confirmed.verdict(OrderMove::Succeed),
            Verdict::Already
        );
    }

    #[test]
    fn an_available_seat_cannot_be_sold_without_a_hold_and_an_order() {
        assert_eq!(
            SeatStatus::Available.verdict(SeatMove::Pay),
            Verdict::Refused
        );
        assert_eq!(
            SeatStatus::Available.verdict(SeatMove::Order),
            Verdict::Refused
        );
        assert_eq!(SeatStatus::Held.verdict(SeatMove::Pay), Verdict::Refused);
    }
}
