//! The query side of onsale (not built yet: issue "The read path").
//!
//! It will serve every read a fan, an analyst or an auditor makes from the projections' read
//! models, never from the command side's memory: seat maps with `asOf`/`lsn`/`seq`, SSE and gRPC
//! delta streams, orders and seat history. Today `GET /v1/orders/{id}` and `GET /v1/events/{id}`
//! are answered by the command side from the show's committed state.
