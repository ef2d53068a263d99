package main

// bench https measures what HTTPS costs the service, in one run. It makes an
// ECDSA P-256 certificate for 127.0.0.1, builds the service, and starts it
// twice on databases of the same size: once over plain HTTP, once with
// -tls-cert and -tls-key. Beside them it starts the bare ceiling three
// times, over plain HTTP (HTTP/1.1 and h2c), over TLS with the same
// certificate (the bare Go TLS server), and over TLS with the service's time
// bounds (withServiceTimeouts), and, when create runs, durable bare twice (bench
// durable, durable.go: net/http and SQLite in WAL with synchronous=FULL,
// group commit, the least a durable create costs), over plain HTTP/1.1 and
// over TLS with the same certificate, each on a fresh SQLite file of its
// own.
//
// Keep-alive scenarios (list-first, get, create: the requests of the main
// benchmark's scripts), each round loading in turn, each of the service's
// loads next to the ceiling's over the same protocol: the service over plain
// HTTP/1.1 with wrk (the base of the ratios), over HTTPS HTTP/1.1 with wrk,
// over HTTPS HTTP/2 with h2load, over plain HTTP/1.1 with h2load --h1 (the
// same client as the HTTP/2 row on both sides of a ratio); the ceiling over
// plain HTTP/1.1 and over HTTPS HTTP/1.1 with wrk, and over HTTPS HTTP/2 and
// plain HTTP/2 (h2c) with h2load (what TLS and HTTP/2 cost, each apart, a
// server that does nothing else; the service serves no h2c), and with the
// service's time bounds over HTTPS HTTP/2 (what net/http's enforcement of
// them costs by itself); in create
// only, durable bare over plain HTTP/1.1 with wrk and over HTTPS HTTP/2 with
// h2load. Every other round loads them in the reverse order (inTurn). The
// bare servers answer with the service's header fields (everyAnswer). The
// report compares the service with a bare server over the same protocol and
// client: with the ceiling in list-first and get (HTTPS HTTP/2 target 0.90,
// its CPU per request at most 1.3 times the ceiling's), with durable bare in
// create (target 0.80), as the main benchmark does.
//
// The handshake scenario: new connections per second, each a full TLS 1.3
// handshake (no session cache, no tickets) and one GET /healthz, from Go
// workers in this process (runHandshakes), each round loading the bare Go
// TLS server, then the service.
//
// By default (-pin) every server runs on CPU 1 and the benchmark, with the
// clients it runs, on CPU 0: a client's TLS costs as much as the server's,
// and on two shared cores it would be taken from the server's CPU, which a
// client on another machine does not do. Every run also measures the CPU
// time of the server it loads (from /proc/PID/stat), so the report gives
// each one's CPU per request beside its throughput: the server's cost
// alone, whatever the layout. With
// -profile DIR, after the rounds of each scenario the service is loaded
// once more per service target, not counted, under a CPU profile; the
// report sorts each profile's time into kinds of work (crypto, system
// calls, allocation and GC...).

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// httpsOptions are the settings of bench https.
type httpsOptions struct {
	duration time.Duration
	rounds   int
	conns    int   // connections of wrk, and of h2load unless h2conns
	h2conns  int   // connections of h2load
	threads  int   // threads of wrk and h2load
	streams  int   // h2load's concurrent streams per connection
	pets     int64 // in each database
	workers  int   // goroutines of the handshake load
	only     []string
	profile  string // the directory of the CPU profiles; none when empty
	keep     bool
	// pin runs the servers on CPU 1 and the benchmark with its clients on
	// CPU 0 (pinnedEnv says the benchmark already runs there).
	pin     bool
	taskset string // its path, with pin
	cpus    int    // the machine's, which a pinned process does not see
	// baseline is the -baseline revision, and baselineCommit its commit:
	// the service as it was there, loaded over HTTPS HTTP/2 beside it.
	baseline, baselineCommit string
}

// pinnedEnv marks the benchmark's process once it has moved itself to CPU
// 0 (bench https -pin).
const pinnedEnv = "PETSTORE_BENCH_PINNED"

// handshakeScenario is the scenario of new connections, beside the
// keep-alive ones.
const handshakeScenario = "handshake"

// httpsScenarios are the scenarios of bench https, in the order they run.
// create comes last of the keep-alive ones, since it grows the tables.
var httpsScenarios = []string{"list-first", "get", "create", handshakeScenario}

// The targets of bench https, as the report names them: a server, the
// protocol it is loaded over, and the client that loads it.
const (
	plainWrk        = "service, plain HTTP/1.1, wrk"
	httpsWrk        = "service, HTTPS HTTP/1.1, wrk"
	httpsH2load     = "service, HTTPS HTTP/2, h2load"
	plainH2load     = "service, plain HTTP/1.1, h2load --h1"
	ceilingPlainWrk = "ceiling, plain HTTP/1.1, wrk"
	ceilingHTTPSWrk = "ceiling, HTTPS HTTP/1.1, wrk"
	ceilingH2load   = "ceiling, HTTPS HTTP/2, h2load"
	ceilingH2c      = "ceiling, plain HTTP/2 (h2c), h2load"
	boundedH2load   = "ceiling with the service's timeouts, HTTPS HTTP/2, h2load"
	durablePlainWrk = "durable bare, plain HTTP/1.1, wrk"
	durableH2load   = "durable bare, HTTPS HTTP/2, h2load"
	baselineH2load  = "baseline, HTTPS HTTP/2, h2load"
	bareTLSServer   = "bare Go TLS server (the ceiling)"
	serviceTLS      = "service"
)

// httpsTarget is one load of a round: a server, the URL it is loaded on and
// the client that loads it.
type httpsTarget struct {
	name   string
	url    string
	server *process // whose CPU time is measured
	// profiled is whether -profile profiles the server under this load
	// (the service's loads only: the ceiling has no profiles).
	profiled bool
	load     func(ctx context.Context, sc string, d time.Duration) (wrkResult, string, error)
	// commits reads the service's group commit counters, for the writes
	// a commit of each create load (the service's loads only).
	commits func(ctx context.Context) (writes, commits int64, err error)
}

