package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"petstore/internal/pgcluster"
)

// This file holds every helper the tests share: one way to start the
// service at each of its three levels, one way to send a request, one way to
// walk all the pages of a list, one fake clock. Request helpers report a
// failure with t.Errorf and return a zero value, never t.Fatal, so that they
// are safe in the goroutines of concurrent tests.

// The keys every test service accepts.
const (
	testKey      = "test-key-0123456789"
	otherTestKey = "second-key-abcdef"
)

// testSecret is the service's secret (see loadSecret) of every server that
// newTestServer starts: fixed, so that a restart on the same file finds the
// same key identities, as it does with the secret file next to a database.
var testSecret = []byte("test-secret-0123456789abcdefghijklmnopqrstuvwxyz")

// staticKeyring is a keyring of fixed keys under testSecret.
func staticKeyring(keys ...string) keyring { return fixedKeyring(testSecret, keys...) }

// keyID is the identity the service gives key under secret, computed here
// apart from auth.go: the HMAC-SHA256 of the key's SHA-256 digest.
func keyID(secret []byte, key string) [sha256.Size]byte {
	d := sha256.Sum256([]byte(key))
	mac := hmac.New(sha256.New, secret)
	mac.Write(d[:])
	return [sha256.Size]byte(mac.Sum(nil))
}

// callerLabel is how logs and metrics name an unlabelled key under secret.
func callerLabel(secret []byte, key string) string {
	id := keyID(secret, key)
	return "key-" + hex.EncodeToString(id[:4])
}

// The three levels at which a test starts the service:
//
//   - newTestServer: the handler newServer builds, over a real SQLite file in
//     t.TempDir(), served by httptest on 127.0.0.1. Most tests use it: the
//     store is at hand, and options set the clock, limits, file and keys.
//   - startRun: the whole program, run() in-process on 127.0.0.1:0 with a
//     fake environment: settings, start-up, the http.Server's limits and
//     shutdown.
//   - startBinary: the real binary, as shipped (CGO off): signals, crashes
//     and the exit code.

// testServer is the real handler over a real SQLite file, served by httptest.
type testServer struct {
	URL     string
	DBPath  string
	Store   *store
	Handler http.Handler // what the server serves, for tests that call it directly
	Log     *syncBuffer  // everything the service logged
	Feed    *feed        // the event feed's streams
	Keys    keyring      // the keys it accepts
	KeyFile string       // the key file Keys reads, "" without one
}

// serverConfig is what the serverOptions of newTestServer change.
type serverConfig struct {
	now        func() time.Time
	limits     limits
	dbPath     string
	keys       []string
	sqliteOnly bool // the test chose its database, or reaches into SQLite itself
	events     feedConfig
}

// serverOption changes how newTestServer builds the server.
type serverOption func(*serverConfig)

// withClock makes the server read the time from now.
func withClock(now func() time.Time) serverOption {
	return func(c *serverConfig) { c.now = now }
}

// withLimits replaces the default limits (no rate limit, keys kept 24 h).
func withLimits(l limits) serverOption {
	return func(c *serverConfig) { c.limits = l }
}

// atPath serves the database at path (a SQLite file, or a PostgreSQL URL)
// instead of a fresh one; the test chose its database, so it does not run
// again on PostgreSQL.
func atPath(path string) serverOption {
	return func(c *serverConfig) { c.dbPath = path; c.sqliteOnly = true }
}

// onSQLite marks a test that reaches into SQLite itself (its pragmas, its
// file): it does not run again on PostgreSQL.
func onSQLite() serverOption {
	return func(c *serverConfig) { c.sqliteOnly = true }
}

// withFeed replaces the event feed's settings (the defaults of the flags).
func withFeed(c feedConfig) serverOption {
	return func(cfg *serverConfig) { cfg.events = c }
}

// withKeys replaces the accepted keys (testKey and otherTestKey).
func withKeys(keys ...string) serverOption {
	return func(c *serverConfig) { c.keys = keys }
}

