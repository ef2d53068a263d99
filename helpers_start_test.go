package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
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
)

// Test helpers: starting the service at its three levels (the handler on
// httptest, run in-process, the real binary), and what a started service
// shares (the key secret of replicas).

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
	fresh := filepath.Join(t.TempDir(), "pets.db")
	cfg := serverConfig{
		now:    time.Now,
		limits: limits{idempotencyTTL: defaultIdempotencyTTL},
		dbPath: fresh,
		keys:   []string{testKey, otherTestKey},
		events: defaultFeedConfig(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.sqliteOnly:
	case testBackend == "postgres":
		cfg.dbPath = migratedPostgres(t)
	default:
		rerunOnPostgres(t)
	}
	if cfg.dbPath == fresh {
		copyMigratedDatabase(t, fresh)
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
	srv := startTestHTTP(t, h)
	t.Cleanup(srv.Close)
	// Before the server closes (cleanups run last first): Close waits for
	// every request, and a stream ends only when the feed stops.
	t.Cleanup(events.stop)
	return &testServer{URL: srv.URL, DBPath: cfg.dbPath, Store: st, Handler: h, Log: logBuf, Feed: events, Keys: keys}
}

// urlLine is the launch contract: the line the service prints once it accepts
// connections.
var urlLine = regexp.MustCompile(`^petstore listening on (https?://[a-z0-9.-]+:[0-9]+)$`)

// runningService is run() started in-process, as an integration test of
// another project would start the binary.
type runningService struct {
	URL    string
	Stdout *syncBuffer // what follows the URL line
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
	rs := &runningService{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
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
	stdout := bufio.NewReader(stdoutR)
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("no URL line on stdout: %v; stderr:\n%s", err, rs.Stderr)
	}
	go io.Copy(rs.Stdout, stdout)
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
		if path := os.Getenv(binaryVariable); path != "" {
			testBinary.path = path // built by the run outside a network namespace
			return
		}
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

// goTool runs command, a go tool -n command line that may begin with
// NAME=VALUE settings of its environment, and returns the path it prints:
// that of a tool a go.mod pins, built into the build cache on first use
// and afterwards only found there (a go build -o would link it again for
// every test binary: versitygw about 10 s of CPU, Pebble 5). When the build
// fails, the error holds the go command's first line (a module it could
// not download, a version missing from go.sum), the rest counted.
func goTool(command string) (string, error) {
	words := strings.Fields(command)
	settings := slices.IndexFunc(words, func(w string) bool { return !strings.Contains(w, "=") })
	cmd := exec.Command(words[settings], words[settings+1:]...)
	cmd.Env = append(os.Environ(), words[:settings]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		first, rest, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		if rest != "" {
			first += fmt.Sprintf(" (and %d more lines)", strings.Count(rest, "\n")+1)
		}
		return "", fmt.Errorf("%s: %v: %s", strings.Join(words[settings:], " "), err, first)
	}
	return strings.TrimSpace(string(out)), nil
}

// builtBinaryEnv is the environment that hands the service this run built
// to a run of the test binary it starts after its own tests (the runs on
// PostgreSQL and over HTTPS), which would otherwise build it again: none
// when it was not built.
func builtBinaryEnv() []string {
	if testBinary.path == "" || testBinary.err != nil {
		return nil
	}
	return []string{binaryVariable + "=" + testBinary.path}
}

// process is the real binary, started by startBinary.
type process struct {
	Cmd    *exec.Cmd
	URL    string
	Stderr *syncBuffer // everything the process logged

	waitOnce sync.Once
	waitErr  error
}

// wait waits for the process to exit, once whoever calls it (a test, and
// the cleanup that kills it), and returns how it exited.
func (p *process) wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.Cmd.Wait() })
	return p.waitErr
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
	p.Cmd.Env = append(append(os.Environ(), env...), replicaEnvFor(t, cmd.Dir, env)...)
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
		p.wait()
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
	tr := testTransport()
	tr.ExpectContinueTimeout = time.Minute
	client := &http.Client{Transport: tr}
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

// migratedDatabase is a SQLite file of this test binary, created and
// migrated once by the store itself, which copyMigratedDatabase copies to
// each new test server's path: the migrations parse and run every table's
// definition again, which under the race detector took a tenth of the
// suite's CPU when each test server ran them. Every migration still runs in
// the tests that choose their file (atPath) or start the binary, and in
// the migration tests.
var migratedDatabase struct {
	once sync.Once
	data []byte
	err  error
}

// copyMigratedDatabase writes the migrated database to path, a new file
// that only this process's user may read, as openStore creates one.
func copyMigratedDatabase(t testing.TB, path string) {
	t.Helper()
	migratedDatabase.once.Do(func() {
		migratedDatabase.data, migratedDatabase.err = newMigratedDatabase()
	})
	if migratedDatabase.err != nil {
		t.Fatalf("the migrated database of the test binary: %v", migratedDatabase.err)
	}
	if err := os.WriteFile(path, migratedDatabase.data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// newMigratedDatabase creates a database in a directory of its own with
// openStore, closes it (which checkpoints its log into the file), and
// returns the file's bytes.
func newMigratedDatabase() ([]byte, error) {
	dir, err := os.MkdirTemp("", "petstore-migrated-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pets.db")
	st, err := openStore(context.Background(), path, 0)
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the store left its log %s-wal after Close (%v): the file alone is not the database", path, err)
	}
	return os.ReadFile(path)
}