// httpsScenarioResult is every round of one scenario of bench https.
type httpsScenarioResult struct {
	name    string
	targets []string               // in the order each round loads them
	runs    map[string][]wrkResult // by target, one per round
	tls     map[string]string      // by target: the TLS its client negotiated, as the client says
	// With -profile: each profiled target's profile, in the order of
	// targets.
	profiles map[string]string
}

// httpsTargetRatio is the target of every ratio HTTPS / plain of the
// keep-alive scenarios, and handshakeRatio that of the service's
// handshakes / the bare server's. ceilingTargetRatio is the target of the
// service's req/s over HTTPS HTTP/2 over the ceiling's, in list-first and
// get, and ceilingCPUTarget the most its CPU per request may be, in times
// the ceiling's (durableTarget is create's, against durable bare).
const (
	httpsTargetRatio   = 0.85
	handshakeRatio     = 0.90
	ceilingTargetRatio = 0.90
	ceilingCPUTarget   = 1.3
)

// runHTTPSBench is `bench https`: the flags read, the service built and
// started over plain HTTP and over HTTPS beside the two ceilings, each
// scenario measured in turn, and the report printed.
func runHTTPSBench(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseHTTPSOptions(args)
	if err != nil {
		return err
	}
	if err := readyForHTTPS(&o, args); err != nil {
		return err
	}
	if o.baseline != "" {
		if o.baselineCommit, err = resolveRevision(ctx, o.baseline); err != nil {
			return err
		}
	}
	r, remove, err := buildHTTPSBench(ctx, o)
	if err != nil {
		return err
	}
	defer remove()
	// Every process started here is stopped before runHTTPSBench returns,
	// by its PID, in the reverse order of their starts.
	defer r.stopAll()
	srv, err := r.startServers(ctx)
	if err != nil {
		return err
	}
	var results []httpsScenarioResult
	for _, sc := range httpsScenarios {
		if !slices.Contains(o.only, sc) {
			continue
		}
		s, err := httpsScenario(ctx, o, sc, r.scenarioTargets(srv, sc))
		if err != nil {
			return err
		}
		results = append(results, s)
	}
	printHTTPSReport(stdout, o, results)
	return nil
}

// parseHTTPSOptions reads the flags of bench https and refuses the settings
// it cannot run.
func parseHTTPSOptions(args []string) (httpsOptions, error) {
	var o httpsOptions
	fs := flag.NewFlagSet("bench https", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one load run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per scenario (each loads every target once)")
	fs.IntVar(&o.conns, "c", 32, "connections of wrk and of h2load")
	fs.IntVar(&o.h2conns, "h2-conns", 0, "connections of h2load, when other than -c (with -m, the requests in flight are h2-conns times m)")
	fs.IntVar(&o.threads, "t", 2, "threads of wrk and of h2load")
	fs.IntVar(&o.streams, "m", 1, "h2load's concurrent streams per HTTP/2 connection (1: as many requests in flight as wrk's -c)")
	fs.Int64Var(&o.pets, "pets", 1000, "pets in each database")
	fs.IntVar(&o.workers, "handshake-workers", 32, "goroutines opening new TLS connections in the handshake scenario")
	only := fs.String("scenarios", strings.Join(httpsScenarios, ","), "the scenarios to run, comma-separated")
	fs.StringVar(&o.profile, "profile", "", "after each scenario's rounds, one more run per service target, not counted, with a CPU profile of the service written to this directory")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (certificate, databases, binary)")
	fs.StringVar(&o.baseline, "baseline", "", "also build the service at this git revision and load it over HTTPS HTTP/2 right before the service in each round, and compare (e.g. main, a commit hash)")
	serviceEnvFlag(fs)
	// Once pinned, this process sees one CPU: the machine's count comes
	// in pinnedEnv.
	cpus := runtime.NumCPU()
	if n, err := strconv.Atoi(os.Getenv(pinnedEnv)); err == nil {
		cpus = n
	}
	o.cpus = cpus
	fs.BoolVar(&o.pin, "pin", cpus >= 2, "run every server on CPU 1 and the clients on CPU 0 (taskset), so that the clients' own TLS work is not taken from the server's CPU")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.h2conns == 0 {
		o.h2conns = o.conns
	}
	if o.rounds < 1 || o.duration < time.Second || o.conns < 1 || o.threads < 1 || o.threads > o.conns || o.streams < 1 || o.workers < 1 || o.h2conns < o.threads {
		return o, errors.New("-rounds, -c, -t, -m and -handshake-workers must be positive, -t at most -c and -h2-conns, -duration at least 1s")
	}
	if o.pets < 100 {
		return o, errors.New("-pets: at least 100")
	}
	for sc := range strings.SplitSeq(*only, ",") {
		if !slices.Contains(httpsScenarios, sc) {
			return o, fmt.Errorf("-scenarios: %q is none of %s", sc, strings.Join(httpsScenarios, ", "))
		}
		o.only = append(o.only, sc)
	}
	return o, nil
}

// readyForHTTPS checks that wrk and h2load are installed and that the
// benchmark runs from the repository root, finds taskset with -pin (and,
// when this process is not pinned yet, runs bench https again with args on
// the clients' CPU in its place: on success it does not return), and makes
// the profiles' directory with -profile.
func readyForHTTPS(o *httpsOptions, args []string) error {
	for _, tool := range []string{"wrk", "h2load"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed; run bench/run https, which installs it (apt-get install wrk nghttp2-client)", tool)
		}
	}
	if _, err := os.Stat("migrations"); err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	if o.pin {
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			return fmt.Errorf("-pin needs taskset (util-linux), or run with -pin=false: %w", err)
		}
		o.taskset = taskset
		if os.Getenv(pinnedEnv) == "" {
			if runtime.NumCPU() < 2 {
				return errors.New("-pin needs two CPUs; run with -pin=false")
			}
			return pinSelf(taskset, args)
		}
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	}
	return nil
}

