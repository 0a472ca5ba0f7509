//! What the waiting room's routes take and answer (their schemas in the OpenAPI document).

use super::*;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Joined {
    /// `null` in the pre-queue (positions are drawn at random at the opening) and in fallback.
    pub position: Option<i64>,
    pub queue_token: String,
    /// Seconds, approximate; `null` when unknown.
    pub eta: Option<f64>,
    pub status: JoinStatus,
}

/// Where a join put the fan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JoinStatus {
    /// Joined before the opening: places are drawn at random when it opens.
    PreQueue,
    Waiting,
    /// The line's store is away: admission at a fixed pace.
    Fallback,
}

/// Where a fan stands in a show's line: `GET /v1/events/{id}/waiting-room`, and each event of
/// its stream.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    pub status: LineStatus,
    /// `FALLBACK` while the line's store is away (admission at a fixed pace); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<LineMode>,
    /// The fan's place; `null` in the pre-queue (drawn at the opening) and in fallback.
    pub position: Option<i64>,
    /// The last place admitted so far.
    pub admitted_through: Option<i64>,
    /// Seconds until admission, approximate and never growing; `null` when unknown.
    pub eta: Option<f64>,
    /// `ADMITTED`: what `POST /v1/events/{id}/enter` takes, until `enterBy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enter_by: Option<DateTime<Utc>>,
    /// `EXPIRED`: what happened, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `ERROR` (a stream's event only): why the standing could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    pub availability: Availability,
}

impl Standing {
    pub(super) fn new(status: LineStatus, availability: Availability) -> Self {
        Self {
            status,
            mode: None,
            position: None,
            admitted_through: None,
            eta: None,
            admission_token: None,
            enter_by: None,
            detail: None,
            code: None,
            availability,
        }
    }
}

/// Where in the line a fan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LineStatus {
    /// Joined before the opening: places are drawn at random when it opens.
    PreQueue,
    Waiting,
    /// The line passed the fan's place: enter with the admission token before `enterBy`.
    Admitted,
    /// Admitted, but the grace window passed: join again (at the back).
    Expired,
    /// A stream's event only: the standing could not be read this time (`code`); the stream goes on.
    Error,
}

/// How the line runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LineMode {
    /// The line's store is away: admission at a fixed pace from PostgreSQL.
    Fallback,
}

/// The stream's last event when the server shuts down (`event: closing`): reconnect.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Closing {
    pub reason: &'static str,
}

/// What a join carries when the show asks a challenge: the challenge as it was given, and the
/// answer found for it (both, or neither: `{}` and no body are the same join).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinRequest {
    pub challenge: Option<String>,
    /// Letters and digits, at most 64: `SHA-256(challenge + ":" + solution)` starts with the
    /// challenge's `bits` zero bits.
    pub solution: Option<String>,
}

/// A proof of work to solve before joining.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    /// Opaque; send it back as it is, with the solution.
    pub challenge: String,
    /// Leading zero bits `SHA-256(challenge + ":" + solution)` must have (about 2^bits tries).
    pub bits: u8,
    /// After this the challenge is refused: ask another.
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnterRequest {
    pub admission_token: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub session_id: String,
    pub lease_expires_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub session_id: String,
}
