package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// shop is what a shop's database holds, read through the API.
type shop struct {
	Pets   []Pet
	Orders []orderJSON
	Events []wireEvent // with their ids: a copy carries them
}

// shopOf reads every pet, order and event of the service at url.
func shopOf(t *testing.T, url string) shop {
	t.Helper()
	res := doRequest(t, url, "GET", "/v1/events?limit=1000", "", nil)
	return shop{Pets: listAll[Pet](t, url, "/v1/pets?limit=100", nil, nil), Orders: listAll[orderJSON](t, url, "/v1/store/orders?limit=100", nil, nil),
		Events: decode[[]wireEvent](t, res)}
}

// TestCopyMovesAShopToPostgreSQLAndBack copies a SQLite file to an empty
// PostgreSQL database and that to a new SQLite file: every pet, order and
// idempotency record arrives with its id, and the id sequences continue where
// the source's were, even past rows that were deleted.
func TestCopyMovesAShopToPostgreSQLAndBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "shop.db")
	first := newTestServer(t, atPath(src))
	keyed := first.do(t, "POST", "/v1/pets", `{"name":"Keyed","categoryId":3}`, withIdempotencyKey("move-me"))
	rex := first.createPet(t, "Rex", 1, "")
	tom := first.createPet(t, "Tom", 2, "")
	o := first.placeOrder(t, rex.ID)
	first.setOrder(t, o.ID, "delivered")
	first.placeOrder(t, tom.ID)
	last := first.createPet(t, "Last", 1, "")
	first.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", last.ID), "", nil) // the sequence is now past the highest id
	want := shopOf(t, first.URL)
	first.Store.Close()

	pg := postgresSchema(t)
	back := filepath.Join(dir, "back.db")
	hops := []struct{ from, to string }{{src, pg}, {pg, back}}
	for _, hop := range hops {
		var out strings.Builder
		if err := run(t.Context(), []string{"copy", "-from", hop.from, "-to", hop.to}, mapEnv(nil), strings.NewReader(""), &out, &out); err != nil {
			t.Fatalf("copy %s to %s: %v", redactDB(hop.from), redactDB(hop.to), err)
		}
		if !strings.HasPrefix(out.String(), fmt.Sprintf("copied %d pets, %d orders, 1 idempotency records, %d events, 1 prune marks and 0 ACME entries", len(want.Pets), len(want.Orders), len(want.Events))) {
			t.Errorf("copy printed %q", out.String())
		}
	}
	// Each copy is checked once both are made: the checks add a pet.
	for _, hop := range hops {
		ts := newTestServer(t, atPath(hop.to))
		if diff := cmp.Diff(want, shopOf(t, ts.URL)); diff != "" {
			t.Errorf("the shop in %s mismatch (-source +copy):\n%s", redactDB(hop.to), diff)
		}
		again := ts.do(t, "POST", "/v1/pets", `{"name":"Keyed","categoryId":3}`, withIdempotencyKey("move-me"))
		if diff := cmp.Diff(createdOf(keyed), createdOf(again)); diff != "" {
			t.Errorf("a keyed create replayed on %s mismatch (-source +copy):\n%s", redactDB(hop.to), diff)
		}
		if next := ts.createPet(t, "Next", 1, ""); next.ID <= last.ID {
			t.Errorf("the next pet on %s got id %d, not above the deleted %d", redactDB(hop.to), next.ID, last.ID)
		}
		ts.Store.Close()
	}
}