// newTestServer starts the service on a fresh database: a SQLite file, or,
// in the PostgreSQL run, a schema of its own.
func newTestServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	cfg := serverConfig{
		now:    time.Now,
		limits: limits{idempotencyTTL: defaultIdempotencyTTL},
		dbPath: filepath.Join(t.TempDir(), "pets.db"),
		keys:   []string{testKey, otherTestKey},
		events: defaultFeedConfig(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.sqliteOnly:
	case testBackend == "postgres":
		cfg.dbPath = postgresSchema(t)
	default:
		rerunOnPostgres(t)
	}
	st, err := openStore(t.Context(), cfg.dbPath, 0)
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	logBuf := &syncBuffer{}
	keys := staticKeyring(cfg.keys...)
	events := newFeed(slogTo(logBuf), st, keys, cfg.events, cfg.now)
	h := newServer(slogTo(logBuf), keys, st, newMetrics(st), events, cfg.now, cfg.limits)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// Before the server closes (cleanups run last first): Close waits for
	// every request, and a stream ends only when the feed stops.
	t.Cleanup(events.stop)
	return &testServer{URL: srv.URL, DBPath: cfg.dbPath, Store: st, Handler: h, Log: logBuf, Feed: events, Keys: keys}
}

// urlLine is the launch contract: the line the service prints once it accepts
// connections.
var urlLine = regexp.MustCompile(`^petstore listening on (http://127\.0\.0\.1:[0-9]+)$`)

// runningService is run() started in-process, as an integration test of
// another project would start the binary.
type runningService struct {
	URL    string
	Stderr *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// mapEnv is a getenv reading env.
func mapEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// startRun starts run with the given environment and waits for the URL line.
func startRun(t *testing.T, env map[string]string, args ...string) *runningService {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	rs := &runningService{Stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	env = withSharedSecret(t, env)
	go func() {
		err := run(ctx, args, mapEnv(env), strings.NewReader(""), stdoutW, rs.Stderr)
		stdoutW.CloseWithError(fmt.Errorf("run returned: %v", err))
		rs.done <- err
	}()
	t.Cleanup(func() {
		rs.cancel()
		<-rs.done
	})
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL line on stdout: %v; stderr:\n%s", err, rs.Stderr)
	}
	go io.Copy(io.Discard, stdoutR)
	m := urlLine.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
	if m == nil {
		t.Fatalf("stdout line %q does not match %v", line, urlLine)
	}
	rs.URL = m[1]
	return rs
}

// stop cancels run, as SIGTERM does in main, and returns what run returned.
func (rs *runningService) stop(t *testing.T) error {
	t.Helper()
	rs.cancel()
	select {
	case err := <-rs.done:
		rs.done <- err // for the cleanup
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("run did not return within 15s of cancellation")
		return nil
	}
}

// testBinary is the service built once for the whole test binary: several
// tests run the real process, and one build is most of their cost. It is the
// test package's one piece of shared state; TestMain removes the build.
var testBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildCommand is the build command of docs/operations.md, word for word (a test holds
// the guide and deploy/petstore.service to it): the binary the tests run is
// built exactly as the one that ships.
const buildCommand = "CGO_ENABLED=0 go build -trimpath -buildvcs=true -o petstore ."

// buildBinary returns the path of the service built by buildCommand,
// building it on first use.
func buildBinary(t *testing.T) string {
	t.Helper()
	testBinary.once.Do(func() {
		testBinary.dir, testBinary.err = os.MkdirTemp("", "petstore-test-")
		if testBinary.err != nil {
			return
		}
		testBinary.path = filepath.Join(testBinary.dir, "petstore")
		words := strings.Fields(buildCommand)
		args := slices.Clone(words[2:])
		args[slices.Index(args, "-o")+1] = testBinary.path
		cmd := exec.Command(words[1], args...)
		cmd.Env = append(os.Environ(), words[0])
		if out, err := cmd.CombinedOutput(); err != nil {
			testBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if testBinary.err != nil {
		t.Fatal(testBinary.err)
	}
	return testBinary.path
}

// process is the real binary, started by startBinary.
type process struct {
	Cmd    *exec.Cmd
	URL    string
	Stderr *syncBuffer // everything the process logged
}

// startBinary starts the built service with env added to this process's
// environment, and returns once it printed its URL. The process is killed
// at the end of the test if it still runs (only it, by its PID).
func startBinary(t *testing.T, bin string, env ...string) *process {
	t.Helper()
	return startCommand(t, exec.Command(bin), env...)
}

// startCommand is startBinary for a command that runs the binary in some
// other way (under a shell that lowers a limit first, for one).
func startCommand(t *testing.T, cmd *exec.Cmd, env ...string) *process {
	t.Helper()
	p := &process{Cmd: cmd, Stderr: &syncBuffer{}}
	p.Cmd.Env = append(os.Environ(), env...)
	if slices.ContainsFunc(env, func(v string) bool { return isPostgresURL(strings.TrimPrefix(v, "PETSTORE_DB=")) }) &&
		!slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, "PETSTORE_SECRET_FILE=") }) {
		p.Cmd.Env = append(p.Cmd.Env, "PETSTORE_SECRET_FILE="+sharedSecretFile(t))
	}
	p.Cmd.Stderr = p.Stderr
	stdout, err := p.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		p.Cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL line: %v; stderr:\n%s", err, p.Stderr)
	}
	m := urlLine.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		t.Fatalf("stdout line %q does not match %v", line, urlLine)
	}
	p.URL = m[1]
	return p
}

