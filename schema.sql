-- schema.sql is the database schema as the migrations in migrations/sqlite
-- leave it, for reading: the tables, their constraints and indexes in one
-- place. It is not executed. To change the schema, add a migration; then
-- go test -run TestSchemaFileShowsTheMigratedSchema -update-schema rewrites
-- this file. Why each table, column and index is there is said in the
-- migration that made it.

CREATE TABLE acme_locks (
    name    TEXT    NOT NULL PRIMARY KEY,
    owner   TEXT    NOT NULL,
    expires INTEGER NOT NULL
) STRICT;

CREATE TABLE acme_storage (
    key      TEXT    NOT NULL PRIMARY KEY,
    value    BLOB    NOT NULL,
    -- Unix milliseconds of the last write.
    modified INTEGER NOT NULL
) STRICT;

CREATE TABLE event_marks (
    one            INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    pruned_through INTEGER NOT NULL CHECK (pruned_through >= 0)
) STRICT;

CREATE TABLE event_tickets (
    digest       BLOB    NOT NULL PRIMARY KEY CHECK (length(digest) = 32),
    api_key_hmac BLOB    NOT NULL CHECK (length(api_key_hmac) = 32),
    expires_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE event_types (
    type TEXT NOT NULL PRIMARY KEY
) STRICT, WITHOUT ROWID;

CREATE TABLE "events" (
    -- AUTOINCREMENT: an id is never handed out twice, not even after the
    -- newest events were pruned, so a cursor always means one place.
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    type        TEXT    NOT NULL REFERENCES event_types (type),
    -- Unix milliseconds, UTC.
    occurred_at INTEGER NOT NULL,
    -- The changed resource's path, and its JSON as GET returned it right
    -- after the change (before it, for a delete).
    subject     TEXT    NOT NULL,
    data        TEXT    NOT NULL CHECK (json_valid(data))
) STRICT;

CREATE INDEX events_order_cancelled ON events (id) WHERE type = 'order.cancelled';

CREATE INDEX events_order_delivered ON events (id) WHERE type = 'order.delivered';

CREATE INDEX events_order_placed ON events (id) WHERE type = 'order.placed';

CREATE INDEX events_pet_created ON events (id) WHERE type = 'pet.created';

CREATE INDEX events_pet_deleted ON events (id) WHERE type = 'pet.deleted';

CREATE INDEX events_pet_updated ON events (id) WHERE type = 'pet.updated';

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

CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id      INTEGER NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        INTEGER NOT NULL,
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    started_at      INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    next_attempt_at INTEGER
) STRICT;

CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);

CREATE TABLE webhooks (
    -- AUTOINCREMENT: a deleted subscription's id is never given to another,
    -- so a receiver or a log that names one means one subscription.
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    url              TEXT    NOT NULL,
    -- The type patterns as the client gave them (["*"] for every type), a
    -- JSON array of strings; webhooks.go expands them.
    types            TEXT    NOT NULL CHECK (json_valid(types)),
    description      TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('active', 'paused', 'failing')),
    -- Why the subscription is failing; NULL otherwise.
    status_reason    TEXT,
    created_at       INTEGER NOT NULL,
    -- The signing secret itself (whsec_...): signing needs it, so a hash
    -- would not do. It is shown only when made (create, rotation).
    secret           TEXT    NOT NULL,
    -- The secret before the last rotation, also signed with until
    -- previous_until (Unix milliseconds).
    previous_secret  TEXT,
    previous_until   INTEGER,
    -- The newest event id delivered or passed over (not of the
    -- subscription's types): delivery goes on with the first event after it.
    delivered_through INTEGER NOT NULL CHECK (delivered_through >= 0),
    -- The retry state of the event after the cursor: attempts made, the
    -- first failure's instant and when the next attempt is due (Unix ms).
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_failure_at INTEGER,
    next_attempt_at  INTEGER,
    -- The replica delivering this subscription and until when its lease
    -- holds (Unix ms): one replica at a time delivers a subscription.
    lease_owner      TEXT,
    lease_until      INTEGER NOT NULL DEFAULT 0
) STRICT;
