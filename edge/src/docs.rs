//! Parts of the documents both sides answer with (the event page and search on the query side,
//! the policy route on the command side), typed once.

use onsale_domain::{BestAvailableOnly, SalePolicy, MAX_SEATS_PER_ACCOUNT};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where a show's sale stands now.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum EventStatus {
    /// Before the on-sale.
    Scheduled,
    OnSale,
    /// No seat available now (returns may put it on sale again).
    SoldOut,
    /// The show has begun.
    Started,
}

impl EventStatus {
    /// A show's status at `now`: started, else sold out when the catalog counts no seat
    /// available (`None`: not counted yet), else before or after its on-sale. The times in any
    /// one measure: instants, or the search index's microseconds.
    pub fn at<T: PartialOrd>(now: T, starts_at: T, on_sale_at: T, available: Option<i32>) -> Self {
        if now >= starts_at {
            Self::Started
        } else if available == Some(0) {
            Self::SoldOut
        } else if now < on_sale_at {
            Self::Scheduled
        } else {
            Self::OnSale
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// As a read model stores it (text).
impl TryFrom<String> for EventStatus {
    type Error = strum::ParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// When explicit seat picks are refused (`BEST_AVAILABLE_ONLY`): the show hands out the best
/// available seats instead, so fans stop racing for the same ones.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BestAvailableOnlyDoc {
    Never,
    OnSaleWindow,
    Always,
}

impl From<BestAvailableOnlyDoc> for BestAvailableOnly {
    fn from(d: BestAvailableOnlyDoc) -> Self {
        match d {
            BestAvailableOnlyDoc::Never => Self::Never,
            BestAvailableOnlyDoc::OnSaleWindow => Self::OnSaleWindow,
            BestAvailableOnlyDoc::Always => Self::Always,
        }
    }
}

impl From<BestAvailableOnly> for BestAvailableOnlyDoc {
    fn from(d: BestAvailableOnly) -> Self {
        match d {
            BestAvailableOnly::Never => Self::Never,
            BestAvailableOnly::OnSaleWindow => Self::OnSaleWindow,
            BestAvailableOnly::Always => Self::Always,
        }
    }
}

/// The policies in force, as the event page and the policy route answer them.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SalePolicyView {
    hold_ttl_seconds: u32,
    on_sale_hold_ttl_seconds: Option<u32>,
    on_sale_window_seconds: u32,
    best_available_only: BestAvailableOnlyDoc,
    max_seats_per_account: u32,
    require_verified_account: bool,
    join_challenge_bits: u8,
    max_failed_payments: u32,
}

impl SalePolicyView {
    pub fn of(hold_ttl_seconds: u32, p: &SalePolicy) -> Self {
        Self {
            hold_ttl_seconds,
            on_sale_hold_ttl_seconds: p.on_sale_hold_ttl_seconds,
            on_sale_window_seconds: p.on_sale_window_seconds,
            best_available_only: p.best_available_only.into(),
            max_seats_per_account: p.max_seats_per_account.unwrap_or(MAX_SEATS_PER_ACCOUNT),
            require_verified_account: p.require_verified_account,
            join_challenge_bits: p.join_challenge_bits,
            max_failed_payments: p.failed_payment_cap(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn each_status_is_written_and_read_back_the_same_everywhere() {
        for status in EventStatus::iter() {
            let wire = serde_json::to_value(status).expect("serializes");
            assert_eq!(wire, status.as_str());
            assert_eq!(
                EventStatus::try_from(status.as_str().to_owned()),
                Ok(status)
            );
        }
    }
}
