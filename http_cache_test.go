package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// countingFill is a fill that counts its calls, so that a test can tell an
// answer served from the cache (no call) from one filled afresh.
type countingFill struct {
	calls int
	err   error
}

func (f *countingFill) item() ([]byte, error) {
	f.calls++
	return []byte(fmt.Sprint("item ", f.calls)), f.err
}

func (f *countingFill) page(more bool) func() (cachedPage, error) {
	return func() (cachedPage, error) {
		f.calls++
		return cachedPage{body: []byte(fmt.Sprint("page ", f.calls)), more: more}, f.err
	}
}

// otherShard returns an id whose item shard differs from id's.
func otherShard(id int64) int64 {
	for other := id + 1; ; other++ {
		if shardOf(other) != shardOf(id) {
			return other
		}
	}
}

// TestCacheRule checks the rule of http_cache.go on the cache itself: for each
// kind of answer, which published changes keep it and which drop it.
func TestCacheRule(t *testing.T) {
	t.Parallel()
	const id = 42
	appended := func() changeSet {
		var cs changeSet
		cs.appendedTo(petsResource)
		return cs
	}
	changed := func(id int64) changeSet {
		var cs changeSet
		cs.changedIn(petsResource, id)
		return cs
	}
	tests := []struct {
		rule   string
		read   func(c *responseCache, f *countingFill) // reads through the cache
		change func(g *generations)                    // between the two reads
		kept   bool                                    // the second read is served from the cache
	}{
		{"an item is kept while nothing is written", readItem(id), func(*generations) {}, true},
		{"an item survives appends", readItem(id), publish(appended()), true},
		{"an item is dropped when it changes", readItem(id), publish(changed(id)), false},
		{"an item survives a change to a pet of another shard", readItem(id), publish(changed(otherShard(id))), true},
		{"an item is dropped when every answer is", readItem(id), (*generations).invalidateAll, false},
		{"a page with more after it survives appends", readPage(true), publish(appended()), true},
		{"a page with more after it is dropped by any change", readPage(true), publish(changed(otherShard(id))), false},
		{"a last page is dropped by appends", readPage(false), publish(appended()), false},
		{"a last page is dropped by any change", readPage(false), publish(changed(id)), false},
		{"a page is kept while nothing is written", readPage(false), func(*generations) {}, true},
		{"a page is dropped when every answer is", readPage(true), (*generations).invalidateAll, false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			var g generations
			c := newResponseCache(&g, petsResource, 16)
			f := &countingFill{}
			tt.read(c, f)
			tt.change(&g)
			tt.read(c, f)
			if kept := f.calls == 1; kept != tt.kept {
				t.Errorf("the answer was kept: %v, want %v (fills: %d)", kept, tt.kept, f.calls)
			}
		})
	}

	t.Run("an answer filled while a write commits is never served after it", func(t *testing.T) {
		// The race of a read filling the cache while a write commits,
		// played step by step: the write publishes its change after the
		// read took its generations and before the read stores its answer.
		for _, read := range []struct {
			name string
			do   func(c *responseCache, fill func())
		}{
			{"item", func(c *responseCache, fill func()) {
				c.item(id, func() ([]byte, error) { fill(); return []byte("old"), nil })
			}},
			{"page", func(c *responseCache, fill func()) {
				c.page(cacheKey{limit: 20}, func() (cachedPage, error) { fill(); return cachedPage{body: []byte("old"), more: true}, nil })
			}},
		} {
			var g generations
			c := newResponseCache(&g, petsResource, 16)
			read.do(c, func() { g.publish(changed(id)) })
			f := &countingFill{}
			switch read.name {
			case "item":
				readItem(id)(c, f)
			case "page":
				readPage(true)(c, f)
			}
			if f.calls != 1 {
				t.Errorf("%s: the answer read before the commit was served after it", read.name)
			}
		}
	})

	t.Run("a failed fill is not kept", func(t *testing.T) {
		var g generations
		c := newResponseCache(&g, petsResource, 16)
		f := &countingFill{err: errors.New("no such pet")}
		if _, err := c.item(id, f.item); err == nil {
			t.Fatalf("item = nil error, want the fill's")
		}
		f.err = nil
		readItem(id)(c, f)
		if f.calls != 2 {
			t.Errorf("fills: %d, want 2: the failed answer was kept", f.calls)
		}
	})

	t.Run("changes merged from several jobs publish every shard", func(t *testing.T) {
		var g generations
		c := newResponseCache(&g, petsResource, 16)
		a, b := int64(id), otherShard(id)
		fa, fb := &countingFill{}, &countingFill{}
		readItem(a)(c, fa)
		readItem(b)(c, fb)
		cs := changed(a)
		cs.add(changed(b))
		g.publish(cs)
		readItem(a)(c, fa)
		readItem(b)(c, fb)
		if fa.calls != 2 || fb.calls != 2 {
			t.Errorf("fills after a merged change: %d and %d, want 2 and 2", fa.calls, fb.calls)
		}
	})
}

