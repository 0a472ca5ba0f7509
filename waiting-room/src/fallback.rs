//! Sessions admitted while Redis is away, remembered in PostgreSQL (and only there, also once
//! Redis is back): an admission token of the fallback enters once (a retry while its session
//! lives gets that session back), a heartbeat renews only a session that exists here and has
//! not lapsed, the gate lets through only such a session, and leaving ends it.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// A new admission (jti) or session id of the fallback (its tokens say `fallback: true`).
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Whether this account's fallback session of this show exists and its lease runs.
pub async fn live(pool: &PgPool, sid: &str, show: &str, account: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM waiting_room_fallback
          WHERE session_id = $1 AND show_id = $2 AND account_id = $3 AND lease_until > now())",
    )
    .bind(sid)
    .bind(show)
    .bind(account)
    .fetch_one(pool)
    .await
}

/// What entering with a fallback admission found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackEntry {
    /// A new session, or the live one this admission already opened (a retry).
    Session(String),
    /// The admission opened a session before, which has ended or is another account's.
    Used,
}

/// Opens the session `sid` for the admission `jti`, once.
pub async fn enter(
    pool: &PgPool,
    jti: &str,
    sid: &str,
    show: &str,
    account: &str,
    lease_until: DateTime<Utc>,
) -> sqlx::Result<FallbackEntry> {
    // Sessions lapsed an hour ago are of no use to anyone: the table stays as small as the
    // outage's live sessions.
    sqlx::query("DELETE FROM waiting_room_fallback WHERE lease_until < now() - interval '1 hour'")
        .execute(pool)
        .await?;
    let opened: Option<String> = sqlx::query_scalar(
        "INSERT INTO waiting_room_fallback (session_id, admission, show_id, account_id, lease_until)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (admission) DO NOTHING RETURNING session_id",
    )
    .bind(sid)
    .bind(jti)
    .bind(show)
    .bind(account)
    .bind(lease_until)
    .fetch_optional(pool)
    .await?;
    if let Some(sid) = opened {
        return Ok(FallbackEntry::Session(sid));
    }
    let again: Option<String> = sqlx::query_scalar(
        "SELECT session_id FROM waiting_room_fallback
          WHERE admission = $1 AND account_id = $2 AND show_id = $3 AND lease_until > now()",
    )
    .bind(jti)
    .bind(account)
    .bind(show)
    .fetch_optional(pool)
    .await?;
    Ok(again.map_or(FallbackEntry::Used, FallbackEntry::Session))
}

/// Renews a live fallback session of this account and show until `until`; `false` when there
/// is none (it lapsed, ended, or never was one).
pub async fn heartbeat(
    pool: &PgPool,
    sid: &str,
    show: &str,
    account: &str,
    until: DateTime<Utc>,
) -> sqlx::Result<bool> {
    Ok(sqlx::query(
        "UPDATE waiting_room_fallback SET lease_until = $4
          WHERE session_id = $1 AND show_id = $2 AND account_id = $3 AND lease_until > now()",
    )
    .bind(sid)
    .bind(show)
    .bind(account)
    .bind(until)
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}

/// Ends a fallback session (the fan left); `false` when there was none. The row stays (until
/// an hour after, long past its admission's grace window) so the admission cannot open
/// another session.
pub async fn leave(pool: &PgPool, sid: &str, show: &str, account: &str) -> sqlx::Result<bool> {
    Ok(sqlx::query(
        "UPDATE waiting_room_fallback SET lease_until = LEAST(lease_until, now())
          WHERE session_id = $1 AND show_id = $2 AND account_id = $3",
    )
    .bind(sid)
    .bind(show)
    .bind(account)
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}
