package main

// bench replicate measures what replicating the SQLite file to object
// storage (-replicate, store_replica.go) costs, in one run, against a real
// S3 server: versitygw, built from tools/versitygw as the tests build it,
// on its posix backend in the run's temporary directory. Every S3 request
// of the run stays on 127.0.0.1: the benchmark builds the service and
// versitygw first (a build may need the module proxy), then runs itself
// again in a network namespace of loopback alone (unshare -n), as the
// tests' S3 cases do, and measures there.
//
// Every replicating service reaches versitygw through a proxy of its own
// (bench storeproxy, a process), which counts the requests by S3 operation
// and the bytes each way, and adds -delay (20 ms) to every request, or
// nothing: a store on another network, and the same store on loopback.
//
// Three parts, chosen with -parts:
//
//   - load: the create scenario of the load benchmark (wrk, -c 64), each
//     round loading in turn the service without replication, then in the
//     background mode and in sync mode (-replicate-sync) with the store at
//     0 ms, then both with the store at -delay, and sync mode at -delay
//     again with four times the connections; each service on its own
//     database and bucket. Ratios are taken within a round: background /
//     none (target >= 0.95), sync / background at each delay (target at
//     -delay: >= 0.5). Beside each: the CPU per create of the service, of
//     versitygw and of the proxy, creates per upload (per level-0 file
//     PUT), uploads/s, and in sync mode the mean wait of a batch of writes
//     for its upload (petstore_replica_write_wait_seconds). With -profile,
//     one more unmeasured run of each replicating service under a CPU
//     profile.
//   - restore: a database of -restore-pets pets, made as the load benchmark
//     makes its large ones, served replicating (its first upload timed),
//     with two seconds of creates on top and level 1's compaction; then
//     `petstore restore` of the latest state, timed, from the store at
//     0 ms and at -delay in turns, and the replica's size by level.
//   - bill: two services of their own, background and sync mode, started
//     before the other parts, each counted through its proxy over -meter
//     idle (once they have run at least 75 s), then over -meter at -rate
//     creates a second; the counts are extrapolated to an hour.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// replicateOptions are the settings of bench replicate.
type replicateOptions struct {
	duration time.Duration
	rounds   int
	conns    int
	threads  int
	pets     int64         // in each database of the load part
	delay    time.Duration // added to every request to the store, in the delayed cases
	// The restore part.
	restorePets int64
	restores    int
	// The bill part.
	meter   time.Duration // each window: idle, then under load
	rate    int           // creates a second in the load window
	parts   []string
	keep    bool
	profile string // the directory of the CPU profiles; none when empty
}

// replicateParts are the parts of bench replicate, in the order they run.
var replicateParts = []string{"load", "restore", "bill"}

// replicateDirEnv names, in the run inside the network namespace, the
// directory where the run outside it built the service and versitygw.
const replicateDirEnv = "PETSTORE_BENCH_REPLICATE_DIR"

// runReplicateBench is `bench replicate`: outside the namespace, the
// builds and the run inside it; inside, the measures and the report.
func runReplicateBench(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseReplicateOptions(args)
	if err != nil {
		return err
	}
	if dir := os.Getenv(replicateDirEnv); dir != "" {
		return runReplicateInside(ctx, o, dir, stdout)
	}
	return runReplicateOutside(ctx, o, args, stdout)
}

