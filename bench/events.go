package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// bench events measures the change feed: how many events per second one
// stream carries while clients create pets, how long an event takes from the
// response to its create to its arrival on the stream (p50 and p99), and
// what the feed costs the creates: each round runs the same creating load
// twice, without a stream and with one open, on the same service. On
// PostgreSQL (-postgres) the creates go to one replica and the stream reads
// from another, so the latency is the cross-replica one (a notification, or
// the poll every second when one is lost).

// eventsOptions are the settings of bench events.
type eventsOptions struct {
	duration time.Duration
	rounds   int
	clients  int
	keep     bool
	postgres bool
	idle     []int // numbers of idle streams to measure creates with; nil: the stream rounds instead
}

// idleRound is what one round of idle streams measured: creates/s with
// each number of idle streams open, in the order of eventsOptions.idle.
type idleRound []float64

// eventsRound is what one round measured.
type eventsRound struct {
	createsAlone  float64 // creates/s without a stream
	createsStream float64 // creates/s with one stream open
	eventsPerSec  float64 // events/s the stream received
	latencies     []time.Duration
	missing       int // acknowledged creates whose event never reached the stream
}

// runEventsBench is `bench events`.
func runEventsBench(ctx context.Context, args []string, stdout io.Writer) error {
	var o eventsOptions
	fs := flag.NewFlagSet("bench events", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one load run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds (each runs the load without a stream, then with one)")
	fs.IntVar(&o.clients, "c", 16, "concurrent creating clients")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	fs.BoolVar(&o.postgres, "postgres", false, "run on a throwaway PostgreSQL cluster with two replicas (creates on one, the stream on the other) instead of SQLite")
	idle := fs.String("idle", "", "instead of the stream rounds, measure creates with these numbers of idle streams open on the replica that writes (comma-separated, e.g. 0,10,100; the first is the baseline)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *idle != "" {
		for f := range strings.SplitSeq(*idle, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return fmt.Errorf("-idle: %q is not a number of streams", f)
			}
			o.idle = append(o.idle, n)
		}
	}
	if o.rounds < 1 || o.clients < 1 || o.duration <= 0 {
		return errors.New("-rounds, -c and -duration must be positive")
	}
	fmt.Fprintln(stdout, "building the service...")
	dir, bin, remove, err := buildInTempDir(ctx, "petstore-bench-events-", o.keep)
	if err != nil {
		return err
	}
	defer remove()

	// Room for every idle stream of a round and those of the round before,
	// which the service may not have closed yet.
	serviceEnv = append(serviceEnv, "PETSTORE_EVENTS_MAX_STREAMS=1000")
	writeURL, streamURL, stop, backend, err := startEventsTargets(ctx, o, dir, bin)
	if err != nil {
		return err
	}
	defer stop()
	if o.idle != nil {
		return runIdleRounds(ctx, o, writeURL, backend, stdout)
	}

	var rounds []eventsRound
	for i := range o.rounds {
		r, err := eventsRoundOn(ctx, o, writeURL, streamURL, fmt.Sprintf("r%d", i))
		if err != nil {
			return err
		}
		rounds = append(rounds, r)
		fmt.Fprintf(stdout, "round %d: %.0f creates/s alone, %.0f with a stream (%.3f), %.0f events/s on the stream, p50 %v p99 %v, %d missing\n",
			i+1, r.createsAlone, r.createsStream, r.createsStream/r.createsAlone, r.eventsPerSec, percentile(r.latencies, 50), percentile(r.latencies, 99), r.missing)
	}
	printEventsReport(stdout, o, backend, rounds)
	return nil
}

// startEventsTargets starts the service (SQLite), or two replicas on a
// throwaway PostgreSQL cluster, and returns where to create and where to
// stream.
func startEventsTargets(ctx context.Context, o eventsOptions, dir, bin string) (writeURL, streamURL string, stop func(), backend string, err error) {
	if !o.postgres {
		p, _, err := startService(ctx, bin, filepath.Join(dir, "events.db"))
		if err != nil {
			return "", "", nil, "", err
		}
		return p.url, p.url, func() { p.stop() }, "SQLite", nil
	}
	pg, err := startPostgres(ctx)
	if err != nil {
		return "", "", nil, "", err
	}
	if err := createPostgresDatabase(ctx, pg, bin, "events", 0); err != nil {
		pg.stop()
		pg.remove()
		return "", "", nil, "", err
	}
	var ps []*process
	stopAll := func() {
		for _, p := range ps {
			p.stop()
		}
		pg.stop()
		if !o.keep {
			pg.remove()
		}
	}
	for range 2 {
		p, _, err := startService(ctx, bin, pg.url("events"))
		if err != nil {
			stopAll()
			return "", "", nil, "", err
		}
		ps = append(ps, p)
	}
	return ps[0].url, ps[1].url, stopAll, "PostgreSQL, 2 replicas", nil
}

