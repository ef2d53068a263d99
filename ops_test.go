package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestSIGHUPReloadsTheKeyFile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	keyFile := filepath.Join(t.TempDir(), "keys")
	writeFile(t, keyFile, "old-key web\nsteady-key monitor\n")
	svc := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_LOG_FORMAT=json",
		"PETSTORE_DB="+filepath.Join(t.TempDir(), "pets.db"), "PETSTORE_API_KEYS_FILE="+keyFile)
	cmd, url, stderr := svc.Cmd, svc.URL, svc.Stderr
	status := func(key string) int {
		return doRequest(t, url, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer " + key}).Status
	}

	// A key present before and after every reload must never be refused
	// while the reloads happen.
	var refused, sent atomic.Int64
	stopReading := keepSending(t, 4, func(_, _ int) bool {
		sent.Add(1)
		if status("steady-key") != http.StatusOK {
			refused.Add(1)
		}
		return true
	})

	if got := status("old-key"); got != http.StatusOK {
		t.Fatalf("old key before rotation: status %d", got)
	}
	if got := status("new-key"); got != http.StatusUnauthorized {
		t.Fatalf("new key before rotation: status %d", got)
	}
	writeFile(t, keyFile, "new-key web\nsteady-key monitor\n")
	cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the new key is accepted after SIGHUP", func() bool { return status("new-key") == http.StatusOK })
	if got := status("old-key"); got != http.StatusUnauthorized {
		t.Errorf("removed key after SIGHUP: status %d, want 401", got)
	}

	// A file that does not parse keeps the keys in force, and says why.
	writeFile(t, keyFile, "new-key web extra words\n")
	cmd.Process.Signal(syscall.SIGHUP)
	const notReloaded = "API keys not reloaded; the previous keys stay in force"
	svc.waitForLog(t, notReloaded)
	if got := status("new-key"); got != http.StatusOK {
		t.Errorf("after a failed reload the current key got status %d, want 200", got)
	}
	for _, r := range stderr.records(t) {
		if err, _ := r["err"].(string); r["msg"] == notReloaded && !strings.Contains(err, "line 1:") {
			t.Errorf("the failed reload does not say which line is wrong: %v", r)
		}
	}

	// Neither does a file that holds no key (an editor caught half-way), nor
	// one that its group or other users can write. Each is an error record.
	for _, tt := range []struct {
		rule    string
		change  func()
		mention string
	}{
		{"a truncated file", func() { writeFile(t, keyFile, "") }, "holds no key"},
		{"a file of comments only", func() { writeFile(t, keyFile, "# new-key web\n") }, "holds no key"},
		{"a file others can write", func() {
			writeFile(t, keyFile, "other-key web\n")
			os.Chmod(keyFile, 0o646)
		}, "(mode 0646)"},
	} {
		failures := len(stderr.find(t, "ERROR", notReloaded))
		tt.change()
		cmd.Process.Signal(syscall.SIGHUP)
		eventually(t, tt.rule+" is refused", func() bool { return len(stderr.find(t, "ERROR", notReloaded)) > failures })
		if err := stderr.find(t, "ERROR", notReloaded)[failures].field("err"); !strings.Contains(err, tt.mention) {
			t.Errorf("%s: the error %q does not mention %q", tt.rule, err, tt.mention)
		}
		if got := status("new-key"); got != http.StatusOK {
			t.Errorf("after %s the current key got status %d, want 200", tt.rule, got)
		}
		if got := status("other-key"); got != http.StatusUnauthorized {
			t.Errorf("after %s a key of the refused file got status %d, want 401", tt.rule, got)
		}
	}
	stopReading()
	if refused.Load() != 0 {
		t.Errorf("%d of %d requests with a key kept across reloads were refused", refused.Load(), sent.Load())
	}
	for _, key := range []string{"old-key", "new-key", "steady-key", "other-key"} {
		if strings.Contains(stderr.String(), key) {
			t.Errorf("the log contains the key %q", key)
		}
	}
}

func TestSIGHUPWhileStartingDoesNotEndTheProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_API_KEYS="+testKey, "PETSTORE_LOG_FORMAT=json",
		"PETSTORE_DB="+filepath.Join(dir, "pets.db"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	firstLine := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		firstLine <- line
		io.Copy(io.Discard, r)
	}()

	// The process is past the first line of main once it touches the
	// database's directory (the settings are checked by creating a file
	// there), and it is still starting: from then until it listens, it is
	// sent SIGHUP after SIGHUP. Each one must be a reload, never the signal's
	// default action, which ends the process.
	if !waitUntil(10*time.Second, 0, func() bool { entries, _ := os.ReadDir(dir); return len(entries) > 0 }) {
		t.Fatalf("the process did not touch %s within 10 s", dir)
	}
	sent := 0
	var line string
	for started := false; !started; {
		select {
		case line = <-firstLine:
			started = true
		default:
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatalf("SIGHUP %d: %v", sent+1, err)
			}
			sent++
		}
	}
	m := urlLine.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		t.Fatalf("after %d SIGHUPs while starting, stdout gave %q (the process ended: %v)", sent, line, cmd.Wait())
	}
	t.Logf("%d SIGHUPs sent while the process started", sent)
	cmd.Process.Signal(syscall.SIGHUP)
	if res := doRequest(t, m[1], "GET", "/v1/pets", "", nil); res.Status != http.StatusOK {
		t.Errorf("after the SIGHUPs: status %d, want 200", res.Status)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGHUPs and SIGTERM the process exited with %v, want exit code 0", err)
	}
}