// waitForLog waits until the process, started with PETSTORE_LOG_FORMAT=json,
// has logged a record with the message msg.
func (p *process) waitForLog(t *testing.T, msg string) {
	t.Helper()
	eventually(t, "the process logs "+strconv.Quote(msg), func() bool {
		return slices.ContainsFunc(p.Stderr.records(t), func(r logRecord) bool { return r["msg"] == msg })
	})
}

// startSlowCreate starts a createPet whose body the test writes, piece by
// piece, into the returned writer, and returns once the handler has started
// reading it: the request asks for 100 Continue, which the server sends only
// then. The answer arrives on the channel.
func startSlowCreate(t *testing.T, base string) (<-chan slowAnswer, *io.PipeWriter) {
	t.Helper()
	bodyR, bodyW := io.Pipe()
	reading := make(chan struct{})
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{Got100Continue: func() { close(reading) }})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/pets", bodyR)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	// The client sends the body only after the 100, and waits for it.
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	t.Cleanup(client.CloseIdleConnections)
	answer := make(chan slowAnswer, 1)
	go func() {
		res, err := client.Do(req)
		if err != nil {
			answer <- slowAnswer{err: err}
			return
		}
		answer <- slowAnswer{res: readResponse(t, res)}
	}()
	select {
	case <-reading:
	case a := <-answer:
		t.Fatalf("the create was answered before its body was read: %v %d %s", a.err, a.res.Status, a.res.Body)
	}
	return answer, bodyW
}

// slowAnswer is the outcome of a request started by startSlowCreate.
type slowAnswer struct {
	res response
	err error
}

// response is what a test keeps of an HTTP answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request with the test key and, when body is not empty, a JSON
// Content-Type. hdr adds or replaces headers; an empty value removes one.
func (ts *testServer) do(t testing.TB, method, path, body string, hdr map[string]string) response {
	t.Helper()
	return doRequest(t, ts.URL, method, path, body, hdr)
}

// doRequest is do for any base URL (run's or the real binary's). A request
// that gets no answer fails the test and returns a zero response.
func doRequest(t testing.TB, base, method, path, body string, hdr map[string]string) response {
	t.Helper()
	res, err := http.DefaultClient.Do(newRequest(t, base, method, path, body, hdr))
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	return readResponse(t, res)
}

