package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The load part of bench replicate: creates from wrk's connections on the
// service without replication, and replicating in each mode to the store
// at 0 ms and at -delay.

// replicaCase is a service of the load part: whether and how it
// replicates, and how far its store is.
type replicaCase struct {
	name       string
	replicates bool
	sync       bool
	delay      time.Duration
	connsTimes int // wrk's connections are -c times this; 1 when 0
}

// loadCases are the services of the load part, in the order each round
// loads them. The last is sync mode at the delay again, with four times the
// connections: with every create waiting for an upload, how many creates a
// second the connections can make is what limits sync mode, and this case
// shows by how much.
func loadCases(delay time.Duration, conns int) []replicaCase {
	at := func(mode string, d time.Duration) string {
		return fmt.Sprintf("%s, store at %d ms", mode, d.Milliseconds())
	}
	return []replicaCase{
		{name: "no replica"},
		{name: at("background", 0), replicates: true},
		{name: at("sync", 0), replicates: true, sync: true},
		{name: at("background", delay), replicates: true, delay: delay},
		{name: at("sync", delay), replicates: true, sync: true, delay: delay},
		{name: at("sync", delay) + fmt.Sprintf(", %d connections", 4*conns), replicates: true, sync: true, delay: delay, connsTimes: 4},
	}
}

// The comparisons of the load part: a case's creates/s over its base's,
// round by round, and the target when there is one (0: none).
type loadRatio struct {
	of, base int // indexes in loadCases
	target   float64
}

// loadRatios are the load part's comparisons: background / none at 0 ms
// (target 0.95), sync / background at 0 ms, background / none at the
// delay, sync / background at the delay (target 0.5), and the same with
// four times the connections in sync mode.
var loadRatios = []loadRatio{{1, 0, 0.95}, {2, 1, 0}, {3, 0, 0}, {4, 3, 0.5}, {5, 3, 0}}

// wrkOptions are wrk's settings for case c.
func (c replicaCase) wrkOptions(o replicateOptions) options {
	return options{duration: o.duration, conns: o.conns * max(1, c.connsTimes), threads: o.threads}
}

// loadTarget is a service of the load part, started.
type loadTarget struct {
	c     replicaCase
	svc   *process
	proxy *countingProxy // nil without replication
	t     target         // what measure loads, with its CPU's parts
}

// replicaRun is one measured run of a service of the load part.
type replicaRun struct {
	wrk     wrkResult
	traffic traffic // through the service's proxy, over the run
	replicaMetrics
}

// loadResult is every round of the load part.
type loadResult struct {
	cases []replicaCase
	parts []string                // the names of each run's CPU times, in their order
	runs  map[string][]replicaRun // by case, one per round
	// With -profile: the CPU profile's file of each replicating case.
	profiles map[string]string
}

// loadPart starts a service for each case, warms each up, then runs the
// rounds.
func (r *replicateRun) loadPart(ctx context.Context) (loadResult, error) {
	res := loadResult{cases: loadCases(r.o.delay, r.o.conns), runs: map[string][]replicaRun{}}
	var targets []loadTarget
	for i, c := range res.cases {
		lt, err := r.startLoadTarget(ctx, i, c)
		if err != nil {
			return res, err
		}
		targets = append(targets, lt)
	}
	for _, p := range targets[0].t.parts {
		res.parts = append(res.parts, p.name)
	}
	for _, lt := range targets {
		if _, err := runWrk(ctx, lt.c.wrkOptions(r.o), r.dir, "create", lt.t.url, r.o.pets, time.Second); err != nil {
			return res, err
		}
	}
	for round := range r.o.rounds {
		for _, lt := range targets {
			run, err := r.loadOnce(ctx, lt.c.wrkOptions(r.o), lt)
			if err != nil {
				return res, fmt.Errorf("%s: %w", lt.c.name, err)
			}
			res.runs[lt.c.name] = append(res.runs[lt.c.name], run)
		}
		loadProgress(os.Stderr, round, res)
	}
	if r.o.profile != "" {
		return res, r.profileLoad(ctx, targets, &res)
	}
	return res, nil
}

