package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Certificates by themselves (-domain), against a real ACME server:
// Pebble, the test CA Let's Encrypt publishes, with pebble-challtestsrv as
// its DNS, answering 127.0.0.1 (or another loopback address) for the test's
// domain. Both are the module's tools (go.mod's tool lines), built once per
// test binary. Every test here runs in a network namespace of its own that
// has loopback alone (unshare -n), so that nothing can reach another
// address, the real Let's Encrypt least of all.

// testDomain is the name the tests order certificates for.
const testDomain = "petstore.test"

// acmeTools are Pebble and its DNS server, built once per test binary (in
// the build cache, by goTool) and handed to the runs in a network namespace
// (acmeToolsVariable).
var acmeTools struct {
	once                 sync.Once
	pebble, challtestsrv string
	certs                string // Pebble's test certificates (its own HTTPS)
	err                  error
}

// acmeToolsVariable and acmeCertsVariable pass the ACME tools built outside
// a network namespace to the run inside it: the paths of the two programs
// (pebble's first, a list as PATH is), and the directory of Pebble's
// certificates.
const (
	acmeToolsVariable = "PETSTORE_TEST_ACME_TOOLS"
	acmeCertsVariable = "PETSTORE_TEST_ACME_CERTS"
)

// The commands that build Pebble and pebble-challtestsrv, the versions
// go.mod's tool lines pin, and say where they are (see goTool).
const (
	pebbleBuild       = "CGO_ENABLED=0 go tool -n pebble"
	challtestsrvBuild = "CGO_ENABLED=0 go tool -n pebble-challtestsrv"
)

// buildACMETools builds Pebble and pebble-challtestsrv, and finds Pebble's
// certificates in its module.
func buildACMETools(t *testing.T) {
	t.Helper()
	acmeTools.once.Do(func() {
		if paths := os.Getenv(acmeToolsVariable); paths != "" {
			acmeTools.pebble, acmeTools.challtestsrv, _ = strings.Cut(paths, string(os.PathListSeparator))
			acmeTools.certs = os.Getenv(acmeCertsVariable)
			return
		}
		if acmeTools.pebble, acmeTools.err = goTool(pebbleBuild); acmeTools.err != nil {
			return
		}
		if acmeTools.challtestsrv, acmeTools.err = goTool(challtestsrvBuild); acmeTools.err != nil {
			return
		}
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/letsencrypt/pebble/v2").Output()
		if err != nil {
			acmeTools.err = fmt.Errorf("go list pebble: %v", err)
			return
		}
		acmeTools.certs = filepath.Join(strings.TrimSpace(string(out)), "test", "certs")
	})
	if acmeTools.err != nil {
		t.Fatal(acmeTools.err)
	}
}

// netnsVariable marks a run of the test binary inside its own network
// namespace (see inALoopbackNetwork).
const netnsVariable = "PETSTORE_TEST_NETNS"

// inALoopbackNetwork runs t's test again, alone, in a network namespace
// that has loopback alone (see inALoopbackNetworkFor), Pebble and the
// service's binary built before.
func inALoopbackNetwork(t *testing.T) bool {
	t.Helper()
	return inALoopbackNetworkFor(t, "the ACME tests", func() []string {
		// Built outside (building fetches modules through the proxy), once
		// for every test that runs inside.
		buildACMETools(t)
		return []string{acmeToolsVariable + "=" + acmeTools.pebble + string(os.PathListSeparator) + acmeTools.challtestsrv, acmeCertsVariable + "=" + acmeTools.certs,
			binaryVariable + "=" + buildBinary(t)}
	})
}