func TestRequestIDs(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	tests := []struct {
		rule     string
		incoming string
		echoed   bool
	}{
		{"a UUID is echoed", "3f1c2a9e-5b7d-4c1e-9f00-0123456789ab", true},
		{"a short token is echoed", "req.42:a_b", true},
		{"128 characters are echoed", strings.Repeat("a", 128), true},
		{"none gets a generated id", "", false},
		{"129 characters are replaced", strings.Repeat("a", 129), false},
		{"spaces are replaced", "abc def", false},
		{"quotes are replaced", `abc"def`, false},
		{"non-ASCII is replaced", "ïd", false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			for _, path := range []string{"/v1/pets", "/v1/nowhere", "/healthz"} {
				res := ts.do(t, "GET", path, "", map[string]string{"X-Request-Id": tt.incoming})
				got := res.Header.Get("X-Request-Id")
				if tt.echoed && got != tt.incoming {
					t.Errorf("GET %s: X-Request-Id = %q, want %q echoed", path, got, tt.incoming)
				}
				if !tt.echoed && (got == tt.incoming || len(got) != 26 || requestID(got) != got) {
					t.Errorf("GET %s: X-Request-Id = %q, want a fresh 26-character id", path, got)
				}
			}
		})
	}
	t.Run("generated ids differ", func(t *testing.T) {
		a := ts.do(t, "GET", "/v1/pets", "", nil).Header.Get("X-Request-Id")
		b := ts.do(t, "GET", "/v1/pets", "", nil).Header.Get("X-Request-Id")
		if a == b {
			t.Errorf("two requests got the same id %q", a)
		}
	})
}

