-- A general-admission section is shown as counts only (issue 18): the seat map says which
-- sections are, in its snapshots and deltas.
ALTER TABLE seat_map_sections ADD COLUMN general_admission boolean NOT NULL DEFAULT false;