// httpsRun is one run of bench https: its settings, the temporary
// directory with the service, wrk's scripts and the certificate in it, and
// the processes started.
type httpsRun struct {
	o       httpsOptions
	dir     string
	bin     string // the service
	baseBin string // the service at -baseline; empty without
	self    string // this program, which serves the ceilings
	cert    certificate
	started []*process // stopped by stopAll, in the reverse order of their starts
}

// buildHTTPSBench builds the service in a new temporary directory and
// writes wrk's scripts and the certificate there; remove deletes the
// directory unless -keep.
func buildHTTPSBench(ctx context.Context, o httpsOptions) (r *httpsRun, remove func(), err error) {
	dir, bin, removeDir, err := buildInTempDir(ctx, "petstore-bench-https-", o.keep)
	if err != nil {
		return nil, nil, err
	}
	r = &httpsRun{o: o, dir: dir, bin: bin}
	if r.self, err = os.Executable(); err != nil {
		removeDir()
		return nil, nil, err
	}
	if err := writeScripts(dir); err != nil {
		removeDir()
		return nil, nil, err
	}
	if r.cert, err = makeCertificate(dir); err != nil {
		removeDir()
		return nil, nil, err
	}
	if o.baselineCommit != "" {
		r.baseBin = filepath.Join(dir, "petstore-baseline")
		if err := buildRevision(ctx, o.baselineCommit, filepath.Join(dir, "baseline-src"), r.baseBin); err != nil {
			removeDir()
			return nil, nil, err
		}
	}
	return r, removeDir, nil
}

// stopAll stops every process the run started, by its PID, in the reverse
// order of their starts.
func (r *httpsRun) stopAll() {
	for _, p := range slices.Backward(r.started) {
		p.stop()
	}
}

// httpsServers are the servers a run of bench https loads.
type httpsServers struct {
	plain, https *process // the service over plain HTTP and over HTTPS
	ceiling      *process // the ceiling over plain HTTP/1.1 and h2c
	bare         *process // the ceiling over TLS: the bare Go TLS server
	bounded      *process // the same with the service's time bounds
	// Durable bare over plain HTTP/1.1 and over TLS; nil unless create
	// runs.
	durable, durableTLS *process
	baseline            *process // the service at -baseline over HTTPS; nil without
}

// startServers starts the service over plain HTTP and over HTTPS, each on
// its own database, the ceiling over plain HTTP (with h2c) and over TLS,
// and, when create runs, durable bare over plain HTTP and over TLS.
func (r *httpsRun) startServers(ctx context.Context) (httpsServers, error) {
	var s httpsServers
	var err error
	if s.plain, err = r.startService(ctx, r.bin, "plain", false); err != nil {
		return s, err
	}
	if s.https, err = r.startService(ctx, r.bin, "https", true); err != nil {
		return s, err
	}
	if r.baseBin != "" {
		if s.baseline, err = r.startService(ctx, r.baseBin, "baseline", true); err != nil {
			return s, err
		}
		fmt.Fprintf(os.Stderr, "baseline (%s) over HTTPS on %s\n", r.o.baseline, s.baseline.url)
	}
	if s.ceiling, err = r.startCeiling(ctx, "h2c"); err != nil {
		return s, err
	}
	if s.bare, err = r.startCeiling(ctx, r.cert.certFile, r.cert.keyFile); err != nil {
		return s, err
	}
	if s.bounded, err = r.startCeiling(ctx, r.cert.certFile, r.cert.keyFile, "bounds"); err != nil {
		return s, err
	}
	fmt.Fprintf(os.Stderr, "service over plain HTTP on %s, over HTTPS on %s; ceiling on %s and %s\n", s.plain.url, s.https.url, s.ceiling.url, s.bare.url)
	if !slices.Contains(r.o.only, "create") {
		return s, nil
	}
	if s.durable, err = r.startDurable(ctx, "plain"); err != nil {
		return s, err
	}
	if s.durableTLS, err = r.startDurable(ctx, "tls", r.cert.certFile, r.cert.keyFile); err != nil {
		return s, err
	}
	fmt.Fprintf(os.Stderr, "durable bare on %s and %s\n", s.durable.url, s.durableTLS.url)
	return s, nil
}

// startService makes a database of its own for the service named name and
// starts the service bin on it, over TLS with the run's certificate when
// overTLS, on the servers' CPU with -pin.
func (r *httpsRun) startService(ctx context.Context, bin, name string, overTLS bool) (*process, error) {
	o := r.o
	db := filepath.Join(r.dir, fmt.Sprintf("pets-%d-%s.db", o.pets, name))
	if err := createDatabase(ctx, bin, db, o.pets); err != nil {
		return nil, fmt.Errorf("database of %d pets for the %s service: %w", o.pets, name, err)
	}
	cmd := serviceCommand(ctx, bin, db)
	if o.pin {
		onServerCPU(cmd, o.taskset)
	}
	client := &http.Client{Timeout: startTimeout}
	if overTLS {
		cmd.Env = append(cmd.Env, "PETSTORE_TLS_CERT="+r.cert.certFile, "PETSTORE_TLS_KEY="+r.cert.keyFile)
		client.Transport = &http.Transport{TLSClientConfig: httpsClient(r.cert)}
	}
	if o.profile != "" {
		cmd.Env = append(cmd.Env, "PETSTORE_PPROF_ADDR=127.0.0.1:0")
	}
	p, _, err := startServiceCommand(ctx, cmd, client)
	if err != nil {
		return nil, fmt.Errorf("start the %s service: %w", name, err)
	}
	r.started = append(r.started, p)
	return p, nil
}

