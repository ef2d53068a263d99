-- 0013: the event types in a table of their own, which events.type
-- references, in place of the CHECK that listed them (see the SQLite
-- migration of the same number): a new type is one INSERT here and its
-- partial index, on both backends. The CHECK is the one migration 7 wrote
-- on the column, named by PostgreSQL's rule (table_column_check). Each
-- event inserted looks its type up in event_types' primary key and takes a
-- key-share lock on that row, which conflicts only with deleting the type
-- or changing it, which nothing does: about 3 us an event, measured.
CREATE TABLE event_types (
    type TEXT NOT NULL PRIMARY KEY
);

INSERT INTO event_types (type) VALUES
    ('pet.created'), ('pet.updated'), ('pet.deleted'),
    ('order.placed'), ('order.delivered'), ('order.cancelled');

ALTER TABLE events
    DROP CONSTRAINT events_type_check,
    ADD CONSTRAINT events_type_fkey FOREIGN KEY (type) REFERENCES event_types (type);
