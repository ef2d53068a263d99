package main

import (
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// createAnswer is what must be identical between a create and its replays.
type createAnswer struct {
	Status   int
	Location string
	Body     string
}

// createdOf keeps the parts of a createPet answer a replay must repeat.
func createdOf(res response) createAnswer {
	return createAnswer{Status: res.Status, Location: res.Header.Get("Location"), Body: string(res.Body)}
}

// withIdempotencyKey returns the headers of a create under key.
func withIdempotencyKey(key string) map[string]string {
	return map[string]string{idempotencyHeader: key}
}

func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const body = `{"name":"Rex","categoryId":7}`
	first := ts.do(t, "POST", "/v1/pets", body, withIdempotencyKey("key-1"))
	if first.Status != http.StatusCreated {
		t.Fatalf("first create: status %d, body %s", first.Status, first.Body)
	}
	if first.Header.Get(idempotencyReplayedHdr) != "" {
		t.Errorf("the first answer is marked %s", idempotencyReplayedHdr)
	}
	rex := decode[Pet](t, first)

	replays := []struct {
		rule   string
		body   string
		header map[string]string
	}{
		{"the same key and body replay the stored 201", body, withIdempotencyKey("key-1")},
		{"the same pet spelled differently is the same request", `{ "categoryId": 7, "status": "available", "name": "Rex" }`, withIdempotencyKey("key-1")},
		{"the quoted Structured Field form is the same key", body, withIdempotencyKey(`"key-1"`)},
	}
	for _, tt := range replays {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/pets", tt.body, tt.header)
			if diff := cmp.Diff(createdOf(first), createdOf(res)); diff != "" {
				t.Errorf("replay mismatch (-want +got):\n%s", diff)
			}
			if got := res.Header.Get(idempotencyReplayedHdr); got != "true" {
				t.Errorf("%s = %q, want true", idempotencyReplayedHdr, got)
			}
		})
	}
	t.Run("the same key with another body is 422 and stores nothing", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", `{"name":"Max","categoryId":7}`, withIdempotencyKey("key-1"))
		wantError(t, res, http.StatusUnprocessableEntity, codeIdempotencyMismatch, "Idempotency-Key", "different")
	})
	if diff := cmp.Diff([]Pet{rex}, decode[[]Pet](t, ts.do(t, "GET", "/v1/pets", "", nil))); diff != "" {
		t.Fatalf("after the replays, pets mismatch (-want +got):\n%s", diff)
	}

	fresh := []struct {
		rule   string
		header map[string]string
	}{
		{"another key is another create", withIdempotencyKey("key-2")},
		{"keys are case-sensitive", withIdempotencyKey("KEY-1")},
		{"keys are scoped per API key", map[string]string{idempotencyHeader: "key-1", "Authorization": "Bearer " + otherTestKey}},
		{"without a key every request creates", nil},
		{"without a key every request creates, again", nil},
	}
	for _, tt := range fresh {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/pets", body, tt.header)
			if res.Status != http.StatusCreated || res.Header.Get(idempotencyReplayedHdr) != "" {
				t.Fatalf("status %d, %s %q; want a fresh 201", res.Status, idempotencyReplayedHdr, res.Header.Get(idempotencyReplayedHdr))
			}
			if p := decode[Pet](t, res); p.ID == rex.ID {
				t.Errorf("got the first pet (id %d) again, want a new one", p.ID)
			}
		})
	}
	if got := len(decode[[]Pet](t, ts.do(t, "GET", "/v1/pets", "", nil))); got != 1+len(fresh) {
		t.Errorf("%d pets stored, want %d", got, 1+len(fresh))
	}
}

