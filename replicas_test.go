package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// farFuture is a cutoff after every key's creation.
var farFuture = time.Date(2100, time.January, 1, 0, 0, 0, 0, time.UTC)

// These tests run replicas of the service on one PostgreSQL database, as a
// shop behind a load balancer does: each replica is a store and handler of
// its own (its own pools, writer, caches and in-flight keys) on the same
// schema, so that nothing is shared but the database.

// replicas starts n replicas on one fresh PostgreSQL schema.
func replicas(t *testing.T, n int) ([]*testServer, string) {
	t.Helper()
	url := postgresSchema(t)
	var rs []*testServer
	for range n {
		rs = append(rs, newTestServer(t, atPath(url)))
	}
	return rs, url
}

func TestReplicasReadTheirWritesOnTheOthers(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 2)
	// Readers keep every read path busy on both replicas, as caches would
	// be filled if there were any.
	defer keepReading(t, rs, "/v1/pets?status=available", "/v1/pets/1", "/v1/store/orders?status=placed")()

	for i := range 10 {
		w, r := rs[i%2], rs[(i+1)%2] // write on one, read on the other
		p := w.createPet(t, fmt.Sprint("pet-", i), 1, "available")
		petPath := fmt.Sprintf("/v1/pets/%d", p.ID)
		if got := decode[Pet](t, r.do(t, "GET", petPath, "", nil)); got != p {
			t.Fatalf("create on one replica, getPet on the other: %v, want %v", got, p)
		}
		r.do(t, "GET", "/v1/pets?status=sold&limit=100", "", nil)
		if res := w.do(t, "PATCH", petPath, `{"status":"sold"}`, nil); res.Status != http.StatusOK {
			t.Fatalf("PATCH: %d", res.Status)
		}
		if got := decode[[]Pet](t, r.do(t, "GET", "/v1/pets?status=sold&limit=100", "", nil)); !slices.ContainsFunc(got, func(q Pet) bool { return q.ID == p.ID }) {
			t.Fatalf("PATCH on one replica, the status filter on the other misses pet %d", p.ID)
		}
		w.do(t, "PATCH", petPath, `{"status":"available"}`, nil)
		o := r.placeOrder(t, p.ID)
		if got := decode[Pet](t, w.do(t, "GET", petPath, "", nil)); got.Status != "pending" {
			t.Fatalf("order on one replica, getPet on the other: %v, want pending", got)
		}
		if res := w.setOrder(t, o.ID, "delivered"); res.Status != http.StatusOK {
			t.Fatalf("deliver: %d", res.Status)
		}
		if got := decode[orderJSON](t, r.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", o.ID), "", nil)); got.Status != "delivered" {
			t.Fatalf("deliver on one replica, getOrder on the other: %v", got)
		}
		if got := decode[Pet](t, r.do(t, "GET", petPath, "", nil)); got.Status != "sold" {
			t.Fatalf("deliver on one replica, getPet on the other: %v, want sold", got)
		}
		q := r.createPet(t, "doomed", 1, "")
		r.do(t, "GET", fmt.Sprintf("/v1/pets/%d", q.ID), "", nil)
		if res := w.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", q.ID), "", nil); res.Status != http.StatusNoContent {
			t.Fatalf("DELETE: %d", res.Status)
		}
		if res := r.do(t, "GET", fmt.Sprintf("/v1/pets/%d", q.ID), "", nil); res.Status != http.StatusNotFound {
			t.Fatalf("DELETE on one replica, getPet on the other: %d, want 404", res.Status)
		}
	}
}

