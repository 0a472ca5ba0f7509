-- Traces (issue 30, docs/adr/019): a seat-map delta names the sampled traces whose events it
-- carries (W3C traceparents), so the read side's span of handing it to subscribers joins them.
-- NULL when none was sampled, which is nearly always.
ALTER TABLE seat_map_deltas ADD COLUMN traceparents text[];
