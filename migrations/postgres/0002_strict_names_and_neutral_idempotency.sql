-- 0002: on SQLite, pets refused NUL bytes in names and idempotency records
-- became neutral of HTTP. A PostgreSQL database starts from that schema
-- (0001), so there is nothing to change here; the number stays, so that
-- versions mean the same schema on both databases.
SELECT 1;