// eventsRoundOn runs one round: the load alone, then the load with a
// stream open.
func eventsRoundOn(ctx context.Context, o eventsOptions, writeURL, streamURL, prefix string) (eventsRound, error) {
	var r eventsRound
	alone, _, err := createFor(ctx, o, writeURL, prefix+"a")
	if err != nil {
		return r, err
	}
	r.createsAlone = float64(alone) / o.duration.Seconds()

	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	arrivals, streamErr, err := openEventStream(streamCtx, streamURL)
	if err != nil {
		return r, err
	}
	n, acked, err := createFor(ctx, o, writeURL, prefix+"s")
	if err != nil {
		return r, err
	}
	r.createsStream = float64(n) / o.duration.Seconds()
	// Give the last events a moment to arrive before the stream is read.
	// Every acknowledged create's own event is waited for: counting the
	// events is not enough, since creates in flight when the load stopped
	// were committed unacknowledged, and their events arrive among the
	// last acknowledged ones' (which were then counted missing).
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !arrivals.hasAll(acked) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-streamErr
	got := arrivals.snapshot()
	r.eventsPerSec = float64(len(got)) / o.duration.Seconds()
	for name, at := range acked {
		arrived, ok := got[name]
		if !ok {
			r.missing++
			continue
		}
		r.latencies = append(r.latencies, max(0, arrived.Sub(at)))
	}
	slices.Sort(r.latencies)
	return r, nil
}

// createFor runs o.clients clients creating pets named prefix-N for
// o.duration, and returns how many were created and when each create's
// response arrived, by name.
func createFor(ctx context.Context, o eventsOptions, url, prefix string) (int, map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var mu sync.Mutex
	acked := map[string]time.Time{}
	var seq atomic.Int64
	var firstErr error
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.clients}}
	defer client.CloseIdleConnections()
	for range o.clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				name := prefix + "-" + strconv.FormatInt(seq.Add(1), 10)
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/pets", strings.NewReader(`{"name":"`+name+`","categoryId":1}`))
				req.Header.Set("Authorization", "Bearer "+benchKey)
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
					}
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				at := time.Now()
				if res.StatusCode != http.StatusCreated {
					mu.Lock()
					firstErr = cmpErr(firstErr, fmt.Errorf("create: status %d", res.StatusCode))
					mu.Unlock()
					return
				}
				mu.Lock()
				acked[name] = at
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return len(acked), acked, firstErr
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// arrivals records when each pet.created event reached the stream, by the
// pet's name.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time
}

// hasAll reports whether the event of every name in acked has arrived.
func (a *arrivals) hasAll(acked map[string]time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name := range acked {
		if _, ok := a.at[name]; !ok {
			return false
		}
	}
	return true
}

func (a *arrivals) snapshot() map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]time.Time, len(a.at))
	for k, v := range a.at {
		out[k] = v
	}
	return out
}

// openEventStream opens a stream of the feed from its current end and
// records the arrival of every pet.created event until ctx ends.
func openEventStream(ctx context.Context, url string) (*arrivals, <-chan error, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/v1/events?type=pet.created", nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, nil, fmt.Errorf("open the stream: status %d", res.StatusCode)
	}
	a := &arrivals{at: map[string]time.Time{}}
	done := make(chan error, 1)
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
			if !ok {
				continue
			}
			now := time.Now()
			var ev struct {
				Data struct {
					Name string `json:"name"`
				} `json:"data"`
			}
			if json.Unmarshal(data, &ev) == nil && ev.Data.Name != "" {
				a.mu.Lock()
				a.at[ev.Data.Name] = now
				a.mu.Unlock()
			}
		}
		done <- sc.Err()
	}()
	return a, done, nil
}

// percentile is the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)].Round(10 * time.Microsecond)
}

