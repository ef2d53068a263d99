package main

import (
	"context"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// The events' tail: the newest events this process knows of, kept in
// memory, so that the open streams of the process read them from one place
// instead of each querying the table at every commit (a hundred idle streams
// made every commit a hundred reads). On SQLite the writer of this process
// appends each batch's events once it has committed them: nothing is read
// at all. On PostgreSQL the other replicas write too, so one goroutine
// fills the tail with one read of the table per wake-up (a notification, a
// commit of this replica, or a poll every second), shared by every stream.
//
// The tail is complete from its base on: every event with an id above base,
// up to its newest, is in it. A stream whose cursor is below the base (it
// fell behind, or resumed from an old position) reads the table, as every
// stream did before there was a tail, until it reaches the base; unless the
// tail can tell that none of the events it dropped since it started is one
// the stream wants (see read), which lets a stream that waits for a rare
// type sleep through any number of others.
//
// A stream is woken only when the tail grows by an event of a type it
// wants (or its base moves): a stream of order.* sleeps while pets are
// created, and learns of them, for its bookmarks, when it next reads.

// The tail's limits.
const (
	// tailEvents is how many events the tail keeps (a few hundred KB): a
	// stream that falls further behind reads the table.
	tailEvents = 2048
	// streamPoll is how often a PostgreSQL tail looks for events of other
	// replicas when no notification woke it, while a stream reads it.
	streamPoll = time.Second
	// fillGap is the least time between two reads of a PostgreSQL tail:
	// under a stream of commits, the wake-ups that come meanwhile are
	// served by one read, and the streams woken once, rather than a read
	// and a wake-up of every stream per commit. An event waits for it at
	// most once, and only when another read came just before.
	fillGap = 5 * time.Millisecond
)

// typeMask is a set of event types, one bit each, in the order of
// eventTypes.
type typeMask uint64

// maskOf is the set of types; nil is every type.
func maskOf(types []string) typeMask {
	if types == nil {
		return typeMask(1)<<len(eventTypes) - 1
	}
	var m typeMask
	for _, t := range types {
		m |= typeBit(t)
	}
	return m
}

// typeBit is the bit of the event type typ; 0 for a type that is none.
func typeBit(typ string) typeMask {
	if i := eventTypeIndex(typ); i >= 0 {
		return 1 << i
	}
	return 0
}

// tailEvent is an event of the tail, with its type's bit.
type tailEvent struct {
	Event
	bit typeMask
}

// eventTail is the tail, and the signals that wake the streams and the
// webhook dispatcher. It also counts the events this process wrote, by type,
// for the metrics.
type eventTail struct {
	// fedByWriter is true on SQLite, where the writer appends (see
	// committed); on PostgreSQL the tail is filled by reads (see
	// store.fillEventTail).
	fedByWriter bool

	mu     sync.Mutex
	events []tailEvent // the events after base, in id order
	base   int64
	// known says that base means something: on SQLite from the store's
	// opening on (newStore starts it at the feed's end); on PostgreSQL from
	// the first fill, and again not once no stream reads the tail (it is
	// then not filled, and starts again from the feed's end when a stream
	// comes).
	known bool
	// from is the base the tail started at, and dropped the newest id of
	// each type (in the order of eventTypes) that left the tail since, by
	// trimming or pruning: what a stream behind the base needs to know
	// whether it missed anything it wants (see read).
	from    int64
	dropped []int64
	readers int // streams reading the tail now
	// waiters are the channels the streams wait on, by the types they
	// want: closed when the tail grows by an event of one of them, or its
	// base moves.
	waiters map[typeMask]chan struct{}
	// committed is closed and replaced at every commit of events that this
	// process makes or hears of (the webhook dispatcher waits on it).
	commits chan struct{}

	// wanted asks the PostgreSQL filler for a read (a notification came, a
	// batch of this replica committed, a stream arrived).
	wanted chan struct{}

	last    atomic.Int64    // the newest event id this process committed or saw
	written []atomic.Uint64 // by type, in the order of eventTypes
}

// newEventTail returns an empty tail; fedByWriter as for the field.
func newEventTail(fedByWriter bool) *eventTail {
	return &eventTail{fedByWriter: fedByWriter, dropped: make([]int64, len(eventTypes)),
		waiters: map[typeMask]chan struct{}{}, commits: make(chan struct{}), wanted: make(chan struct{}, 1),
		written: make([]atomic.Uint64, len(eventTypes))}
}

// wait returns a channel that is closed at the next commit of events this
// process makes or, on PostgreSQL, hears of.
func (t *eventTail) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.commits
}

// waitFor returns a channel that is closed when the tail next grows by an
// event of a type of want, or its base moves.
func (t *eventTail) waitFor(want typeMask) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch, ok := t.waiters[want]
	if !ok {
		ch = make(chan struct{})
		t.waiters[want] = ch
	}
	return ch
}