// readItem reads item id through the cache with f.
func readItem(id int64) func(c *responseCache, f *countingFill) {
	return func(c *responseCache, f *countingFill) { c.item(id, f.item) }
}

// readPage reads one page through the cache with f; more is what the fill
// says of the rows after it.
func readPage(more bool) func(c *responseCache, f *countingFill) {
	return func(c *responseCache, f *countingFill) { c.page(cacheKey{limit: 20}, f.page(more)) }
}

// publish publishes cs.
func publish(cs changeSet) func(g *generations) {
	return func(g *generations) { g.publish(cs) }
}

// TestCachedReadsAlwaysMatchTheDatabase drives random writes through the
// API (creates, patches, deletes, orders placed and changed) and, after each
// one, compares every read the caches may hold with the database itself,
// read past the caches. It fails if any write of the store declares less
// than it changes.
func TestCachedReadsAlwaysMatchTheDatabase(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var petIDs, orderIDs []int64

	// check reads every cached query twice (the second is a cache hit when
	// the first filled it) and compares both with the database.
	check := func(step int, what string) {
		t.Helper()
		for _, id := range append(petIDs, petIDs[len(petIDs)-1]+1) {
			want, err := ts.Store.getPet(t.Context(), id)
			for range 2 {
				res := ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", id), "", nil)
				switch {
				case err != nil && res.Status != http.StatusNotFound:
					t.Fatalf("step %d (%s): pet %d is gone but getPet answered %d %s", step, what, id, res.Status, res.Body)
				case err == nil && !cmp.Equal(want, decode[Pet](t, res)):
					t.Fatalf("step %d (%s): getPet %d = %s, the database holds %v", step, what, id, res.Body, want)
				}
			}
		}
		for _, id := range orderIDs {
			want, err := ts.Store.getOrder(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if got := ts.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", id), "", nil).Body; string(got) != string(orderBody(want)) {
					t.Fatalf("step %d (%s): getOrder %d = %s, the database holds %s", step, what, id, got, orderBody(want))
				}
			}
		}
		for _, status := range []string{"", "available", "pending", "sold"} {
			for _, limit := range []int{1, 100} {
				for _, after := range []int64{0, int64(len(petIDs) / 2)} {
					p, err := ts.Store.listPets(t.Context(), status, pageRequest{after: after, limit: limit})
					if err != nil {
						t.Fatal(err)
					}
					path := fmt.Sprintf("/v1/pets?limit=%d&after=%d", limit, after)
					if status != "" {
						path += "&status=" + status
					}
					for range 2 {
						if got := decode[[]Pet](t, ts.do(t, "GET", path, "", nil)); !cmp.Equal(p.items, got) {
							t.Fatalf("step %d (%s): GET %s = %v, the database holds %v", step, what, path, got, p.items)
						}
					}
				}
			}
		}
		for _, status := range []string{"", "placed", "delivered", "cancelled"} {
			for _, limit := range []int{1, 100} {
				p, err := ts.Store.listOrders(t.Context(), status, pageRequest{limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				path := fmt.Sprintf("/v1/store/orders?limit=%d&status=%s", limit, status)
				if status == "" {
					path = fmt.Sprintf("/v1/store/orders?limit=%d", limit)
				}
				for range 2 {
					if got := ts.do(t, "GET", path, "", nil).Body; string(got) != string(ordersBody(p.items)) {
						t.Fatalf("step %d (%s): GET %s = %s, the database holds %s", step, what, path, got, ordersBody(p.items))
					}
				}
			}
		}
	}
	petIDs = append(petIDs, ts.createPet(t, "first", 1, "").ID)
	check(0, "one pet")
	pick := func(ids []int64) int64 { return ids[rng.IntN(len(ids))] }
	for step := 1; step <= 50; step++ {
		var what string
		switch op := rng.IntN(6); {
		case op == 0:
			p := ts.createPet(t, fmt.Sprint("pet-", step), 1, petStatuses[rng.IntN(3)])
			petIDs = append(petIDs, p.ID)
			what = fmt.Sprintf("created pet %d", p.ID)
		case op == 1:
			id := pick(petIDs)
			res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", id), fmt.Sprintf(`{"name":"patched-%d","status":%q}`, step, petStatuses[rng.IntN(3)]), nil)
			what = fmt.Sprintf("patched pet %d: %d", id, res.Status)
		case op == 2:
			id := pick(petIDs)
			res := ts.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", id), "", nil)
			what = fmt.Sprintf("deleted pet %d: %d", id, res.Status)
		case op == 3 || len(orderIDs) == 0:
			id := pick(petIDs)
			res := ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, id), nil)
			if res.Status == http.StatusCreated {
				orderIDs = append(orderIDs, decode[orderJSON](t, res).ID)
			}
			what = fmt.Sprintf("ordered pet %d: %d", id, res.Status)
		default:
			id := pick(orderIDs)
			res := ts.setOrder(t, id, orderStatuses[1+rng.IntN(2)])
			what = fmt.Sprintf("changed order %d: %d", id, res.Status)
		}
		check(step, what)
	}
}

