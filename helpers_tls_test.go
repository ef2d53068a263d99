package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
// the core API's and the change feed's (its streams included).
var overTLSFiles = []string{"pets_test.go", "orders_test.go", "events_test.go", "events_keys_test.go", "hostile_test.go", "hostile_linux_test.go"}

// overTLS collects the tests of overTLSFiles that started a test server in
// this run, which the run over HTTPS runs again.
var overTLS struct {
	once  sync.Once
	tests map[string]bool // the top-level tests of overTLSFiles
	mu    sync.Mutex
	names map[string]bool
}

// startTestHTTP serves h for a test: over plain HTTP, or over HTTPS with
// HTTP/2 in the run over TLS.
func startTestHTTP(t testing.TB, h http.Handler) *httptest.Server {
	if testTLS {
		srv := httptest.NewUnstartedServer(h)
		srv.EnableHTTP2 = true
		srv.StartTLS()
		return srv
	}
	if testBackend == "" {
		rerunOverTLS(t)
	}
	return httptest.NewServer(h)
}

// rerunOverTLS records t's top-level test for the run over HTTPS when it is
// one of overTLSFiles'.
func rerunOverTLS(t testing.TB) {
	overTLS.once.Do(func() { overTLS.tests = testsOfFiles(overTLSFiles) })
	name, _, _ := strings.Cut(t.Name(), "/")
	if !overTLS.tests[name] {
		return
	}
	overTLS.mu.Lock()
	defer overTLS.mu.Unlock()
	if overTLS.names == nil {
		overTLS.names = map[string]bool{}
	}
	overTLS.names[name] = true
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

// runOverTLS runs the tests recorded by rerunOverTLS again, over HTTPS and
// HTTP/2, in a test binary of its own.
func runOverTLS() int {
	overTLS.mu.Lock()
	names := slices.Sorted(maps.Keys(overTLS.names))
	overTLS.mu.Unlock()
	if len(names) == 0 {
		return 0
	}
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip")
	args = append(args, "-test.run=^("+strings.Join(names, "|")+")$")
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), tlsVariable+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	notePartTime(fmt.Sprintf("the run over HTTPS and HTTP/2 of %d tests", len(names)), time.Since(start), childCPU(cmd))
	if err != nil {
		fmt.Fprintf(os.Stderr, "the run over HTTPS and HTTP/2 of %d tests failed: %v\n", len(names), err)
		return 1
	}
	return 0
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
	for _, file := range overTLSFiles {
		if len(testsOfFiles([]string{file})) == 0 {
			t.Errorf("%s declares no test: the run over HTTPS and HTTP/2 would skip it", file)
		}
	}
}