// inALoopbackNetworkFor runs t's test again, alone, in a network namespace
// that has loopback alone (unshare -n, with -r when not root), and reports
// its failure as t's; it returns false, and the test ends there. Inside
// that run it returns true, and the test goes on. Before that run, prepare
// builds what the test needs (building fetches modules through the proxy,
// which the namespace cannot reach) and returns variables to add to the
// run's environment. Without unshare (or the right to use it) the tests of
// part are skipped, and fail in CI.
func inALoopbackNetworkFor(t *testing.T, part string, prepare func() []string) bool {
	t.Helper()
	if os.Getenv(netnsVariable) == t.Name() {
		return true
	}
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		_, err = exec.LookPath("ip")
	}
	if err == nil {
		err = exec.Command(unshare, unshareFlags(), "true").Run()
	}
	missingPart(t, part+" (a network namespace of loopback alone: unshare, ip)", "apt-get install util-linux iproute2, and run as root", err)
	env := prepare()
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip", "test.count", "test.cpuprofile", "test.memprofile", "test.trace")
	args = append(args, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd := exec.CommandContext(t.Context(), unshare, append([]string{unshareFlags(), "sh", "-c", `ip link set lo up && exec "$0" "$@"`, os.Args[0]}, args...)...)
	cmd.Env = append(append(os.Environ(), env...), netnsVariable+"="+t.Name(), aloneVariable+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s in a network namespace of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}

// unshareFlags are unshare's: a network namespace; as another user than
// root, in a user namespace of its own too.
func unshareFlags() string {
	if os.Geteuid() == 0 {
		return "-n"
	}
	return "-rn"
}

// acmeCA is a Pebble started for a test, with its DNS.
type acmeCA struct {
	directory string // the ACME directory URL
	root      string // the PEM file of the roots of Pebble's own HTTPS
	mgmt      string // its management interface
	log       *syncBuffer
}

// freePort returns a port that nothing listens on at ip, for a server the
// test starts later (Pebble must know the ports it validates on before the
// service listens on them); see unusedPort.
func freePort(t *testing.T, ip string) int {
	t.Helper()
	port, err := unusedPort(ip)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startACMECA starts challtestsrv, answering dnsIP for every name, and
// Pebble, which validates HTTP-01 challenges on port httpPort and
// TLS-ALPN-01 ones on port tlsPort of that address. Certificates of the
// profile "default" last a day; "short", shortLife.
func startACMECA(t *testing.T, dnsIP string, httpPort, tlsPort int, shortLife time.Duration) *acmeCA {
	t.Helper()
	buildACMETools(t)
	dir := t.TempDir()
	dns := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
	ca := &acmeCA{root: filepath.Join(acmeTools.certs, "pebble.minica.pem"), log: &syncBuffer{}}
	startTool(t, exec.Command(acmeTools.challtestsrv, "-defaultIPv4", dnsIP, "-defaultIPv6", "", "-dnsserver", dns,
		"-management", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1"))),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""), ca.log, dns)
	api, mgmt := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	ca.directory = fmt.Sprintf("https://127.0.0.1:%d/dir", api)
	ca.mgmt = fmt.Sprintf("https://127.0.0.1:%d", mgmt)
	config := map[string]any{"pebble": map[string]any{
		"listenAddress": fmt.Sprintf("127.0.0.1:%d", api), "managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate": filepath.Join(acmeTools.certs, "localhost", "cert.pem"), "privateKey": filepath.Join(acmeTools.certs, "localhost", "key.pem"),
		"httpPort": httpPort, "tlsPort": tlsPort, "ocspResponderURL": "", "externalAccountBindingRequired": false,
		"retryAfter": map[string]int{"authz": 1, "order": 1},
		"profiles": map[string]any{
			"default": map[string]any{"description": "a day", "validityPeriod": 86400},
			"short":   map[string]any{"description": "for renewals", "validityPeriod": int(shortLife.Seconds())},
		},
	}}
	b, _ := json.Marshal(config)
	writeFile(t, filepath.Join(dir, "pebble.json"), string(b))
	cmd := exec.Command(acmeTools.pebble, "-config", filepath.Join(dir, "pebble.json"), "-dnsserver", dns)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	// Pebble opens its management port apart from its API: roots reads it.
	startTool(t, cmd, ca.log, fmt.Sprintf("127.0.0.1:%d", api), fmt.Sprintf("127.0.0.1:%d", mgmt))
	return ca
}

// startTool starts cmd, its output to log, and waits until each of addrs
// accepts TCP connections. It is killed, by its PID, when the test ends.
func startTool(t *testing.T, cmd *exec.Cmd, log *syncBuffer, addrs ...string) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, addr := range addrs {
		eventually(t, filepath.Base(cmd.Path)+" listens on "+addr, func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
}

// orders is how many orders the CA took.
func (ca *acmeCA) orders() int { return strings.Count(ca.log.String(), "Added order") }

// issued is how many certificates the CA issued.
func (ca *acmeCA) issued() int { return strings.Count(ca.log.String(), "Issued certificate serial") }

// roots are the roots the CA issues under, from its management interface.
func (ca *acmeCA) roots(t *testing.T) *x509.CertPool {
	t.Helper()
	trust := x509.NewCertPool()
	trust.AppendCertsFromPEM(mustRead(t, ca.root))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trust}}}
	res, err := client.Get(ca.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("Pebble's root is no PEM: %q", b)
	}
	return pool
}

// serialAt is the serial of the certificate served for name at addr, the
// chain verified against roots; "" when the handshake fails.
func serialAt(addr, name string, roots *x509.CertPool) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// startACMEService runs a service with -domain, ordering from ca,
// listening on ip at httpsPort and httpPort, plain (0: no plain listener).
func startACMEService(t *testing.T, ca *acmeCA, db, ip string, httpsPort, httpPort int, extra map[string]string) *runningService {
	t.Helper()
	env := map[string]string{"PETSTORE_DOMAIN": testDomain, "PETSTORE_ACME_CA": ca.directory, "PETSTORE_ACME_CA_ROOT": ca.root,
		"PETSTORE_ACME_EMAIL": "ops@petstore.test", "PETSTORE_ACME_PROFILE": "default",
		"PETSTORE_ADDR": net.JoinHostPort(ip, strconv.Itoa(httpsPort)),
		"PETSTORE_DB":   db, "PETSTORE_API_KEYS": testKey, "PETSTORE_LOG_FORMAT": "json"}
	for k, v := range extra {
		env[k] = v
	}
	plain := ""
	if httpPort != 0 {
		plain = net.JoinHostPort(ip, strconv.Itoa(httpPort))
	}
	return startRun(t, env, "-http-addr", plain)
}

// waitForSerial waits until addr serves a certificate for testDomain that
// roots verify, other than not, and returns its serial.
func waitForSerial(t *testing.T, addr string, roots *x509.CertPool, not string, within time.Duration) string {
	t.Helper()
	var serial string
	var last error
	if !waitUntil(within, 200*time.Millisecond, func() bool {
		serial, last = serialAt(addr, testDomain, roots)
		return last == nil && serial != not
	}) {
		t.Fatalf("%s serves no new certificate for %s within %v: %v", addr, testDomain, within, last)
	}
	return serial
}

// TestACMECertificatesByThemselves: with -domain, a certificate is ordered
// from the CA and served, by HTTP-01 alone (the CA's TLS-ALPN-01 probes
// reach nothing) and by TLS-ALPN-01 alone (no plain listener); a restart
// serves the stored certificate without a new order; a handshake for
// another name fails and orders nothing; and a short-lived certificate is
// renewed without a restart.
func TestACMECertificatesByThemselves(t *testing.T) {
	t.Parallel()
	if !inALoopbackNetwork(t) {
		return
	}
	t.Run("HTTP-01 alone", func(t *testing.T) {
		https, plain, nowhere := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
		ca := startACMECA(t, "127.0.0.1", plain, nowhere, time.Hour)
		db := filepath.Join(t.TempDir(), "pets.db")
		rs := startACMEService(t, ca, db, "127.0.0.1", https, plain, nil)
		if want := fmt.Sprintf("https://%s:%d", testDomain, https); rs.URL != want {
			t.Errorf("the launch line names %s, want %s", rs.URL, want)
		}
		roots := ca.roots(t)
		addr := fmt.Sprintf("127.0.0.1:%d", https)
		serial := waitForSerial(t, addr, roots, "", 30*time.Second)
		if got := ca.issued(); got != 1 {
			t.Errorf("the CA issued %d certificates, want 1", got)
		}

		t.Run("the API answers over it, HTTP/2 with HSTS", func(t *testing.T) {
			client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: testDomain}}}
			res := doRequestWith(t, client, "https://"+addr, "GET", "/v1/pets")
			if res.Status != http.StatusOK || res.Header.Get("Strict-Transport-Security") != hstsValue {
				t.Errorf("GET /v1/pets: %d, HSTS %q", res.Status, res.Header.Get("Strict-Transport-Security"))
			}
		})
		t.Run("another name fails at the handshake and orders nothing", func(t *testing.T) {
			orders := ca.orders()
			for _, name := range []string{"stranger.test", ""} {
				if _, err := serialAt(addr, name, roots); err == nil {
					t.Errorf("a handshake for %q was answered", name)
				}
			}
			if got := ca.issued(); got != 1 {
				t.Errorf("after strangers' handshakes the CA issued %d certificates, want 1", got)
			}
			if got := ca.orders(); got != orders {
				t.Errorf("strangers' handshakes made %d orders", got-orders)
			}
		})
		t.Run("the metric says when it expires", func(t *testing.T) {
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: testDomain}}}
			body := doRequestWith(t, client, "https://"+addr, "GET", "/metrics").Body
			at := metricValue(t, body, "petstore_tls_certificate_expiry_timestamp_seconds", map[string]string{"name": testDomain})
			if d := time.Until(time.Unix(int64(at), 0)); d < 23*time.Hour || d > 25*time.Hour {
				t.Errorf("the certificate expires in %v by the metric, want a day", d)
			}
		})
		t.Run("a restart serves the stored certificate with no new order", func(t *testing.T) {
			if err := rs.stop(t); err != nil {
				t.Fatal(err)
			}
			startACMEService(t, ca, db, "127.0.0.1", https, plain, nil)
			if got, err := serialAt(addr, testDomain, roots); err != nil || got != serial {
				t.Errorf("after the restart the serial served is %q (%v), want the stored %s", got, err, serial)
			}
			if got := ca.issued(); got != 1 {
				t.Errorf("after the restart the CA issued %d certificates, want 1", got)
			}
		})
	})

	t.Run("TLS-ALPN-01 alone", func(t *testing.T) {
		https, nowhere := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
		ca := startACMECA(t, "127.0.0.1", nowhere, https, time.Hour)
		startACMEService(t, ca, filepath.Join(t.TempDir(), "pets.db"), "127.0.0.1", https, 0, nil)
		waitForSerial(t, fmt.Sprintf("127.0.0.1:%d", https), ca.roots(t), "", 30*time.Second)
		if got := ca.issued(); got != 1 {
			t.Errorf("the CA issued %d certificates, want 1", got)
		}
	})

	t.Run("a short-lived certificate is renewed without a restart", func(t *testing.T) {
		https, plain := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
		ca := startACMECA(t, "127.0.0.1", plain, https, 30*time.Second)
		startACMEService(t, ca, filepath.Join(t.TempDir(), "pets.db"), "127.0.0.1", https, plain,
			map[string]string{"PETSTORE_ACME_PROFILE": "short", "PETSTORE_ACME_RENEW_CHECK": "1s"})
		addr, roots := fmt.Sprintf("127.0.0.1:%d", https), ca.roots(t)
		first := waitForSerial(t, addr, roots, "", 30*time.Second)
		second := waitForSerial(t, addr, roots, first, 60*time.Second)
		if got := ca.issued(); got < 2 {
			t.Errorf("the CA issued %d certificates, want the renewal too (served %s then %s)", got, first, second)
		}
	})
}