func TestJSONLogs(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "keys")
	writeFile(t, keyFile, "labelled-key shop-frontend\n")
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	rs := startRun(t, map[string]string{
		"PETSTORE_ADDR":          "127.0.0.1:0",
		"PETSTORE_DB":            dbPath,
		"PETSTORE_API_KEYS":      testKey,
		"PETSTORE_API_KEYS_FILE": keyFile,
	}, "-log-format", "json")
	doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`,
		map[string]string{"Authorization": "Bearer labelled-key", "X-Request-Id": "trace-1"})
	doRequest(t, rs.URL, "GET", "/v1/pets", "", map[string]string{"X-Request-Id": "trace-2"})
	doRequest(t, rs.URL, "GET", "/v1/pets", "", map[string]string{"X-Request-Id": "trace-3", "Authorization": "Bearer wrong"})
	doRequest(t, rs.URL, "GET", "/healthz", "", nil)
	doRequest(t, rs.URL, "GET", "/readyz", "", nil)
	if err := rs.stop(t); err != nil {
		t.Fatal(err)
	}

	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(rs.Stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		delete(m, "time")
		lines = append(lines, m)
	}
	byMsg := func(msg string) []map[string]any {
		return slices.DeleteFunc(slices.Clone(lines), func(m map[string]any) bool { return m["msg"] != msg })
	}

	var requests []map[string]any
	for _, m := range byMsg("request") {
		if m["duration"] == nil || m["bytes"] == nil {
			t.Errorf("access line without duration or bytes: %v", m)
		}
		delete(m, "duration")
		delete(m, "bytes")
		requests = append(requests, m)
	}
	access := func(method, path string, status int, id, caller string) map[string]any {
		return map[string]any{"level": "INFO", "msg": "request", "method": method, "path": path,
			"status": float64(status), "request_id": id, "caller": caller}
	}
	// A request without a valid key also says where it came from, and how
	// many such lines were left out before it (see authFailureLogRate).
	failed := access("GET", "/v1/pets", 401, "trace-3", "")
	failed["client"], failed["unlogged_auth_failures"] = "127.0.0.1", float64(0)
	want := []map[string]any{
		access("POST", "/v1/pets", 201, "trace-1", "shop-frontend"),
		access("GET", "/v1/pets", 200, "trace-2", callerLabel(secretOf(t, dbPath), testKey)),
		failed,
	}
	if diff := cmp.Diff(want, requests); diff != "" {
		t.Errorf("access log mismatch; health checks must not appear at info level (-want +got):\n%s", diff)
	}

	started := byMsg("petstore started")
	if len(started) != 1 {
		t.Fatalf("want one start-up line, got %v", started)
	}
	for _, field := range []string{"version", "url", "db", "journal_mode", "keys"} {
		if started[0][field] == nil {
			t.Errorf("start-up line has no %s: %v", field, started[0])
		}
	}
	if started[0]["journal_mode"] != "wal" || started[0]["keys"] != float64(2) {
		t.Errorf("start-up line: journal_mode %v, keys %v; want wal and 2", started[0]["journal_mode"], started[0]["keys"])
	}
	if stopped := byMsg("stopped"); len(stopped) != 1 || stopped[0]["drained_in"] == nil {
		t.Errorf("want one shutdown line with drained_in, got %v", stopped)
	}
	if down := byMsg("shutting down"); len(down) != 1 || down[0]["reason"] == nil {
		t.Errorf("want one line saying why it shuts down, got %v", down)
	}
	if strings.Contains(rs.Stderr.String(), "labelled-key") || strings.Contains(rs.Stderr.String(), testKey) {
		t.Errorf("the log contains a key")
	}
}

// secretOf reads the secret the service made next to the database at
// dbPath (see loadSecret).
func secretOf(t *testing.T, dbPath string) []byte {
	t.Helper()
	b, err := os.ReadFile(defaultSecretFile(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.TrimSpace(string(b)))
}

func TestMetricsAfterKnownTraffic(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	rex := ts.createPet(t, "Rex", 1, "")
	ts.createPet(t, "Tom", 1, "sold")
	ts.createPet(t, "Kit", 1, "sold")
	ts.do(t, "GET", "/v1/pets", "", nil)
	ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", rex.ID), "", nil)
	ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", rex.ID), "", map[string]string{"Authorization": "Bearer " + otherTestKey})
	ts.do(t, "GET", "/v1/pets/999", "", nil)
	ts.do(t, "GET", "/v1/pets/1", "", map[string]string{"Authorization": ""}) // unauthenticated: not counted as a caller
	ts.do(t, "GET", "/v1/nowhere", "", nil)
	ts.do(t, "POST", "/v1/pets", `{}`, nil)

	t.Run("metrics need a key", func(t *testing.T) {
		wantError(t, ts.do(t, "GET", "/metrics", "", map[string]string{"Authorization": ""}), http.StatusUnauthorized, codeUnauthorized)
	})

	res := ts.do(t, "GET", "/metrics", "", nil)
	if res.Status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(res.Body)))
	if err != nil {
		t.Fatalf("metrics are not the Prometheus text format: %v", err)
	}
	// value returns the value of the series of family with exactly labels.
	value := func(family string, labels map[string]string) float64 {
		if families[family] == nil {
			t.Errorf("no metric family %s", family)
			return -1
		}
		return seriesIn(families, family, labels)
	}
	key1 := callerLabel(testSecret, testKey)
	key2 := callerLabel(testSecret, otherTestKey)
	got := map[string]float64{
		"requests POST /v1/pets 201":    value("petstore_http_requests_total", map[string]string{"route": "POST /v1/pets", "code": "201"}),
		"requests POST /v1/pets 400":    value("petstore_http_requests_total", map[string]string{"route": "POST /v1/pets", "code": "400"}),
		"requests GET /v1/pets 200":     value("petstore_http_requests_total", map[string]string{"route": "GET /v1/pets", "code": "200"}),
		"requests getPet 200":           value("petstore_http_requests_total", map[string]string{"route": "GET /v1/pets/{petId}", "code": "200"}),
		"requests getPet 404":           value("petstore_http_requests_total", map[string]string{"route": "GET /v1/pets/{petId}", "code": "404"}),
		"requests getPet 401":           value("petstore_http_requests_total", map[string]string{"route": "GET /v1/pets/{petId}", "code": "401"}),
		"requests unmatched 404":        value("petstore_http_requests_total", map[string]string{"route": "unmatched", "code": "404"}),
		"latency samples POST /v1/pets": value("petstore_http_request_duration_seconds", map[string]string{"route": "POST /v1/pets"}),
		"pets available":                value("petstore_pets", map[string]string{"status": "available"}),
		"pets pending":                  value("petstore_pets", map[string]string{"status": "pending"}),
		"pets sold":                     value("petstore_pets", map[string]string{"status": "sold"}),
		"idempotency records":           value("petstore_idempotency_records", map[string]string{}),
		"getPet calls by first key":     value("petstore_deprecated_calls_total", map[string]string{"operation": "getPet", "caller": key1}),
		"getPet calls by second key":    value("petstore_deprecated_calls_total", map[string]string{"operation": "getPet", "caller": key2}),
		"database errors":               value("petstore_db_errors_total", map[string]string{}),
	}
	want := map[string]float64{
		"requests POST /v1/pets 201":    3,
		"requests POST /v1/pets 400":    1,
		"requests GET /v1/pets 200":     1,
		"requests getPet 200":           2,
		"requests getPet 404":           1,
		"requests getPet 401":           1,
		"requests unmatched 404":        1,
		"latency samples POST /v1/pets": 4,
		"pets available":                1,
		"pets pending":                  0,
		"pets sold":                     2,
		"idempotency records":           0,
		"getPet calls by first key":     2,
		"getPet calls by second key":    1,
		"database errors":               0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
	if strings.Contains(string(res.Body), testKey) {
		t.Errorf("the metrics contain a key")
	}

	t.Run("database errors are counted", func(t *testing.T) {
		ts.Store.Close()
		for range 3 {
			ts.do(t, "GET", "/v1/pets", "", nil)
		}
		res := ts.do(t, "GET", "/metrics", "", nil)
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(string(res.Body)))
		if err != nil {
			t.Fatal(err)
		}
		// Three failed lists, and perhaps the scrape's own failed counts of
		// pets and idempotency records, which run concurrently with
		// reading this counter.
		if got := seriesValue(families["petstore_db_errors_total"].GetMetric()[0]); got < 3 || got > 5 {
			t.Errorf("petstore_db_errors_total = %v after 3 failed queries, want 3 (to 5)", got)
		}
		for _, name := range []string{"petstore_pets", "petstore_idempotency_records"} {
			if _, ok := families[name]; ok {
				t.Errorf("%s is reported although the database is closed", name)
			}
		}
	})
}

// seriesValue is a counter's or gauge's value, or a histogram's sample count.
func seriesValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// TestCountsFollowEveryWrite drives random writes through the API (creates
// with and without an Idempotency-Key, replays, patches, deletes, orders
// placed and settled, records expiring, pruned and their keys used again)
// and after each one compares the counts /metrics reports, which the writes
// keep (migrations 0005 and 0006), with the rows counted in the database.
func TestCountsFollowEveryWrite(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, time.November, 22, 12, 0, 0, 0, time.UTC)}
	ts := newTestServer(t, withClock(clock.now))
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	type counts struct {
		Pets    map[string]float64
		Records float64
	}
	fromMetrics := func() counts {
		// Parsed once: 300 steps of four parses each were most of the test's time.
		// Asked for uncompressed: gzip at the service and gunzip here were a
		// third of what remained.
		families := metricFamilies(t, ts.do(t, "GET", "/metrics", "", map[string]string{"Accept-Encoding": "identity"}).Body)
		c := counts{Pets: map[string]float64{}, Records: seriesIn(families, "petstore_idempotency_records", map[string]string{})}
		for _, s := range petStatuses {
			c.Pets[s] = seriesIn(families, "petstore_pets", map[string]string{"status": s})
		}
		return c
	}
	fromRows := func() counts {
		c := counts{Pets: map[string]float64{"available": 0, "pending": 0, "sold": 0}}
		rows, err := ts.Store.reader.QueryContext(t.Context(), "SELECT status, count(*) FROM pets GROUP BY status")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			var n float64
			if err := rows.Scan(&s, &n); err != nil {
				t.Fatal(err)
			}
			c.Pets[s] = n
		}
		if err := ts.Store.reader.QueryRowContext(t.Context(), "SELECT count(*) FROM idempotency_keys").Scan(&c.Records); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var petIDs, orderIDs []int64
	keys := []string{}
	pick := func(ids []int64) int64 { return ids[rng.IntN(len(ids))] }
	for step := range 300 {
		var what string
		switch op := rng.IntN(9); {
		case op == 0 || len(petIDs) == 0:
			p := ts.createPet(t, fmt.Sprint("pet-", step), 1, petStatuses[rng.IntN(3)])
			petIDs = append(petIDs, p.ID)
			what = "create"
		case op == 1:
			// A new key, or one used before: a replay (or a 422), or,
			// once it has expired, its record replaced.
			key := fmt.Sprint("key-", step)
			if len(keys) > 0 && rng.IntN(2) == 0 {
				key = keys[rng.IntN(len(keys))]
			}
			keys = append(keys, key)
			res := ts.do(t, "POST", "/v1/pets", `{"name":"keyed","categoryId":1}`, map[string]string{idempotencyHeader: key})
			if res.Status == http.StatusCreated && res.Header.Get(idempotencyReplayedHdr) == "" {
				petIDs = append(petIDs, decode[Pet](t, res).ID)
			}
			what = fmt.Sprintf("create with key %s: %d", key, res.Status)
		case op == 2:
			id := pick(petIDs)
			res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", id), fmt.Sprintf(`{"status":%q}`, petStatuses[rng.IntN(3)]), nil)
			what = fmt.Sprintf("patch %d: %d", id, res.Status)
		case op == 3:
			id := pick(petIDs)
			res := ts.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", id), "", nil)
			what = fmt.Sprintf("delete %d: %d", id, res.Status)
		case op == 4:
			id := pick(petIDs)
			res := ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, id), map[string]string{idempotencyHeader: fmt.Sprint("order-", step)})
			if res.Status == http.StatusCreated {
				orderIDs = append(orderIDs, decode[orderJSON](t, res).ID)
			}
			what = fmt.Sprintf("order %d: %d", id, res.Status)
		case op == 5 && len(orderIDs) > 0:
			id := pick(orderIDs)
			res := ts.setOrder(t, id, orderStatuses[1+rng.IntN(2)])
			what = fmt.Sprintf("settle order %d: %d", id, res.Status)
		case op == 6:
			clock.set(clock.now().Add(time.Duration(rng.IntN(12)) * time.Hour))
			n, err := ts.Store.pruneIdempotencyKeys(t.Context(), clock.now().Add(-defaultIdempotencyTTL))
			if err != nil {
				t.Fatal(err)
			}
			what = fmt.Sprintf("prune: %d", n)
		default:
			clock.set(clock.now().Add(time.Hour))
			what = "an hour passes"
		}
		if diff := cmp.Diff(fromRows(), fromMetrics()); diff != "" {
			t.Fatalf("step %d (%s): counts mismatch (-rows +metrics):\n%s", step, what, diff)
		}
	}
	t.Logf("%d pets, %d orders, counts %v", len(petIDs), len(orderIDs), fromRows())
}

func TestBackupUnderConcurrentWritesRestoresEveryAcknowledgedPet(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, onSQLite()) // backs up the SQLite file
	var mu sync.Mutex
	var acked []Pet
	stopWriting := keepSending(t, 4, func(w, i int) bool {
		res := ts.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"w%d-%d","categoryId":%d}`, w, i, w+1), nil)
		if res.Status != http.StatusCreated {
			t.Errorf("create: status %d", res.Status)
			return false
		}
		p := decode[Pet](t, res)
		mu.Lock()
		acked = append(acked, p)
		mu.Unlock()
		return true
	})
	eventually(t, "some pets are created", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 20 })
	mu.Lock()
	before := slices.Clone(acked) // acknowledged before the backup began
	mu.Unlock()

	out := filepath.Join(t.TempDir(), "backup.db")
	var stdout strings.Builder
	err := run(t.Context(), []string{"backup", "-db", ts.DBPath, out}, func(string) string { return "" }, strings.NewReader(""), &stdout, io.Discard)
	stopWriting()
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if want := fmt.Sprintf("backed up %s to %s\n", ts.DBPath, out); stdout.String() != want {
		t.Errorf("backup printed %q, want %q", stdout.String(), want)
	}

	// Restore: serve the copy, and find every pet acknowledged before the
	// backup began, intact.
	rs := startRun(t, map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": out, "PETSTORE_API_KEYS": testKey})
	restored := listAll[Pet](t, rs.URL, "/v1/pets?limit=100", nil, nil)
	byID := map[int64]Pet{}
	for _, p := range restored {
		byID[p.ID] = p
	}
	for _, p := range before {
		if diff := cmp.Diff(p, byID[p.ID]); diff != "" {
			t.Errorf("pet %d acknowledged before the backup is not restored intact (-want +got):\n%s", p.ID, diff)
		}
	}
	t.Logf("%d pets acknowledged before the backup, %d in it", len(before), len(restored))

	t.Run("an existing output file is never overwritten", func(t *testing.T) {
		writeFile(t, out+".taken", "precious")
		err := runConfig(t, nil, "backup", "-db", ts.DBPath, out+".taken")
		if ce, ok := errors.AsType[*configError](err); !ok || !strings.Contains(ce.problem, "refusing to overwrite") {
			t.Errorf("backup onto an existing file = %v, want a configError refusing", err)
		}
		if b, _ := os.ReadFile(out + ".taken"); string(b) != "precious" {
			t.Errorf("the existing file was changed to %q", b)
		}
	})
	t.Run("a missing database is refused", func(t *testing.T) {
		err := runConfig(t, nil, "backup", "-db", filepath.Join(t.TempDir(), "none.db"), filepath.Join(t.TempDir(), "x.db"))
		if _, ok := errors.AsType[*configError](err); !ok {
			t.Errorf("backup of a missing database = %v, want a configError", err)
		}
	})
	t.Run("the output file is required", func(t *testing.T) {
		if _, ok := errors.AsType[*configError](runConfig(t, nil, "backup", "-db", ts.DBPath)); !ok {
			t.Errorf("backup without OUT.db did not fail with a configError")
		}
	})
}

