// Command bench is the load benchmark of the petstore service. In one run it
// builds the service, makes databases of 1,000 and 1,000,000 pets, starts a
// bare net/http "ceiling" server that answers the same requests from memory
// and the real service on each database, and loads them in turn (ceiling,
// service, ceiling, service...) with wrk, the same connections and duration
// for both. It prints a Markdown table of requests/s, p50 and p99 latency,
// the ratio service/ceiling (median of the rounds), the service's peak RSS
// and its start-up time.
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
// TLS server's (https.go); bench events measures the change feed
// (events.go).
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
	case len(os.Args) > 1 && os.Args[1] == "balance":
		err = runBalancer(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "events":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runEventsBench(ctx, os.Args[2:], os.Stdout)
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

// runBench is the whole benchmark.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one wrk run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per scenario (each runs the ceiling, the baseline if any, then the service)")
	fs.IntVar(&o.conns, "c", 32, "wrk connections")
	fs.IntVar(&o.threads, "t", 2, "wrk threads")
	sizes := fs.String("sizes", "1000,1000000", "database sizes, in pets, comma-separated")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directories (databases, binaries, PostgreSQL's data and log)")
	only := fs.String("scenarios", "", "run only these scenarios, comma-separated (default: all)")
	fs.StringVar(&o.baseline, "baseline", "", "also build and load the service at this git revision, and compare (e.g. main, a commit hash)")
	fs.BoolVar(&o.postgres, "postgres", false, "also start a throwaway PostgreSQL cluster and load the service on it as 1 replica and as 2 replicas behind a round-robin balancer")
	fs.StringVar(&o.profile, "profile", "", "after each scenario's rounds, one more run per service target, not counted, with a CPU profile of the service (of its first replica on PostgreSQL) written to this directory; the report lists each profile's top 10 functions")
	fs.IntVar(&o.scrapers, "scrapers", 8, "scrapers of /metrics running during the get-scraped scenario")
	fs.DurationVar(&o.scrapeEvery, "scrape-every", time.Second, "how often each scraper of get-scraped scrapes /metrics")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rounds < 1 {
		return errors.New("-rounds: at least 1")
	}
	if o.postgres && o.baseline != "" {
		// Each is a comparison of its own, and the two in one run would make
		// every round twice as long and the report unreadable.
		return errors.New("-postgres and -baseline: one comparison at a time")
	}
	if o.scrapers < 1 || o.scrapeEvery <= 0 {
		return errors.New("-scrapers and -scrape-every: at least 1 scraper, and a positive interval")
	}
	for s := range strings.SplitSeq(*sizes, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 100 {
			return fmt.Errorf("-sizes: %q is not a number of pets >= 100", s)
		}
		o.sizes = append(o.sizes, n)
	}
	if *only != "" {
		o.only = strings.Split(*only, ",")
	}
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

	dir, bin, remove, err := buildInTempDir(ctx, "petstore-bench-", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	var baseBin string
	if o.baseline != "" {
		baseBin = filepath.Join(dir, "petstore-baseline")
		if err := buildRevision(ctx, o.baselineCommit, filepath.Join(dir, "baseline-src"), baseBin); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := writeScripts(dir); err != nil {
		return err
	}

	var cluster *pgCluster
	if o.postgres {
		start := time.Now()
		cluster, err = startPostgres(ctx)
		if err != nil {
			return err
		}
		// Stopped after the replicas (benchSize stops them before it
		// returns), and its directory deleted unless -keep.
		if o.keep {
			fmt.Fprintf(os.Stderr, "keeping %s\n", cluster.Dir)
			defer cluster.stop()
		} else {
			defer cluster.remove()
		}
		if o.pgVersion, err = cluster.version(ctx); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "started %s (%s) on a socket in %s in %v\n", o.pgVersion, cluster.Bin, cluster.Dir, time.Since(start).Round(time.Millisecond))
	}

	var results []sizeResult
	for _, n := range o.sizes {
		var bins []binary
		if baseBin != "" {
			bins = append(bins, binary{name: "baseline", path: baseBin, db: filepath.Join(dir, fmt.Sprintf("pets-%d-baseline.db", n))})
		}
		bins = append(bins, binary{name: "service", path: bin, db: filepath.Join(dir, fmt.Sprintf("pets-%d.db", n))})
		for _, b := range bins {
			start := time.Now()
			if err := createDatabase(ctx, b.path, b.db, n); err != nil {
				return fmt.Errorf("database of %d pets for the %s: %w", n, b.name, err)
			}
			fmt.Fprintf(os.Stderr, "made the %s's database of %d pets in %v\n", b.name, n, time.Since(start).Round(time.Millisecond))
		}
		var pg *pgDatabases
		if cluster != nil {
			// A database for each case, so that both start each write
			// scenario in the same state as the SQLite file: the pets loaded,
			// and what the earlier scenarios added on that server.
			pg = &pgDatabases{cluster: cluster}
			for i, db := range []*string{&pg.one, &pg.two} {
				name := fmt.Sprintf("pets_%d_%d", n, i+1)
				start := time.Now()
				if err := createPostgresDatabase(ctx, cluster, bin, name, n); err != nil {
					return fmt.Errorf("PostgreSQL database of %d pets: %w", n, err)
				}
				*db = cluster.url(name)
				fmt.Fprintf(os.Stderr, "made the PostgreSQL database %s of %d pets in %v\n", name, n, time.Since(start).Round(time.Millisecond))
			}
		}
		r, err := benchSize(ctx, o, dir, self, bin, bins, n, pg)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	printReport(stdout, o, results)
	return nil
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

// benchSize runs every scenario against one database size: bins are the
// binaries under load on SQLite, each with its own database, in the order
// each round loads them (after the ceiling); with pg, the binary bin is also
// loaded on PostgreSQL, behind balancers, after them.
func benchSize(ctx context.Context, o options, dir, self, bin string, bins []binary, n int64, pg *pgDatabases) (sizeResult, error) {
	res := sizeResult{pets: n, parts: map[string][]string{}, rssKiB: map[string][]int64{}, startups: map[string][]time.Duration{}}
	// Every process started here is stopped before benchSize returns, in
	// the reverse order of their starts: balancers, then replicas, before
	// the PostgreSQL server that runBench stops.
	var started []*process
	defer func() {
		for _, p := range slices.Backward(started) {
			p.stop()
		}
	}()
	// startMeasured starts the service on db a few times, measuring the
	// start-up of each; the last one stays up for the load.
	startMeasured := func(name, path, db string) (*process, error) {
		for j := range 3 {
			p, took, err := startService(ctx, path, db)
			if err != nil {
				return nil, fmt.Errorf("start the %s: %w", name, err)
			}
			res.startups[name] = append(res.startups[name], took)
			if j == 2 {
				started = append(started, p)
				return p, nil
			}
			p.stop()
		}
		panic("unreachable")
	}
	startBalancer := func(backends ...*process) (*process, error) {
		args := []string{"balance", "127.0.0.1:0"}
		for _, b := range backends {
			args = append(args, b.url)
		}
		p, err := startProcess(serverCommand(ctx, self, args...), "balancer listening on ")
		if err != nil {
			return nil, fmt.Errorf("start a balancer: %w", err)
		}
		started = append(started, p)
		return p, nil
	}
	// rss lists the service processes whose peak RSS is reported.
	rss := map[string][]*process{}

	var targets []target
	var procs []*process
	for _, b := range bins {
		p, err := startMeasured(b.name, b.path, b.db)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	ceil, err := startProcess(serverCommand(ctx, self, "ceiling", "127.0.0.1:0", strconv.FormatInt(n, 10)), "ceiling listening on ")
	if err != nil {
		return res, err
	}
	started = append(started, ceil)
	targets = append(targets, target{name: ceilingName, url: ceil.url, parts: []part{processPart("ceiling", ceil)}})
	rss[ceilingName] = []*process{ceil}
	if pg != nil {
		bal, err := startBalancer(ceil)
		if err != nil {
			return res, err
		}
		targets = append(targets, target{name: balancedName, url: bal.url,
			parts: []part{processPart("balancer", bal), processPart("ceiling", ceil)}})
	}
	for i, b := range bins {
		t := target{name: b.name, url: procs[i].url, parts: []part{processPart("service", procs[i])}}
		if b.name == "service" {
			t.profiled = procs[i]
		}
		targets = append(targets, t)
		rss[b.name] = procs[i : i+1]
	}
	if pg != nil {
		one, err := startMeasured(pg1Name, bin, pg.one)
		if err != nil {
			return res, err
		}
		var two []*process
		for range 2 {
			p, _, err := startService(ctx, bin, pg.two)
			if err != nil {
				return res, fmt.Errorf("start a replica: %w", err)
			}
			started = append(started, p)
			two = append(two, p)
		}
		database := part{"PostgreSQL", pg.cluster.pids}
		for _, c := range []struct {
			name     string
			replicas []*process
			url      string
		}{{pg1Name, []*process{one}, pg.one}, {pg2Name, two, pg.two}} {
			bal, err := startBalancer(c.replicas...)
			if err != nil {
				return res, err
			}
			db, err := sql.Open("pgx", c.url)
			if err != nil {
				return res, err
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			targets = append(targets, target{name: c.name, url: bal.url, pg: db, cluster: pg.cluster, profiled: c.replicas[0],
				parts: []part{processPart("balancer", bal), processPart("service", c.replicas...), database}})
			rss[c.name] = c.replicas
		}
	}
	for _, t := range targets {
		for _, p := range t.parts {
			res.parts[t.name] = append(res.parts[t.name], p.name)
		}
	}

	for _, sc := range slices.Concat(readScenarios, writeScenarios) {
		if len(o.only) > 0 && !slices.Contains(o.only, sc) {
			continue
		}
		s := scenarioResult{name: sc, runs: map[string][]wrkResult{}}
		// A short warm-up of each, not counted.
		for _, t := range targets {
			if _, err := runWrk(ctx, o, dir, sc, t.url, n, time.Second); err != nil {
				return res, err
			}
		}
		for range o.rounds {
			for _, t := range targets {
				var stopScraping func() scrapeResult
				if sc == "get-scraped" && t.name != ceilingName && t.name != balancedName {
					stopScraping = startScrapers(ctx, o, t.url)
				}
				r, err := measure(ctx, o, dir, sc, t, n)
				if stopScraping != nil {
					sr := stopScraping()
					r.Scrapes, r.ScrapeFailures, r.ScrapeMaxUS = sr.scrapes, sr.failures, sr.max.Microseconds()
				}
				if err != nil {
					return res, err
				}
				s.runs[t.name] = append(s.runs[t.name], r)
			}
			progress(os.Stderr, n, s, targets)
		}
		if o.profile != "" {
			s.profiles = map[string]string{}
			for _, t := range targets {
				if t.profiled == nil {
					continue
				}
				file, err := profileRun(ctx, o, dir, sc, t, t.profiled, n)
				if err != nil {
					return res, err
				}
				s.profiles[t.name] = file
				s.profileOrder = append(s.profileOrder, t.name)
				fmt.Fprintf(os.Stderr, "%8d %-11s profiled %s: %s\n", n, sc, t.name, file)
			}
		}
		res.scenarios = append(res.scenarios, s)
	}
	for name, ps := range rss {
		for _, p := range ps {
			res.rssKiB[name] = append(res.rssKiB[name], p.peakRSS())
		}
	}
	return res, nil
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
