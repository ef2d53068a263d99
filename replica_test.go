package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/google/go-cmp/cmp"
)

// Replication of the SQLite file (-replicate), over file:// replicas: what
// the service promises of each mode, of checkpoints and of the library's
// side effects. The same promises against a real S3-compatible server, and
// the loss of the VM, are in replica_s3_test.go.

// startReplicated runs the service in-process on a new SQLite file,
// replicating it to replicaURL with args, and returns it with its file.
func startReplicated(t *testing.T, replicaURL string, args ...string) (*runningService, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "pets.db")
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": db, "PETSTORE_API_KEYS": testKey, "PETSTORE_LOG_FORMAT": "json"}
	return startRun(t, env, append([]string{"-replicate", replicaURL}, args...)...), db
}

// restoreLatest restores the replica at replicaURL, as it is now, into a
// new file, with Litestream's own restore (the command's is tested in
// cmd_restore_test.go), and returns the file.
func restoreLatest(t *testing.T, replicaURL string) string {
	t.Helper()
	target, err := parseReplicaURL(replicaURL)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	r := litestream.NewReplicaWithClient(nil, target.client(quiet, defaultReplicaTimeout, nil))
	opt := litestream.NewRestoreOptions()
	opt.OutputPath = filepath.Join(t.TempDir(), "restored.db")
	if err := r.Restore(t.Context(), opt); err != nil {
		t.Fatalf("restore %s: %v", replicaURL, err)
	}
	return opt.OutputPath
}

// defaultReplicaTimeout is -replicate-timeout's default.
const defaultReplicaTimeout = 10 * time.Second

// petNames reads the names of the pets in the SQLite file at path, in id
// order.
func petNames(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), "SELECT name FROM pets ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	names := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestSyncModeAnswersAWriteOnceItIsInTheReplica: with -replicate-sync, every
// create answered 201 is in the replica at that moment: a restore made
// right after the last answer holds every pet created. 8 writers at once,
// so that writes share uploads.
func TestSyncModeAnswersAWriteOnceItIsInTheReplica(t *testing.T) {
	t.Parallel()
	replica := "file://" + filepath.Join(t.TempDir(), "replica")
	rs, _ := startReplicated(t, replica, "-replicate-sync")
	started := rs.Stderr.find(t, "INFO", "replicating the database")
	if len(started) != 1 || started[0]["to"] != replica || !strings.HasPrefix(fmt.Sprint(started[0]["mode"]), "sync:") {
		t.Errorf("the start-up line of replication: %v, want one naming %s and the sync mode", started, replica)
	}
	var mu sync.Mutex
	var created []string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				name := fmt.Sprintf("w%d-%02d", w, i)
				if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"`+name+`","categoryId":1}`, nil); res.Status != http.StatusCreated {
					t.Errorf("create %s: status %d, body %s", name, res.Status, res.Body)
					return
				}
				mu.Lock()
				created = append(created, name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	restored := petNames(t, restoreLatest(t, replica))
	slices.Sort(restored)
	slices.Sort(created)
	if diff := cmp.Diff(created, restored); diff != "" {
		t.Errorf("pets answered 201 but not in the replica (-answered +replica):\n%s", diff)
	}
	metrics := doRequest(t, rs.URL, "GET", "/metrics", "", nil).Body
	if n := metricValue(t, metrics, "petstore_replica_write_wait_seconds", map[string]string{}); n == 0 || n > 200 {
		t.Errorf("%v batches waited for the replica for 200 creates; want some, and fewer than the creates when writes share uploads", n)
	}
	if lag := metricValue(t, metrics, "petstore_replica_lag_seconds", map[string]string{}); lag != 0 {
		t.Errorf("petstore_replica_lag_seconds = %v after every write was answered in sync mode, want 0", lag)
	}
}

// TestReplicationOwnsCheckpoints: with -replicate, Litestream owns
// checkpointing. The service's writer runs none by itself
// (wal_autocheckpoint 0), no statement of the service checkpoints
// (TRUNCATE or RESTART would wait on Litestream's read lock while writers
// fail), and petstore backup and petstore copy still read the live file,
// Litestream's tables in it included.
func TestReplicationOwnsCheckpoints(t *testing.T) {
	t.Parallel()
	replica := "file://" + filepath.Join(t.TempDir(), "replica")
	rs, db := startReplicated(t, replica)
	for i := range 20 {
		if res := doRequest(t, rs.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":"p%02d","categoryId":1}`, i), nil); res.Status != http.StatusCreated {
			t.Fatalf("create: status %d, body %s", res.Status, res.Body)
		}
	}
	out := filepath.Join(t.TempDir(), "backup.db")
	var stdout, stderr strings.Builder
	if err := run(t.Context(), []string{"backup", "-db", db, out}, mapEnv(nil), strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("petstore backup of a replicated file: %v\n%s", err, stderr.String())
	}
	if got := petNames(t, out); len(got) != 20 {
		t.Errorf("the backup holds %d pets, want 20", len(got))
	}
	// Litestream's tables in the file are no table of the service's:
	// petstore copy moves what the service declares and nothing else.
	copied := filepath.Join(t.TempDir(), "copy.db")
	stdout.Reset()
	stderr.Reset()
	if err := run(t.Context(), []string{"copy", "-from", db, "-to", copied}, mapEnv(nil), strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("petstore copy of a replicated file: %v\n%s", err, stderr.String())
	}
	if got := petNames(t, copied); len(got) != 20 {
		t.Errorf("the copy holds %d pets, want 20", len(got))
	}
	if found := checkpointStatements(t); len(found) > 0 {
		t.Errorf("the service runs checkpoints itself, which Litestream owns: %v", found)
	}
}

