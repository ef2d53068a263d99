package main

// The store's generations: counters per resource that move when a write
// commits, which the response caches (http_cache.go, where the whole rule
// is told) compare to tell whether an answer they hold may have changed.

import (
	"math/bits"
	"sync/atomic"
)

// itemShards is how many counters track changes by id. A change to one pet
// drops the cached answers of the pets in its shard only (1 in 256), not
// every cached pet.
const itemShards = 256

// resourceGenerations count the commits that touched one resource.
type resourceGenerations struct {
	appends atomic.Uint64
	changes atomic.Uint64
	items   [itemShards]atomic.Uint64
}

// generations are the caches' clock: what they compare to tell whether a
// write committed since an answer was read.
type generations struct {
	// epoch moves when every cached answer must go: a closed store serves
	// nothing from its caches, so requests fail alike whether or not their
	// answer was cached.
	epoch     atomic.Uint64
	resources [numResources]resourceGenerations
}

// changeSet is what a write changed, in the caches' terms.
type changeSet struct {
	appended [numResources]bool
	changed  [numResources]bool
	shards   [numResources][itemShards / 64]uint64 // bit i: a row of shard i changed
}

// shardOf is the item shard of an id.
func shardOf(id int64) int { return int(uint64(id) * 0x9E3779B97F4A7C15 >> 56) }

// appendedTo records that rows were added to res, each with an id greater
// than every id before it.
func (cs *changeSet) appendedTo(res resource) { cs.appended[res] = true }

// changedIn records that the row id of res was changed or deleted.
func (cs *changeSet) changedIn(res resource, id int64) {
	cs.changed[res] = true
	s := shardOf(id)
	cs.shards[res][s/64] |= 1 << (s % 64)
}

// add merges other into cs.
func (cs *changeSet) add(other changeSet) {
	for r := range numResources {
		cs.appended[r] = cs.appended[r] || other.appended[r]
		cs.changed[r] = cs.changed[r] || other.changed[r]
		for i, set := range other.shards[r] {
			cs.shards[r][i] |= set
		}
	}
}

// publish moves the generations that cs touched. The writer calls it after
// the commit and before answering.
func (g *generations) publish(cs changeSet) {
	for r := range numResources {
		rg := &g.resources[r]
		if cs.changed[r] {
			for i, set := range cs.shards[r] {
				for set != 0 {
					low := set & -set
					set ^= low
					rg.items[i*64+bits.TrailingZeros64(low)].Add(1)
				}
			}
			rg.changes.Add(1)
		}
		if cs.appended[r] {
			rg.appends.Add(1)
		}
	}
}

// invalidateAll drops every cached answer of every resource.
func (g *generations) invalidateAll() { g.epoch.Add(1) }

// stamp is the generations an answer depends on, read before its query.
type stamp struct {
	epoch, appends, changes, item uint64
}

// stampFor reads the generations of res; item is the shard of id.
func (g *generations) stampFor(res resource, id int64) stamp {
	rg := &g.resources[res]
	return stamp{
		epoch:   g.epoch.Load(),
		appends: rg.appends.Load(),
		changes: rg.changes.Load(),
		item:    rg.items[shardOf(id)].Load(),
	}
}
