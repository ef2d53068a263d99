package main

import (
	"math/bits"
	"sync/atomic"
)

// The response caches keep recent answers of the read operations, already
// encoded, so that a repeated read (the first page of the list, above all)
// costs no query and no encoding. Their whole correctness rule:
//
//	A cached answer is served only while no write that committed after its
//	query began could have changed it.
//
// It holds by three parts:
//
//   - Generations (store_generations.go). For each resource (pets, orders)
//     the store keeps counters that move when a write commits: appends (rows
//     added), changes (rows changed or deleted), and changes by shard of the
//     changed row's id.
//   - Writes say what they change, in these terms. The store's mutation
//     helpers (store_changes.go) record every change a job makes, the only
//     way a job changes a row, and finishJob derives the job's changeSet
//     from the records; the writer publishes the batch's changes after the
//     commit and before it answers any request. So a read that starts after
//     a client saw a 2xx finds the generations moved.
//   - Reads take the generations before their query (this file).
//     responseCache.item and responseCache.page read them, run the fill,
//     and keep the answer with them; a later request is served the answer
//     only while the generations it depends on are unchanged. An answer filled while a write commits
//     carries the generations from before the commit, so it is never served
//     after that write's 2xx.
//
// What an answer depends on follows from its kind alone:
//
//   - An item found by id (a pet) depends on changes to rows in its id's
//     shard. Adding rows cannot change it. A missing item is not cached: it
//     may be created at any moment.
//   - A keyset page (rows with id > after, in id order, up to a limit)
//     depends on every change of its resource. It also depends on appends
//     unless more rows matched after it: a new row has an id greater than
//     every id before it, so it sorts after the rows that already followed
//     the page and cannot enter it.
//
// A cache is a fixed array of slots indexed by a hash of the request, each
// holding a pointer that is swapped atomically: lookups take no lock. Its
// memory is bounded by bytes, not by slots: what an answer weighs depends on
// what clients stored (a page of 100 pets whose names escape to 600 bytes
// each is 65 KB), so a cache counts the bytes of the answers it holds and,
// past its budget, drops answers (a clock hand sweeping the slots) until it
// is under it again. Dropping an answer only costs a query later: the rule
// above is untouched.

// defaultSlotBytes is the budget per slot of a cache made without one.
const defaultSlotBytes = 1 << 10

// entryOverhead is what an entry weighs besides its body, link and filter:
// the cacheEntry itself (112 bytes) rounded up to its allocation.
const entryOverhead = 128

// cacheKey identifies a cached answer: an item by id (limit 0), or a page
// by its after, limit and filter.
type cacheKey struct {
	id     int64 // the item's id, or the page's after
	limit  int
	filter string
}

// cachedPage is an encoded page of a list.
type cachedPage struct {
	body []byte // the whole response body, newline included
	link string // the Link header, "" on the last page
	more bool   // rows matching the query follow the page
}

// cacheEntry is one encoded answer with the generations it was read at.
type cacheEntry struct {
	key  cacheKey
	at   stamp
	page cachedPage // an item's body is in page.body
}

// size is the memory e holds, as counted against a cache's budget.
func (e *cacheEntry) size() int64 {
	if e == nil {
		return 0
	}
	return int64(cap(e.page.body)+len(e.page.link)+len(e.key.filter)) + entryOverhead
}

// responseCache keeps the encoded answers of one read operation on one
// resource.
type responseCache struct {
	gens     *generations
	res      resource
	slots    []atomic.Pointer[cacheEntry]
	shift    uint8         // 64 - log2(len(slots)): slot keeps the hash's top bits
	maxBytes int64         // the budget of the entries' sizes
	bytes    atomic.Int64  // the sizes of the entries in slots
	hand     atomic.Uint64 // the next slot eviction looks at
}

// newResponseCache returns an empty cache of n slots (a power of two) for
// reads of res, with a budget of defaultSlotBytes per slot until bounded
// says otherwise.
func newResponseCache(gens *generations, res resource, n int) *responseCache {
	return &responseCache{gens: gens, res: res, slots: make([]atomic.Pointer[cacheEntry], n),
		shift: uint8(64 - bits.TrailingZeros(uint(n))), maxBytes: int64(n) * defaultSlotBytes}
}