// wakeLocked wakes the streams waiting for a type of grown; t.mu is held.
func (t *eventTail) wakeLocked(grown typeMask) {
	for want, ch := range t.waiters {
		if want&grown != 0 {
			close(ch)
			delete(t.waiters, want)
		}
	}
}

// wakeAllLocked wakes every stream, whatever it waits for: the base moved,
// and a stream behind it must read again; t.mu is held.
func (t *eventTail) wakeAllLocked() {
	for want, ch := range t.waiters {
		close(ch)
		delete(t.waiters, want)
	}
}

// notifyLocked wakes what waits for any commit (see wait); t.mu is held.
func (t *eventTail) notifyLocked() {
	close(t.commits)
	t.commits = make(chan struct{})
}

// heard records a commit of another replica, told by a notification: it
// wakes what waits for any commit and asks the filler for a read.
func (t *eventTail) heard() {
	t.mu.Lock()
	t.notifyLocked()
	t.mu.Unlock()
	t.want()
}

// want asks the filler for a read, without waiting for it.
func (t *eventTail) want() {
	select {
	case t.wanted <- struct{}{}:
	default: // a read is asked for already
	}
}

// subscribe counts a stream that reads the tail; unsubscribe forgets it.
// The first stream of a PostgreSQL tail that was not filled meanwhile starts
// it again from the feed's end.
func (t *eventTail) subscribe() {
	t.mu.Lock()
	t.readers++
	t.mu.Unlock()
	if !t.fedByWriter {
		t.want()
	}
}

// unsubscribe forgets a stream counted by subscribe.
func (t *eventTail) unsubscribe() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.readers--; t.readers == 0 && !t.fedByWriter {
		// Nothing fills it until a stream comes: what it holds is not
		// known to be complete up to the feed's end any more.
		t.known, t.events = false, nil
	}
}

// tailRead is what a stream reads of the tail (see read).
type tailRead struct {
	events   []Event // the events it wants, in id order
	cursor   int64   // the newest id examined
	readable int64   // the newest id examined of a type it may read; 0 when none
	more     bool    // more events follow cursor: read again
}

// read returns, of the tail's events after cursor, those of the types of
// want, at most streamReadBatch of them, appended to dst[:0], and how far it
// examined. ok is false when the tail cannot tell and the table must be
// read: cursor is below the base and an event of a type it wants left the
// tail after cursor (or cursor is from before the tail started). readable
// is the types the stream's key may read, for its bookmarks.
func (t *eventTail) read(cursor int64, want, readable typeMask, dst []Event) (r tailRead, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.events = dst[:0]
	if !t.known {
		return r, false
	}
	if cursor < t.base {
		if cursor < t.from {
			return r, false
		}
		for m := want; m != 0; m &= m - 1 {
			if t.dropped[bits.TrailingZeros64(uint64(m))] > cursor {
				return r, false
			}
		}
		// Nothing it wants left the tail after cursor: it may skip to the
		// base, and only a bookmark needs the newest it may read.
		for m := readable; m != 0; m &= m - 1 {
			r.readable = max(r.readable, t.dropped[bits.TrailingZeros64(uint64(m))])
		}
		if r.readable <= cursor {
			r.readable = 0
		}
		cursor = t.base
	}
	r.cursor = cursor
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].ID > cursor })
	for ; i < len(t.events) && len(r.events) < streamReadBatch; i++ {
		ev := &t.events[i]
		r.cursor = ev.ID
		if readable&ev.bit != 0 {
			r.readable = ev.ID
		}
		if want&ev.bit != 0 {
			r.events = append(r.events, ev.Event)
		}
	}
	r.more = i < len(t.events)
	return r, true
}

// caughtUp reports whether a stream at cursor that wants the types of want
// has read all it wants that this process knows of: the lag it reports.
func (t *eventTail) caughtUp(cursor int64, want typeMask) bool {
	r, ok := t.read(cursor, want, 0, nil)
	return ok && len(r.events) == 0 && !r.more
}

// committed records the events a batch of this process committed, their
// ids set, and wakes the streams. On SQLite they join the tail; a first id
// that does not follow the tail's newest (another process wrote to the
// file) starts the tail again from it. On PostgreSQL the filler is asked to
// read them, with whatever other replicas committed before them.
func (t *eventTail) committed(events []Event) {
	for _, ev := range events {
		if i := eventTypeIndex(ev.Type); i >= 0 {
			t.written[i].Add(1)
		}
	}
	t.advance(events[len(events)-1].ID)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notifyLocked()
	if !t.fedByWriter {
		t.want()
		return
	}
	if !t.known || events[0].ID != t.newestLocked()+1 {
		t.startLocked(events[0].ID - 1)
	}
	t.wakeLocked(t.appendLocked(events))
}

