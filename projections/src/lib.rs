//! The projections of onsale (not built yet: issue "The read path").
//!
//! Kafka consumers that will fold the event log into read models in PostgreSQL (seat map with
//! LSN watermarks and section counts, orders, seat history), each applying an event at most once
//! by (show, sequence) and able to rebuild from zero. Nothing here runs today.
