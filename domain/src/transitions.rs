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
            _ => Verdict::Refused,
        }
    }
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
/// is its own guarded step so that it is visible in the log and idempotent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OrderState {
    PendingPayment,
    PaymentFailed,
    Confirmed,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderMove {
    Succeed,
    Fail,
    Ambiguous,
    Compensate,
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
            (S::Confirmed, M::Succeed) => Verdict::Already,
            (S::PaymentFailed | S::Failed, M::Fail) => Verdict::Already,
            (S::Failed, M::Compensate) => Verdict::Already,
            _ => Verdict::Refused,
        }
    }
    fn is_terminal(self) -> bool {
        matches!(self, Self::Confirmed | Self::Failed)
    }
    fn name(self) -> &'static str {
        self.public_status()
    }
}

impl OrderState {
    /// The status clients see (API.md): a declined order is FAILED as soon as it is declined.
    pub fn public_status(self) -> &'static str {
        match self {
            Self::PendingPayment => "PENDING_PAYMENT",
            Self::PaymentFailed | Self::Failed => "FAILED",
            Self::Confirmed => "CONFIRMED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_seat_moves() -> [SeatMove; 5] {
        use SeatMove::*;
        [Hold, Release, Order, Pay, Compensate]
    }

    #[test]
    fn terminal_states_refuse_every_move_that_would_change_them() {
        for m in all_seat_moves() {
            assert_eq!(SeatStatus::Sold.verdict(m), Verdict::Refused);
        }
        for s in [OrderState::Confirmed, OrderState::Failed] {
            for m in [
                OrderMove::Succeed,
                OrderMove::Fail,
                OrderMove::Ambiguous,
                OrderMove::Compensate,
            ] {
                assert!(
                    !matches!(s.verdict(m), Verdict::To(_)),
                    "{s:?} moved by {m:?}"
                );
            }
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