// TestCopySaysWhatItLeavesBehind guards the copy's summary: after what it
// copied, it counts the webhook subscriptions it did not copy and says why,
// so that none is dropped without a word; a shop without any gets no such
// line.
func TestCopySaysWhatItLeavesBehind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule          string
		subscriptions int
		leftBehind    string
	}{
		{"a shop without subscriptions: only what was copied", 0, ""},
		{"a shop with subscriptions: their count, and why they were not copied", 2,
			"did not copy 2 webhook subscriptions: " + tableNamed("webhooks").notCopied + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "shop.db"), filepath.Join(dir, "copy.db")
			ts := newTestServer(t, atPath(src))
			ts.createPet(t, "Rex", 1, "")
			for i := range tt.subscriptions {
				// No dispatcher runs: nothing is ever sent to these.
				subscribe(t, ts, fmt.Sprintf(`{"url": "https://shop.example.com/hooks/%d"}`, i))
			}
			ts.Store.Close()
			var out strings.Builder
			if err := run(t.Context(), []string{"copy", "-from", src, "-to", dst}, mapEnv(nil), strings.NewReader(""), &out, &out); err != nil {
				t.Fatalf("copy: %v", err)
			}
			want := fmt.Sprintf("copied 1 pets, 0 orders, 0 idempotency records, 1 events, 1 prune marks and 0 ACME entries from %s to %s\n", src, dst) + tt.leftBehind
			if diff := cmp.Diff(want, out.String()); diff != "" {
				t.Errorf("the copy's summary mismatch (-want +got):\n%s", diff)
			}
			copied := newTestServer(t, atPath(dst))
			if got := listAll[webhookJSON](t, copied.URL, "/v1/webhooks?limit=100", nil, nil); len(got) != 0 {
				t.Errorf("the copy holds %d webhook subscriptions, want none", len(got))
			}
		})
	}
}

func TestCopyRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	full := filepath.Join(dir, "full.db")
	ts := newTestServer(t, atPath(full))
	ts.createPet(t, "Rex", 1, "")
	ts.Store.Close()
	other := filepath.Join(dir, "other.db")
	ts2 := newTestServer(t, atPath(other))
	ts2.createPet(t, "Tom", 1, "")
	ts2.Store.Close()
	before, _ := os.ReadFile(other)
	tests := []struct {
		rule    string
		args    []string
		mention string
	}{
		{"a destination that holds data", []string{"-from", full, "-to", other}, "already holds data"},
		{"the same database twice", []string{"-from", full, "-to", full}, "same database"},
		{"no destination", []string{"-from", full}, "name both"},
		{"an in-memory database", []string{"-from", full, "-to", ":memory:"}, "in-memory"},
		{"a stray argument", []string{"-from", full, "-to", other, "now"}, `"now"`},
		{"a source file that does not exist", []string{"-from", filepath.Join(dir, "typo.db"), "-to", filepath.Join(dir, "new.db")}, "not an existing database file"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			err := runConfig(t, nil, append([]string{"copy"}, tt.args...)...)
			if ce, ok := errors.AsType[*configError](err); !ok || !strings.Contains(ce.Error(), tt.mention) {
				t.Errorf("copy %v = %v, want a configError mentioning %q", tt.args, err, tt.mention)
			}
		})
	}
	if after, _ := os.ReadFile(other); !cmp.Equal(before, after) {
		t.Errorf("a refused copy changed the destination file")
	}
	for _, name := range []string{"typo.db", "new.db"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused copy left %s behind (%v)", name, err)
		}
	}
	t.Run("backup refuses a PostgreSQL URL and names pg_dump", func(t *testing.T) {
		err := runConfig(t, nil, "backup", "-db", "postgres://shop:secret@db.example/petstore", filepath.Join(dir, "x.db"))
		if ce, ok := errors.AsType[*configError](err); !ok || !strings.Contains(ce.Error(), "pg_dump") || strings.Contains(ce.Error(), "secret") {
			t.Errorf("backup of a PostgreSQL URL = %v, want a configError naming pg_dump, without the password", err)
		}
	})
}

