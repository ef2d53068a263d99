-- 0002: two tables rebuilt, as SQLite changes a constraint or drops a
-- column: create the new table, copy the rows, drop the old one, rename
-- (https://www.sqlite.org/lang_altertable.html, "other kinds of table schema
-- changes"; the migration runner turns foreign keys off around it and checks
-- them before committing).
--
-- pets: length() counts characters only up to the first NUL, so the old CHECK
-- let "a" followed by 200 NULs through. A name now holds no NUL byte at all
-- (the API refuses every control character), and so its length is what
-- length() says.
CREATE TABLE pets_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL CHECK (instr(CAST(name AS BLOB), x'00') = 0 AND length(name) BETWEEN 1 AND 100),
    category_id INTEGER NOT NULL CHECK (category_id >= 1),
    status      TEXT    NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;
INSERT INTO pets_new (id, name, category_id, status) SELECT id, name, category_id, status FROM pets;
-- AUTOINCREMENT never hands out an id twice, even the id of a row that is
-- gone: the new table continues the old table's sequence, not its highest id.
UPDATE sqlite_sequence
   SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'pets'), 0))
 WHERE name = 'pets_new';
DROP TABLE pets;
ALTER TABLE pets_new RENAME TO pets;
CREATE INDEX pets_status_listing ON pets (status, id, name, category_id);

-- idempotency_keys: a record now says which operation created which
-- resource, and the body it answered; the HTTP status and Location are the
-- handlers' business and follow from the operation. It names the resource by
-- id without a foreign key: an answer once given stays the answer for the
-- key's lifetime, like a log entry, even if the resource later changes.
-- Existing records were all made by createPet.
CREATE TABLE idempotency_keys_new (
    api_key_sha256  BLOB    NOT NULL CHECK (length(api_key_sha256) = 32),
    idempotency_key TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    operation       TEXT    NOT NULL CHECK (length(operation) BETWEEN 1 AND 64),
    fingerprint     BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    resource_id     INTEGER NOT NULL CHECK (resource_id >= 1),
    body            BLOB    NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (api_key_sha256, idempotency_key)
) STRICT, WITHOUT ROWID;
INSERT INTO idempotency_keys_new (api_key_sha256, idempotency_key, operation, fingerprint, resource_id, body, created_at)
SELECT api_key_sha256, idempotency_key, 'createPet', fingerprint, pet_id, body, created_at FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