// TestChangesAreSeenOnTheNextRequest changes pets and orders in a tight
// loop while readers keep the caches filling, and after every 2xx reads what
// it changed: the very next request must see the change.
func TestChangesAreSeenOnTheNextRequest(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	defer keepReading(t, []*testServer{ts}, "/v1/pets?status=sold", "/v1/store/orders?status=placed", "/v1/pets/1")()

	listed := func(path string, id int64) bool {
		return slices.ContainsFunc(decode[[]Pet](t, ts.do(t, "GET", path, "", nil)), func(p Pet) bool { return p.ID == id })
	}
	for i := range 20 {
		p := ts.createPet(t, fmt.Sprint("loop-", i), 1, "available")
		petPath := fmt.Sprintf("/v1/pets/%d", p.ID)
		ts.do(t, "GET", petPath, "", nil) // cached now
		if res := ts.do(t, "PATCH", petPath, `{"status":"sold"}`, nil); res.Status != http.StatusOK {
			t.Fatalf("PATCH: %d", res.Status)
		}
		if got := decode[Pet](t, ts.do(t, "GET", petPath, "", nil)); got.Status != "sold" {
			t.Fatalf("getPet right after PATCH to sold: %v", got)
		}
		if !listed("/v1/pets?status=sold&limit=100&after="+fmt.Sprint(p.ID-1), p.ID) || listed("/v1/pets?status=available&limit=100&after="+fmt.Sprint(p.ID-1), p.ID) {
			t.Fatalf("the status filter does not show pet %d sold right after PATCH", p.ID)
		}
		ts.do(t, "PATCH", petPath, `{"status":"available"}`, nil)
		o := ts.placeOrder(t, p.ID)
		if got := decode[Pet](t, ts.do(t, "GET", petPath, "", nil)); got.Status != "pending" {
			t.Fatalf("getPet right after its order: %v, want pending", got)
		}
		orderPath := fmt.Sprintf("/v1/store/orders/%d", o.ID)
		ts.do(t, "GET", orderPath, "", nil) // cached now
		to := []string{"delivered", "cancelled"}[i%2]
		if res := ts.setOrder(t, o.ID, to); res.Status != http.StatusOK {
			t.Fatalf("PATCH order: %d", res.Status)
		}
		if got := decode[orderJSON](t, ts.do(t, "GET", orderPath, "", nil)); got.Status != to {
			t.Fatalf("getOrder right after PATCH to %s: %v", to, got)
		}
		if got := decode[Pet](t, ts.do(t, "GET", petPath, "", nil)); got.Status != petStatusAfter[to] {
			t.Fatalf("getPet right after its order became %s: %v", to, got)
		}
		if to == "cancelled" {
			if res := ts.do(t, "DELETE", petPath, "", nil); res.Status != http.StatusConflict {
				t.Fatalf("DELETE of a pet with orders: %d", res.Status)
			}
			q := ts.createPet(t, "doomed", 1, "available")
			qPath := fmt.Sprintf("/v1/pets/%d", q.ID)
			ts.do(t, "GET", qPath, "", nil) // cached now
			ts.do(t, "DELETE", qPath, "", nil)
			if res := ts.do(t, "GET", qPath, "", nil); res.Status != http.StatusNotFound {
				t.Fatalf("getPet right after DELETE: %d", res.Status)
			}
			if listed("/v1/pets?limit=100&after="+fmt.Sprint(q.ID-1), q.ID) {
				t.Fatalf("listPets right after DELETE still shows pet %d", q.ID)
			}
		}
	}
}