func TestBackupWritesExactlyTheNamedFile(t *testing.T) {
	// Not parallel: t.Chdir changes the directory of the whole process.
	dir := t.TempDir()
	// Relative names, as typed in a shell: run from the directory.
	t.Chdir(dir)
	ts := newTestServer(t, atPath("file:pets.db"))
	rex := ts.createPet(t, "Rex", 1, "")
	if _, err := os.Stat(filepath.Join(dir, "pets.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-db file:pets.db opened pets.db (stat: %v), not the file named file:pets.db", err)
	}
	backup := func(out string) error {
		return runConfig(t, nil, "backup", "-db", "file:pets.db", out)
	}
	pets := func(t *testing.T, path string) []Pet {
		t.Helper()
		st, err := openStore(t.Context(), path, 0)
		if err != nil {
			t.Fatalf("open the copy %s: %v", path, err)
		}
		defer st.Close()
		return storedPets(t, st)
	}

	t.Run("a name that SQLite would read as a URI", func(t *testing.T) {
		if err := backup("file:copy.db"); err != nil {
			t.Fatalf("backup: %v", err)
		}
		if diff := cmp.Diff([]Pet{rex}, pets(t, filepath.Join(dir, "file:copy.db"))); diff != "" {
			t.Errorf("the copy mismatch (-want +got):\n%s", diff)
		}
		for _, other := range []string{"copy.db"} {
			if _, err := os.Stat(filepath.Join(dir, other)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the backup also wrote %s (stat: %v)", other, err)
			}
		}
	})
	t.Run("the copy is readable by its owner only", func(t *testing.T) {
		if err := backup("owner-only.db"); err != nil {
			t.Fatalf("backup: %v", err)
		}
		if fi, err := os.Stat("owner-only.db"); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the copy's mode is %v (%v), want 0600", fi.Mode().Perm(), err)
		}
	})
	t.Run("nothing is written through a symbolic link", func(t *testing.T) {
		for _, tt := range []struct {
			rule, link, target, out string
			refused                 bool // else the copy is made, as out itself
		}{
			{"a dangling link", "dangling.db", filepath.Join(dir, "elsewhere.db"), "dangling.db", true},
			{"a link to a file", "linked.db", filepath.Join(dir, "precious"), "linked.db", true},
			{"a URI's name whose file is a dangling link", "uri-link.db", filepath.Join(dir, "elsewhere-too.db"), "file:uri-link.db", false},
		} {
			if strings.Contains(tt.target, "precious") {
				writeFile(t, tt.target, "precious")
			}
			if err := os.Symlink(tt.target, tt.link); err != nil {
				t.Fatal(err)
			}
			err := backup(tt.out)
			if ce, ok := errors.AsType[*configError](err); tt.refused && (!ok || !strings.Contains(ce.problem, "refusing to overwrite")) {
				t.Errorf("%s: backup = %v, want a configError refusing", tt.rule, err)
			}
			if !tt.refused {
				if err != nil {
					t.Errorf("%s: backup: %v", tt.rule, err)
				} else if fi, err := os.Lstat(tt.out); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s: %s is not the copy, a regular file (%v, %v)", tt.rule, tt.out, fi, err)
				}
			}
			b, err := os.ReadFile(tt.target)
			switch {
			case strings.Contains(tt.target, "precious") && string(b) != "precious":
				t.Errorf("%s: the link's target now holds %q", tt.rule, b)
			case !strings.Contains(tt.target, "precious") && !errors.Is(err, os.ErrNotExist):
				t.Errorf("%s: the backup wrote through the link to its target (%v)", tt.rule, err)
			}
		}
	})
	t.Run("no working file is left behind", func(t *testing.T) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".petstore-backup-") {
				t.Errorf("left behind: %s", e.Name())
			}
		}
	})
}

