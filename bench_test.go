package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The hot paths inside the process, for benchstat:
//
//	go test -run '^$' -bench . -count 10 > old.txt   (then again after a change)
//	benchstat old.txt new.txt
//
// The load benchmark of the whole service is bench/ (see docs/performance.md).

func BenchmarkKeyCheck(b *testing.B) {
	ks := staticKeyring(testKey, otherTestKey).keys()
	for b.Loop() {
		if _, ok := ks.match(otherTestKey); !ok {
			b.Fatal("key refused")
		}
	}
}

// benchPage is a first page as listPets returns it.
func benchPage() []Pet {
	pets := make([]Pet, defaultLimit)
	for i := range pets {
		pets[i] = Pet{ID: int64(i + 1), Name: fmt.Sprintf("pet-%d", i+1), CategoryID: int64(i%10 + 1), Status: "available"}
	}
	return pets
}

func BenchmarkEncodePage(b *testing.B) {
	pets := benchPage()
	b.Run("encoding/json", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(pets)
		}
	})
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = append(appendPets(buf[:0], pets), '\n')
		}
	})
}

// benchStore opens a store on a fresh file holding n pets.
func benchStore(b *testing.B, n int) *store {
	b.Helper()
	st, err := openStore(b.Context(), filepath.Join(b.TempDir(), "bench.db"), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	_, err = st.writer.ExecContext(b.Context(), `
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO pets (name, category_id, status)
		SELECT 'pet-' || i, i % 10 + 1, CASE i % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'pending' ELSE 'sold' END
		FROM seq`, n)
	if err != nil {
		b.Fatal(err)
	}
	return st
}

func BenchmarkListQuery(b *testing.B) {
	st := benchStore(b, 10000)
	for _, q := range []struct {
		name   string
		status string
		page   pageRequest
	}{
		{"first-page", "", pageRequest{limit: 20}},
		{"status-after", "sold", pageRequest{after: 5000, limit: 20}},
	} {
		b.Run(q.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := st.listPets(b.Context(), q.status, q.page); err != nil {
						b.Error(err) // not Fatal: this is not the benchmark's goroutine
						return
					}
				}
			})
		})
	}
}

// BenchmarkCreate measures a create from the store's side, one at a time
// (every create pays its own fsync) and from many goroutines (group commit
// shares the fsyncs).
func BenchmarkCreate(b *testing.B) {
	for _, parallel := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", parallel), func(b *testing.B) {
			st := benchStore(b, 0)
			var n atomic.Int64
			b.SetParallelism(parallel)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := st.createPet(b.Context(), newPet{Name: fmt.Sprintf("bench-%d", i), CategoryID: 1, Status: "sold"}); err != nil {
						b.Error(err) // not Fatal: this is not the benchmark's goroutine
						return
					}
				}
			})
		})
	}
}

// BenchmarkHandlerChain measures the whole handler chain (access log,
// metrics, auth, routing, the handler) for answers the caches hold, without
// the network: what the service adds to net/http for its cheapest requests.
func BenchmarkHandlerChain(b *testing.B) {
	st := benchStore(b, 1000)
	h := benchHandler(st)
	for _, path := range []string{"/v1/pets?limit=20", "/v1/pets/7"} {
		b.Run(path, func(b *testing.B) {
			req := httptest.NewRequest("GET", path, nil)
			req.Header.Set("Authorization", "Bearer "+testKey)
			for b.Loop() {
				w := newBenchWriter()
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

// benchHandler is the whole handler of the service on st, with the limits
// the service ships with (the rate limit is off by default) and the access
// log in its default format, written to nowhere.
func benchHandler(st *store) http.Handler {
	log := newLogger("text", io.Discard)
	lim := limits{idempotencyTTL: defaultIdempotencyTTL, maxBodyMemory: defaultMaxBodyMemory, authFailures: defaultAuthFailures}
	return newServer(log, staticKeyring(testKey), st, newMetrics(st), newFeed(log, st, defaultFeedConfig(), time.Now), time.Now, lim)
}

// BenchmarkCreateThroughChain measures a durable create (POST /v1/pets, as
// bench/'s create scenario sends it) through the whole handler chain, on
// SQLite and, when the suite can start a cluster, on PostgreSQL; one writer
// at a time (every create pays its own commit) and 32 at once (group commit
// shares the commits).
func BenchmarkCreateThroughChain(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, parallel := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/writers=%d", backend, parallel), func(b *testing.B) {
				var st *store
				if backend == "sqlite" {
					st = benchStore(b, 0)
				} else {
					var err error
					if st, err = openStore(b.Context(), postgresSchema(b), 0); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { st.Close() })
				}
				h := benchHandler(st)
				var n atomic.Int64
				b.ResetTimer() // the first run may have started the cluster
				b.SetParallelism(parallel)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						body := fmt.Sprintf(`{"name":"bench-%d","categoryId":%d}`, i, i%10+1)
						req := httptest.NewRequest("POST", "/v1/pets", strings.NewReader(body))
						req.Header.Set("Authorization", "Bearer "+testKey)
						req.Header.Set("Content-Type", "application/json")
						w := newBenchWriter()
						h.ServeHTTP(w, req)
						if w.status != http.StatusCreated {
							b.Errorf("status %d: %s", w.status, w.body) // not Fatal: this is not the benchmark's goroutine
							return
						}
					}
				})
			})
		}
	}
}

// benchWriter is the least a ResponseWriter does: a fresh header map, as
// net/http gives every response, and the status and body kept for the
// check. httptest.ResponseRecorder would add work of its own to every
// request (it copies the header map at WriteHeader), which is not the
// service's and would blur its profile.
type benchWriter struct {
	header http.Header
	status int
	body   []byte
}

func newBenchWriter() *benchWriter { return &benchWriter{header: http.Header{}} }

func (w *benchWriter) Header() http.Header { return w.header }

func (w *benchWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = p // the last write is enough for an error message
	return len(p), nil
}
