package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// This file is the store's side of `petstore copy` (cmd_copy.go): it reads one
// consistent snapshot of a source store and writes it into a destination
// store in one transaction, table by table as store_tables.go declares them.

// copyBatchParams bounds the parameters of one multi-row INSERT of the copy:
// far below SQLite's limit (32,766) and PostgreSQL's (65,535), and large
// enough that a statement's round trip and parse cost little per row. 500,
// 2,000 and 4,000 were measured (BenchmarkCopy100000Pets, into SQLite):
// within the noise of the shared machine of each other, all far below one
// statement per row (see the README's "Moving a shop's data").
const copyBatchParams = 4000

// tableRows is what the copy moved of one table, or, for a table it does
// not copy, the rows it left behind.
type tableRows struct {
	table tableSpec
	rows  int64
}

// notEmptyError is the copy's refusal of a destination that holds data.
type notEmptyError struct {
	table string
	rows  int64
}

func (e *notEmptyError) Error() string {
	return fmt.Sprintf("the destination already holds data (%d rows in %s)", e.rows, e.table)
}

// querier is what the copy reads the source through: one SQLite connection
// inside its deferred transaction, or a PostgreSQL transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// copyStore copies every table that tables declares copied from src into
// dst, which must hold no data, and moves dst's id sequences past src's.
// It returns the rows it copied of each such table, then the rows it left
// behind of each table it does not copy whose rows have a noun (webhook
// subscriptions), counted in the same snapshot.
//
// src is read as one snapshot, so that a source that is still serving gives
// a copy whose tables agree with each other (every placed order's pet
// pending, for one): SQLite's reads run on one connection inside one
// deferred transaction (WAL: the snapshot of its first read, and the
// service's writer goes on meanwhile), PostgreSQL's in one REPEATABLE READ,
// read-only transaction. Writes committed after the snapshot are not copied.
//
// dst is written in one transaction. On SQLite it takes the file's write
// lock when it begins (_txlock=immediate). On PostgreSQL it first takes the
// replicas' write lock (writeLock), as every write batch of every replica
// does: a replica serving dst meanwhile waits for that lock before touching
// any row, so it never waits on the copy's rows nor collides with its ids,
// and it finds the copied rows and the moved sequences once the copy commits;
// and the emptiness check, made under the lock, still holds at the commit.
func copyStore(ctx context.Context, src, dst *store) ([]tableRows, error) {
	snap, done, err := src.snapshot(ctx)
	if err != nil {
		return nil, src.failed("begin the copy's snapshot", err)
	}
	defer done()

	tx, err := dst.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, dst.failedWrite("begin the copy", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if dst.dialect == postgresDialect {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", writeLock); err != nil {
			return nil, dst.failedWrite("take the write lock", err)
		}
	}
	copied := copiedTables()
	for _, t := range copied {
		if t.singleton {
			continue
		}
		var rows int64
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+t.name).Scan(&rows); err != nil {
			return nil, fmt.Errorf("count the rows of %s: %w", t.name, err)
		}
		if rows > 0 {
			return nil, &notEmptyError{t.name, rows}
		}
	}
	var moved []tableRows
	for _, t := range copied {
		n, err := copyTable(ctx, snap, tx, dst.dialect, t)
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", t.name, err)
		}
		moved = append(moved, tableRows{t, n})
		if t.hasID {
			seq, err := sequence(ctx, snap, src.dialect, t.name)
			if err != nil {
				return nil, err
			}
			if err := setSequence(ctx, tx, dst.dialect, t.name, seq); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range allTables() {
		if t.notCopied == "" || t.noun == "" {
			continue
		}
		var rows int64
		if err := snap.QueryRowContext(ctx, "SELECT count(*) FROM "+t.name).Scan(&rows); err != nil {
			return nil, fmt.Errorf("count the rows of %s: %w", t.name, err)
		}
		moved = append(moved, tableRows{t, rows})
	}
	if err := tx.Commit(); err != nil {
		return nil, dst.failedWrite("commit the copy", err)
	}
	return moved, nil
}

