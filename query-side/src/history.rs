//! A seat's history for auditors (docs/api.md "Audit and the log"): the log's events that
//! touched it (the history projection) with its tickets issued, scanned and revoked (the
//! payments' store, on the show's shard) interleaved, in pages with a cursor.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use onsale_domain::{ShowError, ShowId};
use onsale_edge::auth::{Caller, Role};
use onsale_edge::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::unavailable::db_unavailable;
use crate::QueryState;

/// One change of a seat: an event of the show's log (with its `sequence`), or a ticket of the
/// seat issued, scanned or revoked (`ticketId`, no sequence: tickets are not in the log).
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The event's sequence in the show's log; null for a ticket's entries.
    pub sequence: Option<i64>,
    /// When it was decided (a ticket: issued, scanned or revoked).
    pub at: chrono::DateTime<chrono::Utc>,
    /// When its transaction committed, where the relay saw it (null if it came from the table).
    pub committed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// SeatsHeld, HoldReleased, HoldExpired, OrderPlaced, PaymentSucceeded, PaymentFailed,
    /// PaymentAmbiguous, OrderCompensated, OrderReinstated, MakeGoodOwed, OrderCancelled,
    /// OrderRefunded, ShowScheduled; TicketIssued, TicketScanned, TicketRevoked.
    #[serde(rename = "type")]
    #[sqlx(rename = "type")]
    pub kind: String,
    pub hold_id: Option<String>,
    pub order_id: Option<String>,
    pub account_id: Option<String>,
    /// The commit's LSN, where the relay saw it.
    pub lsn: Option<String>,
    /// Who did it: an account, `processor`, or the part of onsale that decided it
    /// (`onsale:expiry`, `onsale:payments`, `onsale:tickets`, `onsale:catalog`).
    pub actor: Option<String>,
    pub ticket_id: Option<uuid::Uuid>,
    /// What else the event said: a failure's reason, a refund's id, a hold's expiry...
    #[schema(value_type = Option<onsale_projections::history::Detail>)]
    pub detail: Option<sqlx::types::Json<onsale_projections::history::Detail>>,
    #[serde(skip)]
    pub src: i32,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryResponse {
    pub seat_id: String,
    pub entries: Vec<HistoryEntry>,
    /// Where the next page starts (`?cursor=`); absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A page of a seat's history.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct HistoryQuery {
    /// Entries per page, 1 to 1000 (default 200).
    pub limit: Option<i64>,
    /// The previous page's `nextCursor`.
    pub cursor: Option<String>,
}

pub const HISTORY_PAGE: i64 = 200;
pub const HISTORY_PAGE_MAX: i64 = 1_000;

/// The position after an entry: (time in microseconds, source, sequence, ticket), opaque to
/// callers.
type HistoryKey = (i64, i32, i64, uuid::Uuid);

fn history_cursor(e: &HistoryEntry) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
        "{}.{}.{}.{}",
        e.at.timestamp_micros(),
        e.src,
        e.sequence.unwrap_or(0),
        e.ticket_id.unwrap_or_default()
    ))
}

fn parse_history_cursor(c: &str) -> Result<HistoryKey, ApiError> {
    use base64::Engine;
    let bad = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            "cursor is not one this server gave",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(bad)?;
    let mut parts = raw.splitn(4, '.');
    let mut next = || parts.next().ok_or_else(bad);
    Ok((
        next()?.parse().map_err(|_| bad())?,
        next()?.parse().map_err(|_| bad())?,
        next()?.parse().map_err(|_| bad())?,
        next()?.parse().map_err(|_| bad())?,
    ))
}

