-- 0010: the pets' counts (0005) kept per statement, not per row, with
-- transition tables, as 0006 keeps the idempotency records'. A write batch
-- inserts the pets of its creates with one statement, and a catalogue is
-- loaded with a few: each such statement now updates one count, where it
-- updated one per pet (a trigger call, a scan of pet_counts and a new row
-- version each). The statuses are updated in their order, as every writer
-- locks them; the shard is drawn once per statement. The service never
-- changes a pet's id, so an update's rows before and after pair by id.
DROP TRIGGER pets_counted ON pets;
DROP FUNCTION pets_count();

CREATE FUNCTION pets_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s integer := floor(random() * 16);
    c record;
BEGIN
    FOR c IN SELECT status, count(*) AS k FROM inserted GROUP BY status ORDER BY status LOOP
        UPDATE pet_counts SET n = n + c.k WHERE status = c.status AND shard = s;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION pets_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s integer := floor(random() * 16);
    c record;
BEGIN
    FOR c IN SELECT status, count(*) AS k FROM deleted GROUP BY status ORDER BY status LOOP
        UPDATE pet_counts SET n = n - c.k WHERE status = c.status AND shard = s;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION pets_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s integer := floor(random() * 16);
    c record;
BEGIN
    FOR c IN
        SELECT status, sum(k) AS k
          FROM (SELECT b.status, -1 AS k FROM before_rows b JOIN after_rows a USING (id) WHERE b.status <> a.status
                UNION ALL
                SELECT a.status, 1 AS k FROM before_rows b JOIN after_rows a USING (id) WHERE b.status <> a.status) AS moves
         GROUP BY status HAVING sum(k) <> 0 ORDER BY status
    LOOP
        UPDATE pet_counts SET n = n + c.k WHERE status = c.status AND shard = s;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER pets_counted_on_insert AFTER INSERT ON pets
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION pets_count_inserted();

CREATE TRIGGER pets_counted_on_delete AFTER DELETE ON pets
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION pets_count_deleted();

-- Every UPDATE of pets: a trigger with transition tables cannot name the
-- columns it follows (UPDATE OF status).
CREATE TRIGGER pets_counted_on_update AFTER UPDATE ON pets
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows FOR EACH STATEMENT EXECUTE FUNCTION pets_count_updated();