// TestCacheIsBoundedByBytes fills a small cache with answers of random sizes
// and checks after each one that the answers it holds weigh no more than its
// budget, and that what it counts is what its slots hold.
func TestCacheIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	const budget = 10 << 10
	var g generations
	c := newResponseCache(&g, petsResource, 64).bounded(budget)
	rng := rand.New(rand.NewPCG(1, 2))
	held := func() int64 {
		var n int64
		for i := range c.slots {
			n += c.slots[i].Load().size()
		}
		return n
	}
	for i := range 2000 {
		size := 1 + rng.IntN(3<<10)
		if i%100 == 0 {
			size = budget + 1 // larger than the whole budget
		}
		calls := 0
		fill := func() (cachedPage, error) { calls++; return cachedPage{body: make([]byte, size), more: true}, nil }
		key := cacheKey{id: int64(i), limit: 20}
		c.page(key, fill)
		if got := c.heldBytes(); got > budget || got != held() {
			t.Fatalf("after answer %d (%d bytes): the cache counts %d bytes and holds %d; the budget is %d", i, size, got, held(), budget)
		}
		c.page(key, fill)
		if kept := calls == 1; kept == (size > budget-entryOverhead) {
			t.Fatalf("answer %d of %d bytes: kept %v", i, size, kept)
		}
	}
}

// TestCachesHoldAtMostTheirBudget fills the caches of listPets and getPet
// with the largest answers a stored catalogue gives (names of 100 U+2028,
// which JSON escapes to 6 bytes each, stored before names refused them), far
// more of them than the caches have room for, and checks the memory the
// process keeps afterwards: the caches' budgets, not what the answers add up
// to (about 21 MB of pages and 13 MB of pets; either cache keeping them all
// would hold more than the two budgets and the allowance together). The heap is the whole
// process's, so it is measured in a process of its own (inAProcessOfItsOwn),
// where no other test runs.
func TestCachesHoldAtMostTheirBudget(t *testing.T) {
	t.Parallel()
	if !inAProcessOfItsOwn(t) {
		return
	}
	// The server of newTestServer, but for its log, which the requests
	// below would fill with 5 MB.
	st, err := openStore(t.Context(), filepath.Join(t.TempDir(), "pets.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := staticKeyring(testKey)
	h := newServer(slogTo(io.Discard), keys, st, newMetrics(st), newFeed(slogTo(io.Discard), st, keys, defaultFeedConfig(), time.Now), time.Now, limits{idempotencyTTL: defaultIdempotencyTTL})
	const pets = 20_000
	if _, err := st.writer.ExecContext(t.Context(), `
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO pets (name, category_id, status) SELECT ?, 1, 'available' FROM seq`,
		pets, strings.Repeat("\u2028", 100)); err != nil {
		t.Fatal(err)
	}
	serve := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newRequest(t, "http://petstore", "GET", path, "", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d", path, rec.Code)
		}
		return rec.Body.Len()
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	spec := resourceSpecs[petsResource]
	// Pages of 100 pets (about 66 KB each) until they add up to five
	// times the list cache's budget, about 320: more would only cost time
	// (each a query of 100 rows under the race detector), since the bytes,
	// not the slots, bound what the cache keeps of answers so large.
	for after, served := 0, int64(0); served < 5*spec.listCache.bytes; after++ {
		served += int64(serve(fmt.Sprintf("/v1/pets?limit=100&after=%d", after)))
	}
	for id := range pets {
		serve(fmt.Sprintf("/v1/pets/%d", id+1))
	}
	grown := int64(heap()) - int64(before)
	runtime.KeepAlive(h) // the caches live as long as the handler
	// The two budgets, and 1 MiB for everything else the requests leave
	// (the metrics, the pools of the database connections).
	limit := spec.listCache.bytes + spec.itemCache.bytes + 1<<20
	t.Logf("the heap grew by %.1f MiB", float64(grown)/(1<<20))
	if grown > limit {
		t.Errorf("the heap grew by %.1f MiB, more than the caches' budgets and 1 MiB (%.1f MiB)", float64(grown)/(1<<20), float64(limit)/(1<<20))
	}
}

// TestConsecutiveIdsShareNoSlot fills a cache of each size the resources use
// with a window of consecutive ids, half as many as its slots, and
// checks that every one is then served from the cache: no two of them
// evicted each other.
func TestConsecutiveIdsShareNoSlot(t *testing.T) {
	t.Parallel()
	for _, slots := range []int{1 << 8, 1 << 10, 1 << 12, 1 << 14} {
		for _, first := range []int64{1, 1000, 123_457, 1_000_000, 1 << 40} {
			var g generations
			c := newResponseCache(&g, petsResource, slots)
			var f countingFill
			n := int64(slots) / 2
			for id := first; id < first+n; id++ {
				c.item(id, f.item)
			}
			var refilled []int64
			for id := first; id < first+n; id++ {
				before := f.calls
				if c.item(id, f.item); f.calls != before {
					refilled = append(refilled, id)
				}
			}
			if len(refilled) > 0 {
				t.Errorf("%d slots, ids %d to %d: %d ids were evicted by another, the first %v", slots, first, first+n-1, len(refilled), refilled[:min(len(refilled), 5)])
			}
		}
	}
}

// heldBytes is the size of the answers c holds now.
func (c *responseCache) heldBytes() int64 { return c.bytes.Load() }
