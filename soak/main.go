// Command soak runs the pet store under a mixed load of reads and every kind
// of write for a chosen time, stopping it with SIGKILL (and now and then
// SIGTERM) at random moments and restarting it on the same database, and
// checks after every restart that nothing a client was told went missing:
// every acknowledged change is stored, every acknowledged change has its
// event in the feed, and the feed holds no event without its change. With
// -postgres it runs two replicas on one throwaway PostgreSQL database and
// kills them in turn while the other keeps serving. It is not part of CI; run
// it from the repository root:
//
//	go run ./soak -duration 5m
//	go run ./soak -postgres -duration 5m
//
// It prints what it did and found, and exits 1 when any check failed, any
// answer was a 5xx, a request to a replica that was up failed, a retried
// Idempotency-Key made a duplicate, or (SQLite) the database fails its
// integrity check. docs/development.md describes the checks.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"petstore/internal/pgcluster"

	_ "github.com/jackc/pgx/v5/stdlib" // to make the soak's database on the cluster
	_ "modernc.org/sqlite"             // for PRAGMA integrity_check on the file between runs
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		}
		os.Exit(1)
	}
}

// pgSettings are the soak cluster's settings beyond the defaults: durable
// commits, since what the soak checks is that an acknowledged change
// survives the death of the process that made it.
var pgSettings = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on", "max_connections=100"}

// run parses the flags and runs the soak until the duration is over or ctx
// is cancelled.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "petstore-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.bin == "" {
		if o.bin, err = buildPetstore(ctx, dir); err != nil {
			return err
		}
	}
	keyBytes := make([]byte, 16)
	rand.Read(keyBytes)
	r := &soakRun{o: o, s: newSoak(hex.EncodeToString(keyBytes), o.clients, o.timeout), dbPath: filepath.Join(dir, "soak.db")}
	replicas := 1
	if o.postgres {
		c, err := startCluster(ctx)
		if err != nil {
			return err
		}
		defer c.Remove()
		r.dbPath, replicas = c.URL("soak"), 2
	}
	if err := r.startReplicas(replicas); err != nil {
		return err
	}
	defer r.s.stopAll()
	if err := r.runCycles(ctx, stdout); err != nil {
		return err
	}
	duplicates, integrity, err := r.finish(ctx)
	if err != nil {
		return err
	}
	return r.report(stdout, duplicates, integrity)
}

// soakOptions are the soak's flags.
type soakOptions struct {
	duration  time.Duration // how long to run
	clients   int
	killEvery time.Duration // the mean time between stops
	timeout   time.Duration // of one request
	postgres  bool          // two replicas on PostgreSQL, not one on SQLite
	bin       string        // the petstore binary; empty: build it
}

// parseFlags reads the soak's flags; their errors and usage go to stderr.
func parseFlags(args []string, stderr io.Writer) (soakOptions, error) {
	var o soakOptions
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to run")
	fs.IntVar(&o.clients, "clients", 32, "concurrent clients (spread over the replicas)")
	fs.DurationVar(&o.killEvery, "kill-every", 5*time.Second, "mean time between kills (each is uniform in [0.5, 1.5] of it)")
	fs.DurationVar(&o.timeout, "request-timeout", 10*time.Second, "the longest any one request may take")
	fs.BoolVar(&o.postgres, "postgres", false, "run two replicas on a throwaway PostgreSQL cluster (internal/pgcluster) instead of one process on SQLite")
	fs.StringVar(&o.bin, "bin", "", "the petstore binary; empty builds the package in the current directory")
	err := fs.Parse(args)
	return o, err
}

// buildPetstore builds the package in the current directory into dir, with
// the build command of docs/operations.md, and returns the binary's path.
func buildPetstore(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "petstore")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build (run soak from the repository root): %v\n%s", err, out)
	}
	return bin, nil
}

// startCluster starts a throwaway PostgreSQL cluster with the soak's
// database, "soak", made on it.
func startCluster(ctx context.Context) (*pgcluster.Cluster, error) {
	c, err := pgcluster.Start(ctx, time.Minute, pgSettings...)
	if err != nil {
		return nil, fmt.Errorf("-postgres: %w; apt-get install postgresql", err)
	}
	if err := createDatabase(ctx, c.URL("postgres"), "soak"); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// soakRun is one run of the soak: its settings, the soak's replicas and
// model, where the data is, and what the checks found and the stops
// counted.
type soakRun struct {
	o            soakOptions
	s            *soak
	dbPath       string // the SQLite file, or the PostgreSQL database's URL
	f            findings
	kills, terms []int // by replica: its stops by SIGKILL and by SIGTERM
}

// startReplicas starts n replicas on the database, one after the other
// (the first makes the schema); when one fails, those started are stopped.
func (r *soakRun) startReplicas(n int) error {
	// Each replica needs only the database and the keys.
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + r.dbPath, "PETSTORE_API_KEYS=" + r.s.apiKey}
	for i := range n {
		rep := &replica{id: i, bin: r.o.bin, env: env}
		r.s.reps = append(r.s.reps, rep)
		if err := rep.start(); err != nil {
			r.s.stopAll()
			return err
		}
	}
	r.kills, r.terms = make([]int, n), make([]int, n)
	return nil
}

