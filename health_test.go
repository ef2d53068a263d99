package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHealthAndReadiness(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC)}
	ts := newTestServer(t, withClock(clock.now))
	noKey := map[string]string{"Authorization": ""}
	tests := []struct {
		rule string
		path string
		want healthStatus
	}{
		{"healthz needs no key", "/healthz", healthStatus{Status: "ok"}},
		{"readyz needs no key and reports a working database", "/readyz", healthStatus{Status: "ready"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "GET", tt.path, "", noKey)
			if res.Status != http.StatusOK {
				t.Fatalf("status %d, want 200; body %s", res.Status, res.Body)
			}
			if diff := cmp.Diff(tt.want, decode[healthStatus](t, res)); diff != "" {
				t.Errorf("GET %s mismatch (-want +got):\n%s", tt.path, diff)
			}
		})
	}
	t.Run("POST to a health check is 405 in JSON", func(t *testing.T) {
		wantError(t, ts.do(t, "POST", "/healthz", "", nil), http.StatusMethodNotAllowed, codeMethodNotAllowed)
	})

	ts.Store.Close()
	t.Run("readyz answers from a check at most a second old", func(t *testing.T) {
		// The database closed after the last check: until a second has
		// passed, the flood of a client without a key reaches no database.
		clock.set(clock.now().Add(readyMaxAge - time.Millisecond))
		if res := ts.do(t, "GET", "/readyz", "", noKey); res.Status != http.StatusOK {
			t.Errorf("status %d within a second of a good check, want 200 (from the last check)", res.Status)
		}
	})
	clock.set(clock.now().Add(time.Millisecond))
	t.Run("readyz is 503 when the database does not answer", func(t *testing.T) {
		res := ts.do(t, "GET", "/readyz", "", noKey)
		wantError(t, res, http.StatusServiceUnavailable, codeUnavailable, "database")
		if strings.Contains(strings.ToLower(string(res.Body)), "sql") {
			t.Errorf("503 body leaks internals: %s", res.Body)
		}
	})
	t.Run("healthz stays 200 while the database is down", func(t *testing.T) {
		if res := ts.do(t, "GET", "/healthz", "", noKey); res.Status != http.StatusOK {
			t.Errorf("status %d, want 200", res.Status)
		}
	})
}
