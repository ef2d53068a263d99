// Command bench is the load benchmark of the petstore service. In one run it
// builds the service, makes databases of 1,000 and 1,000,000 pets, starts a
// bare net/http "ceiling" server that answers the same requests from memory
// and the real service on each database, and loads them in turn (ceiling,
// service, ceiling, service...) with wrk, the same connections and duration
// for both. In the create scenario each round also loads durable bare
// after the ceiling (bench durable, durable.go: net/http and SQLite in WAL
// with synchronous=FULL, creates group-committed, on a fresh SQLite file
// for each size: the least a durable create costs). It prints a Markdown
// table of requests/s, p50 and p99 latency, the ratio service/ceiling
// (median of the rounds), the service's create ratio to durable bare
// beside it, the service's peak RSS and its start-up time.
//
// With -baseline REV it also builds the service as it was at the git
// revision REV and loads it in every round beside the other two (ceiling,
// baseline, service, ceiling, baseline, service...), each binary on its own
// database of the same size, and the report adds the baseline's figures and
// the ratio service/baseline: a before/after comparison measured side by
// side, on one machine, in one run.
//
// With -postgres it also starts a throwaway PostgreSQL cluster of its own
// (durable: fsync on), makes the same databases in it, and loads the service
// on PostgreSQL as 1 replica and as 2 replicas, each behind a round-robin TCP
// balancer of its own (bench balance), beside the ceiling, the ceiling
// behind a balancer (what the balancer costs) and the service on SQLite.
// The report adds the CPU time per request of each server (its processes,
// PostgreSQL's included), and how many writes each PostgreSQL transaction
// committed (group commit).
//
// bench https compares the service over HTTPS (HTTP/1.1 and HTTP/2) with
// the same service over plain HTTP, and its TLS handshakes with a bare Go
// TLS server's (https.go; with -baseline REV, with the service at REV over
// HTTPS HTTP/2 too); bench events measures the change feed
// (events.go); bench replicate what replicating the SQLite file to object
// storage costs (replicate.go).
//
// Run it from the repository root with bench/run (which installs wrk when it
// is missing). Everything listens on 127.0.0.1; the benchmark ends only the
// processes it started, by PID, every load run is bounded by -duration and
// every start and stop by a timeout. CI does not run it.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "ceiling":
		err = runCeiling(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "durable":
		err = runDurable(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "storeproxy":
		err = runStoreProxy(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "balance":
		err = runBalancer(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "events":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runEventsBench(ctx, os.Args[2:], os.Stdout)
		stop()
	case len(os.Args) > 1 && os.Args[1] == "replicate":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runReplicateBench(ctx, os.Args[2:], os.Stdout)
		stop()
	case len(os.Args) > 1 && os.Args[1] == "https":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runHTTPSBench(ctx, os.Args[2:], os.Stdout)
		stop()
	default:
		// Ctrl-C stops the load and every server the benchmark started.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runBench(ctx, os.Args[1:], os.Stdout)
		stop()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// benchKey is the API key the benchmark configures the service with.
const benchKey = "bench-key-0123456789abcdef"

// readScenarios are run on every database size; writeScenarios only once per
// size after them, since they grow the table.
var (
	readScenarios  = []string{"list-first", "list-deep", "get", "get-scraped"}
	writeScenarios = []string{"create", "mix", "sell"}
)

// targets are the ratio targets, printed beside the measured ratios: the
// second performance round's for list-first, get and create (durable, every
// feature on as shipped), the first release's for the others.
var targets = map[string]string{
	"list-first": ">= 0.80",
	"list-deep":  ">= 0.50",
	"get":        ">= 0.75",
	// Judged against get: within 10% of it (see the report's scrape line).
	"get-scraped": "",
	"create":      ">= 0.45",
	"mix":         ">= 0.60",
	"sell":        "",
}

// durableTarget is the target of the ratio of the service's creates to
// durable bare's, here and in bench https.
const durableTarget = 0.80

// options are the benchmark's flags.
type options struct {
	duration time.Duration
	rounds   int
	conns    int
	threads  int
	sizes    []int64
	keep     bool
	only     []string // scenarios to run; all when empty
	baseline string   // the -baseline revision; none when empty
	postgres bool     // also load the service on PostgreSQL, 1 and 2 replicas
	profile  string   // the directory of the CPU profiles; none when empty

	scrapers    int           // concurrent /metrics scrapers during get-scraped
	scrapeEvery time.Duration // each scraper's interval

	// Resolved from the flags, for the report's first line.
	baselineCommit string // the baseline's full commit hash
	current        string // what the service binary is built from
	pgVersion      string // the PostgreSQL server's, with -postgres
}

// binary is a build of the service under load and its database of one size.
type binary struct {
	name string // "baseline" or "service", as the report says
	path string
	db   string
}

// runBench is the whole benchmark: the flags read, the service (and the
// baseline) built, PostgreSQL started with -postgres, each size measured in
// turn, and the report printed.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	if err := readyToRun(ctx, &o); err != nil {
		return err
	}
	r, remove, err := buildBench(ctx, o)
	if err != nil {
		return err
	}
	defer remove()
	if o.postgres {
		// Stopped after the replicas (benchSize stops them before it
		// returns), and its directory deleted unless -keep.
		stop, err := r.startCluster(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	var results []sizeResult
	for _, n := range r.o.sizes {
		res, err := r.benchSize(ctx, n)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	printReport(stdout, r.o, results)
	return nil
}

// parseOptions reads the benchmark's flags and refuses the settings it
// cannot run.
func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one wrk run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per scenario (each runs the ceiling, the baseline if any, then the service)")
	fs.IntVar(&o.conns, "c", 32, "wrk connections")
	fs.IntVar(&o.threads, "t", 2, "wrk threads")
	sizes := fs.String("sizes", "1000,1000000", "database sizes, in pets, comma-separated")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directories (databases, binaries, PostgreSQL's data and log)")
	serviceEnvFlag(fs)
	only := fs.String("scenarios", "", "run only these scenarios, comma-separated (default: all)")
	fs.StringVar(&o.baseline, "baseline", "", "also build and load the service at this git revision, and compare (e.g. main, a commit hash)")
	fs.BoolVar(&o.postgres, "postgres", false, "also start a throwaway PostgreSQL cluster and load the service on it as 1 replica and as 2 replicas behind a round-robin balancer")
	fs.StringVar(&o.profile, "profile", "", "after each scenario's rounds, one more run per service target, not counted, with a CPU profile of the service (of its first replica on PostgreSQL) written to this directory; the report lists each profile's top 10 functions")
	fs.IntVar(&o.scrapers, "scrapers", 8, "scrapers of /metrics running during the get-scraped scenario")
	fs.DurationVar(&o.scrapeEvery, "scrape-every", time.Second, "how often each scraper of get-scraped scrapes /metrics")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rounds < 1 {
		return o, errors.New("-rounds: at least 1")
	}
	if o.postgres && o.baseline != "" {
		// Each is a comparison of its own, and the two in one run would make
		// every round twice as long and the report unreadable.
		return o, errors.New("-postgres and -baseline: one comparison at a time")
	}
	if o.scrapers < 1 || o.scrapeEvery <= 0 {
		return o, errors.New("-scrapers and -scrape-every: at least 1 scraper, and a positive interval")
	}
	for s := range strings.SplitSeq(*sizes, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 100 {
			return o, fmt.Errorf("-sizes: %q is not a number of pets >= 100", s)
		}
		o.sizes = append(o.sizes, n)
	}
	if *only != "" {
		o.only = strings.Split(*only, ",")
	}
	return o, nil
}

// readyToRun makes the profiles' directory (and has every service serve its
// profiles) with -profile, checks that wrk is installed and that the
// benchmark runs from the repository root, and resolves -baseline to its
// commit.
func readyToRun(ctx context.Context, o *options) error {
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
		serviceEnv = append(serviceEnv, "PETSTORE_PPROF_ADDR=127.0.0.1:0")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk is not installed; run bench/run, which installs it (apt-get install wrk)")
	}
	if _, err := os.Stat("migrations"); err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	if o.baseline != "" {
		commit, err := resolveRevision(ctx, o.baseline)
		if err != nil {
			return err
		}
		o.baselineCommit = commit
		o.current = workingTree(ctx)
	}
	return nil
}

// benchRun is what every size of one run shares: the settings, the
// temporary directory and the binaries built in it, and the PostgreSQL
// cluster with -postgres.
type benchRun struct {
	o       options
	dir     string     // the temporary directory: binaries, scripts, databases
	bin     string     // the service, built from the working tree
	baseBin string     // the service at -baseline; empty without
	self    string     // this program, which serves the ceiling and the balancers
	cluster *pgCluster // with -postgres; nil without
}

// buildBench builds the service (and the baseline) in a new temporary
// directory and writes wrk's scripts there; remove deletes the directory
// unless -keep.
func buildBench(ctx context.Context, o options) (r *benchRun, remove func(), err error) {
	dir, bin, removeDir, err := buildInTempDir(ctx, "petstore-bench-", o.keep)
	if err != nil {
		return nil, nil, err
	}
	r = &benchRun{o: o, dir: dir, bin: bin}
	if o.baseline != "" {
		r.baseBin = filepath.Join(dir, "petstore-baseline")
		if err := buildRevision(ctx, o.baselineCommit, filepath.Join(dir, "baseline-src"), r.baseBin); err != nil {
			removeDir()
			return nil, nil, err
		}
	}
	if r.self, err = os.Executable(); err != nil {
		removeDir()
		return nil, nil, err
	}
	if err := writeScripts(dir); err != nil {
		removeDir()
		return nil, nil, err
	}
	return r, removeDir, nil
}

// startCluster starts the run's PostgreSQL cluster and records its version
// for the report; stop stops it, and deletes its directory unless -keep.
func (r *benchRun) startCluster(ctx context.Context) (stop func(), err error) {
	start := time.Now()
	cluster, err := startPostgres(ctx)
	if err != nil {
		return nil, err
	}
	stop = cluster.remove
	if r.o.keep {
		fmt.Fprintf(os.Stderr, "keeping %s\n", cluster.Dir)
		stop = cluster.stop
	}
	if r.o.pgVersion, err = cluster.version(ctx); err != nil {
		stop()
		return nil, err
	}
	r.cluster = cluster
	fmt.Fprintf(os.Stderr, "started %s (%s) on a socket in %s in %v\n", r.o.pgVersion, cluster.Bin, cluster.Dir, time.Since(start).Round(time.Millisecond))
	return stop, nil
}

// sqliteDatabases makes a database of n pets for each binary under load on
// SQLite (the baseline's first, with -baseline), and returns the binaries in
// the order each round loads them.
func (r *benchRun) sqliteDatabases(ctx context.Context, n int64) ([]binary, error) {
	var bins []binary
	if r.baseBin != "" {
		bins = append(bins, binary{name: "baseline", path: r.baseBin, db: filepath.Join(r.dir, fmt.Sprintf("pets-%d-baseline.db", n))})
	}
	bins = append(bins, binary{name: "service", path: r.bin, db: filepath.Join(r.dir, fmt.Sprintf("pets-%d.db", n))})
	for _, b := range bins {
		start := time.Now()
		if err := createDatabase(ctx, b.path, b.db, n); err != nil {
			return nil, fmt.Errorf("database of %d pets for the %s: %w", n, b.name, err)
		}
		fmt.Fprintf(os.Stderr, "made the %s's database of %d pets in %v\n", b.name, n, time.Since(start).Round(time.Millisecond))
	}
	return bins, nil
}

// postgresDatabases makes the PostgreSQL databases of n pets, with
// -postgres; nil without.
func (r *benchRun) postgresDatabases(ctx context.Context, n int64) (*pgDatabases, error) {
	if r.cluster == nil {
		return nil, nil
	}
	// A database for each case, so that both start each write scenario in
	// the same state as the SQLite file: the pets loaded, and what the
	// earlier scenarios added on that server.
	pg := &pgDatabases{cluster: r.cluster}
	for i, db := range []*string{&pg.one, &pg.two} {
		name := fmt.Sprintf("pets_%d_%d", n, i+1)
		start := time.Now()
		if err := createPostgresDatabase(ctx, r.cluster, r.bin, name, n); err != nil {
			return nil, fmt.Errorf("PostgreSQL database of %d pets: %w", n, err)
		}
		*db = r.cluster.url(name)
		fmt.Fprintf(os.Stderr, "made the PostgreSQL database %s of %d pets in %v\n", name, n, time.Since(start).Round(time.Millisecond))
	}
	return pg, nil
}

// wrkResult is what one wrk run reports (the RESULT line of the scripts),
// and what the benchmark measured of the server around it.
type wrkResult struct {
	Requests     int64 `json:"requests"`
	DurationUS   int64 `json:"duration_us"`
	P50US        int64 `json:"p50_us"`
	P99US        int64 `json:"p99_us"`
	MaxUS        int64 `json:"max_us"`
	Non2xx       int64 `json:"non2xx"`
	SocketErrors int64 `json:"socket_errors"` // timeouts included
	Timeouts     int64 `json:"timeouts"`      // no answer within wrk's --timeout

	// CPU is the CPU time each part of the server used during the run, in
	// the order of its target's parts.
	CPU []time.Duration `json:"-"`
	// Syscalls is the read and write system calls of the server's process
	// during the run (bench https; /proc/PID/io).
	Syscalls int64 `json:"-"`
	// On PostgreSQL, in the write scenarios: the writes done (pets created,
	// orders placed or delivered) and the write transactions that committed
	// them (see readPGCounters).
	Writes, WriteXacts int64 `json:"-"`
	// On PostgreSQL: the deadlocks and long lock waits its log shows.
	Locks lockTrouble `json:"-"`

	// The scrapes of /metrics made during the run (get-scraped only).
	Scrapes, ScrapeFailures, ScrapeMaxUS int64 `json:"-"`
}

// scrapeResult is what the scrapers of one run did.
type scrapeResult struct {
	scrapes, failures int64
	max               time.Duration // the slowest scrape
}

// startScrapers starts o.scrapers goroutines that each scrape url's /metrics
// every o.scrapeEvery, as monitoring systems do, and returns the function
// that stops them and says what they did.
func startScrapers(ctx context.Context, o options, url string) (stop func() scrapeResult) {
	ctx, cancel := context.WithCancel(ctx)
	results := make(chan scrapeResult, o.scrapers)
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range o.scrapers {
		go func() {
			var r scrapeResult
			defer func() { results <- r }()
			// Spread over the interval, as independent scrapers are.
			next := time.Now().Add(o.scrapeEvery * time.Duration(i) / time.Duration(o.scrapers))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(o.scrapeEvery)
				req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
				if err != nil {
					r.failures++
					continue
				}
				req.Header.Set("Authorization", "Bearer "+benchKey)
				start := time.Now()
				res, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if ctx.Err() != nil {
					return
				}
				r.scrapes++
				if err != nil {
					r.failures++
				}
				r.max = max(r.max, time.Since(start))
			}
		}()
	}
	return func() scrapeResult {
		cancel()
		var total scrapeResult
		for range o.scrapers {
			r := <-results
			total.scrapes += r.scrapes
			total.failures += r.failures
			total.max = max(total.max, r.max)
		}
		return total
	}
}

func (r wrkResult) rps() float64 { return float64(r.Requests) / r.seconds() }

func (r wrkResult) seconds() float64 { return float64(r.DurationUS) / 1e6 }

// cpuPerRequest is the CPU time of all the server's parts per request, in µs.
func (r wrkResult) cpuPerRequest() float64 {
	var d time.Duration
	for _, c := range r.CPU {
		d += c
	}
	return float64(d.Microseconds()) / float64(r.Requests)
}

// The targets a round may load, by name: the keys of the results, as the
// report names them.
const (
	ceilingName  = "ceiling"
	balancedName = "ceiling behind the balancer"
	durableName  = "durable bare" // loaded in create only
	baselineName = "baseline"
	serviceName  = "service"
	pg1Name      = "PostgreSQL, 1 replica"
	pg2Name      = "PostgreSQL, 2 replicas"
)

// target is a server a round loads: one column of the report.
type target struct {
	name  string
	url   string
	parts []part
	// pg is the PostgreSQL database the target serves, whose counters are
	// read around each run of a write scenario, on cluster, whose log is
	// read after each run; nil for the others.
	pg      *sql.DB
	cluster *pgCluster
	// profiled is the service process that -profile profiles: nil for the
	// ceiling, the balancer alone and the baseline.
	profiled *process
}

// part is one kind of process of a target, whose CPU time is reported on its
// own: the balancer, the service, PostgreSQL.
type part struct {
	name string
	pids func() []int // its processes at the moment
}

// processPart is a part made of processes the benchmark started.
func processPart(name string, ps ...*process) part {
	return part{name, func() []int {
		pids := make([]int, len(ps))
		for i, p := range ps {
			pids[i] = p.cmd.Process.Pid
		}
		return pids
	}}
}

// scenarioResult is every round of one scenario, for each target.
type scenarioResult struct {
	name string
	runs map[string][]wrkResult // by target name, one per round
	// With -profile: the CPU profile's file of each profiled target, in
	// the order they ran.
	profiles     map[string]string
	profileOrder []string
}

// sizeResult is everything measured on one database size.
type sizeResult struct {
	pets      int64
	scenarios []scenarioResult
	parts     map[string][]string        // the names of each target's parts, in the order of its CPU times
	rssKiB    map[string][]int64         // by target: the peak RSS (VmHWM) of each of its service processes after all scenarios
	startups  map[string][]time.Duration // by target: start-up to first answered request, of a few fresh starts
}

// pgDatabases are the PostgreSQL databases of one size: one for the
// 1-replica case, one for the 2-replica case.
type pgDatabases struct {
	cluster  *pgCluster
	one, two string // URLs
}

// benchSize makes the databases of n pets and runs every scenario against
// them: the binaries under load on SQLite, each on its own database, in the
// order each round loads them (after the ceiling); with -postgres, the
// service also on PostgreSQL, behind balancers, after them.
func (r *benchRun) benchSize(ctx context.Context, n int64) (sizeResult, error) {
	bins, err := r.sqliteDatabases(ctx, n)
	if err != nil {
		return sizeResult{}, err
	}
	pg, err := r.postgresDatabases(ctx, n)
	if err != nil {
		return sizeResult{}, err
	}
	b := &sizeBench{run: r, n: n, rss: map[string][]*process{},
		res: sizeResult{pets: n, parts: map[string][]string{}, rssKiB: map[string][]int64{}, startups: map[string][]time.Duration{}}}
	defer b.stop()
	if err := b.startSQLiteTargets(ctx, bins, pg != nil); err != nil {
		return b.res, err
	}
	if pg != nil {
		if err := b.startPostgresTargets(ctx, pg); err != nil {
			return b.res, err
		}
	}
	for _, t := range b.targets {
		for _, p := range t.parts {
			b.res.parts[t.name] = append(b.res.parts[t.name], p.name)
		}
	}
	for _, sc := range slices.Concat(readScenarios, writeScenarios) {
		if len(r.o.only) > 0 && !slices.Contains(r.o.only, sc) {
			continue
		}
		s, err := b.runScenario(ctx, sc)
		if err != nil {
			return b.res, err
		}
		b.res.scenarios = append(b.res.scenarios, s)
	}
	for name, ps := range b.rss {
		for _, p := range ps {
			b.res.rssKiB[name] = append(b.res.rssKiB[name], p.peakRSS())
		}
	}
	return b.res, nil
}

// sizeBench is the measure of one database size: the servers started for
// it, the targets each round loads, and what was measured.
type sizeBench struct {
	run *benchRun
	n   int64 // the pets in each database
	// started is every process started for this size, stopped before
	// benchSize returns; dbs are the PostgreSQL targets' connections, which
	// read their counters.
	started []*process
	dbs     []*sql.DB
	targets []target
	rss     map[string][]*process // by target: the service processes whose peak RSS is reported
	res     sizeResult
}

// stop closes the connections to PostgreSQL, then stops every process
// started for this size in the reverse order of their starts: balancers,
// then replicas, before the PostgreSQL server that runBench stops.
func (b *sizeBench) stop() {
	for _, db := range slices.Backward(b.dbs) {
		db.Close()
	}
	for _, p := range slices.Backward(b.started) {
		p.stop()
	}
}

// startMeasured starts the service path on db a few times, measuring the
// start-up of each under name; the last one stays up for the load.
func (b *sizeBench) startMeasured(ctx context.Context, name, path, db string) (*process, error) {
	for j := range 3 {
		p, took, err := startService(ctx, path, db)
		if err != nil {
			return nil, fmt.Errorf("start the %s: %w", name, err)
		}
		b.res.startups[name] = append(b.res.startups[name], took)
		if j == 2 {
			b.started = append(b.started, p)
			return p, nil
		}
		p.stop()
	}
	panic("unreachable")
}

// startBalancer starts a round-robin balancer (bench balance) in front of
// backends.
func (b *sizeBench) startBalancer(ctx context.Context, backends ...*process) (*process, error) {
	args := []string{"balance", "127.0.0.1:0"}
	for _, be := range backends {
		args = append(args, be.url)
	}
	p, err := startProcess(serverCommand(ctx, b.run.self, args...), "balancer listening on ")
	if err != nil {
		return nil, fmt.Errorf("start a balancer: %w", err)
	}
	b.started = append(b.started, p)
	return p, nil
}

// startSQLiteTargets starts each binary on its SQLite database (measuring
// its start-ups) and the ceiling, with balanced the ceiling behind a
// balancer too, and durable bare when create runs, and adds their targets:
// the ceiling first, the balanced ceiling, durable bare, then the binaries
// in the order of bins.
func (b *sizeBench) startSQLiteTargets(ctx context.Context, bins []binary, balanced bool) error {
	var procs []*process
	for _, bn := range bins {
		p, err := b.startMeasured(ctx, bn.name, bn.path, bn.db)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	ceil, err := startProcess(serverCommand(ctx, b.run.self, "ceiling", "127.0.0.1:0", strconv.FormatInt(b.n, 10)), "ceiling listening on ")
	if err != nil {
		return err
	}
	b.started = append(b.started, ceil)
	b.targets = append(b.targets, target{name: ceilingName, url: ceil.url, parts: []part{processPart("ceiling", ceil)}})
	b.rss[ceilingName] = []*process{ceil}
	if balanced {
		bal, err := b.startBalancer(ctx, ceil)
		if err != nil {
			return err
		}
		b.targets = append(b.targets, target{name: balancedName, url: bal.url,
			parts: []part{processPart("balancer", bal), processPart("ceiling", ceil)}})
	}
	if len(b.run.o.only) == 0 || slices.Contains(b.run.o.only, "create") {
		if err := b.startDurable(ctx); err != nil {
			return err
		}
	}
	for i, bn := range bins {
		t := target{name: bn.name, url: procs[i].url, parts: []part{processPart("service", procs[i])}}
		if bn.name == "service" {
			t.profiled = procs[i]
		}
		b.targets = append(b.targets, t)
		b.rss[bn.name] = procs[i : i+1]
	}
	return nil
}

// startDurable starts durable bare on a fresh SQLite file in the run's
// directory, one for each size, and adds its target.
func (b *sizeBench) startDurable(ctx context.Context) error {
	db := filepath.Join(b.run.dir, fmt.Sprintf("durable-%d.db", b.n))
	p, err := startProcess(serverCommand(ctx, b.run.self, "durable", "127.0.0.1:0", db), "ceiling listening on ")
	if err != nil {
		return fmt.Errorf("start durable bare: %w", err)
	}
	b.started = append(b.started, p)
	b.targets = append(b.targets, target{name: durableName, url: p.url, parts: []part{processPart("durable bare", p)}})
	return nil
}

// targetsOf are the targets scenario sc loads, in their order: all but
// durable bare, which only create loads.
func (b *sizeBench) targetsOf(sc string) []target {
	if sc == "create" {
		return b.targets
	}
	return slices.DeleteFunc(slices.Clone(b.targets), func(t target) bool { return t.name == durableName })
}

// startPostgresTargets starts the service on PostgreSQL as 1 replica on
// pg.one (measuring its start-ups) and as 2 replicas on pg.two, each case
// behind a balancer of its own, and adds their targets.
func (b *sizeBench) startPostgresTargets(ctx context.Context, pg *pgDatabases) error {
	one, err := b.startMeasured(ctx, pg1Name, b.run.bin, pg.one)
	if err != nil {
		return err
	}
	var two []*process
	for range 2 {
		p, _, err := startService(ctx, b.run.bin, pg.two)
		if err != nil {
			return fmt.Errorf("start a replica: %w", err)
		}
		b.started = append(b.started, p)
		two = append(two, p)
	}
	database := part{"PostgreSQL", pg.cluster.pids}
	for _, c := range []struct {
		name     string
		replicas []*process
		url      string
	}{{pg1Name, []*process{one}, pg.one}, {pg2Name, two, pg.two}} {
		bal, err := b.startBalancer(ctx, c.replicas...)
		if err != nil {
			return err
		}
		db, err := sql.Open("pgx", c.url)
		if err != nil {
			return err
		}
		b.dbs = append(b.dbs, db)
		db.SetMaxOpenConns(1)
		b.targets = append(b.targets, target{name: c.name, url: bal.url, pg: db, cluster: pg.cluster, profiled: c.replicas[0],
			parts: []part{processPart("balancer", bal), processPart("service", c.replicas...), database}})
		b.rss[c.name] = c.replicas
	}
	return nil
}

// runScenario runs scenario sc on every target it loads: a short warm-up of each,
// not counted, the rounds, and with -profile one more profiled run of each
// service target.
func (b *sizeBench) runScenario(ctx context.Context, sc string) (scenarioResult, error) {
	o := b.run.o
	s := scenarioResult{name: sc, runs: map[string][]wrkResult{}}
	targets := b.targetsOf(sc)
	for _, t := range targets {
		if _, err := runWrk(ctx, o, b.run.dir, sc, t.url, b.n, time.Second); err != nil {
			return s, err
		}
	}
	for range o.rounds {
		for _, t := range targets {
			r, err := b.load(ctx, sc, t)
			if err != nil {
				return s, err
			}
			s.runs[t.name] = append(s.runs[t.name], r)
		}
		progress(os.Stderr, b.n, s, targets)
	}
	if o.profile != "" {
		if err := b.profile(ctx, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// load is one measured run of scenario sc on t, with /metrics scraped
// meanwhile when sc is get-scraped and t a service.
func (b *sizeBench) load(ctx context.Context, sc string, t target) (wrkResult, error) {
	var stopScraping func() scrapeResult
	if sc == "get-scraped" && t.name != ceilingName && t.name != balancedName {
		stopScraping = startScrapers(ctx, b.run.o, t.url)
	}
	r, err := measure(ctx, b.run.o, b.run.dir, sc, t, b.n)
	if stopScraping != nil {
		sr := stopScraping()
		r.Scrapes, r.ScrapeFailures, r.ScrapeMaxUS = sr.scrapes, sr.failures, sr.max.Microseconds()
	}
	return r, err
}

// profile runs scenario s once more on each profiled target, not counted,
// under a CPU profile, and records the profiles' files in s.
func (b *sizeBench) profile(ctx context.Context, s *scenarioResult) error {
	s.profiles = map[string]string{}
	for _, t := range b.targets {
		if t.profiled == nil {
			continue
		}
		file, err := profileRun(ctx, b.run.o, b.run.dir, s.name, t, t.profiled, b.n)
		if err != nil {
			return err
		}
		s.profiles[t.name] = file
		s.profileOrder = append(s.profileOrder, t.name)
		fmt.Fprintf(os.Stderr, "%8d %-11s profiled %s: %s\n", b.n, s.name, t.name, file)
	}
	return nil
}

// measure runs one load of scenario sc on t, with the CPU time of t's parts
// and, on PostgreSQL in a write scenario, the writes and the transactions
// that committed them.
func measure(ctx context.Context, o options, dir, sc string, t target, n int64) (wrkResult, error) {
	counted := t.pg != nil && slices.Contains(writeScenarios, sc)
	var before pgCounters
	if counted {
		var err error
		if before, err = readPGCounters(ctx, t.pg); err != nil {
			return wrkResult{}, fmt.Errorf("%s: read the counters: %w", t.name, err)
		}
	}
	var logStart int64
	if t.cluster != nil {
		logStart = t.cluster.logOffset()
	}
	// The counters are read outside the CPU window, so that their queries
	// do not count as the requests' cost.
	cpuBefore := make([]map[int]time.Duration, len(t.parts))
	for i, p := range t.parts {
		cpuBefore[i] = cpuTime(p.pids())
	}
	r, err := runWrk(ctx, o, dir, sc, t.url, n, o.duration)
	if err != nil {
		return r, err
	}
	for i, p := range t.parts {
		r.CPU = append(r.CPU, cpuUsed(cpuBefore[i], cpuTime(p.pids())))
	}
	if counted {
		after, err := readPGCounters(ctx, t.pg)
		if err != nil {
			return r, fmt.Errorf("%s: read the counters: %w", t.name, err)
		}
		r.Writes = after.writesSince(before)
		r.WriteXacts = after.nextXID - before.nextXID
	}
	if t.cluster != nil {
		if r.Locks, err = t.cluster.lockTroubleSince(logStart); err != nil {
			return r, fmt.Errorf("%s: read PostgreSQL's log: %w", t.name, err)
		}
	}
	return r, nil
}

// progress prints the round just finished, so that a long run shows how it
// goes (and each round's figures stay in the terminal's scroll-back).
func progress(w io.Writer, n int64, s scenarioResult, targets []target) {
	last := func(name string) wrkResult { rs := s.runs[name]; return rs[len(rs)-1] }
	c := last(ceilingName)
	fmt.Fprintf(w, "%8d %-10s %s %.0f/s", n, s.name, ceilingName, c.rps())
	for _, t := range targets[1:] {
		r := last(t.name)
		fmt.Fprintf(w, "; %s %.0f/s (ratio %.2f, p99 %.1f ms, non-2xx %d, errors %d", t.name, r.rps(), r.rps()/c.rps(), float64(r.P99US)/1000, r.Non2xx, r.SocketErrors)
		if t.cluster != nil {
			fmt.Fprintf(w, ", deadlocks %d, lock waits over 1 s %d", r.Locks.deadlocks, r.Locks.lockWaits)
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
}

// runWrk runs one wrk load and parses its RESULT line.
func runWrk(ctx context.Context, o options, dir, scenario, url string, n int64, d time.Duration) (wrkResult, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "wrk",
		"-t", strconv.Itoa(o.threads), "-c", strconv.Itoa(o.conns), "-d", strconv.Itoa(secs)+"s",
		"--timeout", "10s", "-s", filepath.Join(dir, scenario+".lua"), url,
		"--", benchKey, strconv.FormatInt(n, 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %v\n%s", scenario, err, out)
	}
	for line := range strings.Lines(string(out)) {
		if js, ok := strings.CutPrefix(strings.TrimSpace(line), "RESULT "); ok {
			var r wrkResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				return r, fmt.Errorf("wrk %s: %v in %q", scenario, err, js)
			}
			return r, nil
		}
	}
	return wrkResult{}, fmt.Errorf("wrk %s printed no RESULT line:\n%s", scenario, out)
}

// process is a server the benchmark started.
type process struct {
	cmd *exec.Cmd
	url string
	// profiles receives the URL of the service's profiles once it prints
	// it (with -profile; nil otherwise).
	profiles chan string

	stopped bool  // stop has run
	stopErr error // what stop returned
}

// urlPattern finds the URL in a server's first line: http://, or https://
// for a server over TLS.
var urlPattern = regexp.MustCompile(`https?://127\.0\.0\.1:[0-9]+`)

// Time limits on the processes the benchmark starts, so that a server that
// hangs cannot hold the benchmark.
const (
	startTimeout = time.Minute      // from the start to the line with the URL
	stopTimeout  = 15 * time.Second // from SIGTERM to the exit
)

// startProcess starts cmd and waits, at most startTimeout, for its stdout
// line that begins with prefix and holds its URL. The process's stderr is
// what cmd.Stderr says: nil, the null device, unless the caller set it.
func startProcess(cmd *exec.Cmd, prefix string) (*process, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd}
	type firstLine struct {
		line string
		err  error
	}
	r := bufio.NewReader(stdout)
	got := make(chan firstLine, 1)
	go func() {
		line, err := r.ReadString('\n')
		got <- firstLine{line, err}
	}()
	var first firstLine
	select {
	case first = <-got:
	case <-time.After(startTimeout):
		// Stopping the process closes the pipe, which ends the read.
		p.stop()
		return nil, fmt.Errorf("%s: no %q line within %v", cmd.Path, prefix, startTimeout)
	}
	if first.err != nil || !strings.HasPrefix(first.line, prefix) {
		p.stop()
		return nil, fmt.Errorf("%s: no %q line (got %q, %v)", cmd.Path, prefix, first.line, first.err)
	}
	if slices.ContainsFunc(cmd.Env, func(v string) bool { return strings.HasPrefix(v, "PETSTORE_PPROF_ADDR=") }) {
		p.profiles = make(chan string, 1)
	}
	go func() {
		for {
			line, err := r.ReadString('\n')
			if url, ok := strings.CutPrefix(strings.TrimSpace(line), profilesPrefix); ok && p.profiles != nil {
				p.profiles <- url
			}
			if err != nil {
				return
			}
		}
	}()
	p.url = urlPattern.FindString(first.line)
	return p, nil
}

// serviceCommand is the service binary bin on the database db, listening on
// a free port of 127.0.0.1. Its stderr (the access log) is the null device
// unless the caller sets it: a log line then costs the service a write, not
// a copy in this process.
func serviceCommand(ctx context.Context, bin, db string) *exec.Cmd {
	cmd := serverCommand(ctx, bin)
	cmd.Env = append(os.Environ(), "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+db, "PETSTORE_API_KEYS="+benchKey)
	cmd.Env = append(cmd.Env, serviceEnv...)
	return cmd
}

// startService starts the service on db and returns it with the time from
// the start of the process to the first answered API request (one that
// reads the database).
func startService(ctx context.Context, bin, db string) (*process, time.Duration, error) {
	return startServiceCommand(ctx, serviceCommand(ctx, bin, db), &http.Client{Timeout: startTimeout})
}

// startServiceCommand is startService for the service command cmd, whose
// first request client sends (one that trusts the service's certificate,
// over HTTPS).
func startServiceCommand(ctx context.Context, cmd *exec.Cmd, client *http.Client) (*process, time.Duration, error) {
	start := time.Now()
	p, err := startProcess(cmd, "petstore listening on ")
	if err != nil {
		return nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", p.url+"/v1/pets?limit=1", nil)
	if err != nil {
		p.stop()
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	res, err := client.Do(req)
	if err != nil {
		p.stop()
		return nil, 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	took := time.Since(start)
	if res.StatusCode != http.StatusOK {
		p.stop()
		return nil, 0, fmt.Errorf("first request: status %d", res.StatusCode)
	}
	return p, took, nil
}

// serverCommand is a server process that SIGTERM stops when ctx ends (by its
// PID: exec signals only the process it started).
func serverCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopTimeout
	return cmd
}

// stop sends SIGTERM to the process (by its PID, never by name) and waits,
// killing it if it has not exited within stopTimeout. It returns nil when
// the process exited with status 0 (a clean stop); a second call returns
// what the first did.
func (p *process) stop() error {
	if p == nil || p.cmd.Process == nil {
		return nil
	}
	if p.stopped {
		return p.stopErr
	}
	p.stopped = true
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case p.stopErr = <-done:
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-done
		p.stopErr = fmt.Errorf("%s did not stop within %v of SIGTERM, killed", p.cmd.Path, stopTimeout)
	}
	return p.stopErr
}

// peakRSS reads the process's peak resident set size (VmHWM), in KiB.
func (p *process) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib
		}
	}
	return -1
}

// printScrapes reports, for each size, getPet's throughput while /metrics is
// scraped against its throughput alone: the ratio of the two scenarios' ratios
// to the ceiling (the rounds of the two scenarios are not side by side, so
// each is first judged against the ceiling of its own rounds). Target:
// within 10%.
func printScrapes(w io.Writer, o options, results []sizeResult) {
	identity := func(x float64) float64 { return x }
	for _, r := range results {
		var get, scraped map[string][]wrkResult
		for i := range r.scenarios {
			switch r.scenarios[i].name {
			case "get":
				get = r.scenarios[i].runs
			case "get-scraped":
				scraped = r.scenarios[i].runs
			}
		}
		if get == nil || scraped == nil {
			continue
		}
		line := func(name string, alone, under []wrkResult) {
			var scrapes, failures, slowest int64
			for _, run := range under {
				scrapes += run.Scrapes
				failures += run.ScrapeFailures
				slowest = max(slowest, run.ScrapeMaxUS)
			}
			fmt.Fprintf(w, "- %d pets, %s: getPet with %d scrapers of /metrics (each every %v) / getPet alone: **%.2f** (target >= 0.90); %d scrapes, %d failed, the slowest %.1f ms\n",
				r.pets, name, o.scrapers, o.scrapeEvery,
				median(rpsRatios(under, scraped[ceilingName]), identity)/median(rpsRatios(alone, get[ceilingName]), identity),
				scrapes, failures, float64(slowest)/1000)
		}
		for _, name := range slices.Sorted(maps.Keys(scraped)) {
			if name != ceilingName && name != balancedName {
				line(name, get[name], scraped[name])
			}
		}
	}
	fmt.Fprintln(w)
}