func TestIdempotencyKeyHeaderValidation(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const body = `{"name":"Rex","categoryId":1}`
	refused := []struct {
		rule    string
		values  []string
		mention string
	}{
		{"an empty key", []string{""}, "empty"},
		{"an empty quoted key", []string{`""`}, "empty"},
		{"a key over 255 characters", []string{strings.Repeat("k", 256)}, "255"},
		{"a key given twice", []string{"a", "b"}, "once"},
		{"a non-ASCII key", []string{"clé"}, "ASCII"},
		{"a quoted key without its closing quote", []string{`"abc`}, "quoted"},
		{"a quoted key with text after the quote", []string{`"abc"def`}, "quoted"},
		{"a quoted key with a bad escape", []string{`"a\bc"`}, "quoted"},
	}
	for _, tt := range refused {
		t.Run("400: "+tt.rule, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/v1/pets", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header[idempotencyHeader] = tt.values
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			wantError(t, readResponse(t, res), http.StatusBadRequest, codeInvalidHeader, "Idempotency-Key", tt.mention)
		})
	}
	if got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets", "", nil)); len(got) != 0 {
		t.Errorf("refused creates stored pets: %v", got)
	}
	accepted := []struct{ rule, key string }{
		{"a key of 255 characters", strings.Repeat("k", 255)},
		{"a UUID", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"a quoted key with escapes", `"a\"b\\c"`},
		{"a key with inner spaces", "a b"},
	}
	for _, tt := range accepted {
		t.Run("accepted: "+tt.rule, func(t *testing.T) {
			if res := ts.do(t, "POST", "/v1/pets", body, withIdempotencyKey(tt.key)); res.Status != http.StatusCreated {
				t.Errorf("status %d, want 201; body %s", res.Status, res.Body)
			}
		})
	}
	t.Run("the header is checked before the body", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", `not json`, withIdempotencyKey(strings.Repeat("k", 256)))
		wantError(t, res, http.StatusBadRequest, codeInvalidHeader, "Idempotency-Key")
	})
}

func TestIdempotencyKeyWhileTheFirstRequestIsInFlight(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	// Another connection holds the writes, so the first create waits
	// inside its transaction (for up to 5 s) until released.
	release := ts.holdWrites(t)
	defer release()

	const body = `{"name":"Rex","categoryId":1}`
	answers := make(chan response, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { answers <- ts.do(t, "POST", "/v1/pets", body, withIdempotencyKey("once")) })
	}
	// Neither can finish while the lock is held, so the first answer is the
	// repeat's 409.
	wantError(t, <-answers, http.StatusConflict, codeIdempotencyConflict, "Idempotency-Key", "still being processed")
	release()
	wg.Wait()
	first := <-answers
	if first.Status != http.StatusCreated {
		t.Fatalf("the first request: status %d, body %s", first.Status, first.Body)
	}
	// Once the first is done, the repeat replays it.
	again := ts.do(t, "POST", "/v1/pets", body, withIdempotencyKey("once"))
	if diff := cmp.Diff(createdOf(first), createdOf(again)); diff != "" {
		t.Errorf("replay after the in-flight request mismatch (-want +got):\n%s", diff)
	}
}

func TestIdempotencyKeysExpireAndArePruned(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, time.March, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	const ttl = time.Hour
	ts := newTestServer(t, withClock(clock.now), withLimits(limits{idempotencyTTL: ttl}))
	if res := ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, withIdempotencyKey("k")); res.Status != http.StatusCreated {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	other := `{"name":"Max","categoryId":1}`

	clock.set(start.Add(ttl - time.Millisecond))
	t.Run("a key is kept for the whole retention", func(t *testing.T) {
		wantError(t, ts.do(t, "POST", "/v1/pets", other, withIdempotencyKey("k")), http.StatusUnprocessableEntity, codeIdempotencyMismatch)
	})
	if n, err := ts.Store.pruneIdempotencyKeys(t.Context(), clock.now().Add(-ttl)); err != nil || n != 0 {
		t.Errorf("pruning before expiry deleted %d keys (err %v), want 0", n, err)
	}

	clock.set(start.Add(ttl))
	t.Run("after the retention the key is forgotten and a new request is processed", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/pets", other, withIdempotencyKey("k"))
		if res.Status != http.StatusCreated || decode[Pet](t, res).Name != "Max" {
			t.Fatalf("status %d, body %s; want a fresh 201 for Max", res.Status, res.Body)
		}
	})
	t.Run("pruning deletes exactly the expired keys", func(t *testing.T) {
		// "k" was re-recorded at start+ttl; a key made an hour earlier
		// under another name is the expired one.
		clock.set(start.Add(2 * ttl))
		ts.do(t, "POST", "/v1/pets", other, withIdempotencyKey("late"))
		n, err := ts.Store.pruneIdempotencyKeys(t.Context(), clock.now().Add(-ttl))
		if err != nil || n != 1 {
			t.Errorf("prune deleted %d keys (err %v), want 1 (the key recorded at start+ttl)", n, err)
		}
		if diff := cmp.Diff([]string{"late"}, storedIdempotencyKeys(t, ts.Store)); diff != "" {
			t.Errorf("keys left after pruning mismatch (-want +got):\n%s", diff)
		}
	})
}

