-- 0008: the table that holds the secret of key identities in a PostgreSQL
-- database (see secret.go). A SQLite database keeps its secret in the file
-- beside it, outside the database, so that a copy of the file (a backup) does
-- not hold it: the table exists so that schema version 8 means the same
-- tables on both backends, and stays empty here.
CREATE TABLE key_identity_secret (
    id     INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    secret TEXT    NOT NULL CHECK (length(secret) >= 32)
) STRICT;
