-- The waiting room admits by the on-sale policies in force (issue 18: verified accounts, the
-- join challenge's size): it reads a show's last SalePolicyChanged from the log itself, which
-- this partial index finds in one probe however long the show's history is. Policy changes are
-- rare, so the index stays tiny.
CREATE INDEX events_policy_changes ON events (aggregate_type, aggregate_id, sequence DESC)
  WHERE event_type = 'SalePolicyChanged';