// checkpointStatements finds the string literals of the service's own Go
// files that run a checkpoint.
func checkpointStatements(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(strings.ToLower(lit.Value), "wal_checkpoint") {
				found = append(found, fset.Position(lit.Pos()).String())
			}
			return true
		})
	}
	return found
}

// TestTheWriterRunsNoAutomaticCheckpointWhenReplicated reads the setting of
// a store opened and replicating as serve does it, on each pool: in the
// connection string, so that a connection opened again has it too.
func TestTheWriterRunsNoAutomaticCheckpointWhenReplicated(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "pets.db")
	st, err := openReplicatedSQLite(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	settings := replicaSettings{timeout: defaultReplicaTimeout, snapshotInterval: 24 * time.Hour, retention: 168 * time.Hour}
	if settings.target, err = parseReplicaURL("file://" + filepath.Join(t.TempDir(), "replica")); err != nil {
		t.Fatal(err)
	}
	if err := st.replicate(t.Context(), slog.New(slog.DiscardHandler), db, settings); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for name, pool := range map[string]*sql.DB{"writer": st.writer, "reader": st.reader} {
		var n int
		if err := pool.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("wal_autocheckpoint = %d on the %s of a replicated store, want 0: Litestream owns checkpoints", n, name)
		}
	}
}

// TestTheDefaultMuxIsNeverServed: Litestream's package registers
// net/http/pprof's handlers on http.DefaultServeMux when imported; the
// service never serves that mux, so /debug/pprof/ is a 404 like any path
// it does not know, with a key or without.
func TestTheDefaultMuxIsNeverServed(t *testing.T) {
	t.Parallel()
	probe := httptest.NewRequest("GET", "/debug/pprof/", nil)
	if _, pattern := http.DefaultServeMux.Handler(probe); pattern == "" {
		t.Fatal("nothing is registered on http.DefaultServeMux for /debug/pprof/: this test no longer checks anything")
	}
	ts := newTestServer(t)
	for _, hdr := range []map[string]string{nil, {"Authorization": ""}} {
		res := ts.do(t, "GET", "/debug/pprof/", "", hdr)
		if res.Status != http.StatusNotFound && res.Status != http.StatusUnauthorized {
			t.Errorf("GET /debug/pprof/ (headers %v): status %d, want 404 or 401", hdr, res.Status)
		}
		var e apiError
		if err := json.Unmarshal(res.Body, &e); err != nil || e.Code == "" {
			t.Errorf("GET /debug/pprof/: not the Error body: %s", res.Body)
		}
	}
}

// replicaStore is where a test's replica lives, which the test can take
// away and bring back: a directory here (file://), a real S3-compatible
// server in replica_s3_test.go.
type replicaStore interface {
	url() string
	env() map[string]string // what the service needs to reach it
	down(t *testing.T)      // unreachable until up
	up(t *testing.T)
}

// dirStore is a file:// replica: down puts a plain file where its
// directory was, so that every write under it fails, as a store gone would.
type dirStore struct{ dir string }

func newDirStore(t *testing.T) *dirStore {
	return &dirStore{dir: filepath.Join(t.TempDir(), "replica")}
}

func (s *dirStore) url() string            { return "file://" + s.dir }
func (s *dirStore) env() map[string]string { return nil }
func (s *dirStore) down(t *testing.T) {
	t.Helper()
	if err := os.Rename(s.dir, s.dir+".away"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.dir, "not a directory")
}
func (s *dirStore) up(t *testing.T) {
	t.Helper()
	if err := os.Remove(s.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.dir+".away", s.dir); err != nil {
		t.Fatal(err)
	}
}

