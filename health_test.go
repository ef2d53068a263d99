package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
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
