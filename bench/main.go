// Command bench is the load benchmark of the petstore service. In one run it
// builds the service, loads databases of 1,000 and 1,000,000 pets, starts a
// bare net/http "ceiling" server that answers the same requests from memory
// and the real service on each database, and loads them in turn (ceiling,
// service, ceiling, service...) with wrk, the same connections and duration
// for both. It prints a Markdown table of requests/s, p50 and p99 latency,
// the ratio service/ceiling (median of the rounds), the service's peak RSS
// and its start-up time.
//
// Run it from the repository root with bench/run (which installs wrk when it
// is missing). Everything listens on 127.0.0.1; the benchmark ends only the
// processes it started, by PID, and every load run is bounded by -duration.
// CI does not run it.
package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
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

	_ "modernc.org/sqlite"
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
	readScenarios  = []string{"list-first", "list-deep", "get"}
	writeScenarios = []string{"create", "mix"}
)

// targets are the ratio targets, printed beside the measured ratios.
var targets = map[string]string{
	"list-first": ">= 0.80",
	"list-deep":  ">= 0.50",
	"get":        ">= 0.60",
	"create":     ">= 0.50",
	"mix":        ">= 0.60",
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
}

// runBench is the whole benchmark.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one wrk run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per scenario (each runs the ceiling then the service)")
	fs.IntVar(&o.conns, "c", 32, "wrk connections")
	fs.IntVar(&o.threads, "t", 2, "wrk threads")
	sizes := fs.String("sizes", "1000,1000000", "database sizes, in pets, comma-separated")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (databases, binary)")
	only := fs.String("scenarios", "", "run only these scenarios, comma-separated (default: all)")
	if err := fs.Parse(args); err != nil {
		return err
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
	schema, err := os.ReadFile("schema.sql")
	if err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
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
	// The README's build command.
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
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
		db := filepath.Join(dir, fmt.Sprintf("pets-%d.db", n))
		start := time.Now()
		if err := loadPets(db, string(schema), n); err != nil {
			return fmt.Errorf("load %d pets: %w", n, err)
		}
		fmt.Fprintf(os.Stderr, "loaded %d pets in %v\n", n, time.Since(start).Round(time.Millisecond))
		r, err := benchSize(ctx, o, dir, bin, self, db, n)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	printReport(stdout, o, results)
	return nil
}

// loadPets builds a database of n pets directly on the file, in one
// transaction: a recursive CTE feeds INSERT ... SELECT, so no row crosses
// from Go to SQLite. Names, categories and statuses vary with the id.
func loadPets(path, schema string, n int64) error {
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		return err
	}
	_, err = db.Exec(`
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO pets (name, category_id, status)
		SELECT 'pet-' || i, i % 10 + 1, CASE i % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'pending' ELSE 'sold' END
		FROM seq`, n)
	if err != nil {
		return err
	}
	_, err = db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

// wrkResult is what one wrk run reports (the RESULT line of the scripts).
type wrkResult struct {
	Requests     int64 `json:"requests"`
	DurationUS   int64 `json:"duration_us"`
	P50US        int64 `json:"p50_us"`
	P99US        int64 `json:"p99_us"`
	Non2xx       int64 `json:"non2xx"`
	SocketErrors int64 `json:"socket_errors"`
}

func (r wrkResult) rps() float64 { return float64(r.Requests) / (float64(r.DurationUS) / 1e6) }

// scenarioResult is every round of one scenario, for both servers.
type scenarioResult struct {
	name             string
	ceiling, service []wrkResult
}

// sizeResult is everything measured on one database size.
type sizeResult struct {
	pets      int64
	scenarios []scenarioResult
	rssKiB    int64           // the service's VmHWM after all scenarios
	ceilRSS   int64           // the ceiling's, for comparison
	startups  []time.Duration // start-up to first answered request
}

// benchSize runs every scenario against one database.
func benchSize(ctx context.Context, o options, dir, bin, self, db string, n int64) (sizeResult, error) {
	res := sizeResult{pets: n}
	// Start-up is measured on a few fresh starts; the last one stays up for
	// the load.
	var svc *process
	for i := range 3 {
		p, took, err := startService(ctx, bin, db)
		if err != nil {
			return res, err
		}
		res.startups = append(res.startups, took)
		if i < 2 {
			p.stop()
		} else {
			svc = p
		}
	}
	defer svc.stop()
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
		// A short warm-up of each, not counted.
		for _, p := range []*process{ceil, svc} {
			if _, err := runWrk(ctx, o, dir, sc, p.url, n, time.Second); err != nil {
				return res, err
			}
		}
		for range o.rounds {
			c, err := runWrk(ctx, o, dir, sc, ceil.url, n, o.duration)
			if err != nil {
				return res, err
			}
			sv, err := runWrk(ctx, o, dir, sc, svc.url, n, o.duration)
			if err != nil {
				return res, err
			}
			s.ceiling = append(s.ceiling, c)
			s.service = append(s.service, sv)
			fmt.Fprintf(os.Stderr, "%8d %-10s ceiling %8.0f/s  service %8.0f/s  ratio %.2f  (service non-2xx %d, errors %d)\n",
				n, sc, c.rps(), sv.rps(), sv.rps()/c.rps(), sv.Non2xx, sv.SocketErrors)
		}
		res.scenarios = append(res.scenarios, s)
	}
	res.rssKiB = svc.peakRSS()
	res.ceilRSS = ceil.peakRSS()
	return res, nil
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
}

