-- 0006: the number of idempotency records, kept as the pets' counts are
-- (0005, whose comments say why and how), for the metric
-- petstore_idempotency_records: the table grows with every create sent with
-- an Idempotency-Key and shrinks only when records expire, so operators
-- alert on its size.
CREATE TABLE idempotency_record_counts (
    shard INTEGER NOT NULL PRIMARY KEY CHECK (shard BETWEEN 0 AND 15),
    n     INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

WITH RECURSIVE shards (shard) AS (SELECT 0 UNION ALL SELECT shard + 1 FROM shards WHERE shard < 15)
INSERT INTO idempotency_record_counts (shard, n) SELECT shard, 0 FROM shards;

UPDATE idempotency_record_counts SET n = (SELECT count(*) FROM idempotency_keys) WHERE shard = 0;

-- A record is replaced in place (an UPDATE, see store_idempotency.go), never
-- deleted and inserted again, so these two keep the count.
CREATE TRIGGER idempotency_keys_counted_on_insert AFTER INSERT ON idempotency_keys BEGIN
    UPDATE idempotency_record_counts SET n = n + 1 WHERE shard = (SELECT abs(random() % 16));
END;

CREATE TRIGGER idempotency_keys_counted_on_delete AFTER DELETE ON idempotency_keys BEGIN
    UPDATE idempotency_record_counts SET n = n - 1 WHERE shard = (SELECT abs(random() % 16));
END;
