package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// PostgreSQL plans a prepared statement for each execution's values until
// the plan made once for every value looks as cheap, and a LIMIT parameter
// makes that plan look dearer than it is past about ten thousand rows. These
// tests fill a table past that, run a read ten times on one connection, and
// count its plans: five made for the values (PostgreSQL always tries five),
// then the plan made once. With the LIMIT a parameter, all ten are made anew.

// preparedPlans is how PostgreSQL planned a prepared statement on one
// connection: plans made once for every value, and plans made for one
// execution's values.
type preparedPlans struct{ Generic, Custom int64 }

// plansOf reads the plans of query on the connection db stands for (a
// *sql.Conn, or a pool of one connection).
func plansOf(t *testing.T, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string) preparedPlans {
	t.Helper()
	var p preparedPlans
	if err := db.QueryRowContext(t.Context(),
		"SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1", query).Scan(&p.Generic, &p.Custom); err != nil {
		t.Fatalf("the plans of %q: %v", query, err)
	}
	return p
}

// filledPostgresStore opens a store on a new PostgreSQL schema with one
// connection for reads, and runs fill (and ANALYZE) on it.
func filledPostgresStore(t *testing.T, fill string) *store {
	t.Helper()
	s, err := openPostgres(t.Context(), postgresSchema(t), 2) // the writer's and one for reads
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, q := range []string{fill, "ANALYZE"} {
		if _, err := s.writer.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestPagesArePlannedOnceOnPostgreSQL(t *testing.T) {
	t.Parallel()
	s := filledPostgresStore(t, `INSERT INTO pets (name, category_id, status)
		SELECT 'pet-' || i, 1, 'available' FROM generate_series(1, 20000) AS i`)
	for range 10 {
		p, err := s.listPets(t.Context(), "", pageRequest{limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.items) != 20 || !p.more {
			t.Fatalf("the first page holds %d pets (more: %v), want 20 and more", len(p.items), p.more)
		}
	}
	query := s.dialect.sql("SELECT " + petColumns + " FROM pets WHERE id > ? ORDER BY id LIMIT 21")
	if diff := cmp.Diff(preparedPlans{Generic: 5, Custom: 5}, plansOf(t, s.reader, query)); diff != "" {
		t.Errorf("plans of 10 first pages of 20,000 pets (-want +got):\n%s", diff)
	}
}

func TestTheFeedsReadsArePlannedOnceOnPostgreSQL(t *testing.T) {
	t.Parallel()
	s := filledPostgresStore(t, `INSERT INTO events (type, occurred_at, subject, data)
		SELECT 'pet.created', 0, '/v1/pets/1', '{}' FROM generate_series(1, 20000)`)
	for range 10 {
		if _, _, err := s.streamEvents(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.listEvents(t.Context(), 0, 101, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]preparedPlans{
		"stream": plansOf(t, s.reader, s.dialect.sql(sqlStreamEvents)),
		"page":   plansOf(t, s.reader, s.dialect.sql(strings.TrimSuffix(sqlListEvents, "?")+"101")),
	}
	want := map[string]preparedPlans{"stream": {Generic: 5, Custom: 5}, "page": {Generic: 5, Custom: 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plans of 10 reads of a stream and of a page over 20,000 events (-want +got):\n%s", diff)
	}
}
