package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Test helpers: the one switch that runs the tests of the core API and of
// the feed again over HTTPS and HTTP/2. Their servers are started by
// startTestHTTP, which serves TLS with HTTP/2 when tlsVariable is set; the
// requests go through http.DefaultClient, which then trusts httptest's
// certificate, and doRequest checks that each one went over HTTP/2. TestMain
// runs those tests again that way once the first run has passed.

// tlsVariable switches the test servers to HTTPS with HTTP/2.
const tlsVariable = "PETSTORE_TEST_TLS"

// testTLS is true in the run over HTTPS.
var testTLS = os.Getenv(tlsVariable) != ""

// overTLSFiles are the files whose tests run again over HTTPS and HTTP/2:
// what differs on that path. The transport's bounds (hostile_test.go and
// hostile_linux_test.go: stalled streams and connections, the body budget,
// header limits), the streams of the change feed (events_test.go,
// events_keys_test.go), and the core API's requests and error bodies
// (pets_test.go). The orders' rules (orders_test.go) run once, over
// HTTP/1.1: they are the handlers' and the store's, and the requests they
// make (JSON bodies, refusals, Idempotency-Key) are the pets' over HTTP/2.
var overTLSFiles = []string{"pets_test.go", "events_test.go", "events_keys_test.go", "hostile_test.go", "hostile_linux_test.go"}

// startTestHTTP serves h for a test: over plain HTTP, or over HTTPS with
// HTTP/2 in the run over TLS.
func startTestHTTP(t testing.TB, h http.Handler) *httptest.Server {
	if testTLS {
		srv := httptest.NewUnstartedServer(h)
		srv.EnableHTTP2 = true
		srv.StartTLS()
		return srv
	}
	return httptest.NewServer(h)
}

// testsOfFiles returns the names of the top-level tests that files declare.
func testsOfFiles(files []string) map[string]bool {
	tests := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			continue // the run over HTTPS then misses this file's tests, and TestTheCoreTestsRunOverTLS says so
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				tests[fn.Name.Name] = true
			}
		}
	}
	return tests
}

// startOverTLS starts the run of the tests of overTLSFiles (those that
// -run and -skip choose) over HTTPS and HTTP/2, in a test binary of its
// own, after the PostgreSQL run. wait waits for it, prints its output, and
// returns 1 when it failed.
func startOverTLS() (wait func() int) {
	names := slices.DeleteFunc(slices.Sorted(maps.Keys(testsOfFiles(overTLSFiles))), func(name string) bool { return !chosenOnTheCommandLine(name) })
	if len(names) == 0 {
		return func() int { return 0 }
	}
	cmd := exec.Command(os.Args[0], sideRunArgs(names, tlsTestsAtOnce)...)
	cmd.Env = append(append(os.Environ(), tlsVariable+"=1"), builtBinaryEnv()...)
	return startPart(cmd, fmt.Sprintf("the run over HTTPS and HTTP/2 of %d tests", len(names)))
}

// testTLSFiles are, in the run over HTTPS, the files of httptest's
// certificate and its private key, which the services that the hostile
// tests start (startHostileTarget) serve, so that http.DefaultClient trusts
// them as it trusts httptest's servers.
var testTLSFiles struct{ dir, cert, key string }

// trustTestServers makes http.DefaultClient trust the certificate that
// every httptest TLS server presents (one, built into httptest), and speak
// HTTP/2 to them, and writes that certificate to testTLSFiles.
func trustTestServers() {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	writeTestTLSFiles(srv.TLS.Certificates[0])
	srv.Close()
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.ForceAttemptHTTP2 = true
	http.DefaultClient.Transport = t
}

// testTransport is a new transport that trusts what http.DefaultClient
// trusts: in the run over HTTPS, httptest's certificate, over HTTP/2.
func testTransport() *http.Transport {
	if tr, ok := http.DefaultClient.Transport.(*http.Transport); ok {
		return tr.Clone()
	}
	return http.DefaultTransport.(*http.Transport).Clone()
}

// writeTestTLSFiles writes cert, its chain and its private key, as PEM, to
// the files of testTLSFiles, in a directory TestMain removes.
func writeTestTLSFiles(cert tls.Certificate) {
	dir, err := os.MkdirTemp("", "petstore-tls-")
	if err != nil {
		panic(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		panic(err)
	}
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	testTLSFiles.dir, testTLSFiles.cert, testTLSFiles.key = dir, filepath.Join(dir, "test.crt"), filepath.Join(dir, "test.key")
	if err := os.WriteFile(testTLSFiles.cert, chain, 0o600); err != nil {
		panic(err)
	}
	if err := os.WriteFile(testTLSFiles.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		panic(err)
	}
}

// TestTheCoreTestsRunOverTLS: the files whose tests run again over HTTPS
// declare tests, so that a renamed file cannot turn the run over HTTPS
// into nothing without a word.
func TestTheCoreTestsRunOverTLS(t *testing.T) {
	t.Parallel()
	for _, file := range overTLSFiles {
		if len(testsOfFiles([]string{file})) == 0 {
			t.Errorf("%s declares no test: the run over HTTPS and HTTP/2 would skip it", file)
		}
	}
}

// chosenOnTheCommandLine reports whether the top-level test name is among
// those that -run and -skip choose (by their first element: a pattern
// that names subtests chooses the tests that hold them).
func chosenOnTheCommandLine(name string) bool {
	matches := func(flagName string) (set, ok bool) {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return false, false
		}
		pattern, _, _ := strings.Cut(f.Value.String(), "/")
		re, err := regexp.Compile(pattern)
		return true, err == nil && re.MatchString(name)
	}
	if set, ok := matches("test.run"); set && !ok {
		return false
	}
	if set, ok := matches("test.skip"); set && ok && !strings.Contains(flag.Lookup("test.skip").Value.String(), "/") {
		return false
	}
	return true
}
