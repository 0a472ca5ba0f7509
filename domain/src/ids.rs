//! Validated identifiers. Each is built by `parse`/`new`, so an invalid one cannot exist.
//!
//! Hold and order ids carry the show they belong to (`h_<show>_<n>`, `o_<show>_<n>`), so any node
//! can route `DELETE /v1/holds/{id}` or `POST /v1/orders` to the show's owner without a lookup
//! table: that matters once shows are sharded across primaries (ADR 002).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// An id (or a label) that does not parse: what is wrong with it, in words. The domain's
/// errors take it in as `InvalidId::Invalid`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidId(pub String);

macro_rules! uuid_id {
    ($name:ident, $what:literal) => {
        #[doc = concat!("The id of a ", $what, ".")]
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            pub fn new(id: Uuid) -> Self {
                Self(id)
            }
            pub fn random() -> Self {
                Self(Uuid::now_v7())
            }
            pub fn uuid(&self) -> Uuid {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Uuid::parse_str(s)
                    .map(Self)
                    .map_err(|_| InvalidId(format!("{s:.80} is not a valid {} id", $what)))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

uuid_id!(ShowId, "show");
uuid_id!(VenueId, "venue");

macro_rules! show_scoped_id {
    ($name:ident, $prefix:literal, $what:literal) => {
        #[doc = concat!("The id of a ", $what, ", carrying its show so that it routes without a lookup.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        pub struct $name {
            show: ShowId,
            id: Uuid,
        }

        /// Hashes the id's own part only: the ids a map holds are a show's, all with the same
        /// show part, and equal ids still hash equal.
        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                state.write_u128(self.id.as_u128());
            }
        }

        impl $name {
            pub fn new(show: ShowId) -> Self {
                Self { show, id: Uuid::now_v7() }
            }
            pub fn show(&self) -> ShowId {
                self.show
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "_{}_{}"), self.show.0.simple(), self.id.simple())
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                let bad = || InvalidId(format!("{s:.80} is not a valid {} id", $what));
                let rest = s.strip_prefix(concat!($prefix, "_")).ok_or_else(bad)?;
                let (show, id) = rest.split_once('_').ok_or_else(bad)?;
                if show.len() != 32 || id.len() != 32 {
                    return Err(bad());
                }
                Ok(Self {
                    show: ShowId(Uuid::parse_str(show).map_err(|_| bad())?),
                    id: Uuid::parse_str(id).map_err(|_| bad())?,
                })
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(Parsed::<Self>::new(concat!($what, " id")))
            }
        }
    };
}

/// Deserializes a validated id straight from the text the deserializer holds, without a
/// `String` in between (a log replay decodes millions of ids).
struct Parsed<T>(&'static str, std::marker::PhantomData<T>);

impl<T> Parsed<T> {
    fn new(what: &'static str) -> Self {
        Self(what, std::marker::PhantomData)
    }
}

impl<T: FromStr<Err = InvalidId>> serde::de::Visitor<'_> for Parsed<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a valid {}", self.0)
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
        s.parse().map_err(E::custom)
    }
}

show_scoped_id!(HoldId, "h", "hold");
show_scoped_id!(OrderId, "o", "order");

/// The rule for section and row labels (and so for every place a section is named, such as a
/// seat-map query): 1 to 16 ASCII letters or digits.
pub fn valid_label(what: &str, s: &str) -> Result<(), InvalidId> {
    if s.is_empty() || s.len() > 16 || !s.chars().all(|c| c.is_ascii_alphanumeric()) {
        let shown: String = s.chars().take(32).collect();
        return Err(InvalidId(format!(
            "{what} {shown:?} must be 1 to 16 letters or digits"
        )));
    }
    Ok(())
}

/// A seat: `<section>-<row>-<number>` (section and row are layout labels, the number counts
/// from 1), as the venue's layout names it. Built from a layout (`layout::seat_id`) or parsed;
/// an id of that shape may still name no seat of a given show (the show says so).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SeatId(String);

