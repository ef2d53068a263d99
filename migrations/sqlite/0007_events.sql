-- 0007: the change feed. Every change the service commits is one row of
-- events, written in the transaction of the change (store_changes.go), so an
-- event exists exactly when its change does. No event is made for the rows
-- that exist when this migration runs: the feed starts with the first change
-- after it.
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

-- The prune mark: every event up to pruned_through was pruned, so a cursor
-- below it has missed events (410), and one at or above it has not.
CREATE TABLE event_marks (
    one            INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    pruned_through INTEGER NOT NULL CHECK (pruned_through >= 0)
) STRICT;

INSERT INTO event_marks (one, pruned_through) VALUES (1, 0);

-- Single-use tickets that open one event stream (a browser's EventSource
-- cannot send an Authorization header). Only the ticket's SHA-256 is kept,
-- with the identity of the API key that asked for it, in the database so
-- that any replica can redeem it.
CREATE TABLE event_tickets (
    digest       BLOB    NOT NULL PRIMARY KEY CHECK (length(digest) = 32),
    api_key_hmac BLOB    NOT NULL CHECK (length(api_key_hmac) = 32),
    expires_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