// printEventsReport prints the medians of the rounds as a Markdown table.
func printEventsReport(w io.Writer, o eventsOptions, backend string, rounds []eventsRound) {
	med := func(f func(eventsRound) float64) float64 {
		xs := make([]float64, 0, len(rounds))
		for _, r := range rounds {
			xs = append(xs, f(r))
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	var all []time.Duration
	missing := 0
	for _, r := range rounds {
		all = append(all, r.latencies...)
		missing += r.missing
	}
	slices.Sort(all)
	fmt.Fprintf(w, "\n%s, %d creating clients, %d rounds of %v (medians):\n\n", backend, o.clients, len(rounds), o.duration)
	fmt.Fprintln(w, "| creates/s alone | creates/s with a stream | ratio | events/s on the stream | p50 create->event | p99 create->event | events missing |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %.0f | %.0f | %.3f | %.0f | %v | %v | %d |\n",
		med(func(r eventsRound) float64 { return r.createsAlone }), med(func(r eventsRound) float64 { return r.createsStream }),
		med(func(r eventsRound) float64 { return r.createsStream / r.createsAlone }), med(func(r eventsRound) float64 { return r.eventsPerSec }),
		percentile(all, 50), percentile(all, 99), missing)
}

// idleStreamsType is the filter of an idle stream: the orders' events, of
// which the load (creates of pets) makes none. Such a stream sends nothing
// but its keep-alives, yet is woken by every commit, as the streams of a
// dashboard that waits for a rare event are.
const idleStreamsType = "order.*"

// runIdleRounds measures creates with each number of idle streams of
// o.idle open on the replica that writes, each round in the order given,
// and prints the medians of each number's ratio to the first's of the same
// round.
func runIdleRounds(ctx context.Context, o eventsOptions, writeURL, backend string, stdout io.Writer) error {
	client := &http.Client{Transport: &http.Transport{}} // a connection per stream
	defer client.CloseIdleConnections()
	var rounds []idleRound
	for i := range o.rounds {
		var r idleRound
		for _, n := range o.idle {
			rate, err := createsWithIdleStreams(ctx, client, o, writeURL, n, fmt.Sprintf("r%di%d", i, n))
			if err != nil {
				return err
			}
			r = append(r, rate)
		}
		rounds = append(rounds, r)
		fmt.Fprintf(stdout, "round %d:", i+1)
		for j, n := range o.idle {
			fmt.Fprintf(stdout, " %d idle %.0f/s (%.3f)", n, r[j], r[j]/r[0])
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "\n%s, %d creating clients, %d rounds of %v, idle streams (type=%s) on the writing replica (medians):\n\n", backend, o.clients, len(rounds), o.duration, idleStreamsType)
	fmt.Fprintln(stdout, "| idle streams | creates/s | ratio to the first |")
	fmt.Fprintln(stdout, "|---|---|---|")
	for j, n := range o.idle {
		var rates, ratios []float64
		for _, r := range rounds {
			rates, ratios = append(rates, r[j]), append(ratios, r[j]/r[0])
		}
		slices.Sort(rates)
		slices.Sort(ratios)
		fmt.Fprintf(stdout, "| %d | %.0f | %.3f |\n", n, rates[len(rates)/2], ratios[len(ratios)/2])
	}
	return nil
}

// createsWithIdleStreams opens n idle streams on url, runs the creating load
// and returns its creates/s, then closes the streams.
func createsWithIdleStreams(ctx context.Context, client *http.Client, o eventsOptions, url string, n int, prefix string) (float64, error) {
	streamsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ended []<-chan error
	for range n {
		done, err := openIdleStream(streamsCtx, client, url)
		if err != nil {
			return 0, err
		}
		ended = append(ended, done)
	}
	created, _, err := createFor(ctx, o, url, prefix)
	cancel()
	for _, done := range ended {
		<-done
	}
	if err != nil {
		return 0, err
	}
	return float64(created) / o.duration.Seconds(), nil
}

// openIdleStream opens a stream of idleStreamsType from the feed's end and
// reads it, dropping what comes, until ctx ends.
func openIdleStream(ctx context.Context, client *http.Client, url string) (<-chan error, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/v1/events?type="+idleStreamsType, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("Accept", "text/event-stream")
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, fmt.Errorf("open an idle stream: status %d", res.StatusCode)
	}
	done := make(chan error, 1)
	go func() {
		defer res.Body.Close()
		_, err := io.Copy(io.Discard, res.Body)
		done <- err
	}()
	return done, nil
}
