//! Every machine-readable code onsale answers a failure with: one enum, so a code is spelt
//! once, each is in the OpenAPI document (`Problem.code`), and a client switches on the
//! generated union instead of strings of its own.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A failure's code (`Problem.code`; gRPC: the `onsale-code` metadata and the message's
/// first word).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    // The request itself.
    /// A field is missing, malformed or out of its bounds.
    InvalidRequest,
    /// The body is not JSON.
    MalformedJson,
    PayloadTooLarge,
    UnsupportedMediaType,
    /// No such route.
    NotFound,
    MethodNotAllowed,
    /// A write without an `Idempotency-Key`.
    IdempotencyKeyRequired,
    /// An `Idempotency-Key` reused with another request.
    IdempotencyKeyReused,
    /// A history cursor past the log's end.
    BeyondTheLog,
    // Who asks.
    /// No token, or one that does not verify.
    Unauthenticated,
    /// A role or account the operation does not allow.
    Forbidden,
    /// The show admits through its waiting room: a queue token is needed.
    AdmissionRequired,
    /// The show sells to verified accounts only.
    VerifiedAccountRequired,
    /// A queue token that does not verify or has lapsed.
    InvalidQueueToken,
    /// Joining this line asks for a proof of work first.
    ChallengeRequired,
    /// A development token asked from another address than the loopback.
    DevTokenLoopbackOnly,
    /// A webhook whose signature does not verify.
    InvalidSignature,
    // The waiting room.
    /// The show sells without a waiting room.
    NoWaitingRoom,
    /// The show's waiting room asks no challenge.
    NoChallenge,
    /// A challenge not ours, expired, another's, or smaller than the show asks now.
    ChallengeInvalid,
    ChallengeNotSolved,
    ChallengeReused,
    /// An admission token not the caller's, or not valid.
    InvalidAdmission,
    /// An admission's grace window passed.
    AdmissionExpired,
    AdmissionUsed,
    /// The sale is at capacity this second (the admission stays good).
    ZoneFull,
    /// A session not the caller's, or not valid.
    InvalidSession,
    /// A session's lease lapsed.
    SessionExpired,
    // Load and outages (each answered with `Retry-After`).
    /// Too many requests from this account or address.
    RateLimited,
    /// The request took longer than its bound.
    RequestTimeout,
    /// The show's queue is full.
    Overloaded,
    /// The process is draining.
    ShuttingDown,
    /// The show is moving to another shard.
    ShowMoving,
    /// Writes are taken in another region (`writeRegion` names it): this one is a standby,
    /// or the show's write cluster records another region as its writer.
    OtherRegion,
    /// A store or a part this request needs is unreachable.
    Unavailable,
    /// The waiting room's store is unreachable.
    WaitingRoomUnavailable,
    /// The process cannot serve yet.
    NotReady,
    /// A part of the process has stopped.
    Unhealthy,
    /// The process's cap on open streams is reached.
    TooManyStreams,
    /// A change acknowledged a moment ago is not readable yet.
    ProjectionBehind,
    /// The operation needs a setting this deployment has not made.
    NotConfigured,
    /// Something failed that should not have.
    Internal,
    // Shows, seats, holds and orders (the domain's).
    EventNotFound,
    EventExists,
    /// A show scheduled a moment ago whose seat map is not drawn yet.
    NotScheduledYet,
    VenueNotFound,
    UnknownSeat,
    UnknownSection,
    SeatUnavailable,
    HoldLimit,
    PaymentAttemptsExceeded,
    BestAvailableOnly,
    GeneralAdmission,
    SaleNotOpen,
    SaleClosed,
    HoldNotFound,
    HoldExpired,
    HoldOrdered,
    OrderNotFound,
    OrderNotCancellable,
    AmountMismatch,
    InvalidTransition,
    // Tickets at the gate.
    TicketNotFound,
    /// A barcode that is no ticket's.
    InvalidCode,
    /// A barcode of a step that has passed.
    ExpiredCode,
    AlreadyScanned,
    TicketUsed,
    TicketRevoked,
    /// The scanner's token names another venue or other shows (its gates).
    NotThisGate,
}

impl ErrorCode {
    /// The code as it is written on the wire.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&onsale_domain::ShowError> for ErrorCode {
    fn from(e: &onsale_domain::ShowError) -> Self {
        use onsale_domain::ShowError as E;
        match e {
            E::ShowNotFound => Self::EventNotFound,
            E::ShowAlreadyExists => Self::EventExists,
            E::Invalid(_) => Self::InvalidRequest,
            E::UnknownSeat(_) => Self::UnknownSeat,
            E::UnknownSection(_) => Self::UnknownSection,
            E::SeatUnavailable { .. } => Self::SeatUnavailable,
            E::HoldLimit { .. } => Self::HoldLimit,
            E::PaymentAttemptsExceeded { .. } => Self::PaymentAttemptsExceeded,
            E::BestAvailableOnly => Self::BestAvailableOnly,
            E::GeneralAdmission(_) => Self::GeneralAdmission,
            E::SaleNotOpen => Self::SaleNotOpen,
            E::SaleClosed => Self::SaleClosed,
            E::HoldNotFound => Self::HoldNotFound,
            E::HoldExpired => Self::HoldExpired,
            E::HoldOrdered(_) => Self::HoldOrdered,
            E::OrderNotFound => Self::OrderNotFound,
            E::NotCancellable(_) => Self::OrderNotCancellable,
            E::IdempotencyKeyReused => Self::IdempotencyKeyReused,
            E::AmountMismatch { .. } => Self::AmountMismatch,
            E::InvalidTransition { .. } => Self::InvalidTransition,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn each_code_is_written_the_same_by_serde_and_by_name() {
        for code in ErrorCode::iter() {
            let wire = serde_json::to_value(code).expect("serializes");
            assert_eq!(wire, code.as_str(), "{code:?}");
            let back: ErrorCode = serde_json::from_value(wire).expect("parses back");
            assert_eq!(back, code);
        }
    }
}