// parseReplicateOptions reads the flags of bench replicate and refuses the
// settings it cannot run.
func parseReplicateOptions(args []string) (replicateOptions, error) {
	var o replicateOptions
	fs := flag.NewFlagSet("bench replicate", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one load run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of the load part (each loads every service once)")
	fs.IntVar(&o.conns, "c", 64, "wrk connections")
	fs.IntVar(&o.threads, "t", 2, "wrk threads")
	fs.Int64Var(&o.pets, "pets", 1000, "pets in each database of the load and bill parts")
	fs.DurationVar(&o.delay, "delay", 20*time.Millisecond, "added to every request to the store in the delayed cases")
	fs.Int64Var(&o.restorePets, "restore-pets", 1000000, "pets in the database the restore part replicates and restores")
	fs.IntVar(&o.restores, "restores", 3, "restores timed at each delay")
	fs.DurationVar(&o.meter, "meter", time.Minute, "the bill part's windows: this long idle, then this long under -rate creates/s")
	fs.IntVar(&o.rate, "rate", 100, "creates a second in the bill part's load window")
	only := fs.String("parts", strings.Join(replicateParts, ","), "the parts to run, comma-separated")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (binaries, databases, the store's files)")
	fs.StringVar(&o.profile, "profile", "", "after the load part's rounds, one more run per replicating service, not counted, with a CPU profile of the service written to this directory")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rounds < 1 || o.duration < time.Second || o.conns < 1 || o.threads < 1 || o.threads > o.conns || o.restores < 1 || o.rate < 1 || o.meter < 10*time.Second || o.delay < 0 {
		return o, errors.New("-rounds, -c, -t, -restores and -rate must be positive, -t at most -c, -duration at least 1s, -meter at least 10s")
	}
	if o.pets < 100 || o.restorePets < 100 {
		return o, errors.New("-pets and -restore-pets: at least 100")
	}
	for p := range strings.SplitSeq(*only, ",") {
		if !slices.Contains(replicateParts, p) {
			return o, fmt.Errorf("-parts: %q is none of %s", p, strings.Join(replicateParts, ", "))
		}
		o.parts = append(o.parts, p)
	}
	return o, nil
}

// runs reports whether the part is to run.
func (o replicateOptions) runs(part string) bool { return slices.Contains(o.parts, part) }

// runReplicateOutside checks the tools, builds the service and versitygw
// into a new temporary directory, runs bench replicate again in a network
// namespace of loopback alone with that directory, and ends its report with
// the whole run's duration.
func runReplicateOutside(ctx context.Context, o replicateOptions, args []string, stdout io.Writer) error {
	start := time.Now()
	unshare, err := readyForReplicate(o)
	if err != nil {
		return err
	}
	dir, _, remove, err := buildInTempDir(ctx, "petstore-bench-replicate-", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	if err := buildVersitygw(ctx, filepath.Join(dir, "versitygw")); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "built the service and versitygw in %v\n", time.Since(start).Round(time.Second))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, unshare, append([]string{unshareFlag(), "sh", "-c", `ip link set lo up && exec "$0" "$@"`, self, "replicate"}, args...)...)
	cmd.Env = append(os.Environ(), replicateDirEnv+"="+dir)
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	// unshare and sh exec into the benchmark, so the PID is its own: on
	// Ctrl-C it stops what it started, within their stop timeouts.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Minute
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench replicate in a network namespace of loopback alone: %w", err)
	}
	fmt.Fprintf(stdout, "\nThe whole run took %v, the builds included.\n", time.Since(start).Round(time.Second))
	return nil
}

// readyForReplicate checks that wrk, unshare and ip are installed and that
// the benchmark runs from the repository root, makes the profiles'
// directory with -profile, and returns unshare's path.
func readyForReplicate(o replicateOptions) (string, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return "", errors.New("wrk is not installed; run bench/run, which installs it (apt-get install wrk)")
	}
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		_, err = exec.LookPath("ip")
	}
	if err == nil {
		err = exec.Command(unshare, unshareFlag(), "true").Run()
	}
	if err != nil {
		return "", fmt.Errorf("bench replicate runs in a network namespace of loopback alone (unshare, ip: apt-get install util-linux iproute2, and run as root): %w", err)
	}
	if _, err := os.Stat("tools/versitygw/go.mod"); err != nil {
		return "", fmt.Errorf("run from the repository root: %w", err)
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return "", fmt.Errorf("-profile: %w", err)
		}
	}
	return unshare, nil
}

// unshareFlag is unshare's: a network namespace; as another user than root,
// in a user namespace of its own too.
func unshareFlag() string {
	if os.Geteuid() == 0 {
		return "-n"
	}
	return "-rn"
}

// versitygwPackage is the S3 server's command, in tools/versitygw's module.
const versitygwPackage = "github.com/versity/versitygw/cmd/versitygw"

// buildVersitygw builds versitygw into out with the settings of the tests'
// and CI's builds (CGO off, so that the build cache serves its packages).
func buildVersitygw(ctx context.Context, out string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-C", "tools/versitygw", "-o", out, versitygwPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build versitygw: %v\n%s", err, b)
	}
	return nil
}

// replicateRun is the run inside the namespace: its settings, the
// directory with the binaries, the store, and what was started.
type replicateRun struct {
	o     replicateOptions
	dir   string
	bin   string // the service
	self  string // this program, which serves the proxies
	store *s3Store
	stops []func() // stopAll runs them in the reverse order of the starts
}

