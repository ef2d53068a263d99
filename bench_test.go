package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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

// benchPetsSQL inserts ? pets named pet-1, pet-2, ... of the ten categories
// and three statuses in turn.
const benchPetsSQL = `
	WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
	INSERT INTO pets (name, category_id, status)
	SELECT 'pet-' || i, i % 10 + 1, CASE i % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'pending' ELSE 'sold' END
	FROM seq`

// benchStore opens a store on a fresh file holding n pets.
func benchStore(b *testing.B, n int) *store {
	b.Helper()
	st, err := openStore(b.Context(), filepath.Join(b.TempDir(), "bench.db"), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if _, err = st.writer.ExecContext(b.Context(), benchPetsSQL, n); err != nil {
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
// shares the fsyncs), with the creates each commit took (creates/commit).
// Run with -cpu 1 too: on one P the writer once took them one at a time
// (see collect).
func BenchmarkCreate(b *testing.B) {
	for _, parallel := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", parallel), func(b *testing.B) {
			st := benchStore(b, 0)
			var n atomic.Int64
			commits := petAppends(st)
			defer func() { b.ReportMetric(float64(b.N)/float64(petAppends(st)-commits), "creates/commit") }()
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
// The last one gets a pet of the thousand at random, as the load benchmark's
// get scenario does: the whole catalogue fits in the cache, and a get that
// misses it costs a query.
func BenchmarkHandlerChain(b *testing.B) {
	const pets = 1000
	st := benchStore(b, pets)
	h := benchHandler(st)
	for _, path := range []string{"/v1/pets?limit=20", "/v1/pets/7", "/v1/pets/random"} {
		b.Run(path, func(b *testing.B) {
			reqs := make([]*http.Request, 1)
			if strings.HasSuffix(path, "/random") {
				reqs = make([]*http.Request, pets)
			}
			for i := range reqs {
				p := path
				if len(reqs) > 1 {
					p = fmt.Sprint("/v1/pets/", i+1)
				}
				reqs[i] = httptest.NewRequest("GET", p, nil)
				reqs[i].Header.Set("Authorization", "Bearer "+testKey)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				w := newBenchWriter()
				h.ServeHTTP(w, reqs[rng.IntN(len(reqs))])
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
	keys := staticKeyring(testKey)
	return newServer(log, keys, st, newMetrics(st), newFeed(log, st, keys, defaultFeedConfig(), time.Now), time.Now, lim)
}

// benchStoreOn opens an empty store on backend: "sqlite", a fresh file, or
// "postgres", a database of the tests' cluster (skipped when the suite
// cannot start one).
func benchStoreOn(b *testing.B, backend string) *store {
	b.Helper()
	if backend == "sqlite" {
		return benchStore(b, 0)
	}
	st, err := openStore(b.Context(), postgresSchema(b), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
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
				st := benchStoreOn(b, backend)
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

// benchCatalogue returns a store on a catalogue of n pets, for the
// benchmarks of reads that the response caches cannot hold. Building a
// million rows takes seconds, which would swamp a profile of the reads: when
// the environment variable PETSTORE_BENCH_DB names a file, the catalogue is
// built there the first time and later runs open it as it is (the reads
// leave it unchanged).
func benchCatalogue(b *testing.B, n int) *store {
	b.Helper()
	path := os.Getenv("PETSTORE_BENCH_DB")
	if path == "" {
		return benchStore(b, n)
	}
	_, err := os.Stat(path)
	fresh := errors.Is(err, os.ErrNotExist)
	st, err := openStore(b.Context(), path, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if fresh {
		if _, err := st.writer.ExecContext(b.Context(), benchPetsSQL, n); err != nil {
			b.Fatal(err)
		}
	}
	var count int
	if err := st.reader.QueryRowContext(b.Context(), "SELECT count(*) FROM pets").Scan(&count); err != nil {
		b.Fatal(err)
	}
	if count != n {
		b.Fatalf("%s holds %d pets, not %d: remove it to build it again", path, count, n)
	}
	return st
}

// BenchmarkUncachedReads measures reads through the whole chain that the
// response caches do not hold, over a million pets: a getPet of an id read
// for the first time (bench/'s get scenario at 1,000,000 pets, where the item
// cache holds 16k of a million answers), a page of one status after a random
// id in the second half of the catalogue (its list-deep scenario), and a page
// of the id filter (ten ids; such pages are never cached).
// The ids follow a prime stride, so that none comes back within a million
// requests.
//
//	PETSTORE_BENCH_DB=/tmp/pets-1m.db go test -run '^$' -bench UncachedReads -benchmem .
func BenchmarkUncachedReads(b *testing.B) {
	const n = 1_000_000
	st := benchCatalogue(b, n)
	h := benchHandler(st)
	for _, bench := range []struct {
		name string
		set  func(u *url.URL, i int)
	}{
		{"get", func(u *url.URL, i int) { u.Path = "/v1/pets/" + strconv.Itoa(i+1) }},
		{"list-deep", func(u *url.URL, i int) {
			u.RawQuery = "limit=20&status=" + petStatuses[i%3] + "&after=" + strconv.Itoa(n/2+i%(n/2))
		}},
		{"list-ids", func(u *url.URL, i int) { // ten ids, the id filter (never cached)
			ids := make([]string, 10)
			for j := range ids {
				ids[j] = strconv.Itoa((i+j*99991)%n + 1)
			}
			u.RawQuery = "id=" + strings.Join(ids, ",")
		}},
	} {
		b.Run(bench.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/v1/pets", nil)
			req.Header.Set("Authorization", "Bearer "+testKey)
			i := 0
			for b.Loop() {
				i = (i + 7919) % n
				bench.set(req.URL, i)
				w := newBenchWriter()
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d: %s", w.status, w.body)
				}
			}
		})
	}
}

// benchEventsSQL inserts ? events of every type: one in ? is pet.deleted
// (the rare type a filter looks for), the others take the five other types
// in turn. Each event's data is a pet's JSON, as long as a real one.
const benchEventsSQL = `
	WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
	INSERT INTO events (type, occurred_at, subject, data)
	SELECT CASE WHEN i % ? = 0 THEN 'pet.deleted' ELSE CASE i % 5 WHEN 0 THEN 'pet.created' WHEN 1 THEN 'pet.updated'
	       WHEN 2 THEN 'order.placed' WHEN 3 THEN 'order.delivered' ELSE 'order.cancelled' END END,
	       1795514400123, '/v1/pets/' || i,
	       '{"id":' || i || ',"name":"pet-' || i || '","categoryId":1,"status":"available","createdAt":"2026-11-24T10:00:00.123Z","updatedAt":"2026-11-24T10:00:00.123Z"}'
	FROM seq`

// BenchmarkEventsPage measures a first page of the change feed through the
// whole handler chain, over a table of events of every type on SQLite and
// PostgreSQL: unfiltered, of a rare type (50 events spread over the table,
// so that a page of 100 holds every one of them), and of common types.
// Without an index on the type, a rare type's page reads the whole table.
func BenchmarkEventsPage(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, n := range []int{50_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/events=%d", backend, n), func(b *testing.B) {
				st := benchStoreOn(b, backend)
				if _, err := st.writer.ExecContext(b.Context(), st.dialect.sql(benchEventsSQL), n, n/50); err != nil {
					b.Fatal(err)
				}
				if _, err := st.writer.ExecContext(b.Context(), "ANALYZE"); err != nil {
					b.Fatal(err)
				}
				var rare int
				if err := st.reader.QueryRowContext(b.Context(), "SELECT count(*) FROM events WHERE type = 'pet.deleted'").Scan(&rare); err != nil || rare != 50 {
					b.Fatalf("the table holds %d events of pet.deleted, want 50 (%v)", rare, err)
				}
				h := benchHandler(st)
				for _, query := range []string{"limit=1", "type=pet.deleted&limit=1", "type=pet.deleted",
					"type=pet.created,pet.updated", "type=pet.deleted,order.placed", "type=order.*"} {
					b.Run(strings.ReplaceAll(query, "&", ","), func(b *testing.B) {
						req := httptest.NewRequest("GET", "/v1/events?"+query, nil)
						req.Header.Set("Authorization", "Bearer "+testKey)
						for b.Loop() {
							w := newBenchWriter()
							h.ServeHTTP(w, req)
							if w.status != http.StatusOK {
								b.Fatalf("status %d: %s", w.status, w.body)
							}
						}
					})
				}
			})
		}
	}
}

// BenchmarkChainOnAFreshGoroutine measures the handler chain as HTTP/2 runs
// it, each request on a new goroutine whose stack has to grow, and on the
// same goroutine, as HTTP/1.1 runs it on its connection's, for comparison.
// growHTTP2Stacks grows the stack at the top of the chain rather than deep
// in it (7.6 to 9.3 µs without it, 3.5 to 4.7 with it); a pool of
// goroutines that kept their grown stacks did as much here but cost as much
// in hand-offs, measured from outside (docs/performance-round-three.md).
func BenchmarkChainOnAFreshGoroutine(b *testing.B) {
	st := benchStore(b, 1000)
	chain := benchHandler(st)
	req := httptest.NewRequest("GET", "/v1/pets/7", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	b.Run("the same goroutine", func(b *testing.B) {
		for b.Loop() {
			chain.ServeHTTP(newBenchWriter(), req)
		}
	})
	b.Run("a fresh goroutine", func(b *testing.B) {
		// As HTTP/2 gives it: a Body even without one, of length 0.
		h2 := req.Clone(req.Context())
		h2.Proto, h2.ProtoMajor, h2.ProtoMinor = "HTTP/2.0", 2, 0
		h2.Body, h2.ContentLength = io.NopCloser(strings.NewReader("")), 0
		done := make(chan struct{})
		for b.Loop() {
			go func() {
				chain.ServeHTTP(newBenchWriter(), h2)
				done <- struct{}{}
			}()
			<-done
		}
	})
}

// BenchmarkLogLines measures an access line on its way to a pipe (the
// process's standard error, as journald reads it): one write(2) a line, or
// into bufferLines' buffer, written out in one write every so often.
func BenchmarkLogLines(b *testing.B) {
	line := []byte("time=2026-11-28T17:43:21.123Z level=INFO msg=request method=GET path=/v1/pets/7 status=200 bytes=58 duration=45.2µs request_id=ROWWODVCY3TZP6SU3DSTCTBLFT caller=key-766570cf\n")
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	go io.Copy(io.Discard, r)
	b.Run("a write a line", func(b *testing.B) {
		for b.Loop() {
			w.Write(line)
		}
	})
	b.Run("buffered", func(b *testing.B) {
		out, _, closeOut := bufferLines(w)
		defer closeOut()
		for b.Loop() {
			out.Write(line)
		}
	})
}