// profileLoad runs the create scenario once more on each replicating
// service, not counted, under a CPU profile of the service.
func (r *replicateRun) profileLoad(ctx context.Context, targets []loadTarget, res *loadResult) error {
	res.profiles = map[string]string{}
	for _, lt := range targets {
		if !lt.c.replicates {
			continue
		}
		o := lt.c.wrkOptions(r.o)
		file := filepath.Join(r.o.profile, "replicate-"+fileWord(lt.c.name)+".pprof")
		err := profileDuring(ctx, lt.svc, o.duration, file, func(d time.Duration) error {
			_, err := runWrk(ctx, o, r.dir, "create", lt.t.url, r.o.pets, d)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", lt.c.name, err)
		}
		res.profiles[lt.c.name] = file
		fmt.Fprintf(os.Stderr, "profiled %s: %s\n", lt.c.name, file)
	}
	return nil
}

// startLoadTarget makes the database of case i and starts its service,
// with its bucket and its proxy when it replicates.
func (r *replicateRun) startLoadTarget(ctx context.Context, i int, c replicaCase) (loadTarget, error) {
	lt := loadTarget{c: c}
	db := filepath.Join(r.dir, fmt.Sprintf("load-%d.db", i))
	if err := createDatabase(ctx, r.bin, db, r.o.pets); err != nil {
		return lt, fmt.Errorf("database of %d pets for %s: %w", r.o.pets, c.name, err)
	}
	url := ""
	if c.replicates {
		bucket := fmt.Sprintf("bench-load-%d", i)
		if err := r.store.newBucket(ctx, bucket); err != nil {
			return lt, err
		}
		var err error
		if lt.proxy, err = r.startProxy(ctx, c.delay); err != nil {
			return lt, err
		}
		url = replicaURL(bucket, lt.proxy.url)
	}
	svc, _, err := r.startReplicating(ctx, db, url, c.sync)
	if err != nil {
		return lt, err
	}
	lt.svc = svc
	proxyPIDs := func() []int { return nil }
	if lt.proxy != nil {
		proxyPIDs = lt.proxy.pids
	}
	lt.t = target{name: c.name, url: svc.url, parts: []part{processPart("service", svc),
		{"versitygw", r.store.pids}, {"proxy", proxyPIDs}}}
	fmt.Fprintf(os.Stderr, "%s: %s\n", c.name, svc.url)
	return lt, nil
}

// loadOnce is one measured run of the create scenario on lt: wrk's
// figures and the CPU times, what crossed its proxy, and how its replica's
// metrics moved.
func (r *replicateRun) loadOnce(ctx context.Context, o options, lt loadTarget) (replicaRun, error) {
	var run replicaRun
	before, err := readReplicaMetrics(ctx, lt.svc.url)
	if err != nil {
		return run, err
	}
	var crossed traffic
	if lt.proxy != nil {
		if crossed, err = lt.proxy.traffic(ctx); err != nil {
			return run, err
		}
	}
	if run.wrk, err = measure(ctx, o, r.dir, "create", lt.t, r.o.pets); err != nil {
		return run, err
	}
	if lt.proxy != nil {
		after, err := lt.proxy.traffic(ctx)
		if err != nil {
			return run, err
		}
		run.traffic = after.minus(crossed)
	}
	after, err := readReplicaMetrics(ctx, lt.svc.url)
	if err != nil {
		return run, err
	}
	run.replicaMetrics = after.minus(before)
	return run, nil
}

// loadProgress prints the round just finished.
func loadProgress(w io.Writer, round int, res loadResult) {
	fmt.Fprintf(w, "round %d:", round+1)
	for _, c := range res.cases {
		rs := res.runs[c.name]
		run := rs[len(rs)-1]
		fmt.Fprintf(w, " %s %.0f/s (p99 %.1f ms, %d uploads, non-2xx %d);", c.name, run.wrk.rps(), float64(run.wrk.P99US)/1000, run.traffic.L0Puts, run.wrk.Non2xx)
	}
	fmt.Fprintln(w)
}

// replicaMetrics are the service's metrics of its replica.
type replicaMetrics struct {
	waits   int64   // batches of writes that waited for an upload (sync mode)
	waitSum float64 // the seconds they waited, together
	errors  int64   // uploads that failed
}

// minus is what m counts more than before.
func (m replicaMetrics) minus(before replicaMetrics) replicaMetrics {
	return replicaMetrics{waits: m.waits - before.waits, waitSum: m.waitSum - before.waitSum, errors: m.errors - before.errors}
}

// readReplicaMetrics reads the replica's metrics from the service at url;
// zero without replication.
func readReplicaMetrics(ctx context.Context, url string) (replicaMetrics, error) {
	var m replicaMetrics
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
	if err != nil {
		return m, err
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return m, fmt.Errorf("read the metrics: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		return m, fmt.Errorf("read the metrics: status %d, %v", res.StatusCode, err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "petstore_replica_write_wait_seconds_count":
			m.waits = int64(v)
		case "petstore_replica_write_wait_seconds_sum":
			m.waitSum = v
		case "petstore_replica_errors_total":
			m.errors = int64(v)
		}
	}
	return m, nil
}