// startCeiling starts the ceiling with args after its address and pets (h2c,
// or a certificate and its key), on the servers' CPU with -pin.
func (r *httpsRun) startCeiling(ctx context.Context, args ...string) (*process, error) {
	return r.startBare(ctx, "ceiling", slices.Concat([]string{strconv.FormatInt(r.o.pets, 10)}, args)...)
}

// startDurable starts durable bare on a fresh SQLite file of its own in the
// run's directory, named after name, with args after its address and file
// (a certificate and its key, or none), on the servers' CPU with -pin.
func (r *httpsRun) startDurable(ctx context.Context, name string, args ...string) (*process, error) {
	db := filepath.Join(r.dir, "durable-"+name+".db")
	return r.startBare(ctx, "durable", slices.Concat([]string{db}, args)...)
}

// startBare starts this program's server kind (ceiling or durable) on a
// free port with args after the address, on the servers' CPU with -pin.
// Both print the ceiling's line when they listen.
func (r *httpsRun) startBare(ctx context.Context, kind string, args ...string) (*process, error) {
	cmd := serverCommand(ctx, r.self, slices.Concat([]string{kind, "127.0.0.1:0"}, args)...)
	if r.o.pin {
		onServerCPU(cmd, r.o.taskset)
	}
	p, err := startProcess(cmd, "ceiling listening on ")
	if err != nil {
		return nil, fmt.Errorf("start the %s: %w", kind, err)
	}
	r.started = append(r.started, p)
	return p, nil
}

// scenarioTargets are the loads of each round of scenario sc: the
// handshake scenario's, or the keep-alive ones, followed in create by
// durable bare's.
func (r *httpsRun) scenarioTargets(s httpsServers, sc string) []httpsTarget {
	switch sc {
	case handshakeScenario:
		return r.newConnTargets(s)
	case "create":
		return append(r.keepAliveTargets(s), r.durableTargets(s)...)
	}
	return r.keepAliveTargets(s)
}

// keepAliveTargets are the loads of each round of a keep-alive scenario, in
// their order: each of the service's next to the ceiling's over the same
// protocol, and with -baseline the baseline's right before the service's
// over HTTPS HTTP/2, so that what is compared runs side by side (the VM's
// speed moves by a fifth within minutes).
func (r *httpsRun) keepAliveTargets(s httpsServers) []httpsTarget {
	var baseline []httpsTarget
	if s.baseline != nil {
		baseline = append(baseline, httpsTarget{name: baselineH2load, url: s.baseline.url, server: s.baseline, load: r.h2load(s.baseline.url, false)})
	}
	return slices.Concat([]httpsTarget{
		{name: plainWrk, url: s.plain.url, server: s.plain, profiled: true, load: r.wrk(s.plain.url), commits: r.commitCounters(s.plain.url)},
		{name: ceilingPlainWrk, url: s.ceiling.url, server: s.ceiling, load: r.wrk(s.ceiling.url)},
		{name: httpsWrk, url: s.https.url, server: s.https, profiled: true, load: r.wrk(s.https.url), commits: r.commitCounters(s.https.url)},
		{name: ceilingHTTPSWrk, url: s.bare.url, server: s.bare, load: r.wrk(s.bare.url)},
	}, baseline, []httpsTarget{
		{name: httpsH2load, url: s.https.url, server: s.https, profiled: true, load: r.h2load(s.https.url, false), commits: r.commitCounters(s.https.url)},
		{name: ceilingH2load, url: s.bare.url, server: s.bare, load: r.h2load(s.bare.url, false)},
		{name: boundedH2load, url: s.bounded.url, server: s.bounded, load: r.h2load(s.bounded.url, false)},
		{name: plainH2load, url: s.plain.url, server: s.plain, load: r.h2load(s.plain.url, true), commits: r.commitCounters(s.plain.url)},
		{name: ceilingH2c, url: s.ceiling.url, server: s.ceiling, load: r.h2load(s.ceiling.url, false)},
	})
}

// durableTargets are the loads of durable bare in each round of create,
// beside the keep-alive ones: over plain HTTP/1.1 with wrk, over HTTPS
// HTTP/2 with h2load.
func (r *httpsRun) durableTargets(s httpsServers) []httpsTarget {
	return []httpsTarget{
		{name: durablePlainWrk, url: s.durable.url, server: s.durable, load: r.wrk(s.durable.url)},
		{name: durableH2load, url: s.durableTLS.url, server: s.durableTLS, load: r.h2load(s.durableTLS.url, false)},
	}
}

// newConnTargets are the loads of each round of the handshake scenario: the
// bare Go TLS server, then the service.
func (r *httpsRun) newConnTargets(s httpsServers) []httpsTarget {
	return []httpsTarget{
		{name: bareTLSServer, url: s.bare.url, server: s.bare, load: r.handshakes(s.bare.url)},
		{name: serviceTLS, url: s.https.url, server: s.https, profiled: true, load: r.handshakes(s.https.url)},
	}
}

// commitCounters reads the group commit counters of the service at url
// (petstore_writes_committed_total and petstore_write_commits_total).
func (r *httpsRun) commitCounters(url string) func(context.Context) (writes, commits int64, err error) {
	client := &http.Client{Timeout: startTimeout}
	if strings.HasPrefix(url, "https:") {
		client.Transport = &http.Transport{TLSClientConfig: httpsClient(r.cert)}
	}
	return func(ctx context.Context) (writes, commits int64, err error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+benchKey)
		res, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			return 0, 0, fmt.Errorf("GET /metrics: status %d, %v", res.StatusCode, err)
		}
		for line := range strings.Lines(string(body)) {
			name, value, _ := strings.Cut(strings.TrimSpace(line), " ")
			v, _ := strconv.ParseFloat(value, 64) // counters print as floats
			switch name {
			case "petstore_writes_committed_total":
				writes = int64(v)
			case "petstore_write_commits_total":
				commits = int64(v)
			}
		}
		return writes, commits, nil
	}
}

