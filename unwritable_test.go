package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCreateIsUnavailableWhileTheDatabaseCannotBeWritten makes the real
// SQLite file unwritable in two ways the tests can cause as root: a page
// limit on the writer connection (SQLite then fails writes with SQLITE_FULL,
// exactly as on a full disk) and query_only (SQLITE_READONLY, as on a
// read-only file or file system). Each time, creates are 503, reads keep
// working, and creates succeed again once the cause is gone.
func TestCreateIsUnavailableWhileTheDatabaseCannotBeWritten(t *testing.T) {
	t.Parallel()
	causes := []struct {
		rule, set, unset, logged string
	}{
		{"disk full (SQLITE_FULL)", "PRAGMA max_page_count = 1", "PRAGMA max_page_count = 1073741823", "full"},
		{"read-only database (SQLITE_READONLY)", "PRAGMA query_only = 1", "PRAGMA query_only = 0", "readonly"},
	}
	for _, tt := range causes {
		t.Run(tt.rule, func(t *testing.T) {
			ts := newTestServer(t, onSQLite())
			var want []Pet
			for i := range 3 {
				want = append(want, ts.createPet(t, fmt.Sprintf("before-%d", i), 1, ""))
			}
			// max_page_count cannot go below the current size: this caps
			// the file at the pages it has, so it fills within a few pets.
			if _, err := ts.Store.writer.ExecContext(t.Context(), tt.set); err != nil {
				t.Fatal(err)
			}
			var refused response
			for i := range 500 {
				res := ts.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"%s","categoryId":1}`, strings.Repeat("x", 90)+fmt.Sprint(i)), withIdempotencyKey(fmt.Sprint("k", i)))
				if res.Status != http.StatusCreated {
					refused = res
					break
				}
				want = append(want, decode[Pet](t, res))
			}
			wantError(t, refused, http.StatusServiceUnavailable, codeUnavailable, "not stored", "cannot be written", "retry")
			if body := strings.ToLower(string(refused.Body)); strings.Contains(body, "sqlite") || strings.Contains(body, "sql") {
				t.Errorf("503 body leaks internals: %s", refused.Body)
			}
			refusals := ts.Log.find(t, "WARN", "request refused")
			if len(refusals) != 1 || !strings.Contains(strings.ToLower(refusals[0].field("err")), tt.logged) {
				t.Errorf("the refusal and its cause (%q) were not logged once as a warning; log:\n%s", tt.logged, ts.Log)
			}

			t.Run("reads keep working", func(t *testing.T) {
				got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?limit=100", "", nil))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("list while unwritable mismatch (-want +got):\n%s", diff)
				}
				if res := ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", want[0].ID), "", nil); res.Status != http.StatusOK {
					t.Errorf("getPet while unwritable: status %d", res.Status)
				}
				if res := ts.do(t, "GET", "/readyz", "", nil); res.Status != http.StatusOK {
					t.Errorf("readyz while unwritable: status %d (reads still work, so the instance is ready)", res.Status)
				}
			})

			if _, err := ts.Store.writer.ExecContext(t.Context(), tt.unset); err != nil {
				t.Fatal(err)
			}
			t.Run("creates work again once the cause is gone, with no restart", func(t *testing.T) {
				// The refused create stored nothing under its key: a retry
				// with the same key is processed afresh.
				key := withIdempotencyKey(fmt.Sprint("k", len(want)-3))
				res := ts.do(t, "POST", "/v1/pets", `{"name":"after","categoryId":1}`, key)
				if res.Status != http.StatusCreated || res.Header.Get(idempotencyReplayedHdr) != "" {
					t.Fatalf("status %d, body %s; want a fresh 201", res.Status, res.Body)
				}
				want = append(want, decode[Pet](t, res))
				got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?limit=100", "", nil))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("list after recovery mismatch (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestEveryWriteIsUnavailableWhileTheDatabaseIsReadOnly checks the store
// area's writes like the create above: 503 `unavailable`, nothing changed,
// and the same write succeeds once the database can be written again.
func TestEveryWriteIsUnavailableWhileTheDatabaseIsReadOnly(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	pet := ts.createPet(t, "Rex", 1, "")
	ordered := ts.createPet(t, "Kit", 1, "")
	o := ts.placeOrder(t, ordered.ID)
	writes := []struct{ rule, method, path, body string }{
		{"updatePet", "PATCH", fmt.Sprintf("/v1/pets/%d", pet.ID), `{"name":"Renamed"}`},
		{"deletePet", "DELETE", fmt.Sprintf("/v1/pets/%d", pet.ID), ""},
		{"placeOrder", "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, pet.ID)},
		{"updateOrder", "PATCH", fmt.Sprintf("/v1/store/orders/%d", o.ID), `{"status":"delivered"}`},
	}
	snapshot := func() string {
		return fmt.Sprint(listAll[Pet](t, ts.URL, "/v1/pets", nil, nil), listAll[orderJSON](t, ts.URL, "/v1/store/orders", nil, nil))
	}
	before := snapshot()
	for _, w := range writes {
		t.Run(w.rule, func(t *testing.T) {
			ts.setReadOnly(t, true)
			wantError(t, ts.do(t, w.method, w.path, w.body, nil), http.StatusServiceUnavailable, codeUnavailable, "not stored", "retry")
			if after := snapshot(); after != before {
				t.Errorf("a refused %s changed the data:\n%s\nbecame\n%s", w.rule, before, after)
			}
			ts.setReadOnly(t, false)
		})
	}
	t.Run("every write works again once the database can be written", func(t *testing.T) {
		for _, w := range writes[2:] { // placeOrder and updateOrder; updatePet and deletePet are alike
			if res := ts.do(t, w.method, w.path, w.body, nil); res.Status >= 300 {
				t.Errorf("%s: status %d, body %s", w.rule, res.Status, res.Body)
			}
		}
	})
}