// TestOneProcessServesASQLiteFile: a second service started on a SQLite
// file that one serves exits 2 at once, naming the file and the first one's
// process id, and leaves the file alone; petstore backup and petstore copy
// -from read the live file all the same, and a copy into a file a service
// serves is refused; once the first is killed by SIGKILL, a new service
// starts on the file at once.
func TestOneProcessServesASQLiteFile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "pets.db")
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + db, "PETSTORE_API_KEYS=" + testKey}
	first := startBinary(t, bin, env...)
	rex := decode[Pet](t, doRequest(t, first.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, nil))
	petsIn := func(t *testing.T, path string) []Pet {
		t.Helper()
		st, err := openStore(t.Context(), path, 0)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		defer st.Close()
		return storedPets(t, st)
	}

	t.Run("a second service is refused", func(t *testing.T) {
		code, stdout, stderr := runOnce(t, bin, env)
		want := fmt.Sprintf("petstore: -db (PETSTORE_DB): %s is served by process %d (started at ", db, first.Cmd.Process.Pid)
		if code != 2 || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
			t.Errorf("a second service: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, one line on stderr starting %q", code, stdout, stderr, want)
		}
	})
	t.Run("backup and copy read the live file", func(t *testing.T) {
		for _, args := range [][]string{{"backup", "-db", db, filepath.Join(dir, "backup.db")}, {"copy", "-from", db, "-to", filepath.Join(dir, "copy.db")}} {
			if code, _, stderr := runOnce(t, bin, nil, args...); code != 0 {
				t.Fatalf("%s: exit %d: %s", args[0], code, stderr)
			}
			if diff := cmp.Diff([]Pet{rex}, petsIn(t, args[len(args)-1])); diff != "" {
				t.Errorf("the %s of the live file mismatch (-want +got):\n%s", args[0], diff)
			}
		}
	})
	t.Run("a copy into a file a service serves is refused", func(t *testing.T) {
		served := filepath.Join(dir, "served.db")
		other := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+served, "PETSTORE_API_KEYS="+testKey)
		code, _, stderr := runOnce(t, bin, nil, "copy", "-from", db, "-to", served)
		if want := fmt.Sprintf("petstore: copy -to: %s is served by process %d", served, other.Cmd.Process.Pid); code != 2 || !strings.HasPrefix(stderr, want) {
			t.Errorf("copy -to a served file: exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
		}
	})
	t.Run("after a SIGKILL a new service starts at once", func(t *testing.T) {
		first.Cmd.Process.Kill()
		first.wait()
		next := startBinary(t, bin, env...)
		if diff := cmp.Diff([]Pet{rex}, listAll[Pet](t, next.URL, "/v1/pets", nil, nil)); diff != "" {
			t.Errorf("the pets after the restart mismatch (-want +got):\n%s", diff)
		}
	})
}