// wrk is the load of url by wrk.
func (r *httpsRun) wrk(url string) func(context.Context, string, time.Duration) (wrkResult, string, error) {
	wrkOptions := options{conns: r.o.conns, threads: r.o.threads}
	return func(ctx context.Context, sc string, d time.Duration) (wrkResult, string, error) {
		res, err := runWrk(ctx, wrkOptions, r.dir, sc, url, r.o.pets, d)
		return res, "", err
	}
}

// h2load is the load of url by h2load, over HTTP/1.1 when h1.
func (r *httpsRun) h2load(url string, h1 bool) func(context.Context, string, time.Duration) (wrkResult, string, error) {
	return func(ctx context.Context, sc string, d time.Duration) (wrkResult, string, error) {
		return runH2load(ctx, r.o, r.dir, sc, url, h1, d)
	}
}

// handshakes is the load of new TLS connections to url.
func (r *httpsRun) handshakes(url string) func(context.Context, string, time.Duration) (wrkResult, string, error) {
	return func(ctx context.Context, _ string, d time.Duration) (wrkResult, string, error) {
		return runHandshakes(ctx, r.o.workers, url, r.cert.roots, d)
	}
}

// The CPUs of bench https -pin: the servers' and the clients'.
const (
	serverCPU = "1"
	clientCPU = "0"
)

// pinSelf runs bench https again with args on the clients' CPU, in place of
// this process (the same PID): so wrk, h2load and the handshake workers,
// which run in or under this process, stay off the servers' CPU.
func pinSelf(taskset string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	argv := append([]string{"taskset", "-c", clientCPU, self, "https"}, args...)
	return syscall.Exec(taskset, argv, append(os.Environ(), pinnedEnv+"="+strconv.Itoa(runtime.NumCPU())))
}

