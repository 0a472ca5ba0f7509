-- A ticket says itself whether it is a general-admission place (issue 18): the issuer knows it
-- from the show's layout when it mints the ticket, so an order read right after its tickets
-- appear does not depend on the seat-map projection having caught up.
ALTER TABLE tickets ADD COLUMN general_admission boolean NOT NULL DEFAULT false;
UPDATE tickets t SET general_admission = true
  FROM seat_map_sections m
 WHERE m.show_id = t.show_id AND m.general_admission AND m.section = split_part(t.seat_id, '-', 1);
