//! A show as search lists it: what the catalog's PostgreSQL search reads as a row and the
//! search index builds from a document.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

/// A show as search lists it.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct EventSummary {
    pub event_id: String,
    pub name: String,
    pub performer: String,
    pub venue_id: String,
    pub venue_name: String,
    pub city: String,
    pub starts_at: DateTime<Utc>,
    pub on_sale_at: DateTime<Utc>,
    #[sqlx(try_from = "String")]
    pub status: onsale_edge::EventStatus,
    pub min_price_cents: i64,
    pub max_price_cents: i64,
    pub waiting_room: bool,
    #[serde(skip)]
    pub score: f64,
}