// TestEveryTableIsDeclared holds store_tables.go to the migrated schema, on
// each backend: every table is declared, as copied or as not copied and why,
// and a copied table's columns are all of its columns, so a table or a
// column that a migration adds cannot be left behind by petstore copy.
func TestEveryTableIsDeclared(t *testing.T) {
	t.Parallel()
	declared := map[string][]string{}
	for _, spec := range allTables() {
		if (spec.notCopied == "") == (len(spec.columns) == 0) {
			t.Errorf("table %s: declare its columns (copied) or why it is not copied, one of the two", spec.name)
		}
		if spec.notCopied == "" && spec.noun == "" {
			t.Errorf("table %s: copied, but with no noun for the copy's summary", spec.name)
		}
		cols := slices.Sorted(slices.Values(spec.columns))
		if cols == nil {
			cols = []string{}
		}
		declared[spec.name] = cols
	}
	for _, backend := range []struct {
		name   string
		db     func(t testing.TB) string
		tables string // table and column, sorted, one row each
	}{
		{"SQLite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "pets.db") },
			`SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p
			  WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY 1, 2`},
		{"PostgreSQL", postgresSchema,
			`SELECT table_name, column_name FROM information_schema.columns
			  WHERE table_schema = current_schema() ORDER BY 1, 2`},
	} {
		t.Run(backend.name, func(t *testing.T) {
			st, err := openStore(t.Context(), backend.db(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			rows, err := st.reader.QueryContext(t.Context(), backend.tables)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			inSchema := map[string][]string{}
			for rows.Next() {
				var table, column string
				if err := rows.Scan(&table, &column); err != nil {
					t.Fatal(err)
				}
				if _, ok := inSchema[table]; !ok {
					inSchema[table] = []string{}
				}
				if spec := tableNamed(table); spec == nil || spec.notCopied == "" {
					inSchema[table] = append(inSchema[table], column)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(declared, inSchema); diff != "" {
				t.Errorf("tables and copied columns: store_tables.go mismatch (-declared +migrated schema):\n%s", diff)
			}
		})
	}
}

// tableNamed is the declaration of the table name, nil if there is none.
func tableNamed(name string) *tableSpec {
	tables := allTables()
	for i := range tables {
		if tables[i].name == name {
			return &tables[i]
		}
	}
	return nil
}

// TestCopyWhileWritersRunKeepsTheShopWhole copies a shop while writers keep
// creating pets and placing, delivering and cancelling orders on it: the
// copy is one snapshot, so the catalogue and the orders agree in it (every
// placed order's pet is pending and every pending pet has a placed order,
// every delivered order's pet is sold), and the copy serves them: each
// placed order can be delivered, each available pet ordered.
func TestCopyWhileWritersRunKeepsTheShopWhole(t *testing.T) {
	t.Parallel()
	sqliteFile := func(t testing.TB) string { return filepath.Join(t.TempDir(), "shop.db") }
	for _, tt := range []struct {
		rule     string
		from, to func(t testing.TB) string
	}{
		{"SQLite to SQLite: one deferred read transaction", sqliteFile, sqliteFile},
		{"SQLite to PostgreSQL: batches under the replicas' write lock", sqliteFile, postgresSchema},
		{"PostgreSQL to SQLite: one REPEATABLE READ transaction", postgresSchema, sqliteFile},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			t.Parallel()
			src, dst := tt.from(t), tt.to(t)
			ts := newTestServer(t, atPath(src))
			const seeded = 40
			for i := range seeded {
				ts.createPet(t, fmt.Sprint("seed-", i), 1, "")
			}
			var writes atomic.Int64
			stop := keepSending(t, 4, func(w, i int) bool {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(i)))
				var res response
				switch op := rng.IntN(8); {
				case op == 0:
					res = ts.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"during-%d-%d","categoryId":2}`, w, i), nil)
				case op < 4:
					res = ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, 1+rng.IntN(seeded)), nil)
				default:
					placed := decode[[]orderJSON](t, ts.do(t, "GET", "/v1/store/orders?status=placed&limit=20", "", nil))
					if len(placed) == 0 {
						return true
					}
					res = ts.setOrder(t, placed[rng.IntN(len(placed))].ID, []string{"delivered", "cancelled"}[rng.IntN(2)])
				}
				if res.Status >= 500 {
					t.Errorf("a write during the copy: status %d, body %s", res.Status, res.Body)
				}
				writes.Add(1)
				return true
			})
			eventually(t, "the writers have begun", func() bool { return writes.Load() >= 20 })
			var out strings.Builder
			err := run(t.Context(), []string{"copy", "-from", src, "-to", dst}, mapEnv(nil), strings.NewReader(""), &out, &out)
			stop()
			if err != nil {
				t.Fatalf("copy while writers run: %v\n%s", err, out.String())
			}

			checkStoreInvariants(t, 0, dst, nil) // as the SIGKILL tests check theirs, in SQL
			cp := newTestServer(t, atPath(dst))
			got := shopOf(t, cp.URL)
			pets := map[int64]Pet{}
			for _, p := range got.Pets {
				pets[p.ID] = p
			}
			placed := map[int64]int64{} // pet id: its placed order
			for _, o := range got.Orders {
				want := map[string]string{"placed": "pending", "delivered": "sold"}[o.Status]
				if pet, ok := pets[o.PetID]; !ok {
					t.Errorf("order %d names pet %d, which the copy lacks", o.ID, o.PetID)
				} else if want != "" && pet.Status != want {
					t.Errorf("order %d is %s, but its pet %d is %s in the copy, not %s", o.ID, o.Status, pet.ID, pet.Status, want)
				}
				if o.Status == "placed" {
					placed[o.PetID] = o.ID
				}
			}
			for _, p := range got.Pets {
				if _, ok := placed[p.ID]; p.Status == "pending" && !ok {
					t.Errorf("pet %d is pending in the copy, with no placed order", p.ID)
				}
			}
			t.Logf("%d writes; the copy holds %d pets, %d orders (%d placed)", writes.Load(), len(got.Pets), len(got.Orders), len(placed))
			for _, id := range placed {
				if res := cp.setOrder(t, id, "delivered"); res.Status != http.StatusOK {
					t.Errorf("delivering order %d on the copy: status %d, body %s", id, res.Status, res.Body)
				}
			}
			for _, p := range got.Pets {
				if p.Status == "available" {
					if res := cp.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, p.ID), nil); res.Status != http.StatusCreated {
						t.Errorf("ordering available pet %d on the copy: status %d, body %s", p.ID, res.Status, res.Body)
					}
				}
			}
		})
	}
}

// BenchmarkCopy100000Pets copies a shop of 100,000 pets (and 10,000 orders)
// from a SQLite file into an empty SQLite file and into an empty PostgreSQL
// schema, opening both as petstore copy does:
//
//	go test -run '^$' -bench Copy -benchtime 3x
func BenchmarkCopy100000Pets(b *testing.B) {
	src := filepath.Join(b.TempDir(), "shop.db")
	st, err := openStore(b.Context(), src, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, fill := range []string{
		`WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 100000)
		 INSERT INTO pets (name, category_id, status) SELECT 'pet-' || n, n % 10 + 1, CASE WHEN n <= 10000 THEN 'sold' ELSE 'available' END FROM i`,
		`INSERT INTO orders (pet_id, status, placed_at, updated_at) SELECT id, 'delivered', 1, 2 FROM pets WHERE id <= 10000`,
	} {
		if _, err := st.writer.ExecContext(b.Context(), fill); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	for _, to := range []struct {
		name string
		db   func(b *testing.B, i int) string
	}{
		{"to SQLite", func(b *testing.B, i int) string { return filepath.Join(b.TempDir(), fmt.Sprint("copy-", i, ".db")) }},
		{"to PostgreSQL", func(b *testing.B, _ int) string { return postgresSchema(b) }},
	} {
		b.Run(to.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				moved, err := copyDatabase(b.Context(), src, to.db(b, i))
				if err != nil {
					b.Fatal(err)
				}
				if moved[0].rows != 100_000 {
					b.Fatalf("copied %d pets", moved[0].rows)
				}
			}
		})
	}
}