// runCycles says what it runs, checks the service before any load, then
// runs cycles of load and stops until the duration is over or ctx is
// cancelled.
func (r *soakRun) runCycles(ctx context.Context, stdout io.Writer) error {
	backend := "SQLite " + r.dbPath
	if r.o.postgres {
		backend = "PostgreSQL, 2 replicas on one database"
	}
	fmt.Fprintf(stdout, "soak: %v, %d clients, a kill every ~%v, %s\n", r.o.duration, r.o.clients, r.o.killEvery, backend)
	if err := r.s.check(ctx, &r.f, false); err != nil {
		return err
	}
	deadline := time.Now().Add(r.o.duration)
	for cycle := 0; time.Now().Before(deadline) && ctx.Err() == nil; cycle++ {
		if err := r.cycle(ctx, stdout, cycle, deadline); err != nil {
			return err
		}
	}
	return nil
}

// cycle is one round of the soak: the load for a random life (cut at the
// deadline), a replica stopped and restarted under the load, then with the
// load stopped the checks and the retries of the keyed creates that the
// stop cut off.
func (r *soakRun) cycle(ctx context.Context, stdout io.Writer, cycle int, deadline time.Time) error {
	life := time.Duration(float64(r.o.killEvery) * (0.5 + mrand.Float64()))
	life = min(life, max(0, time.Until(deadline)))
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range r.s.clients {
		wg.Go(func() { r.s.runClient(c, stopLoad) })
	}
	select {
	case <-time.After(life):
	case <-ctx.Done():
	}
	victim, sig := r.stopOne(cycle)
	restartErr := r.restart(victim, cycle)
	close(stopLoad)
	wg.Wait()
	if restartErr != nil {
		return restartErr
	}
	// With the load stopped, everything acknowledged so far is there,
	// with its event, and nothing else is in the feed.
	before := r.f.failures()
	if err := r.s.check(ctx, &r.f, false); err != nil {
		return err
	}
	if r.f.failures() > before {
		fmt.Fprintf(stdout, "stop %d (%v of replica %d): %d new failures\n", cycle, sig, victim.id, r.f.failures()-before)
	}
	return r.s.retryKeyed(ctx)
}

// stopOne stops the replica whose turn it is in cycle and counts the stop.
// The replicas are stopped in turn; every fifth stop is a SIGTERM, the
// others a SIGKILL, each only to the process this command started, by its
// PID. The other replica keeps serving the load while this one is down and
// while it restarts.
func (r *soakRun) stopOne(cycle int) (*replica, syscall.Signal) {
	victim := r.s.reps[cycle%len(r.s.reps)]
	sig := syscall.SIGKILL
	if cycle%5 == 4 {
		sig = syscall.SIGTERM
		r.terms[victim.id]++
	} else {
		r.kills[victim.id]++
	}
	victim.stop(sig)
	return victim, sig
}

// restart checks the integrity of the SQLite file after the stop of
// cycle, then starts the stopped replica again.
func (r *soakRun) restart(victim *replica, cycle int) error {
	if !r.o.postgres {
		if res, err := integrityCheck(r.dbPath); err != nil || res != "ok" {
			return fmt.Errorf("integrity_check after stop %d: %q, %v", cycle, res, err)
		}
	}
	return victim.start()
}

// finish runs a last check, after the retries of the last round, reading
// the whole feed again, counts the duplicates of retried keys, stops the
// replicas and, on SQLite, checks the file's integrity.
func (r *soakRun) finish(ctx context.Context) (duplicates int, integrity string, err error) {
	if err := r.s.check(ctx, &r.f, true); err != nil {
		return 0, "", err
	}
	duplicates, err = r.s.duplicates(ctx)
	if err != nil {
		return 0, "", err
	}
	r.s.stopAll()
	integrity = "not run (PostgreSQL)"
	if !r.o.postgres {
		if integrity, err = integrityCheck(r.dbPath); err != nil {
			return 0, "", err
		}
	}
	return duplicates, integrity, nil
}