// newRequest builds the request do sends: the test key and, when body is not
// empty, a JSON Content-Type; hdr adds or replaces headers, and an empty
// value removes one.
func newRequest(t testing.TB, base, method, path, body string, hdr map[string]string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
	if err != nil {
		// A path the test wrote wrong: a mistake of the set-up.
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
func readResponse(t testing.TB, res *http.Response) response {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", res.Request.Method, res.Request.URL.Path, err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// slogTo returns a JSON logger writing to w, whose records a test reads
// with syncBuffer.records.
func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// createPet adds a pet through the API and returns it; anything but a 201
// fails the test.
func (ts *testServer) createPet(t testing.TB, name string, categoryID int64, status string) Pet {
	t.Helper()
	body := map[string]any{"name": name, "categoryId": categoryID}
	if status != "" {
		body["status"] = status
	}
	b, _ := json.Marshal(body)
	res := ts.do(t, "POST", "/v1/pets", string(b), nil)
	if res.Status != http.StatusCreated {
		t.Errorf("POST /v1/pets %s: status %d, body %s", b, res.Status, res.Body)
		return Pet{}
	}
	return decode[Pet](t, res)
}

// decode parses a JSON response body into a T, refusing unknown fields.
func decode[T any](t testing.TB, res response) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(res.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Errorf("decode %T from %q: %v", v, res.Body, err)
	}
	return v
}

// wantError checks that res is the standard JSON error with the given status
// and code, and that its message mentions every one of mention.
func wantError(t testing.TB, res response, status int, code string, mention ...string) {
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

// listAll walks a list from path to its last page, following each answer's
// Link header as a client does, and returns every item in order. hdr is as
// for doRequest; between, when not nil, runs after each page (a test changes
// the data between pages with it).
func listAll[T any](t testing.TB, base, path string, hdr map[string]string, between func()) []T {
	t.Helper()
	all := []T{}
	for pages := 0; path != ""; pages++ {
		if pages > 10_000 {
			t.Errorf("more than 10,000 pages: the Link chain does not end")
			return all
		}
		res := doRequest(t, base, "GET", path, "", hdr)
		if res.Status != http.StatusOK {
			t.Errorf("GET %s: status %d, body %s", path, res.Status, res.Body)
			return all
		}
		all = append(all, decode[[]T](t, res)...)
		path = ""
		if link := res.Header.Get("Link"); link != "" {
			target, ok := strings.CutPrefix(link, "<")
			target, rest, _ := strings.Cut(target, ">")
			if !ok || rest != `; rel="next"` {
				t.Errorf("Link %q is not <URL>; rel=\"next\"", link)
				return all
			}
			path = target
		}
		if between != nil {
			between()
		}
	}
	return all
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// eventually polls cond every 20 ms for up to 10 s, for a state that another
// process or goroutine reaches at a moment the test cannot observe directly
// (a file rewritten, a signal handled).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// integrityCheck runs PRAGMA integrity_check on the file at path, as a
// separate process would after the service died.
func integrityCheck(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var result string
	if err := db.QueryRowContext(t.Context(), "PRAGMA integrity_check").Scan(&result); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	return result
}

// writeFile creates a file with the given content.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
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

// logRecord is one line of a JSON log, decoded.
type logRecord map[string]any

// records decodes the buffer as a JSON log, one record per line. Tests read
// what the service logged through its records, never by searching the text,
// where a request id or a path could hold any word.
func (b *syncBuffer) records(t testing.TB) []logRecord {
	t.Helper()
	var recs []logRecord
	for line := range strings.Lines(b.String()) {
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Errorf("log line %q is not a JSON record: %v", line, err)
			continue
		}
		recs = append(recs, r)
	}
	return recs
}

// find returns the records logged at level with the message msg.
func (b *syncBuffer) find(t testing.TB, level, msg string) []logRecord {
	t.Helper()
	return slices.DeleteFunc(b.records(t), func(r logRecord) bool { return r["level"] != level || r["msg"] != msg })
}

// field returns the string value of a record's field, "" if it has none.
func (r logRecord) field(name string) string {
	s, _ := r[name].(string)
	return s
}

// TestMain runs the tests, removes the binary buildBinary built, and says
// which parts of the suite were skipped because this machine lacks what they
// need.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && testBackend == "" && !slices.ContainsFunc(os.Args, func(a string) bool { return strings.HasPrefix(a, "-test.bench") && !strings.HasSuffix(a, "=") }) {
		code = runOnPostgres()
	}
	if testBinary.dir != "" {
		os.RemoveAll(testBinary.dir)
	}
	if testPostgres.cluster != nil {
		testPostgres.cluster.remove()
	}
	if sharedSecret.path != "" {
		os.RemoveAll(filepath.Dir(sharedSecret.path))
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
// `go test ./...` shows them in a terminal or a pipe; when that is a file,
// or cannot be reached, to the test binary's (shown with -v).
func reportSkippedParts() {
	skippedParts.mu.Lock()
	defer skippedParts.mu.Unlock()
	if len(skippedParts.lines) == 0 {
		return
	}
	var w io.Writer = os.Stderr
	// A terminal or a pipe, not a file: a file opened again has an offset of
	// its own, and the go command would write over the line.
	if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0); err == nil {
		defer f.Close()
		if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
			w = f
		}
	}
	for _, line := range skippedParts.lines {
		fmt.Fprintf(w, "petstore tests: %s\n", line)
	}
}

// The PostgreSQL half of the suite. The tests that talk HTTP to a
// newTestServer run twice: in this process on SQLite, then, from TestMain, in
// a second run of this same test binary on PostgreSQL (testBackend
// "postgres"), each test in a schema of its own on a throwaway cluster that
// the tests start themselves. Tests of PostgreSQL alone (replicas, faults,
// copy) run in the first run, on clusters of their own when they stop one.

// backendVariable selects the backend of newTestServer in the second run;
// pgURLVariable passes it the first run's cluster.
const (
	backendVariable = "PETSTORE_TEST_BACKEND"
	pgURLVariable   = "PETSTORE_TEST_POSTGRES_URL"
)

// testBackend is "postgres" in the second run, "" (SQLite) otherwise.
var testBackend = os.Getenv(backendVariable)

// onPostgres collects the top-level tests that run again on PostgreSQL:
// those that started a newTestServer on its default database.
var onPostgres struct {
	mu    sync.Mutex
	names map[string]bool
}

// rerunOnPostgres records that t's top-level test runs again on PostgreSQL.
func rerunOnPostgres(t testing.TB) {
	name, _, _ := strings.Cut(t.Name(), "/")
	onPostgres.mu.Lock()
	defer onPostgres.mu.Unlock()
	if onPostgres.names == nil {
		onPostgres.names = map[string]bool{}
	}
	onPostgres.names[name] = true
}

// pgCluster is a PostgreSQL server the tests started (internal/pgcluster,
// which bench/ uses too), with the tests' settings: on a Unix socket in its
// own directory, so that no TCP port is reserved and none can be taken
// from it, even across a restart.
type pgCluster struct{ *pgcluster.Cluster }

// testPostgres is the cluster of this test binary, started on first use and
// stopped by TestMain.
var testPostgres struct {
	once    sync.Once
	cluster *pgCluster
	url     string // of its petstore database
	err     error
}

// pgTestSettings are the test clusters' settings beyond the defaults. They
// run without fsync: the tests stop them cleanly, never by a power cut.
// Every test that runs on PostgreSQL has a database of its own, with the
// connections of its stores, and a few hundred run at once.
var pgTestSettings = []string{"max_connections=500", "fsync=off", "full_page_writes=off", "shared_buffers=64MB", "log_min_messages=fatal"}

// pgStartTimeout bounds initdb, and then the server's start.
const pgStartTimeout = 30 * time.Second

// startPostgresCluster initialises and starts a new cluster.
func startPostgresCluster() (*pgCluster, error) {
	c, err := pgcluster.Start(context.Background(), pgStartTimeout, pgTestSettings...)
	if err != nil {
		return nil, err
	}
	return &pgCluster{c}, nil
}

// start starts the server again after stop.
func (c *pgCluster) start() error { return c.Start(context.Background(), pgStartTimeout) }

// stop shuts the server down, keeping everything committed, and waits for
// it to exit.
func (c *pgCluster) stop() { c.Stop() }

// url is the URL of a database of the cluster.
func (c *pgCluster) url(database string) string { return c.URL(database) }

// remove stops the cluster and deletes its files.
func (c *pgCluster) remove() { c.Remove() }

// sharedPostgres returns the URL of the petstore database of this test
// binary's cluster, starting it on first use: the first run's own, or, in
// the second run, the one the first run passed down.
func sharedPostgres() (string, error) {
	testPostgres.once.Do(func() {
		if u := os.Getenv(pgURLVariable); u != "" {
			testPostgres.url = u
			return
		}
		c, err := startPostgresCluster()
		if err != nil {
			testPostgres.err = err
			return
		}
		testPostgres.cluster = c
		db, err := sql.Open("pgx", c.url("postgres"))
		if err == nil {
			_, err = db.Exec("CREATE DATABASE petstore")
			db.Close()
		}
		if err == nil {
			// The names of the tests' databases (postgresSchema), made
			// here once: CREATE SEQUENCE IF NOT EXISTS is not safe
			// against itself, and the tests run in parallel.
			db, err = sql.Open("pgx", c.url("petstore"))
			if err == nil {
				_, err = db.Exec("CREATE SEQUENCE petstore_test_databases")
				db.Close()
			}
		}
		testPostgres.url, testPostgres.err = c.url("petstore"), err
	})
	return testPostgres.url, testPostgres.err
}

// The one line that says the PostgreSQL parts were skipped, and how to run
// them: every part that needs PostgreSQL records the same line, so a run
// without it prints it once.
const (
	postgresPart   = "every PostgreSQL part of the suite (its second run of the HTTP tests, replicas, faults, copy)"
	enablePostgres = "apt-get install postgresql (the tests start throwaway clusters themselves)"
)

// postgresSchema returns the URL of an empty database of the shared
// cluster, the test's own until it ends. It skips the test (fails it in CI)
// when PostgreSQL is not installed. A database rather than a schema: the
// replicas' write lock (writeLock) and pg_locks are per database, so tests
// that run at once never wait on each other's batches (a test that holds
// its writes would otherwise hold every other test's). Creating a database
// copies a template (about 200 ms), so a test's database is emptied when it
// ends and handed to the next test (testDatabases).
func postgresSchema(t testing.TB) string {
	t.Helper()
	base, err := sharedPostgres()
	missingPart(t, postgresPart, enablePostgres, err)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + testDatabases.take(t, base)
	t.Cleanup(func() {
		// After the test's own clean-ups (registered later, run first).
		if err := emptyDatabase(u.String()); err != nil {
			t.Errorf("empty the test's database %s: %v", u.Path, err)
			return // not handed out again
		}
		testDatabases.give(strings.TrimPrefix(u.Path, "/"))
	})
	return u.String()
}

// testDatabases are the empty databases of the shared cluster that no
// running test holds, named t1, t2... by a sequence of the cluster
// (petstore_test_databases, made with it), so that the two runs of the test
// binary never make the same name.
var testDatabases databasePool

// databasePool hands out the empty databases of a cluster.
type databasePool struct {
	mu   sync.Mutex
	free []string
}

// take returns a free database, creating one when none is free.
func (p *databasePool) take(t testing.TB, base string) string {
	t.Helper()
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		name := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return name
	}
	p.mu.Unlock()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(t.Context(), "SELECT nextval('petstore_test_databases')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The name is made here from a number, never from input.
	name := fmt.Sprintf("t%d", n)
	if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return name
}

// give hands back a database that emptyDatabase emptied.
func (p *databasePool) give(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, name)
}