// onServerCPU makes cmd start on the servers' CPU alone (taskset executes
// the server in its own place, so the PID is the server's). Go sizes the
// server's GOMAXPROCS to that one CPU, the same for every server loaded.
func onServerCPU(cmd *exec.Cmd, taskset string) {
	cmd.Args = append([]string{"taskset", "-c", serverCPU, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = taskset
}

// httpsClient trusts the benchmark's certificate, and nothing else.
func httpsClient(cert certificate) *tls.Config {
	return &tls.Config{RootCAs: cert.roots, MinVersion: tls.VersionTLS12}
}

// inTurn is the order of the targets' loads in round: as listed in the
// first round and every other one after it, the other way round in the
// rest, so that a drift of the VM's speed during a run favours neither of
// two targets next to each other.
func inTurn(targets []httpsTarget, round int) []httpsTarget {
	if round%2 == 0 {
		return targets
	}
	reversed := slices.Clone(targets)
	slices.Reverse(reversed)
	return reversed
}

// httpsScenario runs the rounds of one scenario on targets, after a warm-up
// of each, and with -profile one more profiled run of each service target.
func httpsScenario(ctx context.Context, o httpsOptions, sc string, targets []httpsTarget) (httpsScenarioResult, error) {
	s := httpsScenarioResult{name: sc, runs: map[string][]wrkResult{}, tls: map[string]string{}, profiles: map[string]string{}}
	for _, t := range targets {
		s.targets = append(s.targets, t.name)
		// A second of each, not counted.
		if _, _, err := t.load(ctx, sc, time.Second); err != nil {
			return s, fmt.Errorf("%s, %s: %w", sc, t.name, err)
		}
	}
	for round := range o.rounds {
		line := fmt.Sprintf("%-10s round %d:", sc, round+1)
		for _, t := range inTurn(targets, round) {
			r, negotiated, err := loadOnce(ctx, o, sc, t)
			if err != nil {
				return s, fmt.Errorf("%s, %s: %w", sc, t.name, err)
			}
			s.runs[t.name] = append(s.runs[t.name], r)
			if negotiated != "" {
				s.tls[t.name] = negotiated
			}
			line += fmt.Sprintf(" %s %.0f/s (%.0f µs CPU, %.1f syscalls, failures %d);", t.name, r.rps(), r.cpuPerRequest(), r.syscallsPerRequest(), r.Non2xx+r.SocketErrors)
		}
		fmt.Fprintln(os.Stderr, strings.TrimSuffix(line, ";"))
	}
	if o.profile == "" {
		return s, nil
	}
	for _, t := range targets {
		if !t.profiled {
			continue
		}
		file := filepath.Join(o.profile, fmt.Sprintf("https-%s-%s.pprof", sc, fileWord(t.name)))
		err := profileDuring(ctx, t.server, o.duration, file, func(d time.Duration) error {
			_, _, err := t.load(ctx, sc, d)
			return err
		})
		if err != nil {
			return s, fmt.Errorf("%s, %s: %w", sc, t.name, err)
		}
		s.profiles[t.name] = file
		fmt.Fprintf(os.Stderr, "%-10s profiled %s: %s\n", sc, t.name, file)
	}
	return s, nil
}

// loadOnce runs one counted load of target t in scenario sc, with the
// server's CPU time and system calls, and in create the service's writes
// and commits, read outside the load's CPU time.
func loadOnce(ctx context.Context, o httpsOptions, sc string, t httpsTarget) (wrkResult, string, error) {
	counted := sc == "create" && t.commits != nil
	var writes, commits int64
	if counted {
		var err error
		if writes, commits, err = t.commits(ctx); err != nil {
			return wrkResult{}, "", err
		}
	}
	pid := t.server.cmd.Process.Pid
	before, syscallsBefore := cpuTime([]int{pid}), readWriteSyscalls(pid)
	r, negotiated, err := t.load(ctx, sc, o.duration)
	if err != nil {
		return r, "", err
	}
	r.CPU = []time.Duration{cpuUsed(before, cpuTime([]int{pid}))}
	if after := readWriteSyscalls(pid); after >= 0 && syscallsBefore >= 0 {
		r.Syscalls = after - syscallsBefore
	}
	if counted {
		w, c, err := t.commits(ctx)
		if err != nil {
			return r, "", err
		}
		r.Writes, r.WriteXacts = w-writes, c-commits
	}
	return r, negotiated, nil
}

// printHTTPSReport writes the report of bench https in Markdown.
func printHTTPSReport(w io.Writer, o httpsOptions, results []httpsScenarioResult) {
	printHTTPSSettings(w, o, results)
	keepAlive := slices.DeleteFunc(slices.Clone(results), func(s httpsScenarioResult) bool { return s.name == handshakeScenario })
	if len(keepAlive) > 0 {
		printKeepAlive(w, keepAlive)
		printAgainstBare(w, keepAlive)
		printAgainstBaseline(w, o, keepAlive)
	}
	for _, s := range results {
		if s.name == handshakeScenario {
			printHandshakes(w, o, s)
		}
	}
	printHTTPSProfiles(w, o, results)
}

// printHTTPSSettings writes the report's first line (the machine and the
// settings) and the TLS each client negotiated.
func printHTTPSSettings(w io.Writer, o httpsOptions, results []httpsScenarioResult) {
	layout := "servers and clients on every CPU (-pin=false)"
	if o.pin {
		layout = fmt.Sprintf("every server on CPU %s, the clients on CPU %s (-pin)", serverCPU, clientCPU)
	}
	fmt.Fprintf(w, "%s, %d CPUs (nproc), %s; %s; %d pets in each database; wrk -t%d -c%d; h2load -t%d -c%d -m%d; %d handshake workers; %d rounds of %v per target, medians%s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.cpus, cpuModel(), layout, o.pets, o.threads, o.conns, o.threads, o.h2conns, o.streams, o.workers, o.rounds, o.duration, serviceEnvNote())
	negotiated := map[string]bool{}
	for _, s := range results {
		for _, name := range s.targets {
			if t := s.tls[name]; t != "" && !negotiated[name+t] {
				negotiated[name+t] = true
				fmt.Fprintf(w, "- TLS negotiated by %s (%s): %s\n", name, s.name, t)
			}
		}
	}
	fmt.Fprintln(w)
}

// ratioRange is the median of ratios with the lowest and highest in
// brackets.
func ratioRange(ratios []float64) string {
	return fmt.Sprintf("%.2f (%.2f to %.2f)", median(ratios, identity), slices.Min(ratios), slices.Max(ratios))
}

// met says whether ratio reaches target.
func met(ratio, target float64) string {
	if ratio >= target {
		return "met"
	}
	return "**not met**"
}

// printKeepAlive writes the table of the keep-alive scenarios, a row per
// load, and the two lines that compare the protocols with one client.
func printKeepAlive(w io.Writer, keepAlive []httpsScenarioResult) {
	fmt.Fprintln(w, "Keep-alive: each row's req/s, p50 / p99 (medians over the rounds), its ratio to the plain HTTP/1.1 row of the same server loaded by wrk (median of the per-round ratios, lowest and highest in brackets), and the server's CPU time and read and write system calls per request (its process, from /proc/PID/stat and /proc/PID/io; the clients' are not counted). \"its ratio\" is the plain row's CPU per request over this row's: the throughput ratio the server would reach if its own CPU were all that limited it (unpinned, on two shared cores, the clients' TLS work takes CPU from the server too). \"server busy\" is the server's CPU time over the run's, in cores: near 1 with -pin, the server's one CPU was the limit, not the client.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | server, protocol, client | req/s | p50 / p99 | ratio to plain HTTP/1.1 (wrk) | target | server CPU per request | its ratio | server busy | server reads + writes per request | failures |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
	for _, s := range keepAlive {
		for _, name := range s.targets {
			rs := s.runs[name]
			ratio, target, cpuRatio := keepAliveRatios(s, name)
			fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %.1f µs | %s | %.2f | %.2f | %d |\n",
				s.name, name, medianOf(rs, wrkResult.rps), latency(rs), ratio, target,
				medianOf(rs, wrkResult.cpuPerRequest), cpuRatio, medianOf(rs, wrkResult.serverBusy), medianOf(rs, wrkResult.syscallsPerRequest), failures(rs))
		}
	}
	fmt.Fprintln(w)
	var same []string
	for _, s := range keepAlive {
		same = append(same, fmt.Sprintf("%s %s", s.name, ratioRange(rpsRatios(s.runs[httpsH2load], s.runs[plainH2load]))))
	}
	fmt.Fprintf(w, "HTTPS HTTP/2 / plain HTTP/1.1 with h2load on both sides (the same client, so that only the server's protocol differs): %s.\n\n", strings.Join(same, "; "))
	var tlsAlone []string
	for _, s := range keepAlive {
		tlsAlone = append(tlsAlone, fmt.Sprintf("%s %s", s.name, ratioRange(rpsRatios(s.runs[ceilingH2load], s.runs[ceilingH2c]))))
	}
	fmt.Fprintf(w, "What TLS alone costs HTTP/2, on the ceiling: HTTPS HTTP/2 / plain HTTP/2 (h2c), h2load on both: %s.\n\n", strings.Join(tlsAlone, "; "))
	printWritesACommit(w, keepAlive)
	var timeouts []string
	for _, s := range keepAlive {
		bounded, bare := s.runs[boundedH2load], s.runs[ceilingH2load]
		cpu := medianOf(bounded, wrkResult.cpuPerRequest) / medianOf(bare, wrkResult.cpuPerRequest)
		timeouts = append(timeouts, fmt.Sprintf("%s %s, CPU per request %.2f", s.name, ratioRange(rpsRatios(bounded, bare)), cpu))
	}
	fmt.Fprintf(w, "What net/http's enforcement of the service's time bounds costs by itself, on the ceiling over HTTPS HTTP/2 (its per-stream timers, the write deadline around each write, the pings): the ceiling with them / the ceiling, h2load on both: %s.\n\n", strings.Join(timeouts, "; "))
}

// keepAliveRatios are the cells of the load name's row in scenario s that
// compare it with the plain HTTP/1.1 row of its server loaded by wrk: the
// throughput ratio, its target (the service over HTTPS only), and the CPU
// ratio; empty in the plain rows themselves.
func keepAliveRatios(s httpsScenarioResult, name string) (ratio, target, cpuRatio string) {
	base := plainBaseOf(name)
	if base == "" {
		return "", "", ""
	}
	rs := s.runs[name]
	cpuRatio = fmt.Sprintf("%.2f", medianOf(s.runs[base], wrkResult.cpuPerRequest)/medianOf(rs, wrkResult.cpuPerRequest))
	r := rpsRatios(rs, s.runs[base])
	switch name {
	case httpsWrk, httpsH2load:
		ratio = "**" + ratioRange(r) + "**"
		target = fmt.Sprintf(">= %.2f: %s", httpsTargetRatio, met(median(r, identity), httpsTargetRatio))
	case plainH2load:
		ratio = ratioRange(r) + " (the clients' difference)"
	case durableH2load:
		ratio = ratioRange(r) + " (of durable bare over plain HTTP/1.1)"
	default:
		ratio = ratioRange(r) + " (of the ceiling over plain HTTP/1.1)"
	}
	return ratio, target, cpuRatio
}

// plainBaseOf is the row the load name's ratios are to: its server's over
// plain HTTP/1.1 loaded by wrk; empty for those rows themselves.
func plainBaseOf(name string) string {
	switch name {
	case httpsWrk, httpsH2load, plainH2load:
		return plainWrk
	case ceilingHTTPSWrk, ceilingH2load, ceilingH2c, boundedH2load:
		return ceilingPlainWrk
	case durableH2load:
		return durablePlainWrk
	}
	return ""
}

// bareComparison compares a load of the service with a load of a bare
// server over the same protocol by the same client.
type bareComparison struct {
	service, bare string  // the loads, as the report names them
	target        float64 // of the service's req/s over the bare server's
	cpuTarget     float64 // the most the service's CPU per request may be, in times the bare server's; 0: none
}

// bareComparisons are those of scenario sc: in create, the service with
// durable bare (the least a durable create costs) on both protocols; in
// the reads, with the ceiling.
func bareComparisons(sc string) []bareComparison {
	if sc == "create" {
		return []bareComparison{
			{service: plainWrk, bare: durablePlainWrk, target: durableTarget},
			{service: httpsH2load, bare: durableH2load, target: durableTarget},
		}
	}
	return []bareComparison{
		{service: plainWrk, bare: ceilingPlainWrk},
		{service: httpsH2load, bare: ceilingH2load, target: ceilingTargetRatio, cpuTarget: ceilingCPUTarget},
	}
}

// printAgainstBare writes the table of the service against the bare
// servers, a row per comparison of bareComparisons whose loads ran.
func printAgainstBare(w io.Writer, keepAlive []httpsScenarioResult) {
	fmt.Fprintln(w, "The service against a bare server loaded over the same protocol by the same client: the ceiling in list-first and get (answers from memory), durable bare in create (`bench durable`: net/http and SQLite in WAL with synchronous=FULL, creates group-committed, one row each and nothing else: the least a durable create costs). The ratio is the median of the per-round ratios of req/s (lowest and highest in brackets); the CPU ratio is the service's CPU per request over the bare server's.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | service | bare server | service req/s | bare req/s | ratio | target | service / bare CPU per request | target |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---|---:|---|")
	for _, s := range keepAlive {
		for _, c := range bareComparisons(s.name) {
			if len(s.runs[c.service]) == 0 || len(s.runs[c.bare]) == 0 {
				continue
			}
			fmt.Fprintln(w, bareComparisonRow(s, c))
		}
	}
	fmt.Fprintln(w)
}

// printAgainstBaseline writes, with -baseline, the line that compares the
// service with the baseline over HTTPS HTTP/2, scenario by scenario.
func printAgainstBaseline(w io.Writer, o httpsOptions, keepAlive []httpsScenarioResult) {
	var parts []string
	for _, s := range keepAlive {
		service, base := s.runs[httpsH2load], s.runs[baselineH2load]
		if len(service) == 0 || len(base) == 0 {
			continue
		}
		cpu := medianOf(service, wrkResult.cpuPerRequest) / medianOf(base, wrkResult.cpuPerRequest)
		parts = append(parts, fmt.Sprintf("%s **%s**, CPU per request %.2f", s.name, ratioRange(rpsRatios(service, base)), cpu))
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "The service against the baseline (%s, %.12s), both over HTTPS HTTP/2 with h2load, side by side in each round: req/s of the service over the baseline's (median of the per-round ratios, lowest and highest in brackets), and the service's CPU per request over the baseline's: %s.\n\n", o.baseline, o.baselineCommit, strings.Join(parts, "; "))
}

// bareComparisonRow is the row of the comparison c in scenario s.
func bareComparisonRow(s httpsScenarioResult, c bareComparison) string {
	service, bare := s.runs[c.service], s.runs[c.bare]
	r := rpsRatios(service, bare)
	cpu := medianOf(service, wrkResult.cpuPerRequest) / medianOf(bare, wrkResult.cpuPerRequest)
	target, cpuTarget := "", ""
	if c.target > 0 {
		target = fmt.Sprintf(">= %.2f: %s", c.target, met(median(r, identity), c.target))
	}
	if c.cpuTarget > 0 {
		// Met when the CPU ratio is at most its target.
		cpuTarget = fmt.Sprintf("<= %.2f: %s", c.cpuTarget, met(c.cpuTarget, cpu))
	}
	return fmt.Sprintf("| %s | %s | %s | %.0f | %.0f | **%s** | %s | %.2f | %s |",
		s.name, c.service, c.bare, medianOf(service, wrkResult.rps), medianOf(bare, wrkResult.rps), ratioRange(r), target, cpu, cpuTarget)
}

// printHandshakes writes the table of the handshake scenario s: the bare Go
// TLS server, then the service with its ratios to it.
func printHandshakes(w io.Writer, o httpsOptions, s httpsScenarioResult) {
	fmt.Fprintf(w, "New connections: each a full TLS 1.3 handshake (no session cache, no tickets), then GET /healthz with Connection: close, its answer and the server's close; %d Go workers in the benchmark's process. Connection time is from the dial to the server's close; \"its ratio\" is the bare server's CPU per handshake over the service's.\n\n", o.workers)
	fmt.Fprintln(w, "| server | handshakes/s | connection p50 / p99 | ratio to the bare Go TLS server | target | server CPU per handshake | its ratio | server busy | server reads + writes per connection | failures |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
	for _, name := range s.targets {
		rs := s.runs[name]
		ratio, target, cpuRatio := "", "", ""
		if name == serviceTLS {
			r := rpsRatios(rs, s.runs[bareTLSServer])
			ratio = "**" + ratioRange(r) + "**"
			target = fmt.Sprintf(">= %.2f: %s", handshakeRatio, met(median(r, identity), handshakeRatio))
			cpuRatio = fmt.Sprintf("%.2f", medianOf(s.runs[bareTLSServer], wrkResult.cpuPerRequest)/medianOf(rs, wrkResult.cpuPerRequest))
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.0f µs | %s | %.2f | %.2f | %d |\n",
			name, medianOf(rs, wrkResult.rps), latency(rs), ratio, target,
			medianOf(rs, wrkResult.cpuPerRequest), cpuRatio, medianOf(rs, wrkResult.serverBusy), medianOf(rs, wrkResult.syscallsPerRequest), failures(rs))
	}
	fmt.Fprintln(w)
}

// printHTTPSProfiles sorts each profile's CPU time into kinds of work (a
// table per scenario, a column per profiled target: the share of the
// profile, and that share of the server's CPU per request in the measured
// rounds), then lists each profile's top 10.
func printHTTPSProfiles(w io.Writer, o httpsOptions, results []httpsScenarioResult) {
	if o.profile == "" {
		return
	}
	ctx := context.Background()
	fmt.Fprintf(w, "CPU profiles of the service, one unmeasured run of %v per scenario and service target after its rounds (files in %s). Each function's own time sorted into kinds of work: the share of the profile, and in brackets that share of the server's CPU per request (or handshake) in the measured rounds.\n", o.duration, o.profile)
	for _, s := range results {
		var names []string
		shares := map[string]map[string]float64{}
		for _, name := range s.targets {
			file, ok := s.profiles[name]
			if !ok {
				continue
			}
			sh, err := profileShares(ctx, file)
			if err != nil {
				fmt.Fprintf(w, "\n%s, %s: %v\n", s.name, name, err)
				continue
			}
			names = append(names, name)
			shares[name] = sh
		}
		if len(names) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n\n| kind of work | %s |\n|---|%s\n", s.name, strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
		for _, k := range cpuKinds {
			row := "| " + k.kind + " |"
			for _, name := range names {
				share := shares[name][k.kind]
				row += fmt.Sprintf(" %.1f%% (%.1f µs) |", share, share/100*medianOf(s.runs[name], wrkResult.cpuPerRequest))
			}
			fmt.Fprintln(w, row)
		}
		for _, name := range names {
			file := s.profiles[name]
			flat, err := topFunctions(ctx, file, false)
			if err != nil {
				fmt.Fprintf(w, "\n%s, %s: %v\n", s.name, name, err)
				continue
			}
			fmt.Fprintf(w, "\n%s, %s (`%s`), top 10 by own time:\n\n| # | function | own | cumulative |\n|---:|---|---:|---:|\n", s.name, name, filepath.Base(file))
			for i, f := range flat {
				fmt.Fprintf(w, "| %d | `%s` | %s | %s |\n", i+1, f.name, f.flatPct, f.cumPct)
			}
		}
	}
	fmt.Fprintln(w)
}

// serverBusy is the server's CPU time over the run's length: the cores it
// kept busy.
func (r wrkResult) serverBusy() float64 {
	if len(r.CPU) == 0 || r.DurationUS == 0 {
		return 0
	}
	return float64(r.CPU[0].Microseconds()) / float64(r.DurationUS)
}

// syscallsPerRequest is the server's read and write system calls per
// request; 0 when they could not be read.
func (r wrkResult) syscallsPerRequest() float64 {
	if r.Syscalls < 0 || r.Requests == 0 {
		return 0
	}
	return float64(r.Syscalls) / float64(r.Requests)
}

// printWritesACommit writes, for create, how many of the service's writes
// shared each commit under each of its loads: the same over HTTP/2 as over
// HTTP/1.1 says that the batches do not split when the writers come back
// more slowly.
func printWritesACommit(w io.Writer, keepAlive []httpsScenarioResult) {
	for _, s := range keepAlive {
		var parts []string
		for _, name := range s.targets {
			rs := s.runs[name]
			if len(rs) == 0 || rs[0].WriteXacts == 0 {
				continue
			}
			perCommit := make([]float64, len(rs))
			for i, x := range rs {
				perCommit[i] = float64(x.Writes) / float64(max(1, x.WriteXacts))
			}
			parts = append(parts, fmt.Sprintf("%s %.1f (%.1f to %.1f)", name, median(perCommit, identity), slices.Min(perCommit), slices.Max(perCommit)))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "Writes a commit in %s (the service's petstore_writes_committed_total over petstore_write_commits_total across each load; median, lowest and highest): %s.\n\n", s.name, strings.Join(parts, "; "))
		}
	}
}
