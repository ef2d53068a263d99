package main

import "sync/atomic"

// The read handlers keep their recent answers, already encoded, so that a
// repeated request (the first page of the list, above all) costs no query
// and no encoding. The rule is that the cache never serves an answer that a
// committed write could have changed:
//
//   - Every entry records the store's versions read BEFORE the query that
//     produced it. The writer moves the versions after each commit and
//     before answering any request of the batch. So when a read fills an
//     entry while a write commits, the entry carries the versions from
//     before that commit and no request that starts after the write's 201
//     accepts it.
//   - Creating a pet only appends: its id is greater than every id already
//     committed. An answer that such a pet cannot change stays valid across
//     appends (a found pet; a list page that already had more matching pets
//     after it, since the new pet would sort after all of them). Any other
//     entry is valid only while no write at all has committed, and every
//     entry is dropped by a write that may change existing pets.
//
// The cache is a fixed array of slots indexed by a hash of the request, each
// holding a pointer that is swapped atomically: lookups take no lock, and
// memory is bounded by the number of slots whatever the table's size.

// Slots per cache. Entries of a list page hold up to 100 pets (about 7 KiB),
// a pet about 100 bytes: both caches together stay under 10 MiB.
const (
	listCacheSlots = 1 << 10
	petCacheSlots  = 1 << 14
)

// cacheKey identifies a request whose answer is cached: a list query, or a
// pet id (with limit 0 and no status).
type cacheKey struct {
	id     int64 // the pet id, or the list's after
	limit  int
	status string
}

// cacheEntry is one encoded answer with what it takes to tell whether it is
// still valid.
type cacheEntry struct {
	key        cacheKey
	at         snapshot // versions read before the query
	appendSafe bool     // creating a pet cannot change this answer
	body       []byte   // the whole response body, newline included
	link       string   // the Link header of a list page, if any
}

// responseCache is a bounded cache of encoded 200 answers.
type responseCache struct {
	slots []atomic.Pointer[cacheEntry]
}

// newResponseCache returns an empty cache of n slots (a power of two).
func newResponseCache(n int) *responseCache {
	return &responseCache{slots: make([]atomic.Pointer[cacheEntry], n)}
}

// slot returns the slot that key hashes to.
func (c *responseCache) slot(key cacheKey) *atomic.Pointer[cacheEntry] {
	h := uint64(key.id)*0x9E3779B97F4A7C15 ^ uint64(key.limit)<<32 ^ uint64(len(key.status))
	h ^= h >> 29
	return &c.slots[h&uint64(len(c.slots)-1)]
}

// get returns the entry for key if there is one that is valid at now, the
// versions read at the start of the request.
func (c *responseCache) get(key cacheKey, now snapshot) (*cacheEntry, bool) {
	e := c.slot(key).Load()
	if e == nil || e.key != key || e.at.changes != now.changes || (!e.appendSafe && e.at.appends != now.appends) {
		return nil, false
	}
	return e, true
}

// put stores e, replacing whatever its slot held.
func (c *responseCache) put(e *cacheEntry) {
	c.slot(e.key).Store(e)
}