func TestOneIdempotencyKeySentToTwoReplicasAtOnceCreatesOnePet(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 2)
	const keys = 20
	answers := make([][2]response, keys)
	var wg sync.WaitGroup
	for k := range keys {
		for i, r := range rs {
			wg.Go(func() {
				answers[k][i] = r.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"keyed-%d","categoryId":1}`, k), withIdempotencyKey(fmt.Sprint("k", k)))
			})
		}
	}
	wg.Wait()
	byName := map[string]int{}
	for _, p := range listAll[Pet](t, rs[0].URL, "/v1/pets?limit=100", nil, nil) {
		byName[p.Name]++
	}
	for k, pair := range answers {
		name := fmt.Sprint("keyed-", k)
		if byName[name] != 1 {
			t.Errorf("key k%d: %d pets named %s, want exactly 1", k, byName[name], name)
		}
		var created []Pet
		for _, res := range pair {
			switch res.Status {
			case http.StatusCreated:
				created = append(created, decode[Pet](t, res))
			case http.StatusConflict:
				wantError(t, res, http.StatusConflict, codeIdempotencyConflict)
			default:
				t.Errorf("key k%d: status %d, body %s; want 201 (first or replay) or 409", k, res.Status, res.Body)
			}
		}
		if len(created) == 2 && created[0] != created[1] {
			t.Errorf("key k%d: the two 201s name different pets: %v and %v", k, created[0], created[1])
		}
	}
}

func TestConcurrentOrdersOnTwoReplicasPlaceOne(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 2)
	const pets, clients = 3, 12
	for p := range pets {
		pet := rs[0].createPet(t, fmt.Sprint("pet-", p), 1, "")
		statuses := make([]int, clients)
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				statuses[c] = rs[c%2].do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, pet.ID), nil).Status
			})
		}
		wg.Wait()
		counts := map[int]int{}
		for _, s := range statuses {
			counts[s]++
		}
		if diff := cmp.Diff(map[int]int{201: 1, 409: clients - 1}, counts); diff != "" {
			t.Errorf("pet %d: statuses mismatch (-want +got):\n%s", pet.ID, diff)
		}
	}
}

// TestPagingAcrossReplicasWhileTheyCreate walks the catalogue page by page,
// switching replicas at every page, while both replicas add pets: every pet
// that existed when paging began is listed exactly once, and no pet is
// skipped: every pet in the catalogue afterwards with an id below the last
// one the walk saw was listed (ids follow the commits, see writeLock).
func TestPagingAcrossReplicasWhileTheyCreate(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 2)
	var before []Pet
	for i := range 60 {
		before = append(before, rs[i%2].createPet(t, fmt.Sprint("before-", i), 1, ""))
	}
	stopWriting := keepSending(t, 4, func(w, i int) bool {
		rs[w%2].createPet(t, fmt.Sprintf("during-%d-%d", w, i), 1, "")
		return true
	})
	var seen []Pet
	next := "/v1/pets?limit=7"
	for page := 0; next != ""; page++ {
		res := rs[page%2].do(t, "GET", next, "", nil)
		seen = append(seen, decode[[]Pet](t, res)...)
		next = ""
		if link := res.Header.Get("Link"); link != "" && page < 40 {
			next = strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
		}
	}
	stopWriting()

	count := map[int64]int{}
	for _, p := range seen {
		count[p.ID]++
	}
	for _, p := range before {
		if count[p.ID] != 1 {
			t.Errorf("pet %d, there when paging began, was listed %d times", p.ID, count[p.ID])
		}
	}
	last := seen[len(seen)-1].ID
	for _, p := range listAll[Pet](t, rs[0].URL, "/v1/pets?limit=100", nil, nil) {
		if p.ID <= last && count[p.ID] != 1 {
			t.Errorf("pet %d (%s) was skipped: the walk reached id %d but never listed it", p.ID, p.Name, last)
		}
	}
	t.Logf("walked %d pets up to id %d while both replicas created", len(seen), last)
}

func TestReplicasStartingTogetherOnAnEmptyDatabaseAllMigrate(t *testing.T) {
	t.Parallel()
	url := postgresSchema(t)
	const n = 4
	errs := make([]error, n)
	stores := make([]*store, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = openStore(t.Context(), url, 0) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
			continue
		}
		stores[i].Close()
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var versions []int
	rows, err := db.QueryContext(t.Context(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		rows.Scan(&v)
		versions = append(versions, v)
	}
	want, err := loadMigrations(migrationFiles, postgresDialect.migrations)
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) != len(want) {
		t.Errorf("versions recorded: %v, want each of 1 to %d once", versions, len(want))
	}

	t.Run("a schema newer than the binary is refused", func(t *testing.T) {
		if _, err := db.ExecContext(t.Context(), "INSERT INTO schema_migrations (version, name) VALUES (999, '0999_future.sql')"); err != nil {
			t.Fatal(err)
		}
		if _, err := openStore(t.Context(), url, 0); !errors.Is(err, errSchemaTooNew) {
			t.Errorf("openStore = %v, want errSchemaTooNew", err)
		}
	})
}

// TestMigrationsMatchOnBothBackends keeps the two lists of migrations in
// step: the same numbers and names, so that a schema version means the same
// change on either database.
func TestMigrationsMatchOnBothBackends(t *testing.T) {
	t.Parallel()
	names := func(d dialect) []string {
		ms, err := loadMigrations(migrationFiles, d.migrations)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.name)
		}
		return out
	}
	if diff := cmp.Diff(names(sqliteDialect), names(postgresDialect)); diff != "" {
		t.Errorf("migrations of SQLite (-) and PostgreSQL (+) differ:\n%s", diff)
	}
}

func TestIdempotencyKeysArePrunedByEveryReplicaWithoutConflict(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 3)
	rs[0].do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, withIdempotencyKey("old"))
	var wg sync.WaitGroup
	counts := make([]int64, len(rs))
	errs := make([]error, len(rs))
	for i, r := range rs {
		wg.Go(func() {
			// A cutoff in the future: every key has expired.
			counts[i], errs[i] = r.Store.pruneIdempotencyKeys(t.Context(), farFuture)
		})
	}
	wg.Wait()
	var total int64
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
		total += counts[i]
	}
	if total != 1 {
		t.Errorf("the replicas deleted %d keys in all, want 1", total)
	}
}

// TestIdsCommitInTheirOrderAcrossReplicas holds one replica's batch open
// after it took an id, and shows that another replica's create waits for it
// (on the append lock) instead of committing a higher id first, which a
// client paging between the two commits would skip.
func TestIdsCommitInTheirOrderAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs, url := replicas(t, 2)
	a, b := rs[0], rs[1]
	inserted, release := make(chan Pet), make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseHeld) // before the stores close, whatever fails
	held := make(chan error, 1)
	go func() {
		_, err := write(t.Context(), a.Store, func(tx *txn) (Pet, error) {
			p, err := tx.insertPet(newPet{"held", 1, "available"})
			if err == nil {
				inserted <- p
				<-release
			}
			return p, err
		})
		held <- err
	}()
	first := <-inserted
	second := make(chan Pet, 1)
	go func() { second <- b.createPet(t, "second", 1, "") }()

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually(t, "the second replica's create waits for the append lock", func() bool {
		var waiting int
		db.QueryRowContext(t.Context(), "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&waiting)
		return waiting > 0
	})
	releaseHeld()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if p := <-second; p.ID <= first.ID {
		t.Errorf("the second replica's pet got id %d, not above the held one's %d", p.ID, first.ID)
	}
}

// loadResult is what one request of a load test got.
type loadResult struct {
	status     int
	code       string
	retryAfter string
	took       time.Duration
	err        error
	created    *Pet // the pet of an acknowledged create
}

// sendLoad sends creates (each with a unique Idempotency-Key) and reads to
// the replicas in turn, from several clients, until stop is closed.
func sendLoad(t *testing.T, urls []string, clients int, stop <-chan struct{}) []loadResult {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	results := make([][]loadResult, clients)
	untilStopped(clients, stop, func(c, i int) bool {
		url := urls[(c+i)%len(urls)]
		start := time.Now()
		var res response
		var err error
		if i%4 == 0 {
			key := fmt.Sprintf("load-%d-%d", c, i)
			res, err = send(client, "POST", url+"/v1/pets", fmt.Sprintf(`{"name":%q,"categoryId":1}`, key), key)
		} else {
			res, err = send(client, "GET", url+"/v1/pets?limit=5&status=available", "", "")
		}
		r := loadResult{status: res.Status, retryAfter: res.Header.Get("Retry-After"), took: time.Since(start), err: err}
		if err == nil && res.Status >= 400 {
			var e apiError
			json.Unmarshal(res.Body, &e)
			r.code = e.Code
		}
		if err == nil && res.Status == http.StatusCreated {
			var p Pet
			json.Unmarshal(res.Body, &p)
			r.created = &p
		}
		results[c] = append(results[c], r)
		return true
	})
	return slices.Concat(results...)
}

// TestPostgresStoppedUnderLoad stops the database under two replicas while
// clients keep sending, then starts it again: meanwhile every request that
// needs it answers 503 unavailable with Retry-After, within 10 s, and never
// another 5xx; /readyz is 503 and /healthz 200; once it is back, every
// replica serves again without a restart, and no acknowledged create is lost.
func TestPostgresStoppedUnderLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("stops and starts a database")
	}
	c, err := startPostgresCluster()
	missingPart(t, postgresPart, enablePostgres, err)
	t.Cleanup(c.remove)
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": c.url("postgres"), "PETSTORE_API_KEYS": testKey}
	var urls []string
	for range 2 {
		urls = append(urls, startRun(t, env, "-log-format", "json").URL)
	}
	stop := make(chan struct{})
	done := make(chan []loadResult)
	go func() { done <- sendLoad(t, urls, 6, stop) }()

	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		if !waitUntil(within, 50*time.Millisecond, cond) {
			close(stop)
			<-done
			t.Fatalf("not within %v: %s", within, what)
		}
	}
	status := func(url, path string) int { return doRequest(t, url, "GET", path, "", nil).Status }
	waitFor("some creates acknowledged before the stop", 10*time.Second, func() bool { return status(urls[0], "/v1/pets?limit=1") == http.StatusOK })

	c.stop()
	stoppedAt := time.Now()
	for _, url := range urls {
		waitFor("/readyz answers 503 while the database is down", 10*time.Second, func() bool { return status(url, "/readyz") == http.StatusServiceUnavailable })
		if got := status(url, "/healthz"); got != http.StatusOK {
			t.Errorf("/healthz = %d while the database is down, want 200: the process is alive", got)
		}
		res := doRequest(t, url, "GET", "/v1/pets", "", nil)
		wantError(t, res, http.StatusServiceUnavailable, codeUnavailable, "retry")
		if res.Header.Get("Retry-After") == "" {
			t.Errorf("a 503 without Retry-After")
		}
	}
	t.Logf("every replica reported the database down %v after it stopped", time.Since(stoppedAt).Round(time.Millisecond))

	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	for _, url := range urls {
		waitFor("the replica serves again within 30 s of the database's return", 30*time.Second, func() bool {
			return doRequest(t, url, "POST", "/v1/pets", `{"name":"after","categoryId":1}`, nil).Status == http.StatusCreated &&
				status(url, "/readyz") == http.StatusOK
		})
	}
	t.Logf("every replica served again %v after the database returned", time.Since(restartedAt).Round(time.Millisecond))
	close(stop)
	results := <-done

	counts := map[string]int{}
	var acked []Pet
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("a request failed without an answer: %v", r.err)
		case r.status >= 500 && (r.status != http.StatusServiceUnavailable || r.code != codeUnavailable):
			t.Errorf("status %d (%s): only 503 unavailable may answer while the database is down", r.status, r.code)
		case r.status == http.StatusServiceUnavailable && r.retryAfter == "":
			t.Errorf("a 503 without Retry-After")
		}
		if r.took > 10*time.Second {
			t.Errorf("a request took %v, over 10 s", r.took)
		}
		if r.created != nil {
			acked = append(acked, *r.created)
		}
		counts[fmt.Sprint(r.status)]++
	}
	t.Logf("statuses over the outage: %v", counts)
	stored := map[int64]Pet{}
	for _, p := range listAll[Pet](t, urls[1], "/v1/pets?limit=100", nil, nil) {
		stored[p.ID] = p
	}
	for _, p := range acked {
		if stored[p.ID] != p {
			t.Errorf("acknowledged pet %v is lost (stored: %v)", p, stored[p.ID])
		}
	}
	t.Logf("%d acknowledged creates, all stored", len(acked))
}

// TestSIGKILLOfOneReplica kills one of two replicas (real processes on one
// database) while clients use both: the other keeps serving without a single
// failed request, and nothing the killed one acknowledged is lost.
func TestSIGKILLOfOneReplica(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	url := postgresSchema(t)
	bin := buildBinary(t)
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + url, "PETSTORE_API_KEYS=" + testKey}
	victim, survivor := startBinary(t, bin, env...), startBinary(t, bin, env...)

	stopVictim, stopSurvivor := make(chan struct{}), make(chan struct{})
	victimDone, survivorDone := make(chan []loadResult), make(chan []loadResult)
	go func() { victimDone <- sendLoad(t, []string{victim.URL}, 4, stopVictim) }()
	go func() { survivorDone <- sendLoad(t, []string{survivor.URL}, 4, stopSurvivor) }()
	killed, _ := signalAtRandom(victim.Cmd, syscall.SIGKILL, 300*time.Millisecond, 500*time.Millisecond)
	<-killed
	close(stopVictim)
	victimResults := <-victimDone
	victim.wait()
	// The survivor keeps serving a while after the kill.
	afterKill := time.Now()
	for time.Since(afterKill) < 500*time.Millisecond {
		if res := doRequest(t, survivor.URL, "GET", "/readyz", "", nil); res.Status != http.StatusOK {
			t.Errorf("the survivor's /readyz = %d after the kill", res.Status)
		}
	}
	close(stopSurvivor)
	survivorResults := <-survivorDone

	for _, r := range survivorResults {
		if r.err != nil || (r.status != http.StatusOK && r.status != http.StatusCreated) {
			t.Errorf("the survivor failed a request: status %d (%s), %v", r.status, r.code, r.err)
		}
	}
	stored := map[int64]Pet{}
	for _, p := range listAll[Pet](t, survivor.URL, "/v1/pets?limit=100", nil, nil) {
		stored[p.ID] = p
	}
	var acked int
	for _, r := range slices.Concat(victimResults, survivorResults) {
		if r.created != nil {
			acked++
			if stored[r.created.ID] != *r.created {
				t.Errorf("acknowledged pet %v is lost", *r.created)
			}
		}
	}
	t.Logf("%d requests to the survivor, all answered; %d acknowledged creates, all stored", len(survivorResults), acked)
}

// TestThePostgreSQLPasswordIsNeverShown starts the service on a URL with a
// password (the test cluster trusts every connection, so any password
// works) and looks for it everywhere it could leak: the log, /metrics, and
// the errors of a URL that cannot be reached or parsed.
func TestThePostgreSQLPasswordIsNeverShown(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(postgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	const password = "Pa55-word-never-shown"
	u.User = url.UserPassword("postgres", password)
	rs := startRun(t, map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": u.String(), "PETSTORE_API_KEYS": testKey}, "-log-format", "json")
	started := rs.Stderr.find(t, "INFO", "petstore started")
	if len(started) != 1 || started[0].field("backend") != "postgres" || !strings.Contains(started[0].field("db"), "xxxxx") {
		t.Errorf("the start-up record does not name the backend and the redacted URL: %v", started)
	}
	metrics := doRequest(t, rs.URL, "GET", "/metrics", "", nil)
	rs.stop(t)
	if strings.Contains(rs.Stderr.String(), password) || strings.Contains(string(metrics.Body), password) {
		t.Errorf("the password appears in the log or the metrics")
	}
	for _, bad := range []string{
		"postgres://postgres:" + password + "@127.0.0.1:1/petstore?connect_timeout=2", // nothing listens
		"postgres://postgres:" + password + "@127.0.0.1:notaport/petstore",
		"postgres://postgres@127.0.0.1:1/petstore?connect_timeout=2&password=" + password,
		"postgres://postgres@127.0.0.1:1/petstore?connect_timeout=2&sslmode=require&sslpassword=" + password,
	} {
		err := run(t.Context(), nil, mapEnv(map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": bad, "PETSTORE_API_KEYS": testKey}), strings.NewReader(""), &syncBuffer{}, &syncBuffer{})
		if err == nil || strings.Contains(err.Error(), password) {
			t.Errorf("start on %s: %v; want an error without the password", redactDB(bad), err)
		}
	}
}
