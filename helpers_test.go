package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The keys every test server accepts.
const (
	testKey      = "test-key-0123456789"
	otherTestKey = "second-key-abcdef"
)

// testServer is the real handler over a real SQLite file in t.TempDir(),
// served by httptest on 127.0.0.1.
type testServer struct {
	URL     string
	DBPath  string
	Store   *store
	Handler http.Handler // what the server serves, for tests that call it directly
	Log     *syncBuffer  // everything the service logged
}

// serverOption changes how newTestServer builds the server.
type serverOption func(*serverConfig)

type serverConfig struct {
	now    func() time.Time
	limits limits
}

// withClock makes the server read the time from now.
func withClock(now func() time.Time) serverOption {
	return func(c *serverConfig) { c.now = now }
}

// withLimits replaces the default limits (no rate limit, keys kept 24 h).
func withLimits(l limits) serverOption {
	return func(c *serverConfig) { c.limits = l }
}

// newTestServer starts the service on a fresh database.
func newTestServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	cfg := serverConfig{now: time.Now, limits: limits{idempotencyTTL: defaultIdempotencyTTL}}
	for _, o := range opts {
		o(&cfg)
	}
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	st, err := openStore(t.Context(), dbPath)
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	logBuf := &syncBuffer{}
	h := newServer(slogTo(logBuf), staticKeyring(testKey, otherTestKey), st, newMetrics(st), cfg.now, cfg.limits)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testServer{URL: srv.URL, DBPath: dbPath, Store: st, Handler: h, Log: logBuf}
}

// response is what a test keeps of an HTTP answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request with the test key and, when body is not empty, a JSON
// Content-Type. hdr adds or replaces headers; an empty value removes one.
func (ts *testServer) do(t *testing.T, method, path, body string, hdr map[string]string) response {
	t.Helper()
	return doRequest(t, ts.URL, method, path, body, hdr)
}

// doRequest is do for any base URL (the real binary's, for example).
func doRequest(t *testing.T, base, method, path, body string, hdr map[string]string) response {
	t.Helper()
	res, err := http.DefaultClient.Do(newRequest(t, base, method, path, body, hdr))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return readResponse(t, res)
}

// newRequest builds the request do sends: the test key and, when body is not
// empty, a JSON Content-Type; hdr adds or replaces headers, and an empty
// value removes one.
func newRequest(t *testing.T, base, method, path, body string, hdr map[string]string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
	if err != nil {
		t.Fatalf("NewRequest(%s %s): %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return req
}

// readResponse reads and closes res.
func readResponse(t *testing.T, res *http.Response) response {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// slogTo returns a text logger writing to w.
func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// createPet adds a pet through the API and returns it, failing the test on
// anything but a 201.
func (ts *testServer) createPet(t *testing.T, name string, categoryID int64, status string) Pet {
	t.Helper()
	body := map[string]any{"name": name, "categoryId": categoryID}
	if status != "" {
		body["status"] = status
	}
	b, _ := json.Marshal(body)
	res := ts.do(t, "POST", "/v1/pets", string(b), nil)
	if res.Status != http.StatusCreated {
		t.Fatalf("POST /v1/pets %s: status %d, body %s", b, res.Status, res.Body)
	}
	return decode[Pet](t, res)
}

// decode parses a JSON response body into a T, refusing unknown fields.
func decode[T any](t *testing.T, res response) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(res.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, res.Body, err)
	}
	return v
}

// wantError checks that res is the standard JSON error with the given status
// and code, and that its message mentions every one of mention.
func wantError(t *testing.T, res response, status int, code string, mention ...string) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json (body %s)", ct, res.Body)
	}
	got := decode[apiError](t, res)
	want := apiError{Code: code, Status: status, Message: got.Message}
	if diff := cmp.Diff(want, got); diff != "" || res.Status != status {
		t.Errorf("HTTP status %d, error body mismatch (-want +got):\n%s", res.Status, diff)
	}
	if got.Message == "" {
		t.Errorf("error message is empty")
	}
	for _, m := range mention {
		if !strings.Contains(got.Message, m) {
			t.Errorf("error message %q does not mention %q", got.Message, m)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMain runs the tests, removes the binary buildBinary built, and says
// which parts of the suite were skipped because this machine lacks what they
// need.
func TestMain(m *testing.M) {
	code := m.Run()
	if testBinary.dir != "" {
		os.RemoveAll(testBinary.dir)
	}
	reportSkippedParts()
	os.Exit(code)
}

// ciVariable is set by .ci/run. CI installs every part the suite can use
// (PostgreSQL, Chromium, Node), so there a missing part fails the test
// instead of skipping it.
const ciVariable = "PETSTORE_CI"

// skippedParts collects one line per part of the suite that could not run
// here, printed once by TestMain.
var skippedParts struct {
	mu    sync.Mutex
	lines []string
}

// missingPart handles a test that needs a part this machine may lack (a
// program, a server): when err says the part is missing, it fails t in CI
// and skips it elsewhere, recording for the end of the run what was skipped
// and how to enable it.
func missingPart(t testing.TB, part, enable string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(ciVariable) != "" {
		t.Fatalf("%s: %v; %s=1 means every part must run (%s)", part, err, ciVariable, enable)
	}
	line := fmt.Sprintf("skipped %s (%v); to run it: %s", part, err, enable)
	skippedParts.mu.Lock()
	if !slices.Contains(skippedParts.lines, line) {
		skippedParts.lines = append(skippedParts.lines, line)
	}
	skippedParts.mu.Unlock()
	t.Skip(line)
}

// reportSkippedParts prints the lines missingPart recorded. go test shows a
// passing package's output only with -v, so the lines go to the go
// command's own standard error (the test binary's parent), where a plain
// `go test ./...` shows them; without that, to the test binary's.
func reportSkippedParts() {
	skippedParts.mu.Lock()
	defer skippedParts.mu.Unlock()
	if len(skippedParts.lines) == 0 {
		return
	}
	var w io.Writer = os.Stderr
	if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0); err == nil {
		defer f.Close()
		w = f
	}
	for _, line := range skippedParts.lines {
		fmt.Fprintf(w, "petstore tests: %s\n", line)
	}
}
