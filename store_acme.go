package main

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// The SQL of the ACME storage (migration 0012): the keys and values that
// the certificates of -domain are kept as, and the locks that let one
// replica at a time order or renew a name (see http_acme.go, which speaks
// CertMagic's terms over these). Both tables are the store's own
// bookkeeping: their writes go through tx.exec and make no event.

const (
	sqlACMEPut = "INSERT INTO acme_storage (key, value, modified) VALUES (?, ?, ?) " +
		"ON CONFLICT (key) DO UPDATE SET value = excluded.value, modified = excluded.modified"
	sqlACMEGet = "SELECT value, modified FROM acme_storage WHERE key = ?"
	// The keys under a prefix are matched by their first characters, not
	// LIKE, whose '_' would match any character of a key such as
	// "challenge_tokens".
	sqlACMEUnder  = "SELECT key, length(value), modified FROM acme_storage WHERE substr(key, 1, ?) = ? ORDER BY key"
	sqlACMEDelete = "DELETE FROM acme_storage WHERE key = ? OR substr(key, 1, ?) = ?"
	// A lock is taken when it is free or its holder let it expire: one
	// statement, so that two replicas never both take it.
	sqlACMELock = "INSERT INTO acme_locks (name, owner, expires) VALUES (?, ?, ?) " +
		"ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires = excluded.expires WHERE acme_locks.expires < ?"
	sqlACMERenewLock = "UPDATE acme_locks SET expires = ? WHERE name = ? AND owner = ?"
	sqlACMEUnlock    = "DELETE FROM acme_locks WHERE name = ? AND owner = ?"
)

// acmeStatements are the prepared statements of the ACME storage.
type acmeStatements struct {
	put, get, under, remove, lock, renewLock, unlock *sql.Stmt
}

// statements declares the ACME storage's statements for prepare.
func (as *acmeStatements) statements(s *store) []statement {
	return []statement{
		{s.writer, &as.put, sqlACMEPut},
		{s.reader, &as.get, sqlACMEGet},
		{s.reader, &as.under, sqlACMEUnder},
		{s.writer, &as.remove, sqlACMEDelete},
		{s.writer, &as.lock, sqlACMELock},
		{s.writer, &as.renewLock, sqlACMERenewLock},
		{s.writer, &as.unlock, sqlACMEUnlock},
	}
}

// errACMENotStored is the answer to a key the ACME storage does not hold.
var errACMENotStored = errors.New("not stored")

// acmeEntry is a key of the ACME storage as a listing shows it.
type acmeEntry struct {
	key      string
	size     int64
	modified time.Time
}

// acmePut stores value under key, durably, at the instant at.
func (s *store) acmePut(ctx context.Context, key string, value []byte, at time.Time) error {
	_, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("store an ACME entry", tx.st.acmeStmts.put, key, value, at.UnixMilli())
	})
	return err
}

// acmeGet returns the value under key and when it was written, or
// errACMENotStored.
func (s *store) acmeGet(ctx context.Context, key string) ([]byte, time.Time, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	var value []byte
	var modified int64
	err := s.acmeStmts.get.QueryRowContext(ctx, key).Scan(&value, &modified)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, errACMENotStored
	}
	if err != nil {
		return nil, time.Time{}, s.failed("read an ACME entry", err)
	}
	return value, time.UnixMilli(modified), nil
}

// acmeUnder lists the keys that start with prefix, in order.
func (s *store) acmeUnder(ctx context.Context, prefix string) ([]acmeEntry, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	rows, err := s.acmeStmts.under.QueryContext(ctx, len(prefix), prefix)
	if err != nil {
		return nil, s.failed("list ACME entries", err)
	}
	defer rows.Close()
	var entries []acmeEntry
	for rows.Next() {
		var e acmeEntry
		var modified int64
		if err := rows.Scan(&e.key, &e.size, &modified); err != nil {
			return nil, s.failed("list ACME entries", err)
		}
		e.modified = time.UnixMilli(modified)
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.failed("list ACME entries", err)
	}
	return entries, nil
}

// acmeDelete deletes key and every key under it (key + "/").
func (s *store) acmeDelete(ctx context.Context, key string) error {
	_, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("delete ACME entries", tx.st.acmeStmts.remove, key, len(key)+1, key+"/")
	})
	return err
}

// acmeLock takes the lock name for owner until until, when it is free or
// expired at now, and reports whether it did.
func (s *store) acmeLock(ctx context.Context, name, owner string, until, now time.Time) (bool, error) {
	n, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("take an ACME lock", tx.st.acmeStmts.lock, name, owner, until.UnixMilli(), now.UnixMilli())
	})
	return n == 1, err
}

// acmeRenewLock pushes the expiry of owner's lock name to until, and
// reports whether owner still held it.
func (s *store) acmeRenewLock(ctx context.Context, name, owner string, until time.Time) (bool, error) {
	n, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("renew an ACME lock", tx.st.acmeStmts.renewLock, until.UnixMilli(), name, owner)
	})
	return n == 1, err
}

// acmeUnlock releases owner's lock name (nothing when another holds it).
func (s *store) acmeUnlock(ctx context.Context, name, owner string) error {
	_, err := write(ctx, s, func(tx *txn) (int64, error) {
		return tx.exec("release an ACME lock", tx.st.acmeStmts.unlock, name, owner)
	})
	return err
}