// runOnce runs the built binary with args and env added to this process's
// environment, to its end (30 s at most), and returns its exit code and
// output.
func runOnce(t *testing.T, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return 0, out.String(), errOut.String()
}

func TestDatabaseFilesAreTheOwnersOnly(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, onSQLite()) // the files of a SQLite database
	ts.createPet(t, "Rex", 1, "")      // the WAL and its index exist once written
	for _, f := range []string{ts.DBPath, ts.DBPath + "-wal", ts.DBPath + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
}

// TestMemoryDatabaseIsSharedByThePoolAndEphemeral runs the real binary in
// a directory of its own (rather than run() after a chdir, which would be
// the whole test process's: the test runs in parallel with others).
func TestMemoryDatabaseIsSharedByThePoolAndEphemeral(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	start := func() *process {
		cmd := exec.Command(bin, "-db", ":memory:")
		cmd.Dir = dir
		return startCommand(t, cmd, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_API_KEYS="+testKey)
	}
	rs := start()
	const n = 40
	var wg sync.WaitGroup
	created := make([]Pet, n)
	for i := range n {
		wg.Go(func() {
			res := doRequest(t, rs.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":"m%d","categoryId":1}`, i), nil)
			if res.Status != http.StatusCreated {
				t.Errorf("create: status %d, body %s", res.Status, res.Body)
				return
			}
			created[i] = decode[Pet](t, res)
			// Read back at once, on whichever pooled connection serves it.
			got := doRequest(t, rs.URL, "GET", fmt.Sprintf("/v1/pets/%d", created[i].ID), "", nil)
			if got.Status != http.StatusOK {
				t.Errorf("get of a just-created pet: status %d", got.Status)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(created, func(a, b Pet) int { return int(a.ID - b.ID) })
	got := decode[[]Pet](t, doRequest(t, rs.URL, "GET", "/v1/pets?limit=100", "", nil))
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("listing mismatch (-want +got):\n%s", diff)
	}
	rs.Cmd.Process.Signal(syscall.SIGTERM) // only the process the test started, by its PID
	if err := rs.wait(); err != nil {
		t.Errorf("the first run's exit: %v", err)
	}

	rs = start()
	if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", nil); string(res.Body) != "[]\n" {
		t.Errorf("a new :memory: run starts with %s, want []", res.Body)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf(":memory: left files behind: %v", entries)
	}
}

func TestSeedLoadsOnlyIntoAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	seed := filepath.Join(t.TempDir(), "seed.json")
	writeFile(t, seed, `[{"name":"Rex","categoryId":1},{"name":"Tom","categoryId":2,"status":"sold"},{"name":"Kit","categoryId":3,"status":"pending"}]`)
	env := map[string]string{
		"PETSTORE_ADDR":     "127.0.0.1:0",
		"PETSTORE_DB":       filepath.Join(t.TempDir(), "pets.db"),
		"PETSTORE_API_KEYS": testKey,
		"PETSTORE_SEED":     seed,
	}
	want := []Pet{
		{ID: 1, Name: "Rex", CategoryID: 1, Status: "available"},
		{ID: 2, Name: "Tom", CategoryID: 2, Status: "sold"},
		{ID: 3, Name: "Kit", CategoryID: 3, Status: "pending"},
	}
	for round := range 2 {
		rs := startRun(t, env)
		got := decode[[]Pet](t, doRequest(t, rs.URL, "GET", "/v1/pets", "", nil))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("start %d: pets mismatch (-want +got):\n%s", round+1, diff)
		}
		rs.stop(t)
	}
}

func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	svc := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_API_KEYS="+testKey, "PETSTORE_LOG_FORMAT=json",
		"PETSTORE_DB="+filepath.Join(t.TempDir(), "pets.db"), "PETSTORE_SHUTDOWN_TIMEOUT=1m")

	// A request whose body never completes keeps the drain waiting.
	_, bodyW := startSlowCreate(t, svc.URL)
	defer bodyW.Close()
	io.WriteString(bodyW, `{"name":`)

	exited := make(chan error, 1)
	svc.Cmd.Process.Signal(syscall.SIGTERM)
	svc.waitForLog(t, "shutting down")
	svc.Cmd.Process.Signal(syscall.SIGTERM)
	go func() { exited <- svc.wait() }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("the process still runs 5s after the second SIGTERM (drain timeout is 1m)")
	}
}

