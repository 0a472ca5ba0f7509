//! What every HTTP and gRPC surface of onsale shares: who the caller is and what their role
//! allows ([`auth`]), the one error type and its problem+json / gRPC status answers
//! ([`problem`]), a JSON extractor whose rejections are problem+json ([`ApiJson`]), and the seam
//! between the booking path and the waiting room ([`admission`]).
//!
//! It decides nothing about seats, holds or orders, and holds no state of its own.

pub mod admission;
pub mod auth;
pub mod code;
pub mod docs;
pub mod limits;
pub mod openapi;
pub mod problem;
pub mod redis_tls;

pub use auth::{AuthSettings, Caller, Role};
pub use code::ErrorCode;
pub use docs::{BestAvailableOnlyDoc, EventStatus, SalePolicyView};
pub use problem::{ApiError, Problem, ProblemMembers};

/// `axum::Json` whose rejections are problem+json.
#[derive(Debug, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// A JSON integer as JSON Schema reads one: `155` and `155.0` are the same integer (a client
/// or a generator may send either); a fraction, or a value outside `T`, is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Integer<T>(pub T);

impl<'de, T: TryFrom<i64>> serde::Deserialize<'de> for Integer<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let n = serde_json::Number::deserialize(d)?;
        let whole = n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() <= 9.007_199_254_740_992e15)
                .map(|f| f as i64)
        });
        let value = whole.ok_or_else(|| D::Error::custom(format!("{n} is not an integer")))?;
        T::try_from(value)
            .map(Integer)
            .map_err(|_| D::Error::custom(format!("{value} is out of range")))
    }
}

/// Written as the integer it is (`155.0` read is `155` written): a request's fingerprint does
/// not tell the two apart.
impl<T: serde::Serialize> serde::Serialize for Integer<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::Integer;

    #[test]
    fn an_integer_may_be_written_with_a_zero_fraction() {
        let parse = |s: &str| serde_json::from_str::<Integer<u32>>(s).map(|i| i.0).ok();
        assert_eq!(parse("155"), Some(155));
        assert_eq!(parse("155.0"), Some(155));
        assert_eq!(parse("155.5"), None);
        assert_eq!(parse("-1"), None);
        assert_eq!(parse("\"155\""), None);
        assert_eq!(parse("1e20"), None);
    }
}