// TestACMEReplicasOrderOnce: two PostgreSQL replicas with one -domain make
// one order between them, and both serve that certificate; the CA validates
// against one of them (DNS names the second), which answers the challenge
// the first put in the shared storage.
func TestACMEReplicasOrderOnce(t *testing.T) {
	t.Parallel()
	if !inALoopbackNetwork(t) {
		return
	}
	db := postgresSchema(t)
	https, plain := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	ca := startACMECA(t, "127.0.0.2", plain, https, time.Hour)
	roots := ca.roots(t)
	secret := map[string]string{"PETSTORE_SECRET_FILE": sharedSecretFile(t)}
	var addrs []string
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		startACMEService(t, ca, db, ip, https, plain, secret)
		addrs = append(addrs, net.JoinHostPort(ip, strconv.Itoa(https)))
	}
	serial := waitForSerial(t, addrs[0], roots, "", 30*time.Second)
	if got := waitForSerial(t, addrs[1], roots, "", 30*time.Second); got != serial {
		t.Errorf("the replicas serve %s and %s, want one certificate", serial, got)
	}
	if got := ca.issued(); got != 1 {
		t.Errorf("the CA issued %d certificates for two replicas, want 1", got)
	}
	t.Run("a replica started later serves the stored certificate", func(t *testing.T) {
		later := freePort(t, "127.0.0.3")
		startACMEService(t, ca, db, "127.0.0.3", later, 0, secret)
		if got := waitForSerial(t, net.JoinHostPort("127.0.0.3", strconv.Itoa(later)), roots, "", 30*time.Second); got != serial {
			t.Errorf("the later replica serves %s, want the stored %s", got, serial)
		}
		if got := ca.issued(); got != 1 {
			t.Errorf("the CA issued %d certificates, want still 1", got)
		}
	})
}

