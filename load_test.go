package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMixedLoad runs 64 clients doing 90% reads and 10% creates, 40
// requests each, at once against run() on a real file: no 5xx, no warning
// or error logged (lock contention would be one), and every acknowledged
// pet readable afterwards. Throughput is logged, not asserted: the machine
// is shared. A number of requests rather than a duration: the test costs
// the same on any machine, and the rate belongs to bench/.
func TestMixedLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sends thousands of requests")
	}
	env := map[string]string{
		"PETSTORE_ADDR":     "127.0.0.1:0",
		"PETSTORE_DB":       dbFor(t, filepath.Join(t.TempDir(), "pets.db")),
		"PETSTORE_API_KEYS": testKey,
	}
	rs := startRun(t, env, "-log-format", "json")
	const clients, perClient = 64, 40
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	type tally struct {
		reads, writes int
		statuses      map[int]int
		failures      []string
		acked         []Pet
	}
	tallies := make([]tally, clients)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			tl := &tallies[c]
			tl.statuses = map[int]int{}
			for i := range perClient {
				var req *http.Request
				write := rand.IntN(10) == 0
				switch {
				case write:
					body := fmt.Sprintf(`{"name":"load-%d-%d","categoryId":%d}`, c, i, i+1)
					req, _ = http.NewRequest("POST", rs.URL+"/v1/pets", strings.NewReader(body))
					tl.writes++
				case len(tl.acked) > 0 && i%3 == 0:
					req, _ = http.NewRequest("GET", fmt.Sprintf("%s/v1/pets/%d", rs.URL, tl.acked[rand.IntN(len(tl.acked))].ID), nil)
					tl.reads++
				default:
					status := []string{"", "&status=available", "&status=sold"}[i%3]
					req, _ = http.NewRequest("GET", fmt.Sprintf("%s/v1/pets?limit=20&after=%d%s", rs.URL, rand.IntN(100), status), nil)
					tl.reads++
				}
				req.Header.Set("Authorization", "Bearer "+testKey)
				res, err := client.Do(req)
				if err != nil {
					tl.failures = append(tl.failures, err.Error())
					continue
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				tl.statuses[res.StatusCode]++
				if err != nil || res.StatusCode >= 500 {
					tl.failures = append(tl.failures, fmt.Sprintf("%s %s: %d %s %v", req.Method, req.URL.Path, res.StatusCode, b, err))
					continue
				}
				if write && res.StatusCode == http.StatusCreated {
					var p Pet
					if err := json.Unmarshal(b, &p); err != nil {
						tl.failures = append(tl.failures, err.Error())
						continue
					}
					tl.acked = append(tl.acked, p)
				}
			}
		})
	}
	wg.Wait()

	statuses := map[int]int{}
	var reads, writes int
	want := map[int64]Pet{}
	for _, tl := range tallies {
		reads += tl.reads
		writes += tl.writes
		for s, n := range tl.statuses {
			statuses[s] += n
		}
		for _, f := range tl.failures {
			t.Error(f)
		}
		for _, p := range tl.acked {
			want[p.ID] = p
		}
	}
	took := time.Since(start)
	t.Logf("%d clients in %v: %d reads, %d creates (%.0f requests/s), statuses %v", clients, took.Round(time.Millisecond), reads, writes, float64(reads+writes)/took.Seconds(), statuses)
	for s := range statuses {
		if s != http.StatusOK && s != http.StatusCreated {
			t.Errorf("%d answers with status %d, want only 200 and 201", statuses[s], s)
		}
	}
	for _, r := range rs.Stderr.records(t) {
		if r["level"] != "INFO" {
			t.Errorf("logged under load: %v", r)
		}
	}
	got := map[int64]Pet{}
	for _, p := range listAll[Pet](t, rs.URL, "/v1/pets?limit=100", nil, nil) {
		got[p.ID] = p
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pets after the load mismatch (-acknowledged +stored):\n%s", diff)
	}
}
