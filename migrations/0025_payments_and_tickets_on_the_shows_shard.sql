-- A show's payments, refunds, tickets, cancellations and the card tokens of its orders live on
-- the show's shard, beside its log (issue 31, docs/adr/021 and 022): every migration runs on
-- every database, so each shard has these tables and the main database's stay empty for shows
-- on other shards. A move copies them with the log, so they get a fence like the log's: once a
-- show's owner on a shard is the tombstone of a move, no row of the show is inserted or changed
-- there. The refusal has a code of its own (OSMVD), so the writer knows to look the show up
-- again rather than wait for the shard.
--
-- A write in flight when the move fences the show must be in the copy: each write takes the
-- show's advisory lock shared (held to its commit), and the fence takes it exclusively, so the
-- fence waits for the writes in flight and the writes after it see the tombstone. Not the
-- owner row FOR SHARE, as an append takes it: many payment and ticket writes share-locking the
-- row an append locks too would make PostgreSQL record every locker in a multixact on that row.

ALTER TABLE payment_tokens ADD COLUMN show_id text;
UPDATE payment_tokens SET show_id = split_part(order_id, '_', 2);
ALTER TABLE payment_tokens ALTER COLUMN show_id SET NOT NULL;

CREATE INDEX payments_by_show ON payments (show_id);
CREATE INDEX refunds_by_show ON refunds (show_id);
CREATE INDEX ticket_orders_by_show ON ticket_orders (show_id);
CREATE INDEX payment_tokens_by_show ON payment_tokens (show_id);

CREATE FUNCTION show_rows_fenced() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('onsale.show:' || NEW.show_id, 0));
    IF EXISTS (SELECT 1 FROM show_owners
                WHERE show_id = NEW.show_id
                  AND node_id = '00000000-0000-0000-0000-6d6f76656421') THEN
        RAISE EXCEPTION 'show % has moved to another shard: % refused here', NEW.show_id, TG_TABLE_NAME
            USING ERRCODE = 'OSMVD';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER payments_fenced BEFORE INSERT OR UPDATE ON payments
    FOR EACH ROW EXECUTE FUNCTION show_rows_fenced();
CREATE TRIGGER refunds_fenced BEFORE INSERT OR UPDATE ON refunds
    FOR EACH ROW EXECUTE FUNCTION show_rows_fenced();
CREATE TRIGGER tickets_fenced BEFORE INSERT OR UPDATE ON tickets
    FOR EACH ROW EXECUTE FUNCTION show_rows_fenced();
CREATE TRIGGER ticket_orders_fenced BEFORE INSERT OR UPDATE ON ticket_orders
    FOR EACH ROW EXECUTE FUNCTION show_rows_fenced();
CREATE TRIGGER payment_tokens_fenced BEFORE INSERT OR UPDATE ON payment_tokens
    FOR EACH ROW EXECUTE FUNCTION show_rows_fenced();
