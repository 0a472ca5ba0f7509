-- Fencing epochs never go back (issue 29). A released claim deletes its `show_owners` row, so
-- `epoch + 1` started again at 1 and a paused old owner of epoch 1 could append past the fence
-- of the next epoch-1 owner. Every claim now draws its epoch from one sequence: strictly
-- greater than any epoch handed out before, whatever was deleted since.
CREATE SEQUENCE show_owner_epochs AS bigint;
SELECT setval('show_owner_epochs', COALESCE((SELECT max(epoch) FROM show_owners), 0) + 1, false);
