//! What every HTTP and gRPC surface of onsale shares: who the caller is and what their role
//! allows ([`auth`]), the one error type and its problem+json / gRPC status answers
//! ([`problem`]), a JSON extractor whose rejections are problem+json ([`ApiJson`]), and the seam
//! between the booking path and the waiting room ([`admission`]).
//!
//! It decides nothing about seats, holds or orders, and holds no state of its own.

pub mod admission;
pub mod auth;
pub mod limits;
pub mod problem;

pub use auth::{AuthSettings, Caller, Role};
pub use problem::{ApiError, Problem};

/// `axum::Json` whose rejections are problem+json.
#[derive(Debug, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);