// bounded sets the most bytes of answers c holds, and returns c.
func (c *responseCache) bounded(maxBytes int64) *responseCache {
	c.maxBytes = maxBytes
	return c
}

// store puts e in slot and keeps c within its budget: the answers at the
// clock hand are dropped until the cache holds no more than maxBytes (only
// stores that run at the same moment can take it past, each by one answer).
// An answer larger than the whole budget is not kept.
func (c *responseCache) store(slot *atomic.Pointer[cacheEntry], e *cacheEntry) {
	size := e.size()
	if size > c.maxBytes {
		return
	}
	old := slot.Swap(e)
	c.bytes.Add(size - old.size())
	for range len(c.slots) {
		if c.bytes.Load() <= c.maxBytes {
			return
		}
		victim := &c.slots[c.hand.Add(1)&uint64(len(c.slots)-1)]
		if victim == slot {
			continue
		}
		// Swapped out by one CompareAndSwap only: each entry's size
		// leaves the count once, as it came in once.
		if v := victim.Load(); v != nil && victim.CompareAndSwap(v, nil) {
			c.bytes.Add(-v.size())
		}
	}
}

// responseCache returns the cache of a read operation on res, within budget
// (its resource's declaration sets it: resourceSpecs).
// On PostgreSQL it keeps nothing: every read goes to the database. Other
// replicas write the same database, and this process learns of their commits
// only by asking the database, which costs a round trip per request, as
// much as the indexed read it would save; so a replica serves only what the
// database says at the moment of the request, and a client that got a 2xx
// from one replica sees the change on any other at once.
func (s *store) responseCache(res resource, budget cacheBudget) *responseCache {
	if s.dialect == postgresDialect {
		return &responseCache{}
	}
	return newResponseCache(&s.generations, res, budget.slots).bounded(budget.bytes)
}

// item returns the encoded answer for the row id, from the cache while it
// is valid, or else from fill, whose answer it keeps. An error from fill
// (the row does not exist, or the query failed) is returned and nothing is
// kept.
func (c *responseCache) item(id int64, fill func() ([]byte, error)) ([]byte, error) {
	if c.slots == nil {
		return fill()
	}
	key := cacheKey{id: id}
	now := c.gens.stampFor(c.res, id)
	if e := c.slot(key).Load(); e != nil && e.key == key && e.at.epoch == now.epoch && e.at.item == now.item {
		return e.page.body, nil
	}
	body, err := fill()
	if err != nil {
		return nil, err
	}
	c.store(c.slot(key), &cacheEntry{key: key, at: now, page: cachedPage{body: body}})
	return body, nil
}

// page returns the encoded page for key, from the cache while it is valid,
// or else from fill, whose answer it keeps unless fill fails.
func (c *responseCache) page(key cacheKey, fill func() (cachedPage, error)) (cachedPage, error) {
	if c.slots == nil {
		return fill()
	}
	now := c.gens.stampFor(c.res, 0)
	if e := c.slot(key).Load(); e != nil && e.key == key && e.at.epoch == now.epoch &&
		e.at.changes == now.changes && (e.page.more || e.at.appends == now.appends) {
		return e.page, nil
	}
	p, err := fill()
	if err != nil {
		return cachedPage{}, err
	}
	c.store(c.slot(key), &cacheEntry{key: key, at: now, page: p})
	return p, nil
}

// slot returns the slot that key hashes to: Fibonacci hashing, the top
// bits of the key times 2^64 divided by the golden ratio. Ids are given in
// order, and consecutive ids (items' ids, pages' afters) then spread evenly
// over the slots: no two of a window of up to half as many ids as slots
// share a slot (TestConsecutiveIdsShareNoSlot), so that a catalogue
// that fits is served whole from the cache. The low bits, used before, gave
// 42 of ids 1 to 1,000 a slot shared with another id of them, each evicting
// the other: 21 queries per 1,000 gets of random pets at 1,000 pets.
func (c *responseCache) slot(key cacheKey) *atomic.Pointer[cacheEntry] {
	x := uint64(key.id) ^ uint64(key.limit)<<40
	if key.filter != "" {
		x ^= fnv1a(key.filter) << 48
	}
	return &c.slots[(x*0x9E3779B97F4A7C15)>>c.shift]
}

// fnv1a is the 64-bit FNV-1a hash of s.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}