/// A page of a seat's history (auditors and admins), checked: the show and the seat must
/// exist. The log's entries and the seat's tickets, interleaved in time order.
pub async fn find_history(
    state: &QueryState,
    caller: &Caller,
    show: &str,
    seat: &str,
    page: &HistoryQuery,
) -> Result<HistoryResponse, ApiError> {
    caller.require(&[Role::Auditor, Role::Admin])?;
    let show: ShowId = show.parse()?;
    let limit = match page.limit {
        None => HISTORY_PAGE,
        Some(n) if (1..=HISTORY_PAGE_MAX).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidRequest,
                format!("limit is 1 to {HISTORY_PAGE_MAX}"),
            ))
        }
    };
    // An empty cursor is none (the first page).
    let after = match page.cursor.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => Some(parse_history_cursor(c)?),
        None => None,
    };
    let after = match after {
        Some((micros, src, sequence, ticket)) => onsale_projections::history::After {
            at: Some(
                chrono::DateTime::from_timestamp_micros(micros).ok_or_else(|| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        ErrorCode::InvalidRequest,
                        "cursor is not one this server gave",
                    )
                })?,
            ),
            src,
            sequence,
            ticket,
        },
        None => onsale_projections::history::After::default(),
    };
    // The log's entries from the read models, the tickets' from the show's shard (where its
    // tickets live, docs/adr/021): each side's page after the cursor, merged in the same order.
    let shard = state.log.pool_of(show).await.map_err(|e| {
        tracing::warn!(%show, error = %e, "the show's shard is not known");
        ApiError::unavailable()
    })?;
    let mut entries: Vec<HistoryEntry> =
        onsale_projections::history::seat_page(&state.pool, show, seat, &after, limit + 1)
            .await
            .map_err(db_unavailable)?;
    entries.extend(
        onsale_payments_store::tickets::seat_page(shard, show, seat, &after, limit + 1)
            .await
            .map_err(db_unavailable)?,
    );
    entries.sort_by_key(|e| {
        (
            e.at,
            e.src,
            e.sequence.unwrap_or(0),
            e.ticket_id.unwrap_or_default(),
        )
    });
    entries.truncate(usize::try_from(limit + 1).unwrap_or(usize::MAX));
    let next_cursor = if entries.len() as i64 > limit {
        entries.truncate(limit as usize);
        entries.last().map(history_cursor)
    } else {
        None
    };
    if entries.is_empty() && after.at.is_none() {
        let known = onsale_projections::seat_map::knows(&state.pool, show, seat)
            .await
            .map_err(db_unavailable)?;
        match known {
            (false, _) => return Err(ShowError::ShowNotFound.into()),
            (true, false) => return Err(ShowError::UnknownSeat(vec![seat.to_owned()]).into()),
            (true, true) => {}
        }
    }
    Ok(HistoryResponse {
        seat_id: seat.to_owned(),
        entries,
        next_cursor,
    })
}

/// Every event that touched a seat, in log order (auditor, admin).
#[utoipa::path(get, path = "/v1/events/{id}/seats/{seat}/history", params(("id" = String, Path), ("seat" = String, Path), HistoryQuery),
    security(("bearer" = [])), responses((status = 200, body = HistoryResponse), (status = 400), (status = 403), (status = 404)))]
pub(crate) async fn seat_history(
    State(state): State<QueryState>,
    caller: Caller,
    Path((id, seat)): Path<(String, String)>,
    Query(page): Query<HistoryQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    Ok(Json(
        find_history(&state, &caller, &id, &seat, &page).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn a_history_cursor_is_read_back_only_as_this_server_writes_it() {
        let ticket = uuid::Uuid::new_v4();
        let raw = format!("1796630400000000.2.17.{ticket}");
        let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        assert_eq!(
            parse_history_cursor(&cursor).expect("a cursor"),
            (1_796_630_400_000_000, 2, 17, ticket)
        );
        for forged in [
            "x.2.17.0",
            "1.2.17",
            "1.two.17.00000000-0000-0000-0000-000000000000",
        ] {
            let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged);
            assert!(parse_history_cursor(&cursor).is_err(), "{forged}");
        }
        assert!(parse_history_cursor("%%%").is_err());
    }
}
