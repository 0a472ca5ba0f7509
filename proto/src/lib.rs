//! The gRPC contract of onsale's read side, generated from `proto/onsale/v1/read.proto`.
//!
//! Clients in other languages generate their stubs from the same file (the tests do so in
//! Python); this crate is the Rust side of it.

#![allow(missing_debug_implementations, unreachable_pub, clippy::all)]

pub mod v1 {
    tonic::include_proto!("onsale.v1");
}
