package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
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

// readOfEvents finds what a line of a plan reads of the events table: an
// index, by any kind of scan, or the table itself.
var readOfEvents = regexp.MustCompile(`Index (?:Only )?Scan using (\w+) on events|Bitmap Index Scan on (\w+)|Seq Scan on (events)`)

// indexesRead lists what the plan of an EXPLAIN run on db reads of the
// events table, an index's name or "events" for the table, in plan order.
func indexesRead(t *testing.T, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, explain string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), explain, args...)
	if err != nil {
		t.Fatalf("%s: %v", explain, err)
	}
	defer rows.Close()
	read := []string{}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		if m := readOfEvents.FindStringSubmatch(line); m != nil {
			read = append(read, m[1]+m[2]+m[3])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return read
}

// TestTheTypeFilterReadsEachTypesIndexOnPostgreSQL guards the plans of the
// events' type filter (listEventsOfTypes) over 50,000 events of which 25
// are pet.deleted, all in the first half. Each arm of a type the filter
// keeps reads that type's index, in the plans made for the values and in
// the plan made once: a rare type's page, and a webhook's read of the next
// event of pet.* behind a cursor past the last pet.deleted. With the types
// as one IN list, or one index on (type, id), PostgreSQL read those through
// the primary key with the type as a filter: the rare type's events to the
// end of the table, for a page of 25 or for one event of pet.*.
func TestTheTypeFilterReadsEachTypesIndexOnPostgreSQL(t *testing.T) {
	t.Parallel()
	s := filledPostgresStore(t, `INSERT INTO events (type, occurred_at, subject, data)
		SELECT CASE WHEN i % 1000 = 0 AND i <= 25000 THEN 'pet.deleted'
		            ELSE (ARRAY['pet.created', 'pet.updated', 'order.placed', 'order.delivered', 'order.cancelled'])[i % 5 + 1] END,
		       0, '/v1/pets/' || i, '{"name":"' || repeat('x', 150) || '"}'
		FROM generate_series(1, 50000) AS i`)
	every := make([]string, len(eventTypes))
	for i, typ := range eventTypes {
		every[i] = eventTypeIndexName(typ)
	}
	tests := []struct {
		rule   string
		types  []string
		after  int64
		limit  int
		events int // how many the read returns
		want   []string
	}{
		{"a rare type's page reads its index", []string{eventPetDeleted}, 0, 100, 25,
			[]string{"events_pet_deleted"}},
		{"one event of pet.* past the last pet.deleted reads each pet type's index", []string{eventPetCreated, eventPetUpdated, eventPetDeleted}, 25000, 1, 1,
			[]string{"events_pet_created", "events_pet_updated", "events_pet_deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			var events []Event
			for range 10 {
				var err error
				if events, err = s.listEvents(t.Context(), tt.after, tt.limit, tt.types); err != nil {
					t.Fatal(err)
				}
				if len(events) != tt.events {
					t.Fatalf("the read returned %d events, want %d", len(events), tt.events)
				}
			}
			// The statement with its LIMITs as parameters, which a page
			// runs past maxSizedPages, returns the same events.
			rows, err := s.eventStmts.listOfTypes.QueryContext(t.Context(), append(typeFilterArgs(s.dialect, tt.after, tt.types, tt.limit, false), tt.limit)...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			unsized := []Event{}
			for rows.Next() {
				var ev Event
				if err := scanEvent(rows, &ev); err != nil {
					t.Fatal(err)
				}
				unsized = append(unsized, ev)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(events, unsized); diff != "" {
				t.Errorf("the events read with the LIMITs as parameters mismatch (-written out +parameters):\n%s", diff)
			}
			query := s.dialect.sql(strings.ReplaceAll(s.dialect.listEventsOfTypes(), " LIMIT ?", " LIMIT "+strconv.Itoa(tt.limit)))
			if diff := cmp.Diff(preparedPlans{Generic: 5, Custom: 5}, plansOf(t, s.reader, query)); diff != "" {
				t.Errorf("plans of 10 reads (-want +got):\n%s", diff)
			}
			args := typeFilterArgs(s.dialect, tt.after, tt.types, tt.limit, true)
			if diff := cmp.Diff(tt.want, indexesRead(t, s.reader, "EXPLAIN "+query, args...)); diff != "" {
				t.Errorf("what the plan made for the values reads (-want +got):\n%s", diff)
			}
			// The plan made once has every arm, each behind the test of
			// its parameter.
			conn, err := s.reader.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			literals := make([]string, len(args))
			for i, a := range args {
				literals[i] = fmt.Sprint(a) // numbers and booleans
			}
			for _, q := range []string{"SET plan_cache_mode = force_generic_plan", "PREPARE type_filter AS " + query} {
				if _, err := conn.ExecContext(t.Context(), q); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(every, indexesRead(t, conn, "EXPLAIN EXECUTE type_filter("+strings.Join(literals, ", ")+")")); diff != "" {
				t.Errorf("what the plan made once reads (-want +got):\n%s", diff)
			}
			// The connection goes back to the pool: leave it as it was.
			for _, q := range []string{"DEALLOCATE type_filter", "RESET plan_cache_mode"} {
				if _, err := conn.ExecContext(t.Context(), q); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
