package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// The webhooks' figures (docs/webhooks.md, Performance), on SQLite with a
// receiver on loopback:
//
//	go test -run '^$' -bench 'Webhook' -benchtime 2000x .

// BenchmarkWebhookThroughput measures deliveries per second to a local
// receiver that answers at once: b.N events wait while the subscription is
// paused, then it is resumed and the clock runs until the last is
// delivered. Each delivery is one POST and one write (the attempt and the
// cursor), strictly one after the other.
func BenchmarkWebhookThroughput(b *testing.B) {
	ts := newTestServer(b, onSQLite())
	startDispatcher(b, ts, fastWebhooks)
	var mu sync.Mutex
	got := 0
	done := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if got++; got == b.N {
			close(done)
		}
	}))
	defer rc.Close()
	sub := subscribe(b, ts, fmt.Sprintf(`{"url": %q}`, rc.URL))
	ts.do(b, "PATCH", webhookPath(sub.ID), `{"status":"paused"}`, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < b.N; i += 4 {
				ts.createPet(b, "pet", 1, "")
			}
		})
	}
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	ts.do(b, "PATCH", webhookPath(sub.ID), `{"status":"active"}`, nil)
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}

// BenchmarkWebhookLatency measures the time from a change's response to
// its delivery, one change at a time: p50 and p99. The dispatcher is woken
// by the commit, before the response is written, so a delivery often
// arrives first (a negative latency); the time from the request's start is
// reported too.
func BenchmarkWebhookLatency(b *testing.B) {
	ts := newTestServer(b, onSQLite())
	startDispatcher(b, ts, fastWebhooks)
	arrived := make(chan time.Time, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- time.Now()
	}))
	defer rc.Close()
	subscribe(b, ts, fmt.Sprintf(`{"url": %q}`, rc.URL))
	var latencies, fromRequest []time.Duration
	for b.Loop() {
		sent := time.Now()
		ts.createPet(b, "pet", 1, "")
		answered := time.Now()
		at := <-arrived
		latencies, fromRequest = append(latencies, at.Sub(answered)), append(fromRequest, at.Sub(sent))
	}
	ms := func(ds []time.Duration, q int) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)*q/100].Microseconds()) / 1000
	}
	b.ReportMetric(ms(latencies, 50), "p50-ms")
	b.ReportMetric(ms(latencies, 99), "p99-ms")
	b.ReportMetric(ms(fromRequest, 99), "p99-from-request-ms")
}
