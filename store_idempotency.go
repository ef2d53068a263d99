package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The SQL of idempotency keys: a record per finished key, written in the
// same transaction as the resource it answers, so that after a crash either
// both exist or neither does.

// idempotencyRecord is what the database keeps of a finished key: which
// operation made which resource, the body it answered, and the fingerprint
// of the request, to tell a retry from another request under the same key.
type idempotencyRecord struct {
	operation   string
	fingerprint [sha256.Size]byte
	resourceID  int64
	body        []byte
}

// sqlLookupIdempotencyKey finds an unexpired record.
const sqlLookupIdempotencyKey = "SELECT operation, fingerprint, resource_id, body FROM idempotency_keys WHERE api_key_hmac = ? AND idempotency_key = ? AND created_at > ?"

// lookupIdempotencyKey returns the record of scope from the read pool,
// unless it was created at or before cutoff.
func (s *store) lookupIdempotencyKey(ctx context.Context, scope idempotencyScope, cutoff time.Time) (idempotencyRecord, bool, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	row := s.idemStmts.lookup.QueryRowContext(ctx, scope.apiKey[:], scope.key, cutoff.UnixMilli())
	return s.scanIdempotencyRecord(row)
}

// lookupIdempotencyKey is the lookup inside a write transaction.
func (tx *txn) lookupIdempotencyKey(scope idempotencyScope, cutoff time.Time) (idempotencyRecord, bool, error) {
	row := tx.queryRow(tx.st.idemStmts.lookupTx, scope.apiKey[:], scope.key, cutoff.UnixMilli())
	return tx.st.scanIdempotencyRecord(row)
}

// scanIdempotencyRecord reads the row of a lookup; found is false when
// there is none.
func (s *store) scanIdempotencyRecord(row *sql.Row) (rec idempotencyRecord, found bool, err error) {
	var fp []byte
	err = row.Scan(&rec.operation, &fp, &rec.resourceID, &rec.body)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, s.failed("look up idempotency key", err)
	}
	copy(rec.fingerprint[:], fp)
	return rec, true, nil
}

// sqlRecordIdempotencyKey stores a record. An expired row under the same key
// is updated in place (lookups already treat it as absent): an upsert, not
// INSERT OR REPLACE, whose delete SQLite does not pass to the triggers that
// count the records (migration 0006). An unexpired row is left alone, and
// the statement changes nothing.
const sqlRecordIdempotencyKey = `INSERT INTO idempotency_keys (api_key_hmac, idempotency_key, operation, fingerprint, resource_id, body, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (api_key_hmac, idempotency_key) DO UPDATE SET operation = excluded.operation, fingerprint = excluded.fingerprint,
    resource_id = excluded.resource_id, body = excluded.body, created_at = excluded.created_at
WHERE idempotency_keys.created_at <= ?`

// recordIdempotencyKey records rec under scope, in the transaction that made
// its resource. An expired row under the same key is replaced: lookups
// already treat it as absent. An unexpired one is a key that another replica
// finished first: the insert fails with errDuplicateKey. No response cache
// shows these rows, so the write changes nothing the caches hold.
func (tx *txn) recordIdempotencyKey(scope idempotencyScope, rec idempotencyRecord, now, cutoff time.Time) error {
	n, err := tx.exec("record idempotency key", tx.st.idemStmts.record,
		scope.apiKey[:], scope.key, rec.operation, rec.fingerprint[:], rec.resourceID, rec.body, now.UnixMilli(), cutoff.UnixMilli())
	if err != nil {
		return err
	}
	if n == 0 {
		// The conflict's WHERE kept an unexpired record: the key was
		// finished by another writer since this transaction looked.
		return fmt.Errorf("record idempotency key: %w", errDuplicateKey)
	}
	return nil
}

// idempotencyStatements are the prepared statements of idempotency keys.
type idempotencyStatements struct {
	lookup, lookupTx, record, prune *sql.Stmt
}

// statements declares the idempotency keys' statements for prepare.
func (is *idempotencyStatements) statements(s *store) []statement {
	return []statement{
		{s.reader, &is.lookup, sqlLookupIdempotencyKey},
		{s.writer, &is.lookupTx, sqlLookupIdempotencyKey},
		{s.writer, &is.record, sqlRecordIdempotencyKey},
		{s.writer, &is.prune, sqlPruneIdempotencyKeys},
	}
}

// sqlCountIdempotencyRecords sums the shards of the records' count
// (migration 0006), cast as sqlCountPets is.
const sqlCountIdempotencyRecords = "SELECT CAST(sum(n) AS BIGINT) FROM idempotency_record_counts"

// countIdempotencyRecords is how many idempotency records are stored,
// expired ones not yet pruned included, for the metrics.
func (s *store) countIdempotencyRecords(ctx context.Context) (int64, error) {
	var n int64
	if err := s.reader.QueryRowContext(ctx, sqlCountIdempotencyRecords).Scan(&n); err != nil {
		return 0, s.failed("count idempotency records", err)
	}
	return n, nil
}

// pruneChunk is how many expired keys one write deletes. A chunk is about
// 20 ms of work, so the writes queued behind it barely wait (on
// PostgreSQL, every replica's writes: batches take turns), and a backlog of
// any size drains chunk by chunk, well within a batch's time limit.
const pruneChunk = 1000

// sqlPruneIdempotencyKeys deletes up to pruneChunk keys created at or before
// a cutoff, oldest first (through the created_at index).
var sqlPruneIdempotencyKeys = fmt.Sprintf(`DELETE FROM idempotency_keys WHERE (api_key_hmac, idempotency_key) IN (
    SELECT api_key_hmac, idempotency_key FROM idempotency_keys WHERE created_at <= ? ORDER BY created_at LIMIT %d)`, pruneChunk)

// pruneIdempotencyKeys deletes the keys created at or before cutoff, one
// chunk per write, and returns how many it deleted. Every replica prunes:
// two at once delete different chunks or find nothing left, which is harmless.
func (s *store) pruneIdempotencyKeys(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		n, err := write(ctx, s, func(tx *txn) (int64, error) {
			return tx.exec("prune idempotency keys", tx.st.idemStmts.prune, cutoff.UnixMilli())
		})
		total += n
		if err != nil || n < pruneChunk {
			return total, err
		}
	}
}

// pruneIdempotencyKeysEvery prunes expired keys now and then every interval
// until ctx is done. Lookups ignore expired keys anyway; pruning only keeps
// the table from growing without bound.
func pruneIdempotencyKeysEvery(ctx context.Context, log *slog.Logger, st *store, ttl, interval time.Duration, now func() time.Time) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := st.pruneIdempotencyKeys(ctx, now().Add(-ttl))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.WarnContext(ctx, "pruning idempotency keys failed; will retry", "err", err)
		case n > 0:
			log.InfoContext(ctx, "pruned expired idempotency keys", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// idempotencyScope names one idempotency key: keys are scoped per API key,
// so two clients choosing the same key never see each other's resources.
type idempotencyScope struct {
	apiKey [sha256.Size]byte // the API key's identity (see keyIdentity), never the key
	key    string
}
