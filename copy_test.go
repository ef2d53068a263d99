package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// shop is what a shop's database holds, read through the API.
type shop struct {
	Pets   []Pet
	Orders []orderJSON
}

// shopOf reads every pet and order of the service at url.
func shopOf(t *testing.T, url string) shop {
	t.Helper()
	return shop{Pets: listAll[Pet](t, url, "/v1/pets?limit=100", nil, nil), Orders: listAll[orderJSON](t, url, "/v1/store/orders?limit=100", nil, nil)}
}

// TestCopyMovesAShopToPostgreSQLAndBack copies a SQLite file to an empty
// PostgreSQL database and that to a new SQLite file: every pet, order and
// idempotency record arrives with its id, and the id sequences continue where
// the source's were, even past rows that were deleted.
func TestCopyMovesAShopToPostgreSQLAndBack(t *testing.T) {
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
		if !strings.HasPrefix(out.String(), fmt.Sprintf("copied %d pets, %d orders and 1 idempotency records", len(want.Pets), len(want.Orders))) {
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

func TestCopyRefuses(t *testing.T) {
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
