-- 0009: webhooks: subscriptions that push the change feed's events
-- to a URL, and the log of every delivery attempt.
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

-- Every delivery attempt, newest read first. Deleted with its subscription,
-- and pruned with its event.
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

CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
