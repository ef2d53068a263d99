-- 0005: the number of pets of each status, kept by the writes themselves, so
-- that /metrics reads 48 rows instead of counting the catalogue (see
-- migrations/sqlite/0005). Each count is split over 16 shards, and a change
-- updates one chosen at random; a count is the sum of its shards.
CREATE TABLE pet_counts (
    status TEXT    NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
    shard  INTEGER NOT NULL CHECK (shard BETWEEN 0 AND 15),
    n      BIGINT  NOT NULL,
    PRIMARY KEY (status, shard)
);

INSERT INTO pet_counts (status, shard, n)
SELECT status, shard, 0
  FROM (VALUES ('available'), ('pending'), ('sold')) AS statuses (status)
 CROSS JOIN generate_series(0, 15) AS shard;

-- The pets already stored are counted once, here, into shard 0.
UPDATE pet_counts SET n = (SELECT count(*) FROM pets WHERE pets.status = pet_counts.status) WHERE shard = 0;

-- One function for every change of a pet, in the transaction of the change.
-- A change of status updates its two rows in one statement, so every writer
-- locks them in the same order.
CREATE FUNCTION pets_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s integer := floor(random() * 16);
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE pet_counts SET n = n + 1 WHERE status = NEW.status AND shard = s;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE pet_counts SET n = n - 1 WHERE status = OLD.status AND shard = s;
    ELSIF OLD.status <> NEW.status THEN
        UPDATE pet_counts SET n = n + CASE WHEN status = NEW.status THEN 1 ELSE -1 END
         WHERE status IN (OLD.status, NEW.status) AND shard = s;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pets_counted AFTER INSERT OR DELETE OR UPDATE OF status ON pets
    FOR EACH ROW EXECUTE FUNCTION pets_count();