// emptyDatabase ends the connections a test left open to the database at
// u (a process it killed may leave one for a moment) and drops everything
// the test made in it: the migrations make their tables, functions and
// triggers in the public schema, and nothing else.
func emptyDatabase(u string) error {
	db, err := sql.Open("pgx", u)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	for _, stmt := range []string{
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
		"DROP SCHEMA public CASCADE",
		"CREATE SCHEMA public",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// runOnPostgres runs the tests that rerunOnPostgres recorded again, in a
// second run of this test binary, on PostgreSQL, and returns its exit code.
func runOnPostgres() int {
	onPostgres.mu.Lock()
	names := slices.Sorted(maps.Keys(onPostgres.names))
	onPostgres.mu.Unlock()
	if len(names) == 0 {
		return 0
	}
	url, err := sharedPostgres()
	if err != nil {
		if os.Getenv(ciVariable) != "" {
			fmt.Fprintf(os.Stderr, "the PostgreSQL half of the suite cannot run: %v; %s=1 means every part must run (%s)\n", err, ciVariable, enablePostgres)
			return 1
		}
		noteSkipped(fmt.Sprintf("skipped %s (%v); to run it: %s", postgresPart, err, enablePostgres))
		return 0
	}
	// The first run's files (its log for go test's cache, a coverage
	// profile) are its own; and the second run chooses its tests.
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip")
	args = append(args, "-test.run=^("+strings.Join(names, "|")+")$")
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), backendVariable+"=postgres", pgURLVariable+"="+url)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "the PostgreSQL run of %d tests failed: %v\n", len(names), err)
		return 1
	}
	return 0
}

