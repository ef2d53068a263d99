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
// Run it from the repository root with bench/run (which installs wrk when it
// is missing). Everything listens on 127.0.0.1; the benchmark ends only the
// processes it started, by PID, every load run is bounded by -duration and
// every start and stop by a timeout. CI does not run it.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "ceiling" {
		err = runCeiling(os.Args[2:])
	} else {
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

// targets are the ratio targets, printed beside the measured ratios.
var targets = map[string]string{
	"list-first": ">= 0.80",
	"list-deep":  ">= 0.50",
	"get":        ">= 0.60",
	// Judged against get: within 10% of it (see the report's scrape line).
	"get-scraped": "",
	"create":      ">= 0.50",
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

	scrapers    int           // concurrent /metrics scrapers during get-scraped
	scrapeEvery time.Duration // each scraper's interval

	// Resolved from the flags, for the report's first line.
	baselineCommit string // the baseline's full commit hash
	current        string // what the service binary is built from
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
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (databases, binaries)")
	only := fs.String("scenarios", "", "run only these scenarios, comma-separated (default: all)")
	fs.StringVar(&o.baseline, "baseline", "", "also build and load the service at this git revision, and compare (e.g. main, a commit hash)")
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

	dir, err := os.MkdirTemp("", "petstore-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := filepath.Join(dir, "petstore")
	if err := buildService(ctx, ".", bin); err != nil {
		return err
	}
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
	for name, body := range scenarioScripts {
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(luaCommon+body+"\n"), 0o644); err != nil {
			return err
		}
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
		r, err := benchSize(ctx, o, dir, self, bins, n)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	printReport(stdout, o, results)
	return nil
}

// wrkResult is what one wrk run reports (the RESULT line of the scripts).
type wrkResult struct {
	Requests     int64 `json:"requests"`
	DurationUS   int64 `json:"duration_us"`
	P50US        int64 `json:"p50_us"`
	P99US        int64 `json:"p99_us"`
	Non2xx       int64 `json:"non2xx"`
	SocketErrors int64 `json:"socket_errors"`

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

func (r wrkResult) rps() float64 { return float64(r.Requests) / (float64(r.DurationUS) / 1e6) }

// scenarioResult is every round of one scenario, for each server; baseline
// is empty without -baseline.
type scenarioResult struct {
	name                       string
	ceiling, baseline, service []wrkResult
}

// binaryResult is what is measured of one binary outside the load.
type binaryResult struct {
	rssKiB   int64           // VmHWM after all scenarios
	startups []time.Duration // start-up to first answered request
}

// sizeResult is everything measured on one database size.
type sizeResult struct {
	pets              int64
	scenarios         []scenarioResult
	service, baseline binaryResult
	ceilRSS           int64 // the ceiling's VmHWM, for comparison
}

// benchSize runs every scenario against one database size: bins are the
// binaries under load, each with its own database, in the order each round
// loads them (after the ceiling).
func benchSize(ctx context.Context, o options, dir, self string, bins []binary, n int64) (sizeResult, error) {
	res := sizeResult{pets: n}
	procs := make([]*process, len(bins))
	for i, b := range bins {
		// Start-up is measured on a few fresh starts; the last one stays up
		// for the load.
		m := res.measured(b.name)
		for j := range 3 {
			p, took, err := startService(ctx, b.path, b.db)
			if err != nil {
				return res, fmt.Errorf("start the %s: %w", b.name, err)
			}
			m.startups = append(m.startups, took)
			if j < 2 {
				p.stop()
			} else {
				procs[i] = p
				defer p.stop()
			}
		}
	}
	ceil, err := startProcess(serverCommand(ctx, self, "ceiling", "127.0.0.1:0", strconv.FormatInt(n, 10)), "ceiling listening on ")
	if err != nil {
		return res, err
	}
	defer ceil.stop()

	for _, sc := range slices.Concat(readScenarios, writeScenarios) {
		if len(o.only) > 0 && !slices.Contains(o.only, sc) {
			continue
		}
		s := scenarioResult{name: sc}
		// The servers in the order of a round, and where each one's runs go.
		servers := []*process{ceil}
		runs := []*[]wrkResult{&s.ceiling}
		for i, b := range bins {
			servers = append(servers, procs[i])
			runs = append(runs, s.runs(b.name))
		}
		// A short warm-up of each, not counted.
		for _, p := range servers {
			if _, err := runWrk(ctx, o, dir, sc, p.url, n, time.Second); err != nil {
				return res, err
			}
		}
		for range o.rounds {
			for i, p := range servers {
				var stopScraping func() scrapeResult
				if sc == "get-scraped" && p != ceil {
					stopScraping = startScrapers(ctx, o, p.url)
				}
				r, err := runWrk(ctx, o, dir, sc, p.url, n, o.duration)
				if stopScraping != nil {
					sr := stopScraping()
					r.Scrapes, r.ScrapeFailures, r.ScrapeMaxUS = sr.scrapes, sr.failures, sr.max.Microseconds()
				}
				if err != nil {
					return res, err
				}
				*runs[i] = append(*runs[i], r)
			}
			progress(os.Stderr, n, s)
		}
		res.scenarios = append(res.scenarios, s)
	}
	for i, b := range bins {
		res.measured(b.name).rssKiB = procs[i].peakRSS()
	}
	res.ceilRSS = ceil.peakRSS()
	return res, nil
}

// measured is where the figures of the binary called name go.
func (r *sizeResult) measured(name string) *binaryResult {
	if name == "baseline" {
		return &r.baseline
	}
	return &r.service
}

// runs is where the wrk runs of the binary called name go.
func (s *scenarioResult) runs(name string) *[]wrkResult {
	if name == "baseline" {
		return &s.baseline
	}
	return &s.service
}

// progress prints the round just finished, so that a long run shows how it
// goes (and each round's figures stay in the terminal's scroll-back).
func progress(w io.Writer, n int64, s scenarioResult) {
	last := func(rs []wrkResult) wrkResult { return rs[len(rs)-1] }
	c, sv := last(s.ceiling), last(s.service)
	fmt.Fprintf(w, "%8d %-10s ceiling %8.0f/s", n, s.name, c.rps())
	if len(s.baseline) == 0 {
		fmt.Fprintf(w, "  service %8.0f/s  ratio %.2f  (service non-2xx %d, errors %d)\n",
			sv.rps(), sv.rps()/c.rps(), sv.Non2xx, sv.SocketErrors)
		return
	}
	b := last(s.baseline)
	fmt.Fprintf(w, "  baseline %8.0f/s  service %8.0f/s  ratios %.2f, %.2f  service/baseline %.2f  (non-2xx and errors: baseline %d, service %d)\n",
		b.rps(), sv.rps(), b.rps()/c.rps(), sv.rps()/c.rps(), sv.rps()/b.rps(),
		b.Non2xx+b.SocketErrors, sv.Non2xx+sv.SocketErrors)
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

	stopped bool  // stop has run
	stopErr error // what stop returned
}

// urlPattern finds the URL in a server's first line.
var urlPattern = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`)

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
	go io.Copy(io.Discard, r)
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
	return cmd
}

// startService starts the service on db and returns it with the time from
// the start of the process to the first answered API request (one that
// reads the database).
func startService(ctx context.Context, bin, db string) (*process, time.Duration, error) {
	cmd := serviceCommand(ctx, bin, db)
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
	client := &http.Client{Timeout: startTimeout}
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

// median returns the median of xs (the mean of the two middle values when
// there is an even number of them).
func median[T cmp.Ordered](xs []T, toFloat func(T) float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return toFloat(s[len(s)/2])
	}
	return (toFloat(s[len(s)/2-1]) + toFloat(s[len(s)/2])) / 2
}

// medianOf is median over a projection of wrk results.
func medianOf(rs []wrkResult, f func(wrkResult) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs, func(x float64) float64 { return x })
}

// printReport writes the Markdown report. With a baseline, the table gains
// its columns and the list its RSS and start-up; without, the report is the
// service against the ceiling alone.
func printReport(w io.Writer, o options, results []sizeResult) {
	withBase := o.baseline != ""
	fmt.Fprintf(w, "%s, %d CPUs (nproc), %s; wrk -t%d -c%d, %d rounds of %v per server, medians\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel(), o.threads, o.conns, o.rounds, o.duration)
	if withBase {
		fmt.Fprintf(w, "Baseline: `%s` (%s); service: %s. Each binary on its own database of the same size, whose schema it made; every round loads the ceiling, the baseline and the service in turn.\n\n",
			o.baseline, o.baselineCommit, o.current)
		fmt.Fprintln(w, "| pets | scenario | ceiling req/s | ceiling p50 / p99 | baseline req/s | baseline p50 / p99 | baseline ratio | service req/s | service p50 / p99 | ratio | target | service/baseline (range over rounds) | req/s spread over rounds, baseline / service | non-2xx, baseline / service |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
	} else {
		fmt.Fprintln(w, "| pets | scenario | ceiling req/s | ceiling p50 / p99 | service req/s | service p50 / p99 | ratio | target | service non-2xx |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---|---:|")
	}
	ms := func(us float64) string { return strconv.FormatFloat(us/1000, 'f', 2, 64) + " ms" }
	latency := func(rs []wrkResult) string {
		return ms(medianOf(rs, func(r wrkResult) float64 { return float64(r.P50US) })) + " / " +
			ms(medianOf(rs, func(r wrkResult) float64 { return float64(r.P99US) }))
	}
	identity := func(x float64) float64 { return x }
	perSize := map[string][]float64{}
	for _, r := range results {
		for _, s := range r.scenarios {
			ratio := median(rpsRatios(s.service, s.ceiling), identity)
			perSize[s.name] = append(perSize[s.name], ratio)
			if !withBase {
				fmt.Fprintf(w, "| %d | %s | %.0f | %s | %.0f | %s | **%.2f** | %s | %d |\n",
					r.pets, s.name,
					medianOf(s.ceiling, wrkResult.rps), latency(s.ceiling),
					medianOf(s.service, wrkResult.rps), latency(s.service),
					ratio, targets[s.name], failures(s.service))
				continue
			}
			vsBase := rpsRatios(s.service, s.baseline)
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %.0f | %s | %.2f | %.0f | %s | **%.2f** | %s | **%.2f** (%.2f to %.2f) | %.0f%% / %.0f%% | %d / %d |\n",
				r.pets, s.name,
				medianOf(s.ceiling, wrkResult.rps), latency(s.ceiling),
				medianOf(s.baseline, wrkResult.rps), latency(s.baseline),
				median(rpsRatios(s.baseline, s.ceiling), identity),
				medianOf(s.service, wrkResult.rps), latency(s.service),
				ratio, targets[s.name],
				median(vsBase, identity), slices.Min(vsBase), slices.Max(vsBase),
				100*spread(s.baseline), 100*spread(s.service),
				failures(s.baseline), failures(s.service))
		}
	}
	fmt.Fprintln(w)
	if withBase {
		fmt.Fprintln(w, "service/baseline is the median of the per-round ratios of req/s (each round loads both, one after the other), with their lowest and highest in brackets; the spread of a binary is (highest - lowest) / median of its req/s over the rounds.")
		fmt.Fprintln(w)
	}
	if len(results) >= 2 {
		first, last := results[0], results[len(results)-1]
		// The machine is shared and noisy, so the scale check compares the
		// ceiling-normalised ratios of the two sizes, not raw req/s.
		fmt.Fprintf(w, "Scale, ratio at %d pets / ratio at %d (target: 0.90 to 1.10):", last.pets, first.pets)
		for _, sc := range readScenarios {
			v := perSize[sc]
			if len(v) < 2 {
				continue
			}
			fmt.Fprintf(w, " %s %.2f;", sc, v[len(v)-1]/v[0])
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w)
	}
	printScrapes(w, o, results)
	mib := func(kib int64) float64 { return float64(kib) / 1024 }
	startMS := func(b binaryResult) float64 {
		return median(b.startups, func(d time.Duration) float64 { return float64(d) / 1e6 })
	}
	for _, r := range results {
		if withBase {
			fmt.Fprintf(w, "- %d pets: service peak RSS (VmHWM) %.1f MiB (baseline %.1f MiB, ceiling %.1f MiB); start-up to first answered request %.1f ms (baseline %.1f ms), medians of %d starts each\n",
				r.pets, mib(r.service.rssKiB), mib(r.baseline.rssKiB), mib(r.ceilRSS), startMS(r.service), startMS(r.baseline), len(r.service.startups))
			continue
		}
		fmt.Fprintf(w, "- %d pets: service peak RSS (VmHWM) %.1f MiB (ceiling %.1f MiB); start-up to first answered request %.1f ms (median of %d starts)\n",
			r.pets, mib(r.service.rssKiB), mib(r.ceilRSS), startMS(r.service), len(r.service.startups))
	}
}

// rpsRatios is the req/s of each round of a divided by that of the same
// round of b: runs measured side by side, so the machine's drift between
// rounds cancels out.
func rpsRatios(a, b []wrkResult) []float64 {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = a[i].rps() / b[i].rps()
	}
	return rs
}

// spread is (highest - lowest) / median of the req/s of rs: how much one
// binary's figure moves from round to round with nothing changed.
func spread(rs []wrkResult) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = r.rps()
	}
	return (slices.Max(xs) - slices.Min(xs)) / median(xs, func(x float64) float64 { return x })
}

// failures counts the non-2xx answers and socket errors of rs.
func failures(rs []wrkResult) int64 {
	var n int64
	for _, r := range rs {
		n += r.Non2xx + r.SocketErrors
	}
	return n
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// printScrapes reports, for each size, getPet's throughput while /metrics is
// scraped against its throughput alone: the ratio of the two scenarios' ratios
// to the ceiling (the rounds of the two scenarios are not side by side, so
// each is first judged against the ceiling of its own rounds). Target:
// within 10%.
func printScrapes(w io.Writer, o options, results []sizeResult) {
	identity := func(x float64) float64 { return x }
	for _, r := range results {
		var get, scraped *scenarioResult
		for i := range r.scenarios {
			switch r.scenarios[i].name {
			case "get":
				get = &r.scenarios[i]
			case "get-scraped":
				scraped = &r.scenarios[i]
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
				median(rpsRatios(under, scraped.ceiling), identity)/median(rpsRatios(alone, get.ceiling), identity),
				scrapes, failures, float64(slowest)/1000)
		}
		if len(scraped.baseline) > 0 {
			line("baseline", get.baseline, scraped.baseline)
		}
		line("service", get.service, scraped.service)
	}
	fmt.Fprintln(w)
}
