-- schema.sql is executed every time the store opens, so every statement
-- must be idempotent (IF NOT EXISTS).

-- pets is the catalogue. STRICT makes SQLite refuse a value of the wrong
-- type instead of silently storing it, and the CHECKs repeat the API's
-- rules so that no code path (a bug, a manual sqlite3 session) can store a
-- pet the API would refuse.
CREATE TABLE IF NOT EXISTS pets (
    -- AUTOINCREMENT guarantees an id is never handed out twice, even if the
    -- highest row is ever deleted; keyset pagination and clients' caches
    -- rely on ids never coming back.
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    category_id INTEGER NOT NULL CHECK (category_id >= 1),
    status      TEXT    NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;

-- pets_status_id serves the filtered keyset query
-- (WHERE status = ? AND id > ? ORDER BY id LIMIT ?) as one index range scan.
CREATE INDEX IF NOT EXISTS pets_status_id ON pets (status, id);