// TestForbiddenIsAnOutcomeInTheLogAndTheMetrics: every 403 for a scope the
// key lacks, whether requireScope or a handler answers it (through
// writeError, with the code insufficient_scope), has the outcome forbidden
// and its caller in the access line, in both log formats, and is counted with
// that outcome in petstore_http_requests_total and by caller in
// petstore_forbidden_total; other answers have no outcome.
func TestForbiddenIsAnOutcomeInTheLogAndTheMetrics(t *testing.T) {
	t.Parallel()
	const (
		readerKey = "reader-key-0123456789abcdef"
		adminKey  = "admin-key-0123456789abcdef"
	)
	keyFile := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "keys")
		writeFile(t, path, readerKey+" reader scopes=pets:read\n"+adminKey+" admin scopes=*\n")
		return path
	}
	// viaRun serves the whole program, run, with a key file, in a log
	// format.
	viaRun := func(format string) func(t *testing.T) (string, *syncBuffer) {
		return func(t *testing.T) (string, *syncBuffer) {
			keyFile := keyFile(t)
			rs := startRun(t, map[string]string{
				"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": filepath.Join(t.TempDir(), "pets.db"),
				"PETSTORE_API_KEYS_FILE": keyFile, "PETSTORE_LOG_FORMAT": format,
			})
			return rs.URL, rs.Stderr
		}
	}
	// viaHandler serves a route whose handler, past the key check, refuses
	// the key itself, as a handler that finds the key lacks a scope beyond
	// its route's does: through writeError, with no header of its own.
	viaHandler := func(t *testing.T) (string, *syncBuffer) {
		logs := &syncBuffer{}
		log := slogTo(logs)
		st, err := openStore(t.Context(), filepath.Join(t.TempDir(), "pets.db"), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		m := newMetrics(st)
		keys, err := loadKeyring("", keyFile(t), testSecret)
		if err != nil {
			t.Fatal(err)
		}
		guard := authGuard{throttle: newAuthThrottle(0, time.Now), failures: m.authFailed, now: time.Now}
		keyed := func(h http.Handler) http.Handler { return requireKey(keys, guard, log, h) }
		mux := http.NewServeMux()
		mux.Handle("POST /v1/pets", keyed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, r, log, errorf(codeInsufficientScope, "this API key may not subscribe to these events"))
		})))
		mux.Handle("GET /metrics", keyed(m.handler()))
		srv := httptest.NewServer(observe(log, m, routeErrors(log, mux, keyed)))
		t.Cleanup(srv.Close)
		return srv.URL, logs
	}
	tests := []struct {
		rule         string
		serve        func(t *testing.T) (string, *syncBuffer)
		format       string
		scope        string // petstore_forbidden_total's scope label
		authenticate string // the WWW-Authenticate header of the 403
	}{
		{"requireScope's 403, text log", viaRun("text"), "text", "pets:write", `Bearer error="insufficient_scope", scope="pets:write"`},
		{"requireScope's 403, JSON log", viaRun("json"), "json", "pets:write", `Bearer error="insufficient_scope", scope="pets:write"`},
		{"a handler's 403 through writeError", viaHandler, "json", "", `Bearer error="insufficient_scope"`},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			t.Parallel()
			url, logs := tt.serve(t)
			request := func(key, id string) response {
				return doRequest(t, url, "POST", "/v1/pets", `{"name":"Rex","status":"available"}`,
					map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json", "X-Request-Id": id})
			}
			res := request(readerKey, "the-403")
			wantError(t, res, http.StatusForbidden, codeInsufficientScope)
			if got := res.Header.Get("WWW-Authenticate"); got != tt.authenticate {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.authenticate)
			}
			request("not-a-key-0123456789abcdef", "the-401")
			metrics := doRequest(t, url, "GET", "/metrics", "", bearer(adminKey)).Body

			// The access lines by request id, the unknowable fields left
			// out; a line without an outcome has none to show.
			lines := map[string]map[string]string{}
			for line := range strings.Lines(logs.String()) {
				fields := map[string]string{}
				if tt.format == "text" {
					for _, f := range strings.Fields(line) {
						k, v, _ := strings.Cut(f, "=")
						fields[k] = v
					}
				} else {
					var r logRecord
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						t.Fatalf("log line %q: %v", line, err)
					}
					for k, v := range r {
						fields[k] = fmt.Sprint(v)
					}
				}
				if id := fields["request_id"]; fields["msg"] == "request" && id != "" {
					for _, unknowable := range []string{"time", "duration", "bytes", "client", "unlogged_auth_failures"} {
						delete(fields, unknowable)
					}
					lines[id] = fields
				}
			}
			want := map[string]map[string]string{
				"the-403": {"level": "INFO", "msg": "request", "method": "POST", "path": "/v1/pets", "status": "403", "request_id": "the-403", "caller": "reader", "outcome": "forbidden"},
			}
			wantEmptyCaller := `""`
			if tt.format == "json" {
				wantEmptyCaller = ""
			}
			want["the-401"] = map[string]string{"level": "INFO", "msg": "request", "method": "POST", "path": "/v1/pets", "status": "401", "request_id": "the-401", "caller": wantEmptyCaller}
			for id, w := range want {
				if diff := cmp.Diff(w, lines[id]); diff != "" {
					t.Errorf("access line of %s mismatch (-want +got):\n%s", id, diff)
				}
			}

			byCaller := map[string]string{"caller": "reader"}
			if tt.scope != "" {
				byCaller["scope"] = tt.scope
			}
			got := map[string]float64{
				"requests 403 forbidden": metricValue(t, metrics, "petstore_http_requests_total", map[string]string{"route": "POST /v1/pets", "code": "403", "outcome": "forbidden"}),
				"requests 403":           metricValue(t, metrics, "petstore_http_requests_total", map[string]string{"route": "POST /v1/pets", "code": "403"}),
				"requests 401":           metricValue(t, metrics, "petstore_http_requests_total", map[string]string{"route": "POST /v1/pets", "code": "401"}),
				"forbidden by caller":    metricValue(t, metrics, "petstore_forbidden_total", byCaller),
				"401s unauthorized":      metricValue(t, metrics, "petstore_auth_failures_total", map[string]string{"answer": "unauthorized"}),
			}
			wantMetrics := map[string]float64{"requests 403 forbidden": 1, "requests 403": 0, "requests 401": 1, "forbidden by caller": 1, "401s unauthorized": 1}
			if diff := cmp.Diff(wantMetrics, got); diff != "" {
				t.Errorf("metrics mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// metricValue reads one series from a /metrics answer: the value of the
// metric name whose labels are exactly labels, 0 when there is none.
func metricValue(t *testing.T, body []byte, name string, labels map[string]string) float64 {
	t.Helper()
	return seriesIn(metricFamilies(t, body), name, labels)
}

// metricFamilies parses a /metrics answer, for several seriesIn.
func metricFamilies(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// seriesIn is the value of the series of name with exactly labels in
// families, 0 if there is none. A label with an empty value is no label, as
// Prometheus reads it (the outcome of petstore_http_requests_total).
func seriesIn(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, m := range families[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			if l.GetValue() != "" {
				got[l.GetName()] = l.GetValue()
			}
		}
		if cmp.Equal(labels, got) {
			return seriesValue(m)
		}
	}
	return 0
}

func TestOrderTransitionsAreCounted(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	var orders []int64
	for i := range 3 {
		p := ts.createPet(t, fmt.Sprint("pet-", i), 1, "")
		orders = append(orders, ts.placeOrder(t, p.ID).ID)
	}
	p := ts.createPet(t, "keyed", 1, "")
	for range 2 { // the replay is not a second order
		ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, p.ID), withIdempotencyKey("once"))
	}
	ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, p.ID), nil) // 409: not counted
	ts.setOrder(t, orders[0], "delivered")
	ts.setOrder(t, orders[1], "cancelled")
	ts.setOrder(t, orders[2], "placed")    // no change: not counted
	ts.setOrder(t, orders[0], "cancelled") // 409: not counted
	body := ts.do(t, "GET", "/metrics", "", nil).Body
	got := map[string]float64{}
	for _, tr := range [][2]string{{"new", "placed"}, {"placed", "delivered"}, {"placed", "cancelled"}, {"placed", "placed"}, {"delivered", "cancelled"}} {
		got[tr[0]+" -> "+tr[1]] = metricValue(t, body, "petstore_order_transitions_total", map[string]string{"from": tr[0], "to": tr[1]})
	}
	want := map[string]float64{"new -> placed": 4, "placed -> delivered": 1, "placed -> cancelled": 1, "placed -> placed": 0, "delivered -> cancelled": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order transitions mismatch (-want +got):\n%s", diff)
	}
}

