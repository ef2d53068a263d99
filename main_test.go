package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunServesAndKeepsPetsAcrossRestarts(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PETSTORE_ADDR":     "127.0.0.1:0",
		"PETSTORE_DB":       dbFor(t, filepath.Join(t.TempDir(), "pets.db")),
		"PETSTORE_API_KEYS": " " + testKey + " ,," + otherTestKey,
	}
	first := startRun(t, env)
	var want []Pet
	for i := range 5 {
		res := doRequest(t, first.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":"pet-%d","categoryId":1,"status":"sold"}`, i), nil)
		if res.Status != http.StatusCreated {
			t.Fatalf("create: status %d, body %s", res.Status, res.Body)
		}
		want = append(want, decode[Pet](t, res))
	}
	if err := first.stop(t); err != nil {
		t.Fatalf("run returned %v after cancellation, want nil", err)
	}

	second := startRun(t, env)
	res := doRequest(t, second.URL, "GET", "/v1/pets?status=sold", "", map[string]string{"Authorization": "Bearer " + otherTestKey})
	if diff := cmp.Diff(want, decode[[]Pet](t, res)); diff != "" {
		t.Errorf("pets after restart mismatch (-want +got):\n%s", diff)
	}
	// New ids continue after the old ones.
	res = doRequest(t, second.URL, "POST", "/v1/pets", `{"name":"late","categoryId":1}`, nil)
	if p := decode[Pet](t, res); p.ID <= want[len(want)-1].ID {
		t.Errorf("id after restart = %d, want > %d", p.ID, want[len(want)-1].ID)
	}
	if strings.Contains(second.Stderr.String(), testKey) {
		t.Errorf("the log contains a configured key:\n%s", second.Stderr)
	}
}

func TestRunFlagsWinOverEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{
		"PETSTORE_ADDR":     "127.0.0.1:1", // a port the flag must override
		"PETSTORE_DB":       filepath.Join(dir, "from-env.db"),
		"PETSTORE_API_KEYS": testKey,
	}
	rs := startRun(t, env, "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "from-flag.db"))
	if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", nil); res.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	rs.stop(t)
	if _, err := os.Stat(filepath.Join(dir, "from-flag.db")); err != nil {
		t.Errorf("the -db flag was not used: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "from-env.db")); err == nil {
		t.Errorf("PETSTORE_DB was used although -db was given")
	}
}

func TestRunWithoutKeysGeneratesOne(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PETSTORE_ADDR": "127.0.0.1:0",
		"PETSTORE_DB":   filepath.Join(t.TempDir(), "pets.db"),
	}
	rs := startRun(t, env)
	m := regexp.MustCompile(`(?m)^WARNING: no API key is configured .*\n\n    ([A-Za-z0-9_-]{43})\n`).FindStringSubmatch(rs.Stderr.String())
	if m == nil {
		t.Fatalf("no generated key announced on stderr:\n%s", rs.Stderr)
	}
	key := m[1]
	if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer " + key}); res.Status != http.StatusOK {
		t.Errorf("with the generated key: status %d, want 200", res.Status)
	}
	res := doRequest(t, rs.URL, "GET", "/v1/pets", "", map[string]string{"Authorization": ""})
	wantError(t, res, http.StatusUnauthorized, codeUnauthorized)
	if n := strings.Count(rs.Stderr.String(), key); n != 1 {
		t.Errorf("the generated key appears %d times on stderr, want exactly once", n)
	}
}

func TestSIGTERMFinishesInFlightRequestsAndClosesTheDatabase(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + dbPath, "PETSTORE_API_KEYS=" + testKey, "PETSTORE_LOG_FORMAT=json"}
	svc := startBinary(t, bin, env...)

	// A create whose body is still arriving when SIGTERM comes. It asks
	// for 100 Continue, which the server sends when the handler starts
	// reading the body: from then on the request is in flight.
	inFlight, bodyW := startSlowCreate(t, svc.URL)
	io.WriteString(bodyW, `{"name":"in-flight",`)
	if err := svc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	svc.waitForLog(t, "shutting down")
	io.WriteString(bodyW, `"categoryId":3}`)
	bodyW.Close()

	r := <-inFlight
	if r.err != nil {
		t.Fatalf("in-flight request failed: %v", r.err)
	}
	if r.res.Status != http.StatusCreated {
		t.Fatalf("in-flight create: status %d, body %s", r.res.Status, r.res.Body)
	}
	if err := svc.wait(); err != nil {
		t.Errorf("after SIGTERM the process exited with %v, want exit code 0", err)
	}
	// SQLite removes the WAL file when the last connection closes cleanly.
	if _, err := os.Stat(dbPath + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WAL file still present after shutdown (stat: %v): the database was not closed", err)
	}

	// The acknowledged pet is there after a restart.
	url := startBinary(t, bin, env...).URL
	want := decode[Pet](t, r.res)
	if diff := cmp.Diff([]Pet{want}, decode[[]Pet](t, doRequest(t, url, "GET", "/v1/pets", "", nil))); diff != "" {
		t.Errorf("pets after restart mismatch (-want +got):\n%s", diff)
	}
}