// urlPattern finds the URL in a server's first line.
var urlPattern = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`)

// startProcess starts cmd and waits for its stdout line that begins with
// prefix and holds its URL.
func startProcess(cmd *exec.Cmd, prefix string) (*process, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = nil // the null device: the service's access log costs it a write, not a copy in this process
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, prefix) {
		p.stop()
		return nil, fmt.Errorf("%s: no %q line (got %q, %v)", cmd.Path, prefix, line, err)
	}
	go io.Copy(io.Discard, stdout)
	p.url = urlPattern.FindString(line)
	return p, nil
}

// startService starts the service on db and returns it with the time from
// the start of the process to the first answered API request (one that
// reads the database).
func startService(ctx context.Context, bin, db string) (*process, time.Duration, error) {
	cmd := serverCommand(ctx, bin)
	cmd.Env = append(os.Environ(), "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB="+db, "PETSTORE_API_KEYS="+benchKey)
	start := time.Now()
	p, err := startProcess(cmd, "petstore listening on ")
	if err != nil {
		return nil, 0, err
	}
	req, _ := http.NewRequest("GET", p.url+"/v1/pets?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+benchKey)
	res, err := http.DefaultClient.Do(req)
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
	cmd.WaitDelay = 15 * time.Second
	return cmd
}

// stop sends SIGTERM to the process (by its PID, never by name) and waits,
// killing it if it has not exited within 15 s.
func (p *process) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
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

// printReport writes the Markdown report.
func printReport(w io.Writer, o options, results []sizeResult) {
	fmt.Fprintf(w, "%s, %d CPUs (nproc), %s; wrk -t%d -c%d, %d rounds of %v per server, medians\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel(), o.threads, o.conns, o.rounds, o.duration)
	fmt.Fprintln(w, "| pets | scenario | ceiling req/s | ceiling p50 / p99 | service req/s | service p50 / p99 | ratio | target | service non-2xx |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---|---:|")
	ms := func(us float64) string { return strconv.FormatFloat(us/1000, 'f', 2, 64) + " ms" }
	perSize := map[string][]float64{}
	for _, r := range results {
		for _, s := range r.scenarios {
			ratios := make([]float64, len(s.service))
			var non2xx int64
			for i := range s.service {
				ratios[i] = s.service[i].rps() / s.ceiling[i].rps()
				non2xx += s.service[i].Non2xx + s.service[i].SocketErrors
			}
			svcRPS := medianOf(s.service, wrkResult.rps)
			ratio := median(ratios, func(x float64) float64 { return x })
			perSize[s.name] = append(perSize[s.name], ratio)
			fmt.Fprintf(w, "| %d | %s | %.0f | %s / %s | %.0f | %s / %s | **%.2f** | %s | %d |\n",
				r.pets, s.name,
				medianOf(s.ceiling, wrkResult.rps),
				ms(medianOf(s.ceiling, func(r wrkResult) float64 { return float64(r.P50US) })),
				ms(medianOf(s.ceiling, func(r wrkResult) float64 { return float64(r.P99US) })),
				svcRPS,
				ms(medianOf(s.service, func(r wrkResult) float64 { return float64(r.P50US) })),
				ms(medianOf(s.service, func(r wrkResult) float64 { return float64(r.P99US) })),
				ratio, targets[s.name], non2xx)
		}
	}
	fmt.Fprintln(w)
	if len(results) >= 2 {
		first, last := results[0], results[len(results)-1]
		// The machine is shared and noisy, so the scale check compares the
		// ceiling-normalised ratios of the two sizes, not raw req/s.
		var scale []string
		for _, sc := range readScenarios {
			v := perSize[sc]
			if len(v) < 2 {
				continue
			}
			scale = append(scale, fmt.Sprintf("%s %.2f", sc, v[len(v)-1]/v[0]))
		}
		fmt.Fprintf(w, "Scale of the read scenarios, ratio at %d pets / ratio at %d (target: 0.90 to 1.10): %s.\n\n",
			last.pets, first.pets, strings.Join(scale, ", "))
	}
	for _, r := range results {
		starts := median(r.startups, func(d time.Duration) float64 { return float64(d) / 1e6 })
		fmt.Fprintf(w, "- %d pets: service peak RSS (VmHWM) %.1f MiB (ceiling %.1f MiB); start-up to first answered request %.1f ms (median of %d starts)\n",
			r.pets, float64(r.rssKiB)/1024, float64(r.ceilRSS)/1024, starts, len(r.startups))
	}
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