// argsWithout returns this test binary's arguments but for the flags named
// in drop, each left out with its value, whether given as -flag=value (as go
// test passes them) or as -flag value (the binary run by hand). A value kept
// alone would end the new run's flags before those appended after it.
func argsWithout(drop ...string) []string {
	var args []string
	for i := 1; i < len(os.Args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(os.Args[i], "-"), "=")
		if slices.Contains(drop, name) {
			if !hasValue {
				i++
			}
			continue
		}
		args = append(args, os.Args[i])
	}
	return args
}

// aloneVariable marks a run of the test binary that inAProcessOfItsOwn
// started for one test.
const aloneVariable = "PETSTORE_TEST_ALONE"

// inAProcessOfItsOwn is for a test that measures something of the whole
// process (its heap) and so cannot share it with the tests running in
// parallel. In the test's own process it returns true, and the test goes
// on. Otherwise it runs this test binary again for t's test alone, reports
// that run's failure as t's, and returns false: the test ends there.
func inAProcessOfItsOwn(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneVariable) == t.Name() {
		return true
	}
	// As in runOnPostgres: the files are this run's, and the new run
	// chooses its test.
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip", "test.count", "test.cpuprofile", "test.memprofile", "test.trace")
	args = append(args, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), aloneVariable+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}

