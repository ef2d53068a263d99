package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// newServerWithKeyFile is newTestServer for keys with scopes and expiry: the
// service accepts the keys of a key file holding content, read as the
// service reads -api-keys-file, and reads the time from now. Keys do not
// depend on the database, so it runs on SQLite only.
func newServerWithKeyFile(t *testing.T, content string, now func() time.Time) *testServer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := loadKeyring("", file, testSecret)
	if err != nil {
		t.Fatalf("loadKeyring: %v", err)
	}
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	st, err := openStore(t.Context(), dbPath, 0)
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	logBuf := &syncBuffer{}
	h := newServer(slogTo(logBuf), kr, st, newMetrics(st), now, limits{idempotencyTTL: defaultIdempotencyTTL})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testServer{URL: srv.URL, DBPath: dbPath, Store: st, Handler: h, Log: logBuf}
}
