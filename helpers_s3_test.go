package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Test helpers: a real S3-compatible server for the tests of replication,
// never a mock. It is versitygw (github.com/versity/versitygw) on its posix
// backend, which keeps each bucket as a directory: the tool of a module of
// its own, tools/versitygw, whose graph stays out of the service's go.mod.
// It is built once per test binary, outside any network namespace (a build
// may fetch modules through the proxy), and every test that uses it runs,
// alone, in a network namespace of loopback alone, as the ACME tests do
// (inALoopbackNetworkWithS3): whatever a test does wrong, the service's S3
// client reaches nothing but 127.0.0.1. A namespace for each test rather
// than one for the whole test binary, as for Pebble: the other tests may
// build with the module proxy, and each S3 test's result stays its own.
// Inside that run one server is started on first use (about 100 ms) and
// shared by the test's subtests, each with a bucket of its own
// (s3Server.newBucket); a test that stops the server for an outage starts
// one of its own (startS3Alone).

// The root credentials of every server the tests start, and the region
// the tests' clients sign for (versitygw's default).
const (
	s3AccessKey = "petstore-test-access-key"
	s3SecretKey = "petstore-test-secret-key-0123456789"
	s3Region    = "us-east-1"
)

// The one line that says the S3 parts were skipped, and how to run them.
const (
	s3Part   = "the S3 tests (versitygw, built from tools/versitygw)"
	enableS3 = "go tool -C tools/versitygw -n versitygw must succeed (it needs the module proxy once; on an empty build cache it takes about 4 minutes of CPU, later it takes under a second)"
)

// versitygwVariable passes the server built outside a network namespace
// to the test's run inside it.
const versitygwVariable = "PETSTORE_TEST_VERSITYGW"

// versitygw is the server built once per test binary (or the one the run
// outside the namespace found), in the build cache.
var versitygw struct {
	once sync.Once
	path string
	err  error
}

// versitygwBuild is how versitygw is built, from the repository's root:
// go tool -n builds the tool that tools/versitygw/go.mod pins into the
// build cache, once, and prints where it is; afterwards it only finds it
// there (go build -o linked it again for every test binary, about 10 s of
// CPU). Always with CGO off, the environment's setting whatever it is, so
// that the race run finds the same build. .ci/run builds it so ahead of the
// tests (a test holds it to this command).
const versitygwBuild = "CGO_ENABLED=0 go tool -C tools/versitygw -n versitygw"

// buildVersitygw returns the path of versitygw, the version
// tools/versitygw/go.mod pins, built by versitygwBuild on first use. A
// build that fails skips the test (fails it in CI).
func buildVersitygw(t *testing.T) string {
	t.Helper()
	versitygw.once.Do(func() {
		if path := os.Getenv(versitygwVariable); path != "" {
			versitygw.path = path
			return
		}
		versitygw.path, versitygw.err = goTool(versitygwBuild)
	})
	missingPart(t, s3Part, enableS3, versitygw.err)
	return versitygw.path
}

// inALoopbackNetworkWithS3 runs t's test again, alone, in a network
// namespace of loopback alone (inALoopbackNetworkFor), with versitygw built
// before; it returns true in that run, where the test goes on, and false
// outside it, where the test ends.
func inALoopbackNetworkWithS3(t *testing.T) bool {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs versitygw")
	}
	return inALoopbackNetworkFor(t, "the S3 tests", func() []string {
		return []string{versitygwVariable + "=" + buildVersitygw(t)}
	})
}

// isolateAWSEnvironment gives the tests an AWS environment of their own,
// set by TestMain before any test runs: the AWS SDK reads this process's
// environment directly, not run's getenv, and the processes the tests start
// inherit it. Every AWS_ variable of the machine goes (AWS_CA_BUNDLE,
// which this machine sets, makes the S3 client fail; a profile or a session
// token would be mixed with the tests' keys), and the keys of the tests'
// servers come in: no test ever signs with a developer's own.
func isolateAWSEnvironment() {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "AWS_") {
			os.Unsetenv(name)
		}
	}
	for name, value := range s3Environment() {
		os.Setenv(name, value)
	}
}

// s3Environment is the environment a service needs to reach the tests'
// servers: their keys, and nothing else of AWS.
func s3Environment() map[string]string {
	return map[string]string{"AWS_ACCESS_KEY_ID": s3AccessKey, "AWS_SECRET_ACCESS_KEY": s3SecretKey}
}

// s3Server is a versitygw the tests started, serving a directory on a port
// of 127.0.0.1 that it keeps across a stop and a start.
type s3Server struct {
	bin, root, addr string
	shared          bool        // others' tests use it: it is never stopped before the end
	log             *syncBuffer // what the server printed

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while stopped
	exited chan struct{} // closed once cmd has exited
}

// testS3 is the server that the tests of this run share, started on first
// use and stopped by TestMain.
var testS3 struct {
	once   sync.Once
	dir    string
	server *s3Server
	err    error
}

// sharedS3 returns the server the tests of this run share, starting it on
// first use. A test that stops its server uses startS3Alone instead.
func sharedS3(t *testing.T) *s3Server {
	t.Helper()
	inTheLoopbackNetwork(t)
	bin := buildVersitygw(t)
	testS3.once.Do(func() {
		testS3.dir, testS3.err = os.MkdirTemp("", "petstore-s3-")
		if testS3.err == nil {
			testS3.server, testS3.err = startS3Server(bin, testS3.dir)
		}
		if testS3.err == nil {
			testS3.server.shared = true
		}
	})
	if testS3.err != nil {
		t.Fatal(testS3.err)
	}
	return testS3.server
}

