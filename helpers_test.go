package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The helpers the tests share, one file per concern: starting the service
// (helpers_start_test.go), sending requests and walking pages
// (helpers_http_test.go), PostgreSQL (helpers_postgres_test.go), faults
// (helpers_faults_test.go), load (helpers_load_test.go), the S3 server of
// the replication tests (helpers_s3_test.go); this one holds the
// test keys, TestMain and the parts a run may skip, the fake clock, waiting
// for a state, the captured log and small file helpers. There is one way to
// do each thing: a helper is extended rather than written again.

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

// slogTo returns a JSON logger writing to w, whose records a test reads
// with syncBuffer.records.
func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

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

// eventuallyWithin bounds eventually's wait. A condition that holds ends
// the wait at once, so the bound costs a passing test nothing; it is long
// enough for a condition met by work in the background (deliveries,
// replication) on a loaded 2-core machine running the whole suite.
const eventuallyWithin = 30 * time.Second

// eventually polls cond every 20 ms for up to eventuallyWithin, for a state
// that another process or goroutine reaches at a moment the test cannot
// observe directly (a file rewritten, a signal handled).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(eventuallyWithin, 20*time.Millisecond, cond) {
		t.Fatalf("after %v: %s", eventuallyWithin, what)
	}
}

// waitUntil polls cond every interval (0: without a pause) until it holds,
// or within has passed, and reports whether it held: eventually, for a test
// that has more to do than fail when it does not.
func waitUntil(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
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

// TestMain gives the tests an AWS environment of their own, runs them,
// stops the servers they share and removes the binaries they built, and says
// which parts of the suite were skipped because this machine lacks what they
// need.
func TestMain(m *testing.M) {
	isolateAWSEnvironment()
	if testTLS {
		trustTestServers()
	}
	runMoreTestsAtOnce()
	firstRun := testBackend == "" && !testTLS && !testReplica && os.Getenv(aloneVariable) == ""
	benchmarks := slices.ContainsFunc(os.Args, func(a string) bool {
		return (strings.HasPrefix(a, "-test.bench") || strings.HasPrefix(a, "-test.fuzz=")) && !strings.HasSuffix(a, "=")
	})
	start := time.Now()
	code := m.Run()
	if firstRun {
		notePartTime("the main run", time.Since(start), processCPU())
	}
	if code == 0 && firstRun && !benchmarks {
		code = runTheRunsAfter()
	}
	if testBinary.dir != "" {
		os.RemoveAll(testBinary.dir)
	}
	if testTLSFiles.dir != "" {
		os.RemoveAll(testTLSFiles.dir)
	}
	if testPostgres.cluster != nil {
		testPostgres.cluster.remove()
	}
	stopS3()
	if sharedSecret.path != "" {
		os.RemoveAll(filepath.Dir(sharedSecret.path))
	}
	reportSkippedParts()
	reportPartTimes()
	os.Exit(code)
}

// runTheRunsAfter runs the runs after the main one, on PostgreSQL and then
// over HTTPS, and returns 1 when one failed. One after the other: side by
// side, the HTTPS run's hostile tests (2,250 streams opened against the body
// budget within the read timeout) did not hold their timing, under the race
// detector and, once in seven runs, without it.
func runTheRunsAfter() int {
	if code := startOnPostgres()(); code != 0 {
		return code
	}
	return startOverTLS()()
}

// testsAtOnce is how many parallel tests run at once unless -parallel says
// otherwise. go test's default, GOMAXPROCS, suits tests that keep a CPU
// busy; most of these wait on something else (a child process, a server's
// answer, a timer, a disk's fsync), and two at a time on a 2-core machine
// left a CPU idle for a third of the run.
const testsAtOnce = 8

// runMoreTestsAtOnce sets -test.parallel to testsAtOnce when the command
// line did not set it.
func runMoreTestsAtOnce() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(testsAtOnce))
	}
}

// startPart starts cmd, a run of this test binary for a part of the suite
// (named what). Its output is kept until wait, which
// waits for it, prints its output whole (the runs' lines never interleave),
// records its time, and returns 1 when it failed.
func startPart(cmd *exec.Cmd, what string) (wait func() int) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Start()
	return func() int {
		if err == nil {
			err = cmd.Wait()
		}
		notePartTime(what, time.Since(start), childCPU(cmd))
		os.Stdout.Write(out.Bytes())
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s failed: %v\n", what, err)
			return 1
		}
		return 0
	}
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