// TestAFailedOrderIsNotRetriedInALoop: when the CA cannot validate the name
// (neither challenge reaches the service), the failure is logged at WARN
// with the CA's error, nothing is served, and the order is not tried again
// at once: the CA's rate limits are spared.
func TestAFailedOrderIsNotRetriedInALoop(t *testing.T) {
	t.Parallel()
	if !inALoopbackNetwork(t) {
		return
	}
	https, nowhere, alsoNowhere := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	ca := startACMECA(t, "127.0.0.1", nowhere, alsoNowhere, time.Hour)
	rs := startACMEService(t, ca, filepath.Join(t.TempDir(), "pets.db"), "127.0.0.1", https, 0, nil)
	var warned []logRecord
	eventually(t, "a WARN says the certificate was not obtained", func() bool {
		warned = rs.Stderr.find(t, "WARN", "TLS certificate not obtained; it is ordered again later, on a growing schedule")
		return len(warned) > 0
	})
	if err := warned[0].field("err"); err == "" {
		t.Errorf("the WARN gives no error: %v", warned[0])
	}
	orders := ca.orders()
	// The first retry comes a minute later: in the next seconds, nothing.
	time.Sleep(5 * time.Second) // the absence of an order can only be waited for
	if got := ca.orders(); got != orders {
		t.Errorf("%d more orders within 5 s of a failure, want none", got-orders)
	}
	if _, err := serialAt(fmt.Sprintf("127.0.0.1:%d", https), testDomain, ca.roots(t)); err == nil {
		t.Error("a certificate is served although none could be obtained")
	}
}

