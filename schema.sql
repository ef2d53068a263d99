-- schema.sql is the database schema as the migrations in migrations/sqlite
-- leave it, for reading: the tables, their constraints and indexes in one
-- place. It is not executed. To change the schema, add a migration; then
-- go test -run TestSchemaFileShowsTheMigratedSchema -update-schema rewrites
-- this file. Why each table, column and index is there is said in the
-- migration that made it.

CREATE TABLE event_marks (
    one            INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    pruned_through INTEGER NOT NULL CHECK (pruned_through >= 0)
) STRICT;

CREATE TABLE event_tickets (
    digest       BLOB    NOT NULL PRIMARY KEY CHECK (length(digest) = 32),
    api_key_hmac BLOB    NOT NULL CHECK (length(api_key_hmac) = 32),
    expires_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
    -- AUTOINCREMENT: an id is never handed out twice, not even after the
    -- newest events were pruned, so a cursor always means one place.
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    type        TEXT    NOT NULL CHECK (type IN ('pet.created', 'pet.updated', 'pet.deleted',
                                                 'order.placed', 'order.delivered', 'order.cancelled')),
    -- Unix milliseconds, UTC.
    occurred_at INTEGER NOT NULL,
    -- The changed resource's path, and its JSON as GET returned it right
    -- after the change (before it, for a delete).
    subject     TEXT    NOT NULL,
    data        TEXT    NOT NULL CHECK (json_valid(data))
) STRICT;

CREATE TRIGGER idempotency_keys_counted_on_delete AFTER DELETE ON idempotency_keys BEGIN
    UPDATE idempotency_record_counts SET n = n - 1 WHERE shard = (SELECT abs(random() % 16));
END;

CREATE TRIGGER idempotency_keys_counted_on_insert AFTER INSERT ON idempotency_keys BEGIN
    UPDATE idempotency_record_counts SET n = n + 1 WHERE shard = (SELECT abs(random() % 16));
END;

CREATE TABLE "idempotency_keys" (
    api_key_hmac  BLOB    NOT NULL CHECK (length(api_key_hmac) = 32),
    idempotency_key TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    operation       TEXT    NOT NULL CHECK (length(operation) BETWEEN 1 AND 64),
    fingerprint     BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    resource_id     INTEGER NOT NULL CHECK (resource_id >= 1),
    body            BLOB    NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (api_key_hmac, idempotency_key)
) STRICT, WITHOUT ROWID;

CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

CREATE TABLE idempotency_record_counts (
    shard INTEGER NOT NULL PRIMARY KEY CHECK (shard BETWEEN 0 AND 15),
    n     INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE key_identity_secret (
    id     INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    secret TEXT    NOT NULL CHECK (length(secret) >= 32)
) STRICT;

CREATE TABLE orders (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- No ON DELETE: a pet that an order names cannot be deleted, so the sales
    -- history stays whole (the API answers 409 before the database would).
    pet_id     INTEGER NOT NULL REFERENCES pets (id),
    status     TEXT    NOT NULL CHECK (status IN ('placed', 'delivered', 'cancelled')),
    -- Unix milliseconds, UTC.
    placed_at  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK (updated_at >= placed_at)
) STRICT;

CREATE UNIQUE INDEX orders_one_placed_per_pet ON orders (pet_id) WHERE status = 'placed';

CREATE INDEX orders_pet ON orders (pet_id);

CREATE INDEX orders_status_listing ON orders (status, id, pet_id, placed_at, updated_at);

CREATE TABLE pet_counts (
    status TEXT    NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
    shard  INTEGER NOT NULL CHECK (shard BETWEEN 0 AND 15),
    n      INTEGER NOT NULL,
    PRIMARY KEY (status, shard)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER pets_counted_on_delete AFTER DELETE ON pets BEGIN
    UPDATE pet_counts SET n = n - 1
     WHERE status = OLD.status AND shard = (SELECT abs(random() % 16));
END;

CREATE TRIGGER pets_counted_on_insert AFTER INSERT ON pets BEGIN
    UPDATE pet_counts SET n = n + 1
     WHERE status = NEW.status AND shard = (SELECT abs(random() % 16));
END;

CREATE TRIGGER pets_counted_on_status_change AFTER UPDATE OF status ON pets WHEN OLD.status <> NEW.status BEGIN
    UPDATE pet_counts SET n = n + CASE WHEN status = NEW.status THEN 1 ELSE -1 END
     WHERE status IN (OLD.status, NEW.status) AND shard = (SELECT abs(random() % 16));
END;

CREATE TABLE "pets" (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL CHECK (instr(CAST(name AS BLOB), x'00') = 0 AND length(name) BETWEEN 1 AND 100),
    category_id INTEGER NOT NULL CHECK (category_id >= 1),
    status      TEXT    NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;

CREATE INDEX pets_status_listing ON pets (status, id, name, category_id);

CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
) STRICT;