impl SeatId {
    pub fn parse(s: &str) -> Result<Self, InvalidId> {
        let bad = || {
            let shown: String = s.chars().take(80).collect();
            InvalidId(format!("{shown:?} is not a seat id (section-row-number)"))
        };
        let mut parts = s.rsplitn(3, '-');
        let (number, row, section) = (parts.next(), parts.next(), parts.next());
        let (Some(number), Some(row), Some(section)) = (number, row, section) else {
            return Err(bad());
        };
        valid_label("section", section).map_err(|_| bad())?;
        valid_label("row", row).map_err(|_| bad())?;
        match number.parse::<u32>() {
            Ok(n) if n >= 1 && !number.starts_with('0') => Ok(Self(s.to_owned())),
            _ => Err(bad()),
        }
    }

    /// The id of seat `number` of `row` in `section`, labels the layout already checked.
    pub(crate) fn of(section: &str, row: &str, number: u32) -> Self {
        Self(format!("{section}-{row}-{number}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SeatId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        Self::parse(s)
    }
}

impl fmt::Display for SeatId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SeatId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Parsed::<Self>::new("seat id"))
    }
}

impl AsRef<str> for SeatId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SeatId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for SeatId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

macro_rules! text_id {
    ($name:ident, $what:literal, $max:expr) => {
        #[doc = concat!("A ", $what, ": 1 to ", stringify!($max), " visible ASCII characters.")]
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: &str) -> Result<Self, InvalidId> {
                if s.is_empty() || s.len() > $max || !s.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(InvalidId(format!(
                        "{} must be 1 to {} visible ASCII characters",
                        $what, $max
                    )));
                }
                Ok(Self(s.to_owned()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Self::parse(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(Parsed::<Self>::new($what))
            }
        }
    };
}

text_id!(AccountId, "account id", 128);
text_id!(IdempotencyKey, "Idempotency-Key", 255);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seat_ids_have_the_layouts_shape_and_round_trip() {
        for ok in ["S1-R1-1", "101-A-12", "VIP-3-400"] {
            let id = SeatId::parse(ok).expect(ok);
            assert_eq!(id.as_str(), ok);
            let json = serde_json::to_string(&id).expect("serializes");
            assert_eq!(json, format!("\"{ok}\""));
            assert_eq!(serde_json::from_str::<SeatId>(&json).expect("parses"), id);
        }
        for bad in [
            "", "S1", "S1-R1", "S1-R1-0", "S1-R1-01", "S1-R1-x", "S 1-R1-1", "-R1-1", "S1--1",
        ] {
            assert!(SeatId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(serde_json::from_str::<SeatId>("\"nope\"").is_err());
    }

    #[test]
    fn hold_ids_round_trip_and_carry_their_show() {
        let show = ShowId::random();
        let hold = HoldId::new(show);
        let parsed: HoldId = hold.to_string().parse().expect("parses");
        assert_eq!(parsed, hold);
        assert_eq!(parsed.show(), show);
        let json = serde_json::to_string(&hold).expect("json");
        assert_eq!(serde_json::from_str::<HoldId>(&json).expect("back"), hold);
    }

    #[test]
    fn a_malformed_id_is_not_echoed_back_whole() {
        let long = "x".repeat(10_000);
        let messages = [
            long.parse::<ShowId>().map(|_| ()),
            long.parse::<HoldId>().map(|_| ()),
            SeatId::parse(&long).map(|_| ()),
        ];
        for m in messages {
            let e = m.expect_err("refused").to_string();
            assert!(e.len() < 200, "{} characters: {e:.100}", e.len());
        }
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            "",
            "h_",
            "h_123_456",
            "o_00000000000000000000000000000000_x",
            "nonsense",
        ] {
            assert!(bad.parse::<HoldId>().is_err(), "{bad}");
        }
        let order = OrderId::new(ShowId::random()).to_string();
        assert!(
            order.parse::<HoldId>().is_err(),
            "an order id is not a hold id"
        );
        assert!(AccountId::parse("has space").is_err());
        assert!(AccountId::parse(&"x".repeat(129)).is_err());
        assert!(IdempotencyKey::parse("k-1").is_ok());
    }
}
