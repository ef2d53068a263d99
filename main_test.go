package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

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

// startRun starts run with the given environment and waits for the URL line.
func startRun(t *testing.T, env map[string]string, args ...string) *runningService {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	rs := &runningService{Stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := run(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), stdoutW, rs.Stderr)
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

func TestRunServesAndKeepsPetsAcrossRestarts(t *testing.T) {
	env := map[string]string{
		"PETSTORE_ADDR":     "127.0.0.1:0",
		"PETSTORE_DB":       filepath.Join(t.TempDir(), "pets.db"),
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

// testBinary is the service built once for the whole test binary: several
// tests run the real process, and one build is most of their cost. It is the
// test package's one piece of shared state; TestMain removes the build.
var testBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildCommand is the README's build command, word for word (a test holds
// the README and deploy/petstore.service to it): the binary the tests run is
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

// startBinary starts the built service and returns its URL once it printed it.
func startBinary(t *testing.T, bin string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd, url, _ := startBinaryWithStderr(t, bin, env...)
	return cmd, url
}

func TestSIGTERMFinishesInFlightRequestsAndClosesTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	cmd, url := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+dbPath, "PETSTORE_API_KEYS="+testKey)

	// A create whose body is still arriving when SIGTERM comes.
	bodyR, bodyW := io.Pipe()
	req, err := http.NewRequest("POST", url+"/v1/pets", bodyR)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	type result struct {
		res response
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{res: readResponse(t, res)}
	}()
	io.WriteString(bodyW, `{"name":"in-flight",`)
	time.Sleep(200 * time.Millisecond) // let the server start reading the request
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shutdown begin
	io.WriteString(bodyW, `"categoryId":3}`)
	bodyW.Close()

	r := <-got
	if r.err != nil {
		t.Fatalf("in-flight request failed: %v", r.err)
	}
	if r.res.Status != http.StatusCreated {
		t.Fatalf("in-flight create: status %d, body %s", r.res.Status, r.res.Body)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM the process exited with %v, want exit code 0", err)
	}
	// SQLite removes the WAL file when the last connection closes cleanly.
	if _, err := os.Stat(dbPath + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WAL file still present after shutdown (stat: %v): the database was not closed", err)
	}

	// The acknowledged pet is there after a restart.
	_, url = startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+dbPath, "PETSTORE_API_KEYS="+testKey)
	want := decode[Pet](t, r.res)
	if diff := cmp.Diff([]Pet{want}, decode[[]Pet](t, doRequest(t, url, "GET", "/v1/pets", "", nil))); diff != "" {
		t.Errorf("pets after restart mismatch (-want +got):\n%s", diff)
	}
}