// report prints what the soak did and found, and fails when anything was
// lost, duplicated or failed.
func (r *soakRun) report(stdout io.Writer, duplicates int, integrity string) error {
	s, f := r.s, &r.f
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(stdout, "requests: %d (5xx: %d, failed while their replica was up: %d, refused writes: %d)\n", s.requests.Load(), s.fivexx.Load(), s.netErrs.Load(), s.refused.Load())
	for i := range s.reps {
		fmt.Fprintf(stdout, "stops of replica %d: %d SIGKILL, %d SIGTERM\n", i, r.kills[i], r.terms[i])
	}
	fmt.Fprintf(stdout, "acknowledged writes: %d createPet (%d with an Idempotency-Key, %d of them retried after a stop), %d updatePet, %d deletePet, %d placeOrder, %d updateOrder delivered, %d updateOrder cancelled\n",
		s.acks[opCreate], s.keyedCount, s.retried, s.acks[opPatch], s.acks[opDelete], s.acks[opPlace], s.acks[opDeliver], s.acks[opCancel])
	fmt.Fprintf(stdout, "writes left without an answer by a stop: %d\n", s.unanswered)
	fmt.Fprintf(stdout, "checks: %d (last: %d resources checked, %d events in the feed)\n", f.checks, f.resources, f.events)
	fmt.Fprintf(stdout, "acknowledged changes not stored: %d\n", f.lost)
	fmt.Fprintf(stdout, "acknowledged changes without their event: %d\n", f.missingEvents)
	fmt.Fprintf(stdout, "feed replay differing from the API (event without change, or change without event): %d\n", f.replayDiffs)
	fmt.Fprintf(stdout, "feed ids out of order: %d\n", f.disorder)
	fmt.Fprintf(stdout, "duplicates from retried Idempotency-Keys: %d\n", duplicates)
	fmt.Fprintf(stdout, "integrity_check: %s\n", integrity)
	for _, m := range f.examples {
		fmt.Fprintf(stdout, "  %s\n", m)
	}
	if f.failures() > 0 || s.fivexx.Load() > 0 || s.netErrs.Load() > 0 || s.refused.Load() > 0 || duplicates > 0 || (!r.o.postgres && integrity != "ok") {
		return errors.New("FAILED: something acknowledged was lost, duplicated or missing from the feed, the feed held something never done, or the service failed a request while up")
	}
	fmt.Fprintln(stdout, "PASS")
	return nil
}

// replica is one petstore process the soak started, and restarts.
type replica struct {
	id  int
	bin string
	env []string

	mu    sync.Mutex
	cmd   *exec.Cmd
	url   string
	up    bool
	epoch int // counts the stops: a request failed across a stop was not the replica's fault
}

// urlLine is the service's launch contract.
var urlLine = regexp.MustCompile(`petstore listening on (http://127\.0\.0\.1:[0-9]+)`)

// start runs the binary and waits for its URL line.
func (r *replica) start() error {
	cmd := exec.Command(r.bin)
	cmd.Env = append(os.Environ(), r.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := urlLine.FindStringSubmatch(line)
	if err != nil || m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("replica %d printed no URL line (%q, %v)", r.id, line, err)
	}
	go io.Copy(io.Discard, stdout)
	r.mu.Lock()
	r.cmd, r.url, r.up = cmd, m[1], true
	r.mu.Unlock()
	return nil
}

// stop marks the replica down, sends sig to its process (by its PID, the
// one this command started) and waits for it to exit.
func (r *replica) stop(sig syscall.Signal) {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd, r.up = nil, false
	r.epoch++
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	cmd.Wait()
}

// target is the replica's URL and epoch when it is up.
func (r *replica) target() (url string, epoch int, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.url, r.epoch, r.up
}

// stopAll ends every replica still running with SIGTERM.
func (s *soak) stopAll() {
	for _, r := range s.reps {
		r.stop(syscall.SIGTERM)
	}
}

// createDatabase makes the database name on the cluster whose maintenance
// database is at adminURL.
func createDatabase(ctx context.Context, adminURL, name string) error {
	db, err := sql.Open("pgx", adminURL)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// name is a constant of this program, never input.
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// integrityCheck runs PRAGMA integrity_check on the database file.
func integrityCheck(path string) (string, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var res string
	err = db.QueryRow("PRAGMA integrity_check").Scan(&res)
	return res, err
}
