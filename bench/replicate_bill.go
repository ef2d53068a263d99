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
	"sync"
	"sync/atomic"
	"time"
)

// The bill part of bench replicate: what a replicating service asks of the
// store, counted through its proxy, idle and under a steady rate of
// creates, extrapolated to an hour.

// billMode is one service of the bill part and what it was counted doing.
type billMode struct {
	name  string
	sync  bool
	idle  traffic // over the idle window
	load  traffic // over the load window
	paced paced   // the creates of the load window
}

// billResult is what the bill part measured.
type billResult struct {
	window time.Duration
	rate   int
	settle time.Duration // from the services' start to the idle window
	modes  []billMode
}

// billSettle is how long, at least, the services of the bill part run
// before the idle window opens: what their start uploads is compacted, and
// its level-0 files kept past their retention of a minute (l0Retention)
// and removed, so that the window counts what an hour of idling costs.
const billSettle = 75 * time.Second

// billServices are the services of the bill part, started: the proxy and
// the URL of each mode's service.
type billServices struct {
	res     billResult
	proxies []*countingProxy
	urls    []string
	started time.Time
}

// startBill starts a service in each mode, each with its database, bucket
// and proxy (no delay). The run starts them before its other parts, so
// that they settle meanwhile.
func (r *replicateRun) startBill(ctx context.Context) (*billServices, error) {
	b := &billServices{res: billResult{window: r.o.meter, rate: r.o.rate,
		modes: []billMode{{name: "background"}, {name: "sync", sync: true}}}}
	for _, m := range b.res.modes {
		db := filepath.Join(r.dir, fmt.Sprintf("bill-%s.db", m.name))
		if err := createDatabase(ctx, r.bin, db, r.o.pets); err != nil {
			return nil, fmt.Errorf("database of %d pets for the %s mode: %w", r.o.pets, m.name, err)
		}
		bucket := "bench-bill-" + m.name
		if err := r.store.newBucket(ctx, bucket); err != nil {
			return nil, err
		}
		p, err := r.startProxy(ctx, 0)
		if err != nil {
			return nil, err
		}
		svc, _, err := r.startReplicating(ctx, db, replicaURL(bucket, p.url), m.sync)
		if err != nil {
			return nil, err
		}
		b.proxies, b.urls = append(b.proxies, p), append(b.urls, svc.url)
	}
	b.started = time.Now()
	return b, nil
}

// billPart counts the traffic of the bill part's services over an idle
// window, once they have run billSettle, then over a window of -rate
// creates a second on each at once.
func (r *replicateRun) billPart(ctx context.Context, b *billServices) (billResult, error) {
	res := b.res
	wait := time.Until(b.started.Add(billSettle))
	fmt.Fprintf(os.Stderr, "bill: idle for %v, then %d creates/s for %v on each mode\n", (max(0, wait) + res.window).Round(time.Second), res.rate, res.window)
	if err := sleep(ctx, wait); err != nil {
		return res, err
	}
	res.settle = time.Since(b.started)
	before, err := counts(ctx, b.proxies)
	if err != nil {
		return res, err
	}
	if err := sleep(ctx, res.window); err != nil {
		return res, err
	}
	idle, err := counts(ctx, b.proxies)
	if err != nil {
		return res, err
	}
	var wg sync.WaitGroup
	for i := range res.modes {
		wg.Go(func() { res.modes[i].paced = paceCreates(ctx, b.urls[i], res.rate, res.window) })
	}
	wg.Wait()
	loaded, err := counts(ctx, b.proxies)
	for i := range res.modes {
		res.modes[i].idle = idle[i].minus(before[i])
		res.modes[i].load = loaded[i].minus(idle[i])
	}
	return res, err
}

// counts is what each proxy has counted so far.
func counts(ctx context.Context, proxies []*countingProxy) ([]traffic, error) {
	ts := make([]traffic, len(proxies))
	for i, p := range proxies {
		var err error
		if ts[i], err = p.traffic(ctx); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// paced is what a paced load did.
type paced struct {
	created, failed int64
	slowest         time.Duration
}

// paceCreates creates pets on the service at url at rate a second for d:
// each create is sent on the tick of its turn, on a goroutine of its own,
// so that a slow answer does not delay the next create, and the load stays
// a steady rate (at most 256 creates in flight).
func paceCreates(ctx context.Context, url string, rate int, d time.Duration) paced {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var created, failed, slowest atomic.Int64
	inFlight := make(chan struct{}, 256)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return paced{created: created.Load(), failed: failed.Load(), slowest: time.Duration(slowest.Load())}
		case <-tick.C:
		}
		select {
		case inFlight <- struct{}{}:
		default:
			failed.Add(1) // too many waiting: counted, not sent
			continue
		}
		wg.Go(func() {
			defer func() { <-inFlight }()
			start := time.Now()
			if createOne(client, url, "meter-"+strconv.Itoa(n)) {
				created.Add(1)
			} else {
				failed.Add(1)
			}
			for took := int64(time.Since(start)); ; {
				s := slowest.Load()
				if took <= s || slowest.CompareAndSwap(s, took) {
					break
				}
			}
		})
	}
}

// createOne creates the pet name on the service at url, and reports
// whether it was answered 201. Its request is not bound by the pacing's
// window: a create sent is answered.
func createOne(client *http.Client, url, name string) bool {
	req, err := http.NewRequest("POST", url+"/v1/pets", strings.NewReader(`{"name":"`+name+`","categoryId":1}`))
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode == http.StatusCreated
}
