-- 0012: the storage of HTTPS certificates that -domain orders by themselves
-- from an ACME CA (CertMagic's Storage, http_acme.go): the ACME account and
-- its key, each certificate with its private key and metadata, and the
-- challenges in flight, as keys of a small file system ("certificates/
-- <ca>/<name>/<name>.crt"). In the database, so that `petstore backup`
-- holds them (private keys included: keep backups as secret as the
-- database), every PostgreSQL replica serves the same certificate, and a
-- replica started later serves the stored one without a new order.
CREATE TABLE acme_storage (
    key      TEXT    NOT NULL PRIMARY KEY,
    value    BLOB    NOT NULL,
    -- Unix milliseconds of the last write.
    modified INTEGER NOT NULL
) STRICT;

-- The locks that let one replica at a time order or renew a name: a row is
-- a lock, held by owner (a random id of the process) until expires (Unix
-- milliseconds), which the holder pushes forward while it works, so that a
-- lock outlives its holder by at most that much.
CREATE TABLE acme_locks (
    name    TEXT    NOT NULL PRIMARY KEY,
    owner   TEXT    NOT NULL,
    expires INTEGER NOT NULL
) STRICT;