// runReplicateInside starts versitygw, runs each part and prints the
// report.
func runReplicateInside(ctx context.Context, o replicateOptions, dir string, stdout io.Writer) error {
	if !onlyLoopback() {
		return errors.New("bench replicate measures inside a network namespace of loopback alone")
	}
	r := &replicateRun{o: o, dir: dir, bin: filepath.Join(dir, "petstore")}
	defer r.stopAll()
	var err error
	if r.self, err = os.Executable(); err != nil {
		return err
	}
	if err := writeScripts(dir); err != nil {
		return err
	}
	res := replicateResult{loadBefore: loadAverage(), start: time.Now()}
	if r.store, err = startS3Store(ctx, filepath.Join(dir, "versitygw"), filepath.Join(dir, "s3")); err != nil {
		return err
	}
	r.stops = append(r.stops, r.store.stop)
	var bill *billServices
	if o.runs("bill") {
		if bill, err = r.startBill(ctx); err != nil {
			return err
		}
	}
	if o.runs("load") {
		if res.load, err = r.loadPart(ctx); err != nil {
			return err
		}
	}
	if o.runs("restore") {
		if res.restore, err = r.restorePart(ctx); err != nil {
			return err
		}
	}
	if bill != nil {
		if res.bill, err = r.billPart(ctx, bill); err != nil {
			return err
		}
	}
	res.loadAfter, res.took = loadAverage(), time.Since(res.start)
	printReplicateReport(stdout, o, res)
	return nil
}

// onlyLoopback reports whether this process's network has no interface but
// loopback: the namespace the run outside made.
func onlyLoopback() bool {
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return false
	}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, _, ok := strings.Cut(line, ":")
		if i >= 2 && ok && strings.TrimSpace(name) != "lo" {
			return false
		}
	}
	return true
}

// stopAll stops what the run started, in the reverse order of the starts.
func (r *replicateRun) stopAll() {
	for _, stop := range slices.Backward(r.stops) {
		stop()
	}
}

// loadAverage is the first figure of /proc/loadavg: what else ran on the
// machine, on the shared VM.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f, _, _ := strings.Cut(string(b), " ")
	return f
}

// replicaURL is -replicate's value for the replica at path in bucket, the
// store reached at endpoint.
func replicaURL(bucket, endpoint string) string {
	return fmt.Sprintf("s3://%s/petstore?endpoint=%s&force-path-style=true", bucket, endpoint)
}

// replicaPrefix is where replicaURL's replica lies in its bucket.
const replicaPrefix = "petstore/"

// storeEnv is cmd's environment without any AWS variable of the machine
// (AWS_CA_BUNDLE, which makes the service refuse an S3 replica, or a
// developer's profile), with the keys of the run's store instead.
func storeEnv(env []string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	return append(env, "AWS_ACCESS_KEY_ID="+s3AccessKey, "AWS_SECRET_ACCESS_KEY="+s3SecretKey)
}

// startReplicating starts the service on db, replicating to url (in sync
// mode when sync), or not replicating when url is empty; it returns the
// service and the time from its start to its first answered request, which
// with -replicate includes the first upload.
func (r *replicateRun) startReplicating(ctx context.Context, db, url string, sync bool) (*process, time.Duration, error) {
	cmd := serviceCommand(ctx, r.bin, db)
	cmd.Env = storeEnv(cmd.Env)
	if url != "" {
		cmd.Env = append(cmd.Env, "PETSTORE_REPLICATE="+url, "PETSTORE_REPLICATE_SYNC="+strconv.FormatBool(sync))
	}
	if r.o.profile != "" {
		cmd.Env = append(cmd.Env, "PETSTORE_PPROF_ADDR=127.0.0.1:0")
	}
	p, took, err := startServiceCommand(ctx, cmd, &http.Client{Timeout: startTimeout})
	if err != nil {
		return nil, 0, fmt.Errorf("start the service on %s: %w", filepath.Base(db), err)
	}
	r.stops = append(r.stops, func() { p.stop() })
	return p, took, nil
}

// startProxy starts a proxy to the store that adds delay to every request
// (bench storeproxy), stopped with the run.
func (r *replicateRun) startProxy(ctx context.Context, delay time.Duration) (*countingProxy, error) {
	cmd := serverCommand(ctx, r.self, "storeproxy", "127.0.0.1:0", r.store.endpoint, delay.String())
	p, err := startProcess(cmd, "store proxy listening on ")
	if err != nil {
		return nil, fmt.Errorf("start a proxy to the store: %w", err)
	}
	r.stops = append(r.stops, func() { p.stop() })
	return &countingProxy{proc: p, url: p.url}, nil
}