// reportSkippedParts prints the lines missingPart recorded, through
// reportLines.
func reportSkippedParts() {
	skippedParts.mu.Lock()
	defer skippedParts.mu.Unlock()
	reportLines(skippedParts.lines)
}

// partTimes holds, in the first run, one line per run of the test binary
// (the main run and the runs TestMain starts after it) with its wall time,
// printed once by TestMain: the suite's time is known by part, not only
// as go test's one figure for the package.
var partTimes struct {
	mu    sync.Mutex
	lines []string
}

// notePartTime records how long a run of the suite took, in wall time
// and, when known (cpu above 0), in CPU time.
func notePartTime(what string, took, cpu time.Duration) {
	line := fmt.Sprintf("%s took %.1fs", what, took.Seconds())
	if cpu > 0 {
		line += fmt.Sprintf(" (CPU %.1fs)", cpu.Seconds())
	}
	partTimes.mu.Lock()
	defer partTimes.mu.Unlock()
	partTimes.lines = append(partTimes.lines, line)
}

// processCPU is the CPU time (user and system) of this process and of the
// children it has waited for (the service binaries, Chromium, the runs in a
// process of their own), read from /proc/self/stat; 0 where there is none.
func processCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses and may
	// hold spaces: utime, stime, cutime and cstime are the 12th to 15th,
	// in ticks of 1/100 s (USER_HZ).
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 15 {
		return 0
	}
	var ticks int64
	for _, f := range fields[11:15] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// childCPU is the CPU time (user and system) of cmd's process once it has
// exited, its own children's included (wait4 reports both).
func childCPU(cmd *exec.Cmd) time.Duration {
	if cmd.ProcessState == nil {
		return 0
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// reportPartTimes prints the lines notePartTime recorded, through
// reportLines.
func reportPartTimes() {
	partTimes.mu.Lock()
	defer partTimes.mu.Unlock()
	reportLines(partTimes.lines)
}

// reportLines prints lines for the end of the run. go test shows a
// passing package's output only with -v, so the lines go to the go
// command's own standard error (the test binary's parent), where a plain
// `go test ./...` shows them in a terminal or a pipe; when that is a file,
// or cannot be reached, to the test binary's (shown with -v).
func reportLines(lines []string) {
	if len(lines) == 0 {
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
	for _, line := range lines {
		fmt.Fprintf(w, "petstore tests: %s\n", line)
	}
}

// The PostgreSQL half of the suite. The tests that talk HTTP to a
// newTestServer run twice: in this process on SQLite, then, from TestMain, in
// a second run of this same test binary on PostgreSQL (testBackend
// "postgres"), each test in a schema of its own on a throwaway cluster that
// the tests start themselves. Tests of PostgreSQL alone (replicas, faults,
// copy) run in the first run, on clusters of their own when they stop one.

// noteSkipped records a line for the end of the run, like missingPart, for
// a part of a test that cannot run here while the rest of the test does.
func noteSkipped(line string) {
	skippedParts.mu.Lock()
	defer skippedParts.mu.Unlock()
	if !slices.Contains(skippedParts.lines, line) {
		skippedParts.lines = append(skippedParts.lines, line)
	}
}

// defaultFeedConfig is the feed's settings when none is given: the flags'
// defaults.
func defaultFeedConfig() feedConfig {
	return feedConfig{retention: defaultEventsRetention, heartbeat: defaultEventsHeartbeat, maxStreams: defaultEventsMaxStreams}
}

// unusedPort returns a port that nothing listens on at ip, for a server
// started later on it (and, for some, started again on it after a stop).
// The tests that need one run in a network namespace of their own, where no
// other test runs; but a port the kernel picks for ":0" comes from its
// ephemeral range, from which it also takes the local port of every
// outgoing connection, so a connection of the test's own (to Pebble, to its
// DNS, a probe, a retry against the stopped server) could hold it when the
// server came to listen: "address already in use" (once, 2026-11-29, in
// TestAFailedOrderIsNotRetriedInALoop). So the port comes from below that
// range, which the kernel never gives a connection, and never twice in one
// process.
func unusedPort(ip string) (int, error) {
	givenPorts.Lock()
	defer givenPorts.Unlock()
	low := ephemeralLow()
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		if givenPorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue // in use: another
		}
		ln.Close()
		givenPorts.given[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port at %s below %d in 100 tries", ip, low)
}

// givenPorts are the ports unusedPort gave.
var givenPorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux's
// ip_local_port_range), or Linux's default when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if low, err := strconv.Atoi(f[0]); err == nil && low > 11000 {
			return low
		}
	}
	return 32768
}
