package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConnectionsCarryTheDurabilityPragmas guards the promise behind a 201:
// every connection, writer and readers, runs in WAL mode with
// synchronous=FULL (2), a busy timeout and foreign keys enforced, and
// readers cannot write.
func TestConnectionsCarryTheDurabilityPragmas(t *testing.T) {
	t.Parallel()
	st, err := openStore(t.Context(), filepath.Join(t.TempDir(), "pets.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	type pragmas struct {
		JournalMode string
		Synchronous int
		BusyTimeout int
		ForeignKeys int
		QueryOnly   int
	}
	read := func(db *sql.DB) pragmas {
		t.Helper()
		var p pragmas
		for _, q := range []struct {
			pragma string
			dst    any
		}{
			{"journal_mode", &p.JournalMode},
			{"synchronous", &p.Synchronous},
			{"busy_timeout", &p.BusyTimeout},
			{"foreign_keys", &p.ForeignKeys},
			{"query_only", &p.QueryOnly},
		} {
			if err := db.QueryRowContext(t.Context(), "PRAGMA "+q.pragma).Scan(q.dst); err != nil {
				t.Fatalf("PRAGMA %s: %v", q.pragma, err)
			}
		}
		return p
	}
	if diff := cmp.Diff(pragmas{"wal", 2, 5000, 1, 0}, read(st.writer)); diff != "" {
		t.Errorf("writer pragmas mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pragmas{"wal", 2, 5000, 1, 1}, read(st.reader)); diff != "" {
		t.Errorf("reader pragmas mismatch (-want +got):\n%s", diff)
	}
	if _, err := st.reader.ExecContext(t.Context(), "INSERT INTO pets (name, category_id, status) VALUES ('x', 1, 'sold')"); err == nil {
		t.Errorf("a reader connection accepted a write")
	}
}

// TestSchemaRefusesWhatTheAPIRefuses checks that the table's constraints
// hold even for a write that bypasses the handlers.
func TestSchemaRefusesWhatTheAPIRefuses(t *testing.T) {
	t.Parallel()
	st, err := openStore(t.Context(), filepath.Join(t.TempDir(), "pets.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tests := []struct {
		rule     string
		name     any
		category any
		status   any
	}{
		{"empty name", "", 1, "sold"},
		{"name over 100 characters", strings.Repeat("a", 101), 1, "sold"},
		{"name of 101 multi-byte characters", strings.Repeat("é", 101), 1, "sold"},
		// length() stops counting at a NUL: "a" and 200 NULs measured 1.
		{"name with NULs after a character", "a" + strings.Repeat("\x00", 200), 1, "sold"},
		{"name that is a NUL", "\x00", 1, "sold"},
		{"category 0", "Rex", 0, "sold"},
		{"category that is not an integer", "Rex", "one", "sold"},
		{"category with a fraction", "Rex", 1.5, "sold"},
		{"unknown status", "Rex", 1, "adopted"},
		{"null name", nil, 1, "sold"},
		{"name as a blob", []byte("Rex"), 1, "sold"},
		{"null status", "Rex", 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			_, err := st.writer.ExecContext(t.Context(), "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)", tt.name, tt.category, tt.status)
			if err == nil {
				t.Errorf("the schema accepted %v, %v, %v", tt.name, tt.category, tt.status)
			}
		})
	}
}

// TestACancelledReadIsNoDatabaseError: petstore_db_errors_total counts what
// the database failed at, not reads whose client left.
func TestACancelledReadIsNoDatabaseError(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	before := ts.Store.errorCount()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := ts.Store.ping(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ping with a cancelled context = %v, want context.Canceled", err)
	}
	if got := ts.Store.errorCount(); got != before {
		t.Errorf("a cancelled read counted as a database error: %d, want %d", got, before)
	}
	ts.Store.failed("read", errors.New("disk I/O error"))
	if got := ts.Store.errorCount(); got != before+1 {
		t.Errorf("a failed read: error count %d, want %d", got, before+1)
	}
}
