package main

import (
	"context"
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
// stream did before there was a tail, until it reaches the base.

// The tail's limits.
const (
	// tailEvents is how many events the tail keeps (a few hundred KB): a
	// stream that falls further behind reads the table.
	tailEvents = 2048
	// streamPoll is how often a PostgreSQL tail looks for events of other
	// replicas when no notification woke it, while a stream reads it.
	streamPoll = time.Second
)

// eventTail is the tail, and the signal that wakes the streams when it
// grows. It also counts the events this process wrote, by type, for the
// metrics.
type eventTail struct {
	// fedByWriter is true on SQLite, where the writer appends (see
	// committed); on PostgreSQL the tail is filled by reads (see
	// store.fillEventTail).
	fedByWriter bool

	mu     sync.Mutex
	ch     chan struct{} // closed and replaced whenever the tail grows or its base moves
	events []Event       // the events after base, in id order
	base   int64
	// known says that base means something: on SQLite from the store's
	// opening on (newStore starts it at the feed's end); on PostgreSQL from
	// the first fill, and again not once no stream reads the tail (it is
	// then not filled, and starts again from the feed's end when a stream
	// comes).
	known   bool
	readers int // streams reading the tail now

	// wanted asks the PostgreSQL filler for a read (a notification came, a
	// batch of this replica committed, a stream arrived).
	wanted chan struct{}

	last    atomic.Int64    // the newest event id this process committed or saw
	written []atomic.Uint64 // by type, in the order of eventTypes
}

// newEventTail returns an empty tail; fedByWriter as for the field.
func newEventTail(fedByWriter bool) *eventTail {
	return &eventTail{fedByWriter: fedByWriter, ch: make(chan struct{}), wanted: make(chan struct{}, 1),
		written: make([]atomic.Uint64, len(eventTypes))}
}

// wait returns a channel that is closed when the tail next grows.
func (t *eventTail) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ch
}

// wakeLocked wakes the waiters; t.mu is held.
func (t *eventTail) wakeLocked() {
	close(t.ch)
	t.ch = make(chan struct{})
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

// after returns the events of the tail after cursor, at most
// streamReadBatch of them, appended to dst[:0]. ok is false when the tail
// cannot tell: cursor is below its base, where the table must be read.
func (t *eventTail) after(cursor int64, dst []Event) (events []Event, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known || cursor < t.base {
		return dst[:0], false
	}
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].ID > cursor })
	return append(dst[:0], t.events[i:min(len(t.events), i+streamReadBatch)]...), true
}

// committed records the events a batch of this process committed, their
// ids set, and wakes the streams. On SQLite they join the tail; a first id
// that does not follow the tail's newest (another process wrote to the
// file) starts the tail again from it. On
// PostgreSQL the filler is asked to read them, with whatever other replicas
// committed before them.
func (t *eventTail) committed(events []Event) {
	for _, ev := range events {
		if i := eventTypeIndex(ev.Type); i >= 0 {
			t.written[i].Add(1)
		}
	}
	t.advance(events[len(events)-1].ID)
	if !t.fedByWriter {
		t.want()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	newest := t.base
	if len(t.events) > 0 {
		newest = t.events[len(t.events)-1].ID
	}
	if !t.known || events[0].ID != newest+1 {
		t.known, t.base, t.events = true, events[0].ID-1, t.events[:0]
	}
	t.appendLocked(events)
	t.wakeLocked()
}

// appendLocked adds events that follow the tail's newest, dropping the
// oldest past tailEvents; t.mu is held.
func (t *eventTail) appendLocked(events []Event) {
	t.events = append(t.events, events...)
	if over := len(t.events) - tailEvents; over > 0 {
		// Copied into a new array now and then, not re-sliced at every
		// append, so the array neither grows for ever nor is copied often.
		if over >= tailEvents/2 || cap(t.events) > 2*tailEvents {
			t.base = t.events[over-1].ID
			t.events = append(make([]Event, 0, tailEvents+tailEvents/2), t.events[over:]...)
		}
	}
}

// pruned moves the base past events that pruning deleted: a stream whose
// cursor is below them reads the table, and learns there that its events
// are gone (see serveStream).
func (t *eventTail) pruned(through int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known || through <= t.base {
		return
	}
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].ID > through })
	t.base, t.events = through, t.events[i:]
	t.wakeLocked()
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
// it, it reads the events after the tail's newest, a batch at a time, and
// wakes the streams. A failed read is retried at the next wake-up or poll;
// the streams wait meanwhile, and their keep-alives go on.
func (s *store) fillEventTail(ctx context.Context) {
	t := s.events
	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
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
	case len(t.events) > 0:
		return t.events[len(t.events)-1].ID, true
	}
	return t.base, true
}

// start makes an empty tail complete after end, the feed's end as just read,
// and returns where to read from. A tail that a concurrent start made known
// already stays as it is.
func (t *eventTail) start(end int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known {
		t.known, t.base, t.events = true, end, t.events[:0]
		t.wakeLocked()
	}
	if len(t.events) > 0 {
		return t.events[len(t.events)-1].ID
	}
	return t.base
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
	newest := t.base
	if len(t.events) > 0 {
		newest = t.events[len(t.events)-1].ID
	}
	if !t.known || newest != from {
		return false
	}
	if len(events) == 0 {
		return true
	}
	t.appendLocked(events)
	if prunedThrough > t.base {
		i := sort.Search(len(t.events), func(i int) bool { return t.events[i].ID > prunedThrough })
		t.base, t.events = prunedThrough, t.events[i:]
	}
	t.wakeLocked()
	return true
}