// startS3Alone starts a server of the test's own, which it may stop and
// start again (an outage) without disturbing any other test. It is stopped
// when the test ends.
func startS3Alone(t *testing.T) *s3Server {
	t.Helper()
	inTheLoopbackNetwork(t)
	bin := buildVersitygw(t)
	s, err := startS3Server(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// inTheLoopbackNetwork fails a test that would start an S3 server outside
// the network namespace of inALoopbackNetworkWithS3.
func inTheLoopbackNetwork(t *testing.T) {
	t.Helper()
	if os.Getenv(netnsVariable) == "" {
		t.Fatal("the S3 tests run in a network namespace of loopback alone: begin the test with inALoopbackNetworkWithS3")
	}
}

// stopS3 stops the shared server and removes its directory and the build,
// for TestMain.
func stopS3() {
	if testS3.server != nil {
		testS3.server.kill()
	}
	if testS3.dir != "" {
		os.RemoveAll(testS3.dir)
	}
}

// startS3Server starts versitygw on the posix backend over root, on a free
// port of 127.0.0.1 (unusedPort): inside the test's network namespace
// nothing else runs, so the port stays free until the server takes it, and
// again after a stop.
func startS3Server(bin, root string) (*s3Server, error) {
	port, err := unusedPort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &s3Server{bin: bin, root: root, addr: addr, log: &syncBuffer{}}
	return s, s.run()
}

// s3StartTimeout bounds a server's start (it listens within about 100 ms).
const s3StartTimeout = 10 * time.Second

// run starts the server's process and waits until it answers HTTP.
func (s *s3Server) run() error {
	cmd := exec.Command(s.bin, "--port", s.addr, "--quiet", "posix", s.root)
	// Its own environment, whole: versitygw reads dozens of VGW_ and ROOT_
	// variables, which a developer's shell could set. The keys go there
	// rather than in flags, out of ps.
	cmd.Env = []string{"ROOT_ACCESS_KEY_ID=" + s3AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s3SecretKey}
	cmd.Dir = s.root
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	gone := false
	answers := waitUntil(s3StartTimeout, 10*time.Millisecond, func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
		}
		// Any answer is S3's: 403 to a request without a signature.
		res, err := client.Get(s.endpoint())
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	})
	switch {
	case gone:
		return fmt.Errorf("versitygw on %s exited at start: %v; it printed:\n%s", s.addr, cmd.ProcessState, s.log)
	case !answers:
		s.kill()
		return fmt.Errorf("versitygw on %s did not answer within %v; it printed:\n%s", s.addr, s3StartTimeout, s.log)
	}
	return nil
}

// endpoint is the server's URL, the endpoint of the replicas' URLs.
func (s *s3Server) endpoint() string { return "http://" + s.addr }

// kill ends the server's process, by its PID, and waits for it to exit.
func (s *s3Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// stop kills the server, as an outage would (SIGKILL: nothing is answered
// once it returns), keeping its directory and port for start.
func (s *s3Server) stop(t *testing.T) {
	t.Helper()
	if s.shared {
		t.Fatal("the shared S3 server serves other tests: stop a server of the test's own (startS3Alone)")
	}
	s.kill()
}

// start starts the server again after stop, on the same port and
// directory, and returns once it answers.
func (s *s3Server) start(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		t.Fatal("the S3 server runs already")
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
}

// client is an S3 client of the server, as a test looks into it: path
// style, the root's keys, nothing read from the environment.
func (s *s3Server) client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s3Region,
		BaseEndpoint: aws.String(s.endpoint()),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s3AccessKey, SecretAccessKey: s3SecretKey, Source: "the tests' S3 server"}, nil
		}),
		// As the service's own client does with an endpoint set.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// s3Bucket is a bucket of a test's own, and the replica in it that the
// service is given.
type s3Bucket struct {
	Name   string
	Path   string            // the replica's path in the bucket
	URL    string            // -replicate's value: s3://Name/Path?endpoint=...&force-path-style=true
	Env    map[string]string // what the service's environment needs to reach it (s3Environment)
	Client *s3.Client        // the test's own, to look into the bucket
}

// bucketsMade numbers the buckets of this run.
var bucketsMade atomic.Int64

// newBucket creates a bucket of the test's own on the server.
func (s *s3Server) newBucket(t *testing.T) *s3Bucket {
	t.Helper()
	b := &s3Bucket{Name: fmt.Sprintf("petstore-test-%d", bucketsMade.Add(1)), Path: "petstore", Env: s3Environment(), Client: s.client()}
	b.URL = fmt.Sprintf("s3://%s/%s?endpoint=%s&force-path-style=true", b.Name, b.Path, s.endpoint())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := b.Client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b.Name)}); err != nil {
		t.Fatalf("create the bucket %s: %v", b.Name, err)
	}
	return b
}

// keys lists the keys of the objects under the replica's path, the path
// included. A listing that fails fails the test (t.Errorf) and returns
// what was listed before.
func (b *s3Bucket) keys(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(b.Client, &s3.ListObjectsV2Input{Bucket: aws.String(b.Name), Prefix: aws.String(b.Path + "/")})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Errorf("list the objects of %s/%s: %v", b.Name, b.Path, err)
			return keys
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// s3Status returns the HTTP status of an error of the S3 client, 0 when it
// is not an answer of the server.
func s3Status(err error) int {
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok {
		return re.HTTPStatusCode()
	}
	return 0
}