// TestWritesACommitAreCounted: the two counters of group commit count each
// committed batch once and each write in it once, so that their ratio is the
// writes that shared a commit.
func TestWritesACommitAreCounted(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	counts := func() map[string]float64 {
		families := metricFamilies(t, ts.do(t, "GET", "/metrics", "", nil).Body)
		return map[string]float64{
			"commits": seriesIn(families, "petstore_write_commits_total", map[string]string{}),
			"writes":  seriesIn(families, "petstore_writes_committed_total", map[string]string{}),
		}
	}
	before := counts()
	release := blockWriter(t, ts.Store)
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if res := ts.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"p%d","categoryId":1}`, i), nil); res.Status != http.StatusCreated {
				t.Errorf("create %d: status %d, body %s", i, res.Status, res.Body)
			}
		})
	}
	waitQueued(t, ts.Store, n)
	release()
	wg.Wait()
	ts.createPet(t, "alone", 1, "available")
	after := counts()
	got := map[string]float64{"commits": after["commits"] - before["commits"], "writes": after["writes"] - before["writes"]}
	// The blocking job's commit (a write of nothing), one for the ten
	// creates queued behind it, and one for the create alone.
	want := map[string]float64{"commits": 3, "writes": 12}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("group commit's counters (-want +got):\n%s", diff)
	}
}
