-- 0013: the event types in a table of their own, which events.type
-- references, in place of the CHECK that listed them. SQLite cannot change
-- a CHECK in place, so a new type meant rebuilding events (every event
-- copied, every index built again); a new type is now one INSERT here and
-- its partial index (migration 11), and a type that is not in the table is
-- still refused, by the foreign key (the service's connections turn
-- foreign_keys on). TestEventTypesAreTheDeclaredOnes holds the table to
-- the types the code declares (eventTypes).
CREATE TABLE event_types (
    type TEXT NOT NULL PRIMARY KEY
) STRICT, WITHOUT ROWID;

INSERT INTO event_types (type) VALUES
    ('pet.created'), ('pet.updated'), ('pet.deleted'),
    ('order.placed'), ('order.delivered'), ('order.cancelled');

-- The last rebuild of events, the way SQLite changes a constraint
-- (https://www.sqlite.org/lang_altertable.html, "other kinds of table schema
-- changes"): create the new table, copy the rows, drop the old one, rename,
-- and create again what the drop took with it, the indexes of migration 11
-- (events has no trigger, and no table references it). The migration runner
-- turns foreign keys off around the transaction and checks every reference,
-- these included, with foreign_key_check before it commits.
CREATE TABLE events_new (
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
INSERT INTO events_new (id, type, occurred_at, subject, data)
SELECT id, type, occurred_at, subject, data FROM events ORDER BY id;
-- The new table continues the old table's sequence, not its highest id:
-- the newest events may have been pruned, and the prune mark (event_marks)
-- is past them. The copy gave events_new a row only if it copied an event,
-- so the old table's row is taken whole.
DELETE FROM sqlite_sequence WHERE name = 'events_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'events_new', seq FROM sqlite_sequence WHERE name = 'events';
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;
CREATE INDEX events_pet_created ON events (id) WHERE type = 'pet.created';
CREATE INDEX events_pet_updated ON events (id) WHERE type = 'pet.updated';
CREATE INDEX events_pet_deleted ON events (id) WHERE type = 'pet.deleted';
CREATE INDEX events_order_placed ON events (id) WHERE type = 'order.placed';
CREATE INDEX events_order_delivered ON events (id) WHERE type = 'order.delivered';
CREATE INDEX events_order_cancelled ON events (id) WHERE type = 'order.cancelled';
