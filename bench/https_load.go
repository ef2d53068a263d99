package main

// The loads of bench https beyond wrk's: h2load for HTTP/2 (and HTTP/1.1 as
// its control), a Go load of new TLS connections with full handshakes, the
// certificate they all use, and the kinds of work a CPU profile shows.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// certificate is the benchmark's own TLS certificate: an ECDSA P-256 key
// and a self-signed certificate for 127.0.0.1, in PEM files, and the pool
// of roots that trusts it.
type certificate struct {
	certFile, keyFile string
	roots             *x509.CertPool
}

// makeCertificate makes the benchmark's certificate in dir, valid for a
// day: what a shop's own certificate looks like to the service (-tls-cert,
// -tls-key), with the key type most CAs issue for speed.
func makeCertificate(dir string) (certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certificate{}, fmt.Errorf("generate the key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "petstore bench"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return certificate{}, fmt.Errorf("create the certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return certificate{}, err
	}
	c := certificate{certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), roots: x509.NewCertPool()}
	if err := os.WriteFile(c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return certificate{}, err
	}
	if err := os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return certificate{}, err
	}
	c.roots.AddCert(leaf)
	return c, nil
}

// h2loadCreateBody is the body of every create h2load sends (-d sends one
// file each time). Pets need not have distinct names, so every POST makes
// a new pet, as wrk's creates do.
const h2loadCreateBody = `{"name":"bench-h2load","categoryId":3}`

// h2loadGetURIs is how many random ids h2load's get scenario cycles
// through (-i): each connection goes through the list in order, so the ids
// are a fixed random sample of the table rather than wrk's fresh draw per
// request; at 1,000 pets the sample covers the table several times.
const h2loadGetURIs = 4096

