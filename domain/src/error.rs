//! The one error type of the domain. Each variant is a user-facing outcome with a stable code.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::ids::{InvalidId, OrderId};

pub type Result<T, E = ShowError> = std::result::Result<T, E>;

/// Serializable both ways: a command forwarded to the node owning its show comes back with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ShowError {
    #[error("the show does not exist")]
    ShowNotFound,
    #[error("the show already exists")]
    ShowAlreadyExists,
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("unknown seats: {0:?}")]
    UnknownSeat(Vec<String>),
    #[error("unknown section {0}")]
    UnknownSection(String),
    #[error("seats unavailable: {lost:?}")]
    SeatUnavailable { lost: Vec<String> },
    #[error("the per-account limit of {limit} seats would be exceeded ({already} already held or ordered)")]
    HoldLimit { limit: u32, already: u32 },
    #[error("this account had {limit} payments declined for this show within a day; it may order again later")]
    PaymentAttemptsExceeded { limit: u32, retry_after_secs: u64 },
    #[error("this show hands out the best available seats now: ask for a quantity, not seats")]
    BestAvailableOnly,
    #[error("section {0} is general admission: ask for a quantity")]
    GeneralAdmission(String),
    #[error("the sale has not opened yet")]
    SaleNotOpen,
    #[error("the sale has closed")]
    SaleClosed,
    #[error("no such hold")]
    HoldNotFound,
    #[error("the hold has expired or was released")]
    HoldExpired,
    #[error("the hold was already used by order {0}")]
    HoldOrdered(OrderId),
    #[error("no such order")]
    OrderNotFound,
    #[error("an order that is {0} cannot be cancelled")]
    NotCancellable(Cow<'static, str>),
    #[error("this idempotency key was used with a different request")]
    IdempotencyKeyReused,
    #[error("the processor reports {reported} cents captured for an order of {expected}")]
    AmountMismatch { expected: i64, reported: i64 },
    #[error("{entity} cannot go from {from} by {by}")]
    InvalidTransition {
        entity: Cow<'static, str>,
        from: Cow<'static, str>,
        by: Cow<'static, str>,
    },
}

impl From<InvalidId> for ShowError {
    fn from(e: InvalidId) -> Self {
        Self::Invalid(e.0)
    }
}