// startReplicatedOn is startReplicated on store, with its environment.
func startReplicatedOn(t *testing.T, store replicaStore, args ...string) (*runningService, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "pets.db")
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": db, "PETSTORE_API_KEYS": testKey, "PETSTORE_LOG_FORMAT": "json"}
	maps.Copy(env, store.env())
	return startRun(t, env, append([]string{"-replicate", store.url()}, args...)...), db
}

// TestTheStoreGoesAwayInSyncMode: with -replicate-sync, while the replica
// cannot be written a create is answered 503 replica_unavailable within
// -replicate-timeout, with Retry-After, saying that it may have been
// committed; reads go on; once the store is back, the same request with the
// same Idempotency-Key gets the original answer, and one pet was created.
func TestTheStoreGoesAwayInSyncMode(t *testing.T) {
	t.Parallel()
	storeGoesAwayInSyncMode(t, newDirStore(t))
}

// storeGoesAwayInSyncMode is TestTheStoreGoesAwayInSyncMode on store.
func storeGoesAwayInSyncMode(t *testing.T, store replicaStore) {
	rs, _ := startReplicatedOn(t, store, "-replicate-sync", "-replicate-timeout", "1s")
	before := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Before","categoryId":1}`, nil)
	if before.Status != http.StatusCreated {
		t.Fatalf("create with the store up: %d %s", before.Status, before.Body)
	}
	store.down(t)
	key := map[string]string{idempotencyHeader: "during-the-outage"}
	start := time.Now()
	res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"During","categoryId":1}`, key)
	took := time.Since(start)
	wantError(t, res, http.StatusServiceUnavailable, codeReplicaUnavailable, "may have been committed", "Idempotency-Key")
	if res.Header.Get("Retry-After") == "" {
		t.Error("a 503 replica_unavailable without Retry-After")
	}
	if took > 5*time.Second {
		t.Errorf("the 503 came after %v, with -replicate-timeout 1s", took)
	}
	if got := doRequest(t, rs.URL, "GET", "/v1/pets", "", nil); got.Status != http.StatusOK {
		t.Errorf("a read while the store is away: status %d", got.Status)
	}
	store.up(t)
	var again response
	eventually(t, "the retry gets the original answer once the store is back", func() bool {
		again = doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"During","categoryId":1}`, key)
		return again.Status == http.StatusCreated
	})
	var pets []Pet
	if err := json.Unmarshal(doRequest(t, rs.URL, "GET", "/v1/pets", "", nil).Body, &pets); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, p := range pets {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"Before", "During"}, names); diff != "" {
		t.Errorf("the pets after the retry (-want +got):\n%s", diff)
	}
}

// TestTheStoreGoesAwayInTheBackground: without -replicate-sync, writes are
// answered 201 while the replica cannot be written; the lag grows, a WARN
// says why, and once the store is back the replica catches up (lag 0)
// within 5 s, holding every write.
func TestTheStoreGoesAwayInTheBackground(t *testing.T) {
	t.Parallel()
	storeGoesAwayInTheBackground(t, newDirStore(t))
}

// storeGoesAwayInTheBackground is TestTheStoreGoesAwayInTheBackground on
// store.
func storeGoesAwayInTheBackground(t *testing.T, store replicaStore) {
	rs, _ := startReplicatedOn(t, store)
	lag := func() float64 {
		return metricValue(t, doRequest(t, rs.URL, "GET", "/metrics", "", nil).Body, "petstore_replica_lag_seconds", map[string]string{})
	}
	store.down(t)
	var created []string
	for i := range 10 {
		name := fmt.Sprintf("away-%d", i)
		if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"`+name+`","categoryId":1}`, nil); res.Status != http.StatusCreated {
			t.Fatalf("a create while the store is away: %d %s", res.Status, res.Body)
		}
		created = append(created, name)
	}
	eventually(t, "the lag grows past a second", func() bool { return lag() > 1 })
	if res := doRequest(t, rs.URL, "GET", "/readyz", "", nil); res.Status != http.StatusOK {
		t.Errorf("/readyz while the replica cannot be written: %d, want 200 (the service serves on)", res.Status)
	}
	eventually(t, "a WARN says the replica cannot be written", func() bool {
		return len(rs.Stderr.find(t, "WARN", "the replica cannot be written; the service serves on and retries")) == 1
	})
	store.up(t)
	back := time.Now()
	eventually(t, "the replica catches up", func() bool { return lag() == 0 })
	if took := time.Since(back); took > 5*time.Second {
		t.Errorf("caught up %v after the store came back, want within 5s", took)
	}
	if diff := cmp.Diff(created, petNames(t, restoreLatest(t, store.url()))); diff != "" {
		t.Errorf("the replica after catching up (-want +got):\n%s", diff)
	}
}
