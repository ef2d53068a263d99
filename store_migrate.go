package main

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// The schema evolves by numbered migrations, migrations/<dialect>/NNNN_name.sql,
// embedded in the binary and applied in order at start-up, all of those the
// database lacks in one transaction, each recorded in schema_migrations. A
// migration is never edited once released: a change to the schema is a new
// file. The two dialects keep the same numbers for the same change, so a
// schema version means the same tables on either. schema.sql shows the
// SQLite schema they produce, for reading.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFiles embed.FS

// migrationLock is the PostgreSQL advisory lock that migrations take, so
// that replicas starting together migrate one after the other: the first
// applies what is missing, the others find nothing left to do.
const migrationLock = 7_370_616_452 // "petstore" on a phone keypad

// errSchemaTooNew is what opening a database returns when a newer release
// has migrated it past what this binary knows.
var errSchemaTooNew = errors.New("the database schema is newer than this binary")

// migration is one numbered schema change.
type migration struct {
	version int
	name    string // the file name, for errors and the record
	sql     string
}

// loadMigrations reads the migrations of dir in fsys, ordered by version,
// and checks that they are numbered 1, 2, 3... with no gap or repeat.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("migration %s is not named NNNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: version, name: e.Name(), sql: string(b)})
	}
	// ReadDir sorts by name, and the numbers are zero-padded.
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected number %d", m.name, i+1)
		}
	}
	return ms, nil
}

// migrate brings the database of dialect d up to its last migration and
// returns the versions it found and left.
func migrate(ctx context.Context, db *sql.DB, d dialect) (from, to int, err error) {
	ms, err := loadMigrations(migrationFiles, d.migrations)
	if err != nil {
		return 0, 0, err
	}
	return applyMigrations(ctx, db, d, ms)
}

// applyMigrations brings the database up to the last of ms. It runs on one
// connection of db, in one transaction: after a crash half-way the database
// is still at its old version, and the next start tries again. A database
// at a version above the last of ms is refused with errSchemaTooNew,
// untouched.
func applyMigrations(ctx context.Context, db *sql.DB, d dialect, ms []migration) (from, to int, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	createVersions := `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
) STRICT`
	if d == postgresDialect {
		createVersions = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER     PRIMARY KEY,
    name       TEXT        NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`
	} else {
		// A table rebuild drops a table that others may reference, which
		// the foreign key checks would refuse statement by statement.
		// SQLite's procedure is to turn them off (they cannot change inside
		// a transaction), migrate, check every reference once with
		// foreign_key_check before committing, and turn them back on.
		if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
			return 0, 0, err
		}
		defer func() {
			// The writer connection lives on: it must not keep running
			// without the checks.
			if _, onErr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); onErr != nil && err == nil {
				err = fmt.Errorf("turn foreign keys back on: %w", onErr)
			}
		}()
	}

	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback() // a no-op after Commit
	if d == postgresDialect {
		// Held until the transaction ends, so the lock is released by the
		// commit or the rollback, even if this process dies.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return 0, 0, fmt.Errorf("take the migration lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, createVersions); err != nil {
		return 0, 0, fmt.Errorf("create schema_migrations: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	last := len(ms)
	if from > last {
		return from, from, fmt.Errorf("%w: it is at version %d, and this binary knows versions up to %d; run the release that migrated it (or a newer one), or restore a backup made before that release", errSchemaTooNew, from, last)
	}
	for _, m := range ms[from:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return from, from, fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, d.sql("INSERT INTO schema_migrations (version, name) VALUES (?, ?)"), m.version, m.name); err != nil {
			return from, from, fmt.Errorf("record migration %s: %w", m.name, err)
		}
	}
	if d == sqliteDialect && from < last { // only after migrations: see checkForeignKeys
		if err := checkForeignKeys(ctx, tx); err != nil {
			return from, from, err
		}
	}
	if err := tx.Commit(); err != nil {
		return from, from, fmt.Errorf("commit migrations: %w", err)
	}
	return from, last, nil
}

// checkForeignKeys fails when a row references a row that does not exist.
// It runs after migrations were applied, which ran with the checks off; a
// start that applies none skips it, since nothing then wrote without them
// (the service's connections always have them on), and it reads every row
// that references another: every event, since migration 13 (about 0.2 s a
// million events, at every start).
func checkForeignKeys(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return fmt.Errorf("check foreign keys: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fkid int
		if err := rows.Scan(&table, &rowid, &parent, &fkid); err != nil {
			return fmt.Errorf("check foreign keys: %w", err)
		}
		return fmt.Errorf("after migrating, a row of %s (rowid %v) references a missing row of %s", table, rowid.Int64, parent)
	}
	return rows.Err()
}