// snapshot begins the one read transaction the copy reads s through, and
// returns done, which ends it.
func (s *store) snapshot(ctx context.Context) (q querier, done func(), err error) {
	if s.dialect == postgresDialect {
		tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
		if err != nil {
			return nil, nil, err
		}
		return tx, func() { tx.Rollback() }, nil
	}
	// Not BeginTx: the store's connections begin with _txlock=immediate,
	// which would take the write lock and hold the service's writer for
	// the whole copy. A plain BEGIN is deferred: the snapshot of its first
	// read, without a lock on writers.
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, func() {
		conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
	}, nil
}

// copyTable copies every row of t from src into tx, in multi-row INSERTs of
// up to copyBatchParams parameters: one statement per row cost 39 s for
// 100,000 pets.
func copyTable(ctx context.Context, src querier, tx *sql.Tx, d dialect, t tableSpec) (int64, error) {
	if t.singleton {
		// The migrations made the destination's rows; the source's replace them.
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+t.name); err != nil {
			return 0, err
		}
	}
	columns := strings.Join(t.columns, ", ")
	query := "SELECT " + columns + " FROM " + t.name
	if t.hasID {
		query += " ORDER BY id" // the destination's index is filled in order
	}
	rows, err := src.QueryContext(ctx, query)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	width := len(t.columns)
	perBatch := max(1, copyBatchParams/width)
	insertOf := func(n int) string {
		row := "(?" + strings.Repeat(", ?", width-1) + ")"
		return d.sql("INSERT INTO " + t.name + " (" + columns + ") VALUES " + row + strings.Repeat(", "+row, n-1))
	}
	full, err := tx.PrepareContext(ctx, insertOf(perBatch))
	if err != nil {
		return 0, err
	}
	defer full.Close()
	batch := make([]any, 0, perBatch*width)
	flush := func() error {
		var err error
		switch n := len(batch) / width; n {
		case 0:
		case perBatch:
			_, err = full.ExecContext(ctx, batch...)
		default:
			_, err = tx.ExecContext(ctx, insertOf(n), batch...)
		}
		batch = batch[:0]
		return err
	}
	values := make([]any, width)
	ptrs := make([]any, width)
	for i := range values {
		ptrs[i] = &values[i]
	}
	var n int64
	for rows.Next() {
		// Scanning into an *any copies a []byte, so a batch may hold
		// values of many rows.
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		batch = append(batch, values...)
		n++
		if len(batch) == perBatch*width {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// sequence returns the last id that table's sequence handed out, read
// through q: at least the highest id, more when the rows with the last ids
// were deleted. Ids are never handed out twice, so a copy continues from
// here.
func sequence(ctx context.Context, q querier, d dialect, table string) (int64, error) {
	var seq sql.NullInt64
	var err error
	if d == postgresDialect {
		err = q.QueryRowContext(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+table+"_id_seq").Scan(&seq)
	} else {
		err = q.QueryRowContext(ctx, "SELECT seq FROM sqlite_sequence WHERE name = ?", table).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil // no row was ever inserted
		}
	}
	if err != nil {
		return 0, fmt.Errorf("read the id sequence of %s: %w", table, err)
	}
	return seq.Int64, nil
}

// setSequence moves table's id sequence so that the next id is above seq.
func setSequence(ctx context.Context, tx *sql.Tx, d dialect, table string, seq int64) error {
	var err error
	switch {
	case seq == 0:
		return nil
	case d == postgresDialect:
		_, err = tx.ExecContext(ctx, "SELECT setval(pg_get_serial_sequence($1, 'id'), $2)", table, seq)
	default:
		// Inserting rows with their ids set the sequence to the highest;
		// the source's may be higher, if its last rows were deleted.
		_, err = tx.ExecContext(ctx, "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", seq, table)
		if err == nil {
			_, err = tx.ExecContext(ctx, "INSERT INTO sqlite_sequence (name, seq) SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?)", table, seq, table)
		}
	}
	if err != nil {
		return fmt.Errorf("move the id sequence of %s: %w", table, err)
	}
	return nil
}
