package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// runCopy is `petstore copy -from SRC -to DST`: it moves a shop's data
// between databases, each a SQLite file or a PostgreSQL URL, for instance
// from the file a shop started with to the PostgreSQL its replicas share.
func runCopy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("petstore copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the database to copy: a SQLite file or a postgres:// URL")
	to := fs.String("to", "", "the database to copy into, which must hold no data: a SQLite file (created if missing) or a postgres:// URL")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: petstore copy -from SRC -to DST\n\n"+
			"Copies every pet, order and idempotency record, with their ids, from SRC to DST in one\n"+
			"transaction, and moves DST's id sequences past SRC's. DST gets the schema if it has none,\n"+
			"and must hold no data. Stop the service on SRC first: writes made during the copy are not copied.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &configError{"copy", err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return &configError{"copy", fmt.Sprintf("unexpected %q: name the databases with -from and -to", fs.Arg(0))}
	case *from == "" || *to == "":
		return &configError{"copy", "name both databases: petstore copy -from SRC -to DST"}
	case *from == *to:
		return &configError{"copy", "-from and -to name the same database"}
	case *from == memoryDB || *to == memoryDB:
		return &configError{"copy", "an in-memory database lives only inside its process; copy from or to a file or a PostgreSQL URL"}
	}
	if !isPostgresURL(*from) {
		// openStore would create a missing file and copy its nothing.
		if fi, err := os.Stat(*from); err != nil || !fi.Mode().IsRegular() {
			return &configError{"copy -from", fmt.Sprintf("%q is not an existing database file", *from)}
		}
	}
	n, err := copyDatabase(ctx, *from, *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "copied %d pets, %d orders and %d idempotency records from %s to %s\n", n.pets, n.orders, n.keys, redactDB(*from), redactDB(*to))
	return nil
}

// copied counts what copyDatabase moved.
type copied struct{ pets, orders, keys int64 }

// copyTables are the tables copyDatabase moves, in an order that keeps every
// reference valid, with their columns; those with ids name their sequence.
var copyTables = []struct {
	name    string
	columns string
	hasID   bool
}{
	{"pets", "id, name, category_id, status", true},
	{"orders", "id, pet_id, status, placed_at, updated_at", true},
	{"idempotency_keys", "api_key_hmac, idempotency_key, operation, fingerprint, resource_id, body, created_at", false},
}

// copyDatabase copies from src to dst. Both are opened as the service opens
// them, so each is first brought to this binary's schema version.
func copyDatabase(ctx context.Context, src, dst string) (copied, error) {
	from, err := openStore(ctx, src, 0)
	if err != nil {
		return copied{}, &configError{"copy -from", err.Error()}
	}
	defer from.Close()
	to, err := openStore(ctx, dst, 0)
	if err != nil {
		return copied{}, &configError{"copy -to", err.Error()}
	}
	defer to.Close()

	// One transaction on the destination, outside the writer's batches,
	// whose time limit fits requests, not a whole database.
	sqlTx, err := to.writer.BeginTx(ctx, nil)
	if err != nil {
		return copied{}, to.failedWrite("begin the copy", err)
	}
	defer sqlTx.Rollback() // a no-op after Commit
	tx := &txn{ctx: ctx, tx: sqlTx, st: to}
	n, err := func() (copied, error) {
		var n copied
		counts := []*int64{&n.pets, &n.orders, &n.keys}
		for _, t := range copyTables {
			var rows int64
			if err := tx.tx.QueryRowContext(tx.ctx, "SELECT count(*) FROM "+t.name).Scan(&rows); err != nil {
				return n, fmt.Errorf("count %s of %s: %w", t.name, redactDB(dst), err)
			}
			if rows > 0 {
				return n, &configError{"copy -to", fmt.Sprintf("%s already holds data (%d rows in %s); copy only into an empty database", redactDB(dst), rows, t.name)}
			}
		}
		for i, t := range copyTables {
			copiedRows, err := copyTable(tx, from, t.name, t.columns)
			if err != nil {
				return n, fmt.Errorf("copy %s: %w", t.name, err)
			}
			*counts[i] = copiedRows
			if t.hasID {
				seq, err := from.sequence(ctx, t.name)
				if err != nil {
					return n, err
				}
				if err := tx.setSequence(t.name, seq); err != nil {
					return n, err
				}
			}
		}
		return n, nil
	}()
	if err != nil {
		return n, err
	}
	if err := sqlTx.Commit(); err != nil {
		return n, to.failedWrite("commit the copy", err)
	}
	return n, nil
}

// copyTable copies every row of table from src into tx's database.
func copyTable(tx *txn, src *store, table, columns string) (int64, error) {
	rows, err := src.reader.QueryContext(tx.ctx, "SELECT "+columns+" FROM "+table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	placeholders := "?"
	for range cols[1:] {
		placeholders += ", ?"
	}
	insert, err := tx.tx.PrepareContext(tx.ctx, tx.st.dialect.sql("INSERT INTO "+table+" ("+columns+") VALUES ("+placeholders+")"))
	if err != nil {
		return 0, err
	}
	defer insert.Close()
	values := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range values {
		ptrs[i] = &values[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		if _, err := insert.ExecContext(tx.ctx, values...); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// sequence returns the last id that table's sequence handed out: at least
// the highest id, more when the rows with the last ids were deleted. Ids
// are never handed out twice, so a copy continues from here.
func (s *store) sequence(ctx context.Context, table string) (int64, error) {
	var seq sql.NullInt64
	var err error
	if s.dialect == postgresDialect {
		err = s.reader.QueryRowContext(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+table+"_id_seq").Scan(&seq)
	} else {
		err = s.reader.QueryRowContext(ctx, "SELECT seq FROM sqlite_sequence WHERE name = ?", table).Scan(&seq)
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
func (tx *txn) setSequence(table string, seq int64) error {
	var err error
	switch {
	case seq == 0:
		return nil
	case tx.st.dialect == postgresDialect:
		_, err = tx.tx.ExecContext(tx.ctx, "SELECT setval(pg_get_serial_sequence($1, 'id'), $2)", table, seq)
	default:
		// Inserting rows with their ids set the sequence to the highest;
		// the source's may be higher, if its last rows were deleted.
		_, err = tx.tx.ExecContext(tx.ctx, "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", seq, table)
		if err == nil {
			_, err = tx.tx.ExecContext(tx.ctx, "INSERT INTO sqlite_sequence (name, seq) SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?)", table, seq, table)
		}
	}
	if err != nil {
		return fmt.Errorf("move the id sequence of %s: %w", table, err)
	}
	return nil
}
