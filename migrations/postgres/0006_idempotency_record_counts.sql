-- 0006: the number of idempotency records, kept as the pets' counts are
-- (0005), for the metric petstore_idempotency_records.
CREATE TABLE idempotency_record_counts (
    shard INTEGER NOT NULL PRIMARY KEY CHECK (shard BETWEEN 0 AND 15),
    n     BIGINT  NOT NULL
);

INSERT INTO idempotency_record_counts (shard, n) SELECT shard, 0 FROM generate_series(0, 15) AS shard;

UPDATE idempotency_record_counts SET n = (SELECT count(*) FROM idempotency_keys) WHERE shard = 0;

-- Statement triggers with transition tables: pruning deletes many records in
-- one statement, which then updates one row, not one per record. A record
-- is replaced in place (an upsert's UPDATE), never deleted and inserted
-- again, so inserts and deletes keep the count.
CREATE FUNCTION idempotency_keys_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s integer := floor(random() * 16); -- once: random() in WHERE would be drawn per row
BEGIN
    UPDATE idempotency_record_counts SET n = n + (SELECT count(*) FROM inserted) WHERE shard = s;
    RETURN NULL;
END
$$;

CREATE FUNCTION idempotency_keys_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s integer := floor(random() * 16); -- once: random() in WHERE would be drawn per row
BEGIN
    UPDATE idempotency_record_counts SET n = n - (SELECT count(*) FROM deleted) WHERE shard = s;
    RETURN NULL;
END
$$;

CREATE TRIGGER idempotency_keys_counted_on_insert AFTER INSERT ON idempotency_keys
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION idempotency_keys_count_inserted();

CREATE TRIGGER idempotency_keys_counted_on_delete AFTER DELETE ON idempotency_keys
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION idempotency_keys_count_deleted();