// The lines of h2load's summary that runH2load reads.
var (
	h2loadFinished = regexp.MustCompile(`finished in ([0-9.]+)(s|ms|us),`)
	h2loadRequests = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, \d+ succeeded, \d+ failed, (\d+) errored, (\d+) timeout`)
	h2loadStatuses = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2loadTLS      = regexp.MustCompile(`(?m)^(TLS Protocol|Cipher|Server Temp Key|Application protocol): (.*)$`)
)

// runH2load runs one h2load load of scenario sc (list-first, get or create,
// the requests of wrk's scripts) on url for d, with o's connections and
// threads and o.streams concurrent streams per connection: HTTP/2 over
// TLS, or HTTP/1.1 with h1 (over plain HTTP for an http:// URL). It returns
// the figures in wrk's terms, the latencies read from h2load's log of every
// request (its summary has no percentiles), and what h2load says of the
// TLS it negotiated.
func runH2load(ctx context.Context, o httpsOptions, dir, sc, url string, h1 bool, d time.Duration) (wrkResult, string, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	logFile := filepath.Join(dir, "h2load-requests.tsv")
	args := []string{"-c", strconv.Itoa(o.h2conns), "-t", strconv.Itoa(o.threads), "-m", strconv.Itoa(o.streams),
		"-D", strconv.Itoa(secs), "--log-file", logFile, "-H", "Authorization: Bearer " + benchKey}
	if h1 {
		args = append(args, "--h1")
	}
	switch sc {
	case "list-first":
		args = append(args, url+"/v1/pets?limit=20")
	case "get":
		uris := filepath.Join(dir, "h2load-get.uris")
		if err := writeGetURIs(uris, url, o.pets); err != nil {
			return wrkResult{}, "", err
		}
		args = append(args, "-i", uris)
	case "create":
		body := filepath.Join(dir, "h2load-create.json")
		if err := os.WriteFile(body, []byte(h2loadCreateBody), 0o644); err != nil {
			return wrkResult{}, "", err
		}
		args = append(args, "-d", body, "-H", "Content-Type: application/json", url+"/v1/pets")
	default:
		return wrkResult{}, "", fmt.Errorf("h2load: no requests for the scenario %q", sc)
	}
	out, err := exec.CommandContext(ctx, "h2load", args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, "", fmt.Errorf("h2load %s: %v\n%s", sc, err, out)
	}
	r, err := parseH2load(string(out))
	if err != nil {
		return r, "", fmt.Errorf("h2load %s: %w\n%s", sc, err, out)
	}
	if r.P50US, r.P99US, r.MaxUS, err = h2loadLatencies(logFile); err != nil {
		return r, "", fmt.Errorf("h2load %s: %w", sc, err)
	}
	var negotiated []string
	for _, m := range h2loadTLS.FindAllStringSubmatch(string(out), -1) {
		negotiated = append(negotiated, m[1]+": "+strings.TrimSpace(m[2]))
	}
	want := "Application protocol: h2"
	if strings.HasPrefix(url, "http://") {
		want += "c"
	}
	if !h1 && !slices.Contains(negotiated, want) {
		return r, "", fmt.Errorf("h2load %s did not speak HTTP/2 (%s)", sc, strings.Join(negotiated, ", "))
	}
	return r, strings.Join(negotiated, ", "), nil
}

// parseH2load reads the requests, their statuses and errors, and the
// duration of the load from h2load's summary.
func parseH2load(out string) (wrkResult, error) {
	fin := h2loadFinished.FindStringSubmatch(out)
	reqs := h2loadRequests.FindStringSubmatch(out)
	statuses := h2loadStatuses.FindStringSubmatch(out)
	if fin == nil || reqs == nil || statuses == nil {
		return wrkResult{}, errors.New("no summary in its output")
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	secs, _ := strconv.ParseFloat(fin[1], 64)
	unit := map[string]float64{"s": 1e6, "ms": 1e3, "us": 1}[fin[2]]
	return wrkResult{
		Requests:     n(reqs[1]),
		DurationUS:   int64(secs * unit),
		Non2xx:       n(statuses[2]) + n(statuses[3]) + n(statuses[4]),
		SocketErrors: n(reqs[2]) + n(reqs[3]),
		Timeouts:     n(reqs[3]),
	}, nil
}

// h2loadLatencies reads the p50, p99 and longest request time, in µs, from
// h2load's log file (a line per request: start, status, µs to the end of
// the response).
func h2loadLatencies(file string) (p50, p99, longest int64, err error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	var times []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 3 {
			continue
		}
		us, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		times = append(times, time.Duration(us)*time.Microsecond)
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	if len(times) == 0 {
		return 0, 0, 0, fmt.Errorf("%s logs no request", file)
	}
	slices.Sort(times)
	return percentile(times, 50).Microseconds(), percentile(times, 99).Microseconds(), times[len(times)-1].Microseconds(), nil
}

// writeGetURIs writes h2loadGetURIs URLs of pets of url, ids drawn at
// random from 1 to n with a fixed seed (every run the same sample), one a
// line, for h2load -i.
func writeGetURIs(file, url string, n int64) error {
	rng := mathrand.New(mathrand.NewPCG(7919, uint64(n)))
	var b strings.Builder
	for range h2loadGetURIs {
		fmt.Fprintf(&b, "%s/v1/pets/%d\n", url, 1+rng.Int64N(n))
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// handshakeClient is the TLS of every connection of the handshake load:
// TLS 1.3 only, full handshakes (no session cache, no tickets: the client
// offers no PSK mode, so the server sends no ticket either), Go's default
// key exchanges, the certificate verified against roots, HTTP/1.1.
func handshakeClient(roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		RootCAs:                roots,
		ServerName:             "127.0.0.1",
		MinVersion:             tls.VersionTLS13,
		MaxVersion:             tls.VersionTLS13,
		NextProtos:             []string{"http/1.1"},
		ClientSessionCache:     nil,
		SessionTicketsDisabled: true,
	}
}

// handshakeTimeout bounds each connection of the handshake load, from the
// dial to the server's close.
const handshakeTimeout = 10 * time.Second

// runHandshakes loads url (https://127.0.0.1:PORT) with new connections for
// d: each of workers goroutines dials, makes a full TLS 1.3 handshake,
// sends GET /healthz with Connection: close, reads the answer and the
// server's close, and starts again. Requests counts the connections whose
// answer was read; the latencies are those of whole connections. It
// returns what the connections negotiated too, and fails if any resumed a
// session.
func runHandshakes(ctx context.Context, workers int, url string, roots *x509.CertPool, d time.Duration) (wrkResult, string, error) {
	addr, ok := strings.CutPrefix(url, "https://")
	if !ok {
		return wrkResult{}, "", fmt.Errorf("%s is not an https URL", url)
	}
	ctx, cancel := context.WithTimeout(ctx, d+handshakeTimeout+5*time.Second)
	defer cancel()
	cfg := handshakeClient(roots)
	request := []byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: petstore-bench\r\nConnection: close\r\n\r\n")
	type workerResult struct {
		times          []time.Duration
		non2xx, failed int64
		firstErr       error
		state          *tls.ConnectionState
		resumed        bool
	}
	results := make(chan workerResult, workers)
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		go func() {
			var r workerResult
			defer func() { results <- r }()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				begin := time.Now()
				status, state, err := oneHandshake(ctx, addr, cfg, request)
				if err != nil {
					r.failed++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				if state.DidResume {
					r.resumed = true
					return
				}
				if r.state == nil {
					r.state = &state
				}
				if status != http.StatusOK {
					r.non2xx++
				}
				r.times = append(r.times, time.Since(begin))
			}
		}()
	}
	var all []time.Duration
	res := wrkResult{}
	var negotiated string
	var firstErr error
	resumed := false
	for range workers {
		r := <-results
		all = append(all, r.times...)
		res.Non2xx += r.non2xx
		res.SocketErrors += r.failed
		firstErr = cmpErr(firstErr, r.firstErr)
		resumed = resumed || r.resumed
		if r.state != nil && negotiated == "" {
			s := r.state
			negotiated = fmt.Sprintf("%s, %s, key exchange %s, ALPN %s, certificate %s", tls.VersionName(s.Version), tls.CipherSuiteName(s.CipherSuite), s.CurveID, s.NegotiatedProtocol, certificateKind(s.PeerCertificates))
		}
	}
	res.DurationUS = time.Since(start).Microseconds()
	if resumed {
		return res, "", errors.New("a connection resumed a TLS session: the handshakes were not all full ones")
	}
	if len(all) == 0 {
		return res, "", fmt.Errorf("no connection to %s answered: %v", url, firstErr)
	}
	if res.SocketErrors > 0 {
		fmt.Fprintf(os.Stderr, "handshakes to %s: %d connections failed, the first: %v\n", url, res.SocketErrors, firstErr)
	}
	res.Requests = int64(len(all))
	slices.Sort(all)
	res.P50US, res.P99US, res.MaxUS = percentile(all, 50).Microseconds(), percentile(all, 99).Microseconds(), all[len(all)-1].Microseconds()
	return res, negotiated, nil
}

// certificateKind names the key of the first certificate ("ECDSA P-256").
func certificateKind(chain []*x509.Certificate) string {
	if len(chain) == 0 {
		return "none"
	}
	if k, ok := chain[0].PublicKey.(*ecdsa.PublicKey); ok {
		return "ECDSA " + k.Curve.Params().Name
	}
	return chain[0].PublicKeyAlgorithm.String()
}

// oneHandshake is one connection of the handshake load: dial, handshake,
// one request, its answer, then the rest of the stream up to the server's
// close. The server closes first (the request says Connection: close), so
// the connection's TIME_WAIT is on the server's side, and the load does not
// run out of local ports however many connections it opens.
func oneHandshake(ctx context.Context, addr string, cfg *tls.Config, request []byte) (int, tls.ConnectionState, error) {
	dialer := net.Dialer{Timeout: handshakeTimeout}
	raw, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, tls.ConnectionState{}, err
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return 0, tls.ConnectionState{}, err
	}
	if err := conn.HandshakeContext(ctx); err != nil {
		return 0, tls.ConnectionState{}, fmt.Errorf("handshake: %w", err)
	}
	if _, err := conn.Write(request); err != nil {
		return 0, tls.ConnectionState{}, err
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, tls.ConnectionState{}, fmt.Errorf("read the answer: %w", err)
	}
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return 0, tls.ConnectionState{}, fmt.Errorf("read the answer: %w", err)
	}
	res.Body.Close()
	if _, err := io.Copy(io.Discard, br); err != nil {
		return 0, tls.ConnectionState{}, fmt.Errorf("wait for the server's close: %w", err)
	}
	return res.StatusCode, conn.ConnectionState(), nil
}

// cpuKinds sort a CPU profile's functions into kinds of work, by the start
// of their names; the first that matches wins, so the runtime's memory and
// system call functions are taken out before the rest of the runtime.
var cpuKinds = []struct {
	kind     string
	prefixes []string
}{
	{"crypto (AES-GCM, hashes, ECDSA, key exchange)", []string{"crypto/", "vendor/golang.org/x/crypto/", "golang.org/x/crypto/", "math/big."}},
	{"system calls", []string{"syscall.", "internal/runtime/syscall", "runtime/internal/syscall", "runtime.entersyscall", "runtime.exitsyscall", "runtime.reentersyscall", "runtime.futex", "runtime.epollwait", "runtime.usleep", "runtime.osyield", "runtime.write1", "runtime.read", "runtime.madvise", "runtime.mmap", "runtime.munmap", "runtime.tgkill", "runtime.rtsigprocmask"}},
	{"memory: allocation and GC", []string{
		"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.rawbyteslice", "runtime.rawstring",
		"runtime.(*mcache)", "runtime.(*mcentral)", "runtime.(*mheap)", "runtime.(*mspan)", "runtime.(*pageAlloc)", "runtime.(*spanSet)",
		"runtime.nextFreeFast", "runtime.heapSetType", "runtime.memclrNoHeapPointers", "runtime.deductAssistCredit",
		"runtime.gc", "runtime.scan", "runtime.greyobject", "runtime.findObject", "runtime.markBits", "runtime.markroot",
		"runtime.(*gcWork)", "runtime.(*gcBits)", "runtime.(*gcControllerState)", "runtime.heapBits", "runtime.typePointers", "runtime.(*typePointers)",
		"runtime.bulkBarrier", "runtime.wbBuf", "runtime.sweepone", "runtime.(*sweepLocked)", "runtime.spanOf", "runtime.pageIndexOf",
		"runtime.tryDeferToSpanScan", "runtime.(*spanQueue)", "runtime.(*spanInlineMarkBits)", "runtime.tryGetSpan", "runtime.(*mSpanStateBox)",
		"internal/runtime/gc/",
	}},
	{"goroutines: scheduling, channels, select, timers, stack growth", []string{
		"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.gopark", "runtime.goready", "runtime.ready", "runtime.execute",
		"runtime.mcall", "runtime.gogo", "runtime.newproc", "runtime.goexit", "runtime.gfget", "runtime.gfput", "runtime.casgstatus",
		"runtime.selectgo", "runtime.sellock", "runtime.selunlock", "runtime.chansend", "runtime.chanrecv", "runtime.send", "runtime.recv",
		"runtime.closechan", "runtime.acquireSudog", "runtime.releaseSudog", "runtime.(*waitq)", "runtime.(*hchan)", "runtime.(*guintptr)",
		"runtime.(*timer)", "runtime.(*timers)", "runtime.lock2", "runtime.unlock2", "runtime.runq", "runtime.globrunq", "runtime.(*gQueue)",
		"runtime.netpoll", "runtime.stealWork", "runtime.checkTimers", "runtime.wakep", "runtime.startm", "runtime.stopm", "runtime.mPark",
		"runtime.notesleep", "runtime.notewakeup", "runtime.resetspinning", "runtime.(*m).", "runtime.pidle", "runtime.handoffp",
		"runtime.newstack", "runtime.copystack", "runtime.morestack", "runtime.stackalloc", "runtime.stackfree", "runtime.stackcache",
		"runtime.adjust", "runtime.(*unwinder)", "runtime.(*stkframe)", "runtime.pcvalue", "runtime.step", "runtime.findfunc",
		"runtime.funcInfo", "runtime.funcdata", "runtime.readvarint",
	}},
	// The functions written in assembly have no package in their names.
	{"the rest of the runtime (maps, memmove, time...)", []string{"runtime.", "internal/runtime/", "aeshashbody", "memeqbody", "indexbytebody", "cmpbody", "countbytebody", "gcWriteBarrier"}},
	{"HTTP/1.1 and HTTP/2 (net/http)", []string{"net/http.", "vendor/golang.org/x/net/http2", "golang.org/x/net/http2", "vendor/golang.org/x/net/http/", "net/textproto.", "bufio.", "net/url."}},
	{"network (net, internal/poll)", []string{"net.", "internal/poll."}},
	{"the service (package main)", []string{"main."}},
	{"SQLite (modernc.org)", []string{"modernc.org/"}},
	{"other (encoding, logging, sync...)", []string{""}},
}

// cpuKindOf is the kind of work of the function named fn.
func cpuKindOf(fn string) string {
	for _, k := range cpuKinds {
		for _, p := range k.prefixes {
			if strings.HasPrefix(fn, p) {
				return k.kind
			}
		}
	}
	return cpuKinds[len(cpuKinds)-1].kind
}

// profileShares reads a CPU profile's share of each kind of work, in
// percent of the profile's samples, from every function's own time (`go
// tool pprof -top` with no function dropped).
func profileShares(ctx context.Context, file string) (map[string]float64, error) {
	rows, err := pprofTop(ctx, file, "-nodecount=1000000", "-nodefraction=0")
	if err != nil {
		return nil, err
	}
	shares := map[string]float64{}
	for _, r := range rows {
		pct, err := strconv.ParseFloat(strings.TrimSuffix(r.flatPct, "%"), 64)
		if err != nil {
			continue
		}
		shares[cpuKindOf(r.name)] += pct
	}
	return shares, nil
}

// readWriteSyscalls is the read and write system calls the process pid has
// made so far (syscr + syscw of /proc/PID/io: read(2), write(2) and their
// kin, which is how Go reads and writes sockets); -1 when it cannot be read.
func readWriteSyscalls(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	var n int64
	found := 0
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		if k == "syscr" || k == "syscw" {
			c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			n += c
			found++
		}
	}
	if found != 2 {
		return -1
	}
	return n
}
