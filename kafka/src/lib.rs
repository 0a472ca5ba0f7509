//! The CDC relay of onsale (not built yet: issue "The read path").
//!
//! It will read the `events` table through a PostgreSQL logical replication slot and publish
//! each committed event to Kafka keyed by show, in a Debezium-style envelope, advancing the slot
//! only after the broker acknowledged. Nothing here runs today.
