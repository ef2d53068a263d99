package main

import (
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// updateSchema rewrites schema.sql from what the migrations produce:
// go test -run TestSchemaFileShowsTheMigratedSchema -update-schema
var updateSchema = flag.Bool("update-schema", false, "rewrite schema.sql from the migrations")

// releaseDB is a database written by release 1.0.0, the last release before
// versioned migrations: six pets (ids 1 to 6), two of them created under an
// Idempotency-Key by the API key releaseKey. Made with that release's binary
// (commit eebcfd5) through its API, then stopped with SIGTERM.
const (
	releaseDB  = "testdata/petstore-1.0.0.db"
	releaseKey = "release-key-0123456789"
)

// copyFile copies src to a new file in a temporary directory and returns
// its path.
func copyFile(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// schemaVersion reads the versions recorded in the database at path.
func schemaVersions(t *testing.T, path string) []int {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	versions := []int{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return versions
}

// allMigrations is every migration's version, 1 to the last.
func allMigrations(t *testing.T) []int {
	t.Helper()
	ms, err := loadMigrations(migrationFiles, "migrations/sqlite")
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for _, m := range ms {
		versions = append(versions, m.version)
	}
	return versions
}

func TestMigrationsUpgradeAReleaseDatabaseInPlace(t *testing.T) {
	t.Parallel()
	path := copyFile(t, releaseDB)
	// The records were made on 2026-11-22; the clock stands just after, so
	// they have not expired.
	clock := &fakeClock{t: time.Date(2026, time.November, 22, 16, 0, 0, 0, time.UTC)}
	ts := newTestServer(t, atPath(path), withKeys(releaseKey), withClock(clock.now))
	if diff := cmp.Diff(allMigrations(t), schemaVersions(t, path)); diff != "" {
		t.Errorf("recorded migrations mismatch (-want +got):\n%s", diff)
	}
	auth := map[string]string{"Authorization": "Bearer " + releaseKey}

	t.Run("every pet is kept", func(t *testing.T) {
		want := []Pet{
			{1, "Rex", 1, "available"},
			{2, "Tom", 2, "pending"},
			{3, "Bo", 3, "sold"},
			{4, "Café 🐶", 9223372036854775807, "available"},
			{5, "Kit", 4, "available"},
			{6, "Max", 5, "sold"},
		}
		if diff := cmp.Diff(want, listAll[Pet](t, ts.URL, "/v1/pets?limit=100", auth, nil)); diff != "" {
			t.Errorf("pets after the upgrade mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the counts start from the rows already there", func(t *testing.T) {
		body := ts.do(t, "GET", "/metrics", "", auth).Body
		got := map[string]float64{"records": metricValue(t, body, "petstore_idempotency_records", map[string]string{})}
		for _, s := range petStatuses {
			got[s] = metricValue(t, body, "petstore_pets", map[string]string{"status": s})
		}
		// Migration 4 dropped the release's two records.
		want := map[string]float64{"available": 3, "pending": 1, "sold": 2, "records": 0}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("counts after the upgrade mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("no event is made for the rows that were there: the feed starts empty", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/events", "", auth)
		if diff := cmp.Diff("[]\n", string(res.Body)); diff != "" || res.Status != http.StatusOK {
			t.Errorf("the feed after the upgrade: status %d, mismatch (-want +got):\n%s", res.Status, diff)
		}
	})
	t.Run("ids continue after the old ones", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", `{"name":"New","categoryId":1}`, auth)
		if diff := cmp.Diff(Pet{7, "New", 1, "available"}, decode[Pet](t, res)); diff != "" {
			t.Errorf("first pet after the upgrade mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("idempotency records from before keyed identities are dropped, never replayed", func(t *testing.T) {
		// The release scoped them by the plain digest of the API key, which
		// migration 4 cannot turn into the key's HMAC: they are deleted,
		// and a retry is processed as a new request.
		var n int
		if err := ts.Store.reader.QueryRowContext(t.Context(), "SELECT count(*) FROM idempotency_keys").Scan(&n); err != nil || n != 0 {
			t.Errorf("idempotency records after the upgrade: %d (%v), want 0", n, err)
		}
		for i, tt := range []struct{ key, body, want string }{
			{"release-key-1", `{"name":"Kit","categoryId":4}`, `{"id":8,"name":"Kit","categoryId":4,"status":"available"}` + "\n"},
			{`"quoted \"2\""`, `{"name":"Max","categoryId":5,"status":"sold"}`, `{"id":9,"name":"Max","categoryId":5,"status":"sold"}` + "\n"},
		} {
			res := ts.do(t, "POST", "/v1/pets", tt.body, map[string]string{"Authorization": "Bearer " + releaseKey, idempotencyHeader: tt.key})
			got := createAnswer{Status: res.Status, Location: res.Header.Get("Location"), Body: string(res.Body)}
			want := createAnswer{Status: http.StatusCreated, Location: fmt.Sprintf("/v1/pets/%d", 8+i), Body: tt.want}
			if diff := cmp.Diff(want, got); diff != "" || res.Header.Get(idempotencyReplayedHdr) != "" {
				t.Errorf("retry of %s after the upgrade mismatch (-want +got):\n%s(replayed: %q)", tt.key, diff, res.Header.Get(idempotencyReplayedHdr))
			}
		}
	})
	t.Run("up to migration 3, the release's idempotency records are kept", func(t *testing.T) {
		path := copyFile(t, releaseDB)
		ms, err := loadMigrations(migrationFiles, "migrations/sqlite")
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, _, err := applyMigrations(t.Context(), db, sqliteDialect, ms[:3]); err != nil {
			t.Fatal(err)
		}
		type record struct {
			Key, Operation string
			Resource       int64
			Body           string
		}
		var got []record
		rows, err := db.QueryContext(t.Context(), "SELECT idempotency_key, operation, resource_id, body FROM idempotency_keys ORDER BY resource_id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var r record
			if err := rows.Scan(&r.Key, &r.Operation, &r.Resource, &r.Body); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		want := []record{
			{"release-key-1", "createPet", 5, `{"id":5,"name":"Kit","categoryId":4,"status":"available"}` + "\n"},
			{`quoted "2"`, "createPet", 6, `{"id":6,"name":"Max","categoryId":5,"status":"sold"}` + "\n"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("records at version 3 mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("a pet from the release can be ordered and sold", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/store/orders", `{"petId":1}`, auth)
		if res.Status != http.StatusCreated {
			t.Fatalf("placeOrder: status %d, body %s", res.Status, res.Body)
		}
		o := decode[orderJSON](t, res)
		if res := ts.do(t, "PATCH", fmt.Sprintf("/v1/store/orders/%d", o.ID), `{"status":"delivered"}`, auth); res.Status != http.StatusOK {
			t.Fatalf("deliver: status %d, body %s", res.Status, res.Body)
		}
		if diff := cmp.Diff([]Pet{{1, "Rex", 1, "sold"}}, decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?id=1", "", auth))); diff != "" {
			t.Errorf("pet 1 after its order mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the upgraded file passes SQLite's integrity check", func(t *testing.T) {
		if got := integrityCheck(t, path); got != "ok" {
			t.Errorf("integrity_check = %q, want ok", got)
		}
	})
}

func TestMigrationsOpenAnUpToDateDatabaseUnchanged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pets.db")
	for range 2 {
		st, err := openStore(t.Context(), path, 0)
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	if diff := cmp.Diff(allMigrations(t), schemaVersions(t, path)); diff != "" {
		t.Errorf("recorded migrations after two opens mismatch (-want +got):\n%s", diff)
	}
}

func TestMigrationsRefuseADatabaseNewerThanTheBinary(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pets.db")
	st, err := openStore(t.Context(), path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.writer.ExecContext(t.Context(), "INSERT INTO schema_migrations (version, name) VALUES (999, '0999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	_, err = openStore(t.Context(), path, 0)
	if !errors.Is(err, errSchemaTooNew) {
		t.Fatalf("openStore = %v, want errSchemaTooNew", err)
	}
	for _, want := range []string{"version 999", fmt.Sprintf("up to %d", len(allMigrations(t)))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(before, after) {
		t.Errorf("the refused database file was modified")
	}
	// run refuses to start, with the setting named, before listening.
	err = run(t.Context(), nil, mapEnv(map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": path, "PETSTORE_API_KEYS": testKey}), strings.NewReader(""), &syncBuffer{}, &syncBuffer{})
	if _, ok := errors.AsType[*configError](err); !ok || !strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("run = %v, want a configError saying the schema is newer than this binary", err)
	}
}

func TestMigrationsApplyAllOrNothing(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/0001_first.sql":  {Data: []byte("CREATE TABLE first (x INTEGER);")},
		"m/0002_second.sql": {Data: []byte("CREATE TABLE second (x INTEGER); INSERT INTO nowhere VALUES (1);")},
	}
	ms, err := loadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := applyMigrations(t.Context(), db, sqliteDialect, ms); err == nil || !strings.Contains(err.Error(), "0002_second.sql") {
		t.Fatalf("migrate = %v, want the failure of 0002_second.sql", err)
	}
	var tables []string
	rows, err := db.QueryContext(t.Context(), "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if len(tables) != 0 {
		t.Errorf("tables after a failed migration: %v, want none (not even schema_migrations)", tables)
	}
}

// TestMigrationsRefuseABrokenReference: SQLite's migrations run with the
// foreign key checks off (a table rebuild, as migration 13's of events,
// drops a table others reference), so a migration that leaves a row
// referencing nothing is caught by foreign_key_check before the commit.
func TestMigrationsRefuseABrokenReference(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/0001_kinds.sql": {Data: []byte("CREATE TABLE kinds (kind TEXT PRIMARY KEY); CREATE TABLE things (kind TEXT REFERENCES kinds (kind));")},
		"m/0002_thing.sql": {Data: []byte("INSERT INTO things (kind) VALUES ('unknown');")},
	}
	ms, err := loadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := applyMigrations(t.Context(), db, sqliteDialect, ms); err == nil || !strings.Contains(err.Error(), "a row of things (rowid 1) references a missing row of kinds") {
		t.Fatalf("migrate = %v, want the broken reference named", err)
	}
	if tables := queryRows(t, db, "SELECT name FROM sqlite_schema WHERE type = 'table'"); len(tables) != 0 {
		t.Errorf("tables after a refused migration: %v, want none", tables)
	}
}

func TestLoadMigrationsRefusesBadNumbering(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule  string
		files []string
	}{
		{"a gap", []string{"0001_a.sql", "0003_c.sql"}},
		{"a repeat", []string{"0001_a.sql", "0001_b.sql"}},
		{"not starting at 1", []string{"0002_b.sql"}},
		{"no number", []string{"first.sql"}},
		{"not .sql", []string{"0001_a.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tt.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("SELECT 1;")}
			}
			if _, err := loadMigrations(fsys, "m"); err == nil {
				t.Errorf("loadMigrations(%v) = nil error", tt.files)
			}
		})
	}
}

// TestSchemaFileShowsTheMigratedSchema keeps schema.sql, the schema as the
// migrations leave it, true: it is what a reader opens to see the tables.
func TestSchemaFileShowsTheMigratedSchema(t *testing.T) {
	t.Parallel()
	st, err := openStore(t.Context(), filepath.Join(t.TempDir(), "pets.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.reader.QueryContext(t.Context(),
		"SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY tbl_name, type DESC, name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	b.WriteString(schemaFileHeader)
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\n%s;\n", stmt)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if *updateSchema {
		if err := os.WriteFile("schema.sql", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.String(), string(got)); diff != "" {
		t.Errorf("schema.sql is not the migrated schema; run go test -run %s -update-schema (-want +got):\n%s", t.Name(), diff)
	}
}

// schemaFileHeader starts schema.sql.
const schemaFileHeader = `-- schema.sql is the database schema as the migrations in migrations/sqlite
-- leave it, for reading: the tables, their constraints and indexes in one
-- place. It is not executed. To change the schema, add a migration; then
-- go test -run TestSchemaFileShowsTheMigratedSchema -update-schema rewrites
-- this file. Why each table, column and index is there is said in the
-- migration that made it.
`

func TestStartUpLogsTheMigration(t *testing.T) {
	t.Parallel()
	path := copyFile(t, releaseDB)
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": path, "PETSTORE_API_KEYS": testKey}
	last := float64(len(allMigrations(t)))
	for _, want := range []logRecord{
		// A file of the releases before migrations is at version 0.
		{"level": "INFO", "msg": "database schema migrated", "db": path, "from": 0.0, "to": last},
		nil, // the second start finds nothing to migrate
	} {
		rs := startRun(t, env, "-log-format", "json")
		if err := rs.stop(t); err != nil {
			t.Fatal(err)
		}
		recs := rs.Stderr.find(t, "INFO", "database schema migrated")
		for _, r := range recs {
			delete(r, "time")
		}
		wantRecs := []logRecord{}
		if want != nil {
			wantRecs = []logRecord{want}
		}
		if diff := cmp.Diff(wantRecs, recs); diff != "" {
			t.Errorf("migration log records mismatch (-want +got):\n%s", diff)
		}
	}
}

// schemaBackend is a backend a schema test runs on: the migrations'
// directory and dialect, a database of its own, and the query that lists
// the indexes of events (name and definition, by name).
type schemaBackend struct {
	name          string
	dir           string
	dialect       dialect
	db            func(t testing.TB) string
	eventsIndexes string
}

// schemaBackends are both backends.
var schemaBackends = []schemaBackend{
	{"SQLite", "migrations/sqlite", sqliteDialect, func(t testing.TB) string { return filepath.Join(t.TempDir(), "pets.db") },
		"SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL ORDER BY name"},
	{"PostgreSQL", "migrations/postgres", postgresDialect, postgresSchema,
		"SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'events' ORDER BY indexname"},
}

// TestEventTypesAreTheDeclaredOnes holds the table event_types, which
// events.type references (migration 13), to the types the code declares
// (eventTypes, from resourceSpecs), on each backend, each type with the
// partial index that a type filter of the feed reads (eventTypeIndexName,
// migration 11): a type added to a resource's declaration without its
// migration, or the other way round, fails here.
func TestEventTypesAreTheDeclaredOnes(t *testing.T) {
	t.Parallel()
	for _, backend := range schemaBackends {
		t.Run(backend.name, func(t *testing.T) {
			st, err := openStore(t.Context(), backend.db(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var types []string
			for _, row := range queryRows(t, st.reader, "SELECT type FROM event_types ORDER BY type") {
				types = append(types, row[0])
			}
			if diff := cmp.Diff(slices.Sorted(slices.Values(eventTypes)), types); diff != "" {
				t.Errorf("event_types mismatch (-declared in resourceSpecs +in the table):\n%s", diff)
			}
			indexes := map[string]bool{}
			for _, row := range queryRows(t, st.reader, backend.eventsIndexes) {
				indexes[row[0]] = true
			}
			for _, typ := range eventTypes {
				if !indexes[eventTypeIndexName(typ)] {
					t.Errorf("type %s has no index %s on events", typ, eventTypeIndexName(typ))
				}
			}
		})
	}
}

// TestTheDatabaseRefusesAnUnknownEventType: with the types in their own
// table rather than in a CHECK, the database still stores an event only of
// a type the table holds, whatever writes the row.
func TestTheDatabaseRefusesAnUnknownEventType(t *testing.T) {
	t.Parallel()
	for _, backend := range schemaBackends {
		t.Run(backend.name, func(t *testing.T) {
			st, err := openStore(t.Context(), backend.db(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, tt := range []struct {
				rule    string
				typ     string
				refused bool
			}{
				{"a declared type is stored", eventPetCreated, false},
				{"a type no resource declares is refused", "pet.adopted", true},
				{"a pattern is no type", "pet.*", true},
				{"types are compared exactly, case included", "Pet.Created", true},
				{"a type with a trailing space is another type", eventOrderPlaced + " ", true},
				{"the empty type is refused", "", true},
			} {
				_, err := st.writer.ExecContext(t.Context(), st.dialect.sql("INSERT INTO events (type, occurred_at, subject, data) VALUES (?, 0, '/v1/pets/1', '{}')"), tt.typ)
				want := "stored"
				if tt.refused {
					want = "refused by the foreign key"
				}
				if got := foreignKeyViolation(err); got != tt.refused || (err != nil && !got) {
					t.Errorf("%s: insert of type %q = %v, want it %s", tt.rule, tt.typ, err, want)
				}
			}
		})
	}
}

// foreignKeyViolation reports whether err is the database's refusal of a
// row that references a row that does not exist.
func foreignKeyViolation(err error) bool {
	if se, ok := errors.AsType[*sqlite.Error](err); ok {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
	}
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "23503"
}

// TestMigration13KeepsEveryEventAndItsIds upgrades a database at version 12
// holding events, on each backend, to the last version: on SQLite migration
// 13 rebuilds events, which must keep every event, every index and the id
// sequence, even when pruning has taken every event (the new table has no
// row to take its sequence from), since the prune mark and the clients'
// cursors are past those ids.
func TestMigration13KeepsEveryEventAndItsIds(t *testing.T) {
	t.Parallel()
	for _, backend := range schemaBackends {
		for _, tt := range []struct {
			rule   string
			pruned int64 // the events up to this id are deleted at version 12
		}{
			{"the oldest events pruned", 2},
			{"every event pruned", 5},
		} {
			t.Run(backend.name+"/"+tt.rule, func(t *testing.T) {
				db := backend.db(t)
				before, indexes := eventsAtVersion12(t, backend, db, tt.pruned)
				st, err := openStore(t.Context(), db, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if st.schemaFrom != 12 {
					t.Fatalf("opened at version %d, want 12", st.schemaFrom)
				}
				if diff := cmp.Diff(before, queryRows(t, st.reader, "SELECT id, type || ' ' || occurred_at || ' ' || subject || ' ' || data FROM events ORDER BY id")); diff != "" {
					t.Errorf("events after migration 13 mismatch (-before +after):\n%s", diff)
				}
				if diff := cmp.Diff(indexes, queryRows(t, st.reader, backend.eventsIndexes)); diff != "" {
					t.Errorf("indexes of events after migration 13 mismatch (-before +after):\n%s", diff)
				}
				insert := st.dialect.sql("INSERT INTO events (type, occurred_at, subject, data) VALUES (?, 0, '/v1/pets/9', '{}') RETURNING id")
				var id int64
				if err := st.writer.QueryRowContext(t.Context(), insert, eventPetCreated).Scan(&id); err != nil || id != 6 {
					t.Errorf("the first event after migration 13: id %d (%v), want 6, after the 5 handed out", id, err)
				}
				if _, err := st.writer.ExecContext(t.Context(), insert, "pet.adopted"); !foreignKeyViolation(err) {
					t.Errorf("an event of an unknown type after migration 13: %v, want refused by the foreign key", err)
				}
			})
		}
	}
}

// eventsAtVersion12 migrates the empty database db to version 12, writes
// five events (ids 1 to 5) and deletes those up to pruned, as pruning does.
// It returns the events left (id, then the other columns) and the indexes
// of events.
func eventsAtVersion12(t *testing.T, b schemaBackend, db string, pruned int64) (events, indexes [][]string) {
	t.Helper()
	d := b.dialect
	ms, err := loadMigrations(migrationFiles, b.dir)
	if err != nil {
		t.Fatal(err)
	}
	conn := openDB(t, db)
	if _, _, err := applyMigrations(t.Context(), conn, d, ms[:12]); err != nil {
		t.Fatal(err)
	}
	for i, typ := range []string{eventPetCreated, eventPetUpdated, eventOrderPlaced, eventOrderDelivered, eventPetDeleted} {
		if _, err := conn.ExecContext(t.Context(), d.sql("INSERT INTO events (type, occurred_at, subject, data) VALUES (?, ?, ?, ?)"),
			typ, 1000+i, fmt.Sprintf("/v1/pets/%d", i+1), fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(t.Context(), d.sql("DELETE FROM events WHERE id <= ?"), pruned); err != nil {
		t.Fatal(err)
	}
	events = queryRows(t, conn, "SELECT id, type || ' ' || occurred_at || ' ' || subject || ' ' || data FROM events ORDER BY id")
	indexes = queryRows(t, conn, b.eventsIndexes)
	return events, indexes
}

// queryRows runs query through q and returns its rows, each column read as
// a string.
func queryRows(t *testing.T, q querier, query string) [][]string {
	t.Helper()
	rows, err := q.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	columns, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var all [][]string
	for rows.Next() {
		row := make([]string, len(columns))
		ptrs := make([]any, len(columns))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		all = append(all, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}