// newestLocked is the newest id of the tail; t.mu is held.
func (t *eventTail) newestLocked() int64 {
	if len(t.events) > 0 {
		return t.events[len(t.events)-1].ID
	}
	return t.base
}

// startLocked empties the tail and makes it complete after base; t.mu is
// held.
func (t *eventTail) startLocked(base int64) {
	t.known, t.base, t.from, t.events = true, base, base, t.events[:0]
	clear(t.dropped)
	t.wakeAllLocked()
}

// appendLocked adds events that follow the tail's newest, dropping the
// oldest past tailEvents, and returns their types; t.mu is held.
func (t *eventTail) appendLocked(events []Event) typeMask {
	var grown typeMask
	for _, ev := range events {
		bit := typeBit(ev.Type)
		grown |= bit
		t.events = append(t.events, tailEvent{Event: ev, bit: bit})
	}
	// Copied into a new array now and then, not re-sliced at every append,
	// so the array neither grows for ever nor is copied often.
	if over := len(t.events) - tailEvents; over >= tailEvents/2 || (over > 0 && cap(t.events) > 2*tailEvents) {
		t.dropLocked(over)
		t.events = append(make([]tailEvent, 0, tailEvents+tailEvents/2), t.events...)
	}
	return grown
}

// dropLocked drops the n oldest events, moving the base past them; t.mu is
// held.
func (t *eventTail) dropLocked(n int) {
	for _, ev := range t.events[:n] {
		if i := bits.TrailingZeros64(uint64(ev.bit)); ev.bit != 0 {
			t.dropped[i] = ev.ID
		}
	}
	t.base = t.events[n-1].ID
	t.events = t.events[n:]
}

// pruned moves the base past events that pruning deleted: a stream whose
// cursor is below them reads the table, and learns there that its events
// are gone (see serveStream), unless none of them was one it wants.
func (t *eventTail) pruned(through int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prunedLocked(through)
}

// prunedLocked is pruned; t.mu is held.
func (t *eventTail) prunedLocked(through int64) {
	if !t.known || through <= t.base {
		return
	}
	newest := t.newestLocked()
	if n := sort.Search(len(t.events), func(i int) bool { return t.events[i].ID > through }); n > 0 {
		t.dropLocked(n)
	}
	if through > newest {
		// Events the tail never held were pruned (on PostgreSQL, before
		// a read brought them): their types are not known, so no stream
		// below them may skip them.
		t.from = max(t.from, through)
	}
	t.base = through
	t.wakeAllLocked()
}

// advance records that the feed reaches at least last.
func (t *eventTail) advance(last int64) {
	for {
		old := t.last.Load()
		if last <= old || t.last.CompareAndSwap(old, last) {
			return
		}
	}
}

// fillEventTail fills a PostgreSQL tail until ctx is done: whenever a read
// is wanted (see eventTail.want) or every streamPoll, while a stream reads
// it, but at most once every fillGap, it reads the events after the tail's
// newest, a batch at a time, and wakes the streams. A failed read is retried
// at the next wake-up or poll; the streams wait meanwhile, and their
// keep-alives go on.
func (s *store) fillEventTail(ctx context.Context) {
	t := s.events
	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wanted:
		case <-poll.C:
		}
		from, ok := t.fillFrom()
		if !ok {
			continue
		}
		if from < 0 {
			bounds, err := s.eventBounds(ctx)
			if err != nil {
				continue
			}
			from = t.start(bounds.end)
		}
		for {
			events, prunedThrough, err := s.streamEvents(ctx, from)
			if err != nil || !t.fill(from, events, prunedThrough) || len(events) < streamReadBatch {
				break
			}
			from = events[len(events)-1].ID
		}
		gap.Reset(fillGap)
		select {
		case <-ctx.Done():
			return
		case <-gap.C:
		}
	}
}

// fillFrom is where the filler reads from: the tail's newest id, or -1 when
// the tail must start again from the feed's end. ok is false when no stream
// reads the tail.
func (t *eventTail) fillFrom() (from int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.readers == 0:
		return 0, false
	case !t.known:
		return -1, true
	}
	return t.newestLocked(), true
}

// start makes an empty tail complete after end, the feed's end as just read,
// and returns where to read from. A tail known already stays as it is.
func (t *eventTail) start(end int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known {
		t.startLocked(end)
	}
	return t.newestLocked()
}

// fill adds the events read after from, with the prune mark the same read
// saw, and wakes the streams. It reports false, adding nothing, when the
// tail moved meanwhile (no stream reads it any more, so it was forgotten).
func (t *eventTail) fill(from int64, events []Event, prunedThrough int64) bool {
	if len(events) > 0 {
		t.advance(events[len(events)-1].ID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known || t.newestLocked() != from {
		return false
	}
	if len(events) == 0 {
		return true
	}
	t.wakeLocked(t.appendLocked(events))
	t.prunedLocked(prunedThrough)
	return true
}