// TestLongServerNamesAreCutInTheLog: with -domain, handshakes for a server
// name of 50,000 characters, with TLS-ALPN-01's protocol (which CertMagic
// answers with a challenge's certificate, and logs when it has none) and
// without (no certificate for the name), leave lines of their sample, each
// under 1 KB, the name cut to 32 bytes in all of them, CertMagic's and the
// server's alike (issue 38, finding 2: each made a line of 100 KB). No CA
// answers: the service orders nothing it could be given.
func TestLongServerNamesAreCutInTheLog(t *testing.T) {
	t.Parallel()
	if !inALoopbackNetwork(t) {
		return
	}
	https, nowhere := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	addr := fmt.Sprintf("127.0.0.1:%d", https)
	rs := startRun(t, map[string]string{"PETSTORE_DOMAIN": testDomain, "PETSTORE_ACME_CA": fmt.Sprintf("https://127.0.0.1:%d/dir", nowhere),
		"PETSTORE_ADDR": addr, "PETSTORE_DB": filepath.Join(t.TempDir(), "pets.db"), "PETSTORE_API_KEYS": testKey, "PETSTORE_LOG_FORMAT": "json"},
		"-http-addr", "")
	long := strings.Repeat("a", 50_000) + ".test"
	const n = 200
	start := time.Now()
	for i := range n {
		config := &tls.Config{ServerName: long, InsecureSkipVerify: true}
		if i%2 == 0 {
			config.NextProtos = []string{"acme-tls/1"}
		}
		if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, config); err == nil {
			conn.Close()
			t.Fatalf("a handshake for a name of %d characters succeeded", len(long))
		}
	}
	eventually(t, "CertMagic's lines of the challenges it could not answer", func() bool {
		return strings.Contains(rs.Stderr.String(), `"msg":"tls-alpn challenge"`)
	})
	logged := rs.Stderr.String()
	// Every line read was logged by now: at most the burst and the rate
	// since the first handshake.
	elapsed := time.Since(start)
	lines := 0
	for line := range strings.Lines(logged) {
		if strings.Contains(line, "aaaa") {
			lines++
		}
		if len(line) > 1024 || strings.Contains(line, strings.Repeat("a", 33)) {
			t.Errorf("a log line of %d bytes holds the server name: %.300s", len(line), line)
		}
	}
	if most := authFailureLogBurst + int(elapsed.Seconds()*authFailureLogRate) + 1; lines > most {
		t.Errorf("%d handshakes in %v were logged in %d lines, want at most %d", n, elapsed, lines, most)
	}
}