// TestABacklogOfExpiredKeysLargerThanAChunkIsPrunedWhole: more expired keys than one
// write deletes are all pruned, in chunks, and the records' count follows.
func TestABacklogOfExpiredKeysLargerThanAChunkIsPrunedWhole(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const backlog = 2*pruneChunk + 1
	// One statement, past the store: 2,001 inserts in one write batch took
	// most of a batch's time limit on PostgreSQL under load.
	err := ts.exec(t, `WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n + 1 < ?)
		INSERT INTO idempotency_keys (api_key_hmac, idempotency_key, operation, fingerprint, resource_id, body, created_at)
		SELECT ?, 'k-' || n, 'createPet', ?, 1, ?, n FROM i`, backlog, make([]byte, 32), make([]byte, 32), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := ts.Store.pruneIdempotencyKeys(t.Context(), time.UnixMilli(backlog))
	if err != nil || n != backlog {
		t.Errorf("prune deleted %d keys (err %v), want %d", n, err, backlog)
	}
	left, err := ts.Store.countIdempotencyRecords(t.Context())
	if err != nil || left != 0 || len(storedIdempotencyKeys(t, ts.Store)) != 0 {
		t.Errorf("after pruning, the count says %d records (err %v) and %d are stored; want none", left, err, len(storedIdempotencyKeys(t, ts.Store)))
	}
}

// storedIdempotencyKeys lists the idempotency keys in the database.
func storedIdempotencyKeys(t *testing.T, st *store) []string {
	t.Helper()
	rows, err := st.reader.QueryContext(t.Context(), "SELECT idempotency_key FROM idempotency_keys ORDER BY idempotency_key")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	keys := []string{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestIdempotencyKeyReplaysAfterARestartAndIsPrunedByRun restarts the
// service twice on one file: the second run replays a key the first
// recorded, and the third, started with -idempotency-ttl 1h, prunes it at
// once, since it was made two hours ago. No clock is waited for: the
// record's time is moved back in the file, as a fake clock would have
// written it, between the runs.
func TestIdempotencyKeyReplaysAfterARestartAndIsPrunedByRun(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": dbPath, "PETSTORE_API_KEYS": testKey}
	const body = `{"name":"Rex","categoryId":1}`

	first := startRun(t, env)
	want := doRequest(t, first.URL, "POST", "/v1/pets", body, withIdempotencyKey("restart"))
	if want.Status != http.StatusCreated {
		t.Fatalf("status %d, body %s", want.Status, want.Body)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	second := startRun(t, env)
	got := doRequest(t, second.URL, "POST", "/v1/pets", body, withIdempotencyKey("restart"))
	if diff := cmp.Diff(createdOf(want), createdOf(got)); diff != "" {
		t.Errorf("replay after restart mismatch (-want +got):\n%s", diff)
	}
	if err := second.stop(t); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite", dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "UPDATE idempotency_keys SET created_at = ?", time.Now().Add(-2*time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	// The default retention (24 h) would keep it; the setting must reach
	// the pruning, which run starts with its first pass at once.
	startRun(t, env, "-idempotency-ttl", "1h")
	eventually(t, "run prunes the key made two hours ago with a retention of 1 h", func() bool {
		var n int
		if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM idempotency_keys").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}
