//! Parts of the documents both sides answer with (the event page on the command side, search
//! on the query side), typed once.

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
    /// available (`None`: not counted yet), else before or after its on-sale.
    pub fn at(
        now: chrono::DateTime<chrono::Utc>,
        starts_at: chrono::DateTime<chrono::Utc>,
        on_sale_at: chrono::DateTime<chrono::Utc>,
        available: Option<i32>,
    ) -> Self {
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