// holdWrites makes the next writes of ts wait, from another connection,
// until release is called (at the latest when the test ends): on SQLite it
// holds the file's write lock, on PostgreSQL a lock on the tables that every
// write of the API changes first (reads go on). A held write gives up after
// 5 s (SQLite's busy timeout, or the batch timeout on PostgreSQL), so a test
// uses it at once.
func (ts *testServer) holdWrites(t *testing.T) (release func()) {
	t.Helper()
	driver, lock := "sqlite", []string{"BEGIN IMMEDIATE"}
	if isPostgresURL(ts.DBPath) {
		driver, lock = "pgx", []string{"BEGIN", "LOCK TABLE pets, orders IN EXCLUSIVE MODE"}
	}
	db, err := sql.Open(driver, ts.DBPath)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	for _, stmt := range lock {
		if _, err := conn.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	return release
}

// setReadOnly makes the writer of ts refuse every write, as a read-only
// file or file system (SQLITE_READONLY) or a read-only PostgreSQL (a
// standby, SQLSTATE 25006) does, or lets it write again.
func (ts *testServer) setReadOnly(t *testing.T, on bool) {
	t.Helper()
	stmt := map[bool]string{true: "PRAGMA query_only = 1", false: "PRAGMA query_only = 0"}[on]
	if isPostgresURL(ts.DBPath) {
		stmt = map[bool]string{true: "SET default_transaction_read_only = on", false: "SET default_transaction_read_only = off"}[on]
	}
	// The writer has one connection, so the setting holds for every write.
	if _, err := ts.Store.writer.ExecContext(t.Context(), stmt); err != nil {
		t.Fatal(err)
	}
}

// exec runs a statement on the writer's database directly, past the store,
// in the dialect of ts (written with ? parameters).
func (ts *testServer) exec(t *testing.T, query string, args ...any) error {
	t.Helper()
	_, err := ts.Store.writer.ExecContext(t.Context(), ts.Store.dialect.sql(query), args...)
	return err
}

// tcpProxy forwards the connections it accepts on 127.0.0.1 to target,
// until cut, which closes them all and refuses new ones: to a client behind
// it, the server at target stops answering.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// newProxy starts a proxy on 127.0.0.1 to address on network ("tcp", or
// "unix" for a socket file), closed when the test ends.
func newProxy(t testing.TB, network, address string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial(network, address)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

// cut closes every connection and refuses new ones.
func (p *tcpProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// unreachableServer returns a server whose PostgreSQL database stopped
// answering after it started: its connections go through a proxy that is then
// cut. Without PostgreSQL, it returns false (and fails the test in CI), after
// recording the part of the test that cannot run.
func unreachableServer(t *testing.T) (*testServer, bool) {
	t.Helper()
	if _, err := sharedPostgres(); err != nil {
		if os.Getenv(ciVariable) != "" {
			t.Fatalf("an unreachable database needs PostgreSQL: %v; %s=1 means every part must run", err, ciVariable)
		}
		noteSkipped(fmt.Sprintf("skipped %s (%v); to run it: %s", postgresPart, err, enablePostgres))
		return nil, false
	}
	u, err := url.Parse(postgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test cluster listens on a Unix socket (pgcluster): the proxy
	// reaches it there, and the service reaches the proxy over TCP.
	q := u.Query()
	proxy := newProxy(t, "unix", filepath.Join(q.Get("host"), ".s.PGSQL."+q.Get("port")))
	q.Del("host")
	q.Del("port")
	u.Host, u.RawQuery = proxy.ln.Addr().String(), q.Encode()
	ts := newTestServer(t, atPath(u.String()))
	proxy.cut()
	return ts, true
}

// noteSkipped records a line for the end of the run, like missingPart, for
// a part of a test that cannot run here while the rest of the test does.
func noteSkipped(line string) {
	skippedParts.mu.Lock()
	defer skippedParts.mu.Unlock()
	if !slices.Contains(skippedParts.lines, line) {
		skippedParts.lines = append(skippedParts.lines, line)
	}
}

// dbFor is the -db of a test that starts the service itself (with startRun
// or startBinary) and may run on either backend: path, a SQLite file, in the
// first run, which records the test to run again; in the PostgreSQL run, a
// schema of its own, the same one for the same path within the test.
func dbFor(t *testing.T, path string) string {
	t.Helper()
	if testBackend != "postgres" {
		rerunOnPostgres(t)
		return path
	}
	dbForSchemas.mu.Lock()
	defer dbForSchemas.mu.Unlock()
	if dbForSchemas.urls == nil {
		dbForSchemas.urls = map[string]string{}
	}
	if u, ok := dbForSchemas.urls[path]; ok {
		return u
	}
	u := postgresSchema(t)
	dbForSchemas.urls[path] = u
	return u
}

// dbForSchemas remembers the schema dbFor gave each path.
var dbForSchemas struct {
	mu   sync.Mutex
	urls map[string]string
}

// openDB opens a database as a test reads it past the service: a SQLite
// file or a PostgreSQL URL.
func openDB(t *testing.T, db string) *sql.DB {
	t.Helper()
	driver := "sqlite"
	if isPostgresURL(db) {
		driver = "pgx"
	}
	conn, err := sql.Open(driver, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// untilStopped is the tests' one load loop: it calls do(worker, i) from
// workers goroutines, i counting each worker's own calls from 0, round and
// round until stop is closed or do returns false (a worker that met the
// end it expected, such as a killed server), and returns once every worker
// has finished its last call. do reports failures with t.Errorf, never
// t.Fatal: it runs outside the test's goroutine.
func untilStopped(workers int, stop <-chan struct{}, do func(worker, i int) bool) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !do(w, i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// keepSending runs untilStopped in the background until the returned stop
// is called (at the latest when the test ends); stop waits for the workers'
// last calls, so what they did is all done once it returns.
func keepSending(t testing.TB, workers int, do func(worker, i int) bool) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		untilStopped(workers, quit, do)
		close(done)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// keepReading sends GETs of each path to each server, one worker per pair,
// round and round, until the returned stop is called (at the latest when
// the test ends): the readers that keep caches filling while a test writes.
func keepReading(t *testing.T, servers []*testServer, paths ...string) (stop func()) {
	t.Helper()
	return keepSending(t, len(servers)*len(paths), func(w, _ int) bool {
		servers[w/len(paths)].do(t, "GET", paths[w%len(paths)], "", nil)
		return true
	})
}

// sharedSecret is the secret file that the services a test starts on
// PostgreSQL share when a test names none (replicas may share a file, or
// read the secret the database keeps: see auth_secret_test.go), written once per
// test binary.
var sharedSecret struct {
	once sync.Once
	path string
	err  error
}

// sharedSecretFile returns the path of the shared secret file.
func sharedSecretFile(t testing.TB) string {
	t.Helper()
	sharedSecret.once.Do(func() {
		dir, err := os.MkdirTemp("", "petstore-secret-")
		if err != nil {
			sharedSecret.err = err
			return
		}
		sharedSecret.path = filepath.Join(dir, "secret")
		sharedSecret.err = os.WriteFile(sharedSecret.path, append([]byte(generateKey()), '\n'), 0o600)
	})
	if sharedSecret.err != nil {
		t.Fatal(sharedSecret.err)
	}
	return sharedSecret.path
}

// withSharedSecret adds the shared secret file to the environment of a
// service on PostgreSQL that names none.
func withSharedSecret(t testing.TB, env map[string]string) map[string]string {
	if !isPostgresURL(env["PETSTORE_DB"]) || env["PETSTORE_SECRET_FILE"] != "" {
		return env
	}
	withSecret := maps.Clone(env)
	withSecret["PETSTORE_SECRET_FILE"] = sharedSecretFile(t)
	return withSecret
}
