package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The change feed, GET /v1/events: the events in id order (which is commit
// order), read by polling pages of JSON or as a Server-Sent Events stream
// that resumes where a client left off. A page reads the events table by
// cursor. A stream reads the newest events from the tail this process keeps
// in memory (store_events_tail.go), woken when it grows, and the table only
// while its cursor is older than the tail. A stream checks the key it was
// opened with at every wake-up, heartbeat and key reload, and ends, saying
// why, once that key has expired or was removed.

// The feed's limits.
const (
	defaultEventsLimit = 100
	maxEventsLimit     = 1000
	// streamRetry is the reconnection delay a stream advises its client
	// (the SSE retry field), in milliseconds.
	streamRetry = 2000
	// streamWriteTimeout is how long a stream waits for its client to take
	// a frame: a client that stops reading for longer is disconnected, so
	// a stalled reader holds no buffer and no connection for ever.
	streamWriteTimeout = 30 * time.Second
	// ticketTTL is how long a stream ticket can be redeemed.
	ticketTTL = 60 * time.Second
)

// eventStreamType is the media type of a Server-Sent Events stream.
const eventStreamType = "text/event-stream"

// feedConfig are the feed's settings.
type feedConfig struct {
	heartbeat  time.Duration // the silence after which a stream sends a keep-alive
	retention  time.Duration // how long events are kept
	maxStreams int           // open streams per API key
	// writeTimeout is how long a frame may wait for its client:
	// streamWriteTimeout, unless a test sets it (zero means the default).
	writeTimeout time.Duration
}

// feed serves the event feed. It knows the streams it has open, to cap them
// per key and to report the slowest one's lag, and ends them all when the
// server shuts down.
type feed struct {
	log      *slog.Logger
	st       *store
	keys     keyring // the keys in force, which an open stream checks its own against
	cfg      feedConfig
	now      func() time.Time
	shutdown chan struct{} // closed when the server begins to shut down
	stopOnce sync.Once

	mu      sync.Mutex
	perKey  map[[sha256.Size]byte]int
	streams map[*stream]struct{}
}

// stream is one open Server-Sent Events stream.
type stream struct {
	mu     sync.Mutex
	cursor int64    // the newest event id it examined
	want   typeMask // the types it sends
}

// newFeed returns the feed of st, whose streams end when their key is no
// longer among keys or has expired.
func newFeed(log *slog.Logger, st *store, keys keyring, cfg feedConfig, now func() time.Time) *feed {
	if cfg.writeTimeout == 0 {
		cfg.writeTimeout = streamWriteTimeout
	}
	return &feed{log: log, st: st, keys: keys, cfg: cfg, now: now, shutdown: make(chan struct{}),
		perKey: map[[sha256.Size]byte]int{}, streams: map[*stream]struct{}{}}
}

// stop ends every open stream, cleanly (each finishes the frame it is
// writing), and refuses new ones. The server calls it when it begins to
// shut down: streams never end by themselves, so they would hold the drain
// until its timeout.
func (f *feed) stop() { f.stopOnce.Do(func() { close(f.shutdown) }) }

// eventsQuery is a validated query of the feed.
type eventsQuery struct {
	after    int64
	hasAfter bool
	limit    int
	types    []string // nil: every type
	// typeFilter is the type parameter in its canonical form
	// (canonicalTypeFilter), for the next link: never what the client
	// sent, so that the Link does not grow with the request.
	typeFilter string
}

// parseEventsQuery validates the feed's query string. ticket is the one
// parameter it leaves to the authentication (see requireKeyOrTicket).
func parseEventsQuery(raw string) (eventsQuery, error) {
	q := eventsQuery{limit: defaultEventsLimit}
	err := parseQuery(raw, queryParams{operation: "listEvents", names: "after, limit, type and ticket"}, func(name, v string) (known bool, err error) {
		switch name {
		case "after":
			n, ok := parseDecimal(v)
			if !ok {
				return true, errorf(codeInvalidParameter, "parameter after must be an event id: an integer from 0 to 9223372036854775807")
			}
			q.after, q.hasAfter = n, true
		case "limit":
			q.limit, err = parseLimit(v, maxEventsLimit)
		case "type":
			var types []string
			if types, err = parseTypeFilter(v); err == nil {
				q.types, q.typeFilter = types, canonicalTypeFilter(types)
			}
		case "ticket": // the authentication's (see requireKeyOrTicket)
		default:
			return false, nil
		}
		return true, err
	})
	return q, err
}

// parseTypeFilter reads the value of a type filter: event types and
// patterns separated by commas (OpenAPI's style form, explode false),
// repeats allowed, and at most as many items as there are types and
// patterns, so that naming each once always fits. It returns the types
// they name, in eventTypes' order, without repeats.
func parseTypeFilter(v string) ([]string, error) {
	choices := strings.Join(slices.Concat(eventTypes, eventPatterns), ", ")
	items := strings.Split(v, ",")
	if most := len(eventTypes) + len(eventPatterns); len(items) > most {
		return nil, errorf(codeInvalidParameter, "parameter type holds %d items; the limit is %d, as many as there are event types and patterns: give each at most once, from %s", len(items), most, choices)
	}
	for i, item := range items {
		if item == "" {
			return nil, errorf(codeInvalidParameter, "parameter type: item %d is empty (two commas together, or one at an end); give types or patterns separated by commas, from %s", i+1, choices)
		}
	}
	types, unknown, ok := expandEventTypes(items, false)
	if !ok {
		return nil, errorf(codeInvalidParameter, "parameter type: %q is not an event type; give types or patterns separated by commas, from %s", abbreviate(unknown), choices)
	}
	return types, nil
}

// canonicalTypeFilter is the type filter that keeps types, as the next link
// carries it: for each resource in turn, its pattern when every one of its
// types is kept, else the types kept, in eventTypes' order
// ("pet.*,order.placed"). However the request wrote the filter, its next
// link is the same, and at most as long as the names of the event types.
func canonicalTypeFilter(types []string) string {
	var items []string
	for _, spec := range resourceSpecs {
		kept := slices.DeleteFunc(slices.Clone(spec.events), func(t string) bool { return !slices.Contains(types, t) })
		if len(kept) == len(spec.events) {
			items = append(items, spec.name+".*")
			continue
		}
		items = append(items, kept...)
	}
	return strings.Join(items, ",")
}

// nextLink is the Link to the page after the event last, with the same
// limit and type filter.
func (q eventsQuery) nextLink(last int64) string {
	var b strings.Builder
	b.WriteString("</v1/events?after=")
	b.WriteString(strconv.FormatInt(last, 10))
	b.WriteString("&limit=")
	b.WriteString(strconv.Itoa(q.limit))
	if q.typeFilter != "" {
		b.WriteString("&type=")
		b.WriteString(url.QueryEscape(q.typeFilter))
	}
	b.WriteString(`>; rel="next"`)
	return b.String()
}

// wants reports whether a stream or page of q shows events of typ.
func (q eventsQuery) wants(typ string) bool {
	if q.types == nil {
		return true
	}
	for _, t := range q.types {
		if t == typ {
			return true
		}
	}
	return false
}

// cursorExpired is the answer to a cursor that points before pruned events.
func cursorExpired(cursor, prunedThrough int64) *apiError {
	return errorf(codeCursorExpired, "events after %d are no longer kept (every event up to %d was pruned), so some of the events after your cursor are gone; start again without a cursor (no after, no Last-Event-ID) and reconcile with the lists", cursor, prunedThrough)
}

// wantsStream reports whether the request asks for the SSE form: its
// Accept header names text/event-stream, with a weight other than q=0
// (which says the client does not accept it, RFC 9110 section 12.4.2).
func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != eventStreamType {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q == 0 {
				continue
			}
			return true
		}
	}
	return false
}

// handleListEvents serves listEvents: GET /v1/events, as pages of JSON or,
// with Accept: text/event-stream, as a stream.
func (f *feed) handleListEvents() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := parseEventsQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, r, f.log, err)
			return
		}
		q.types = readableTypes(r.Context(), q.types)
		if wantsStream(r) {
			f.serveStream(w, r, q)
			return
		}
		f.servePage(w, r, q)
	})
}

// servePage answers one page of the feed as JSON.
func (f *feed) servePage(w http.ResponseWriter, r *http.Request, q eventsQuery) {
	bounds, err := f.st.eventBounds(r.Context())
	if err != nil {
		writeError(w, r, f.log, err)
		return
	}
	if q.hasAfter && q.after < bounds.prunedThrough {
		writeError(w, r, f.log, cursorExpired(q.after, bounds.prunedThrough))
		return
	}
	var events []Event
	if q.types == nil || len(q.types) > 0 {
		events, err = f.st.listEvents(r.Context(), q.after, q.limit, q.types)
		if err != nil {
			writeError(w, r, f.log, err)
			return
		}
	}
	last := q.after
	switch {
	case len(events) > 0:
		last = events[len(events)-1].ID
	case !q.hasAfter && readableTypes(r.Context(), nil) == nil:
		last = bounds.end
	case !q.hasAfter:
		// The feed's end may be the id of an event the key may not
		// read, which would tell it that something happened (as a
		// bookmark would): the prune mark tells only the retention.
		last = bounds.prunedThrough
	}
	w.Header().Set("Link", q.nextLink(last))
	writeBody(w, http.StatusOK, eventsBody(events))
}

// lastEventID reads the Last-Event-ID header of a reconnecting stream.
func lastEventID(r *http.Request) (id int64, ok bool, err error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		return 0, false, nil
	}
	id, ok = parseDecimal(strings.TrimSpace(v))
	if !ok {
		return 0, false, errorf(codeInvalidHeader, "the Last-Event-ID header must be an event id, an integer from 0 to 9223372036854775807, as the stream's id: lines give it")
	}
	return id, true, nil
}

// openStream counts a new stream of the key id, refusing it past the cap.
func (f *feed) openStream(key [sha256.Size]byte) (*stream, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.perKey[key] >= f.cfg.maxStreams {
		return nil, false
	}
	f.perKey[key]++
	s := &stream{}
	f.streams[s] = struct{}{}
	return s, true
}

// closeStream forgets a stream opened by openStream.
func (f *feed) closeStream(key [sha256.Size]byte, s *stream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.perKey[key]--; f.perKey[key] <= 0 {
		delete(f.perKey, key)
	}
	delete(f.streams, s)
}

// serveStream serves the feed as Server-Sent Events until the client goes
// away, stops reading, the server shuts down, or the key it was opened with
// has expired or is no longer in force.
func (f *feed) serveStream(w http.ResponseWriter, r *http.Request, q eventsQuery) {
	ctx := r.Context()
	key, _ := keyIdentity(ctx)
	s, ok := f.openStream(key)
	if !ok {
		w.Header().Set("Retry-After", "60")
		writeError(w, r, f.log, errorf(codeRateLimited, "this API key already has %d event streams open, the most it may; close one (or read the feed by polling) and retry", f.cfg.maxStreams))
		return
	}
	defer f.closeStream(key, s)
	// Subscribed before the bounds are read: a commit after the read
	// closes the channel the stream waits on, so it never sleeps through
	// it.
	tail := f.st.events
	tail.subscribe()
	defer tail.unsubscribe()
	st := &openStreamState{f: f, ctx: ctx, s: s, tail: tail, want: maskOf(q.types), readable: maskOf(readableTypes(ctx, nil)),
		opened: streamKey{id: key, scopes: callerScopes(ctx)}, keys: f.keys.keys()}
	wake := tail.waitFor(st.want)
	if err := st.position(r, q); err != nil {
		writeError(w, r, f.log, err)
		return
	}
	if !st.open(w) {
		return
	}
	st.heartbeat = time.NewTimer(f.cfg.heartbeat)
	defer st.heartbeat.Stop()
	stopExpiry := st.watchExpiry()
	defer stopExpiry()
	st.run(wake)
}

// openStreamState is one open stream, as its steps share it: where it is in
// the feed, what it sends, the key it was opened with, and its answer.
type openStreamState struct {
	f              *feed
	ctx            context.Context
	s              *stream
	tail           *eventTail
	want, readable typeMask  // the types it sends, and those its key may read
	opened         streamKey // the key it was opened with
	keys           *keySet   // the key set opened was checked against; a reload closes its replaced
	expiry         <-chan time.Time

	rc        *http.ResponseController
	w         http.ResponseWriter
	buf       []byte
	heartbeat *time.Timer

	cursor    int64 // the newest event examined
	lastFrame int64 // the id of the last frame sent that carried one
	// lastReadable is the newest event examined that the key may read,
	// whatever the filter asked for: only such an event may move a
	// bookmark (see heartbeatFrame).
	lastReadable int64
	events       []Event // the last batch read, its array reused
}

// position sets where the stream starts: after Last-Event-ID when the
// client reconnects, after the query's after, else at the feed's end (only
// new events). A position the pruning passed is 410.
func (st *openStreamState) position(r *http.Request, q eventsQuery) error {
	id, fromHeader, err := lastEventID(r)
	if err != nil {
		return err
	}
	bounds, err := st.f.st.eventBounds(st.ctx)
	if err != nil {
		return err
	}
	st.cursor = bounds.end
	switch {
	case fromHeader:
		st.cursor = id
	case q.hasAfter:
		st.cursor = q.after
	}
	if st.cursor < bounds.prunedThrough {
		return cursorExpired(st.cursor, bounds.prunedThrough)
	}
	st.lastFrame, st.lastReadable = st.cursor, st.cursor
	st.s.setCursor(st.cursor, st.want)
	return nil
}

// open answers 200 with the stream's headers and its first frame, which
// tells the client how soon to reconnect. It reports whether the stream
// may go on.
func (st *openStreamState) open(w http.ResponseWriter) bool {
	st.w, st.rc = w, http.NewResponseController(w)
	// The stream outlives the server's read timeout; its writes have their
	// own deadline (the write timeout), set before each one.
	_ = st.rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", eventStreamType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold the frames back
	w.WriteHeader(http.StatusOK)
	st.buf = make([]byte, 0, 4096)
	st.buf = append(st.buf, "retry: "...)
	st.buf = strconv.AppendInt(st.buf, streamRetry, 10)
	st.buf = append(st.buf, "\n\n"...)
	return st.send()
}

// watchExpiry arms a timer for the key's expiry, if it has one: it only
// makes the key's check run at the expiry rather than at the next
// heartbeat (the check itself reads the feed's clock). It returns what
// stops the timer.
func (st *openStreamState) watchExpiry() (stop func()) {
	e, ok := st.keys.byID(st.opened.id)
	if !ok || e.expires.IsZero() {
		return func() {}
	}
	t := time.NewTimer(e.expires.Sub(st.f.now()))
	st.expiry = t.C
	return func() { t.Stop() }
}

// run sends what follows the position, then waits and sends again at each
// wake-up, until the client goes, the key ends, or the server stops. Each
// turn: everything after the cursor is sent (catchUp), then, when the
// heartbeat was due and nothing went, a heartbeat frame; then it waits.
func (st *openStreamState) run(wake <-chan struct{}) {
	beat := false // the heartbeat is due: after the read, a frame must go
	for {
		sent, ok := st.catchUp()
		if !ok {
			return
		}
		if beat && !sent && !st.heartbeatFrame() {
			return
		}
		var goOn bool
		if beat, goOn = st.wait(wake); !goOn {
			return
		}
		if !beat && st.woken(wake) {
			wake = st.tail.waitFor(st.want)
		}
	}
}

// catchUp reads and sends everything after the cursor, a batch at a time,
// checking the key after each read. It reports whether a frame was sent,
// and whether the stream may go on.
func (st *openStreamState) catchUp() (sent, ok bool) {
	for {
		r, ok := st.read()
		if !ok {
			return sent, false
		}
		st.events = r.events
		// Checked after the read: every event read was committed before
		// this check, so none committed after the key ended is ever sent.
		if end := st.f.keyEnded(st.opened); end != nil {
			st.buf = append(st.buf[:0], end...)
			st.send()
			return sent, false
		}
		st.buf = st.buf[:0]
		for _, ev := range r.events {
			st.buf = appendEventFrame(st.buf, ev)
			st.lastFrame = ev.ID
		}
		st.cursor, st.lastReadable = r.cursor, max(st.lastReadable, r.readable)
		st.s.setCursor(st.cursor, st.want)
		if len(st.buf) > 0 {
			if !st.send() {
				return sent, false
			}
			sent = true
			st.heartbeat.Reset(st.f.cfg.heartbeat)
		}
		if !r.more {
			return sent, true
		}
	}
}

// read reads the next batch after the cursor: from the tail while it can
// tell, else from the table. It reports false when the stream must end: the
// read failed, or events after the cursor were pruned while the stream
// waited (they cannot be sent any more, and the client's reconnection gets
// the 410 that says so).
func (st *openStreamState) read() (tailRead, bool) {
	r, fromTail := st.tail.read(st.cursor, st.want, st.readable, st.events)
	if fromTail {
		return r, true
	}
	events, prunedThrough, err := st.f.st.streamEvents(st.ctx, st.cursor)
	if err != nil {
		if st.ctx.Err() == nil {
			st.f.log.WarnContext(st.ctx, "event stream ended: reading the events failed", "err", err)
		}
		return r, false
	}
	if st.cursor < prunedThrough {
		return r, false
	}
	r = tailRead{cursor: st.cursor, more: len(events) == streamReadBatch, events: events[:0]}
	for _, ev := range events {
		r.cursor = ev.ID
		bit := typeBit(ev.Type)
		if st.readable&bit != 0 {
			r.readable = ev.ID
		}
		if st.want&bit != 0 {
			r.events = append(r.events, ev)
		}
	}
	return r, true
}

// heartbeatFrame sends the frame of a due heartbeat: a bookmark when events
// the key may read were examined and skipped by the filter, which moves the
// client's Last-Event-ID past them (never past one it may not read: its id
// would tell that something the key may not see happened), else a
// keep-alive comment. It reports whether the stream may go on.
func (st *openStreamState) heartbeatFrame() bool {
	st.buf = st.buf[:0]
	if st.lastReadable > st.lastFrame {
		st.buf = append(st.buf, "event: bookmark\nid: "...)
		st.buf = strconv.AppendInt(st.buf, st.lastReadable, 10)
		st.buf = append(st.buf, "\ndata: {}\n\n"...)
		st.lastFrame = st.lastReadable
	} else {
		st.buf = append(st.buf, ": keep-alive\n\n"...)
	}
	if !st.send() {
		return false
	}
	st.heartbeat.Reset(st.f.cfg.heartbeat)
	return true
}

// wait waits for what makes the stream read again: the events it wants
// (wake), a reload of the keys, the key's expiry or the heartbeat (each
// checked by the read that follows: a stream woken only for what it wants
// learns there of the events it skipped, and checks its key). beat says
// the heartbeat is due; goOn is false when the client went or the server
// stops.
func (st *openStreamState) wait(wake <-chan struct{}) (beat, goOn bool) {
	select {
	case <-wake:
	case <-st.keys.replaced:
		st.keys = st.f.keys.keys()
	case <-st.expiry:
	case <-st.heartbeat.C:
		return true, true
	case <-st.ctx.Done():
		return false, false
	case <-st.f.shutdown:
		return false, false
	}
	return false, true
}

// woken reports whether wake has fired: only then is a new wake-up channel
// taken (a reload or an expiry reads again on the same one).
func (st *openStreamState) woken(wake <-chan struct{}) bool {
	select {
	case <-wake:
		return true
	default:
		return false
	}
}

// send writes the buffer to the client and flushes it, within the write
// timeout. It reports whether the stream may go on.
func (st *openStreamState) send() bool { return st.f.send(st.rc, st.w, st.buf) }

// streamKey is the key an open stream was opened with (or whose ticket
// opened it): its identity, and the scopes it held then, which shaped what
// the stream shows.
type streamKey struct {
	id     [sha256.Size]byte
	scopes scopeSet
}

// keyEnded checks the key of a stream against the keys in force now. It
// returns nil while the stream may go on, or its last frame. A key that has
// expired or was removed ends it with an "end" event whose data is the
// Error body of the 401 a new request with that key would get, so that a
// client stops instead of reconnecting with a dead key. A key whose scopes
// changed ends it with a comment: a reconnection gets a stream of what the
// key may read now (or a 403, when that is no longer the feed).
func (f *feed) keyEnded(k streamKey) []byte {
	e, ok := f.keys.keys().byID(k.id)
	var end *apiError
	switch {
	case !ok:
		end = errorf(codeUnauthorized, "the API key that opened this stream is no longer accepted (it was removed from the keys in force); ask the operator for a new key")
	case e.expired(f.now()):
		end = errorf(codeUnauthorized, "the API key that opened this stream has expired (at %s); ask the operator for a new key", e.expires.Format(time.RFC3339))
	case e.scopes != k.scopes:
		return []byte(": the scopes of the API key that opened this stream changed; reconnect for a stream of what it may read now\n\n")
	default:
		return nil
	}
	body, _ := json.Marshal(end) // strings and an int always encode
	return append(append([]byte("event: end\ndata: "), body...), "\n\n"...)
}

// setCursor records the newest event id the stream examined, and the types
// it sends.
func (s *stream) setCursor(id int64, want typeMask) {
	s.mu.Lock()
	s.cursor, s.want = id, want
	s.mu.Unlock()
}

// send writes buf to the client and flushes it, within the write timeout
// (streamWriteTimeout). It reports whether the stream may go on.
func (f *feed) send(rc *http.ResponseController, w http.ResponseWriter, buf []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(f.cfg.writeTimeout))
	if _, err := w.Write(buf); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// appendEventFrame appends ev as one SSE frame: its id, its type as the
// event name, and its JSON on one data line (the JSON holds no newline:
// appendJSONString escapes every control character).
func appendEventFrame(dst []byte, ev Event) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendInt(dst, ev.ID, 10)
	dst = append(dst, "\nevent: "...)
	dst = append(dst, ev.Type...)
	dst = append(dst, "\ndata: "...)
	dst = appendEvent(dst, ev)
	return append(dst, "\n\n"...)
}

// lag is how far the slowest open stream is behind the newest event this
// process knows of, in ids (ids may skip numbers, so this is at most the
// number of events it has yet to examine).
func (f *feed) lag() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := f.st.events.last.Load()
	slowest := last
	for s := range f.streams {
		s.mu.Lock()
		cursor, want := s.cursor, s.want
		s.mu.Unlock()
		// A stream that waits for types that have not come is not
		// behind, however far its cursor is: nothing it would send is
		// after it.
		if !f.st.events.caughtUp(cursor, want) {
			slowest = min(slowest, cursor)
		}
	}
	return float64(max(0, last-slowest))
}

// openStreams is how many streams are open.
func (f *feed) openStreams() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return float64(len(f.streams))
}

// collectors are the feed's metrics.
func (f *feed) collectors() []prometheus.Collector {
	written := prometheus.NewDesc("petstore_events_written_total", "Events this process committed, by type.", []string{"type"}, nil)
	return []prometheus.Collector{
		eventsWrittenCollector{tail: f.st.events, desc: written},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "petstore_event_streams",
			Help: "Event streams (GET /v1/events as text/event-stream) open now.",
		}, f.openStreams),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "petstore_event_stream_reads_total",
			Help: "Reads of the events table for streams: those of streams behind the in-memory tail of recent events and, on PostgreSQL, the tail's own (one per wake-up, shared by every stream). On SQLite streams that keep up read none.",
		}, func() float64 { return float64(f.st.streamReads.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "petstore_event_stream_lag_events",
			Help: "How many event ids the slowest open stream is behind the newest event this process knows of (0 without streams).",
		}, f.lag),
	}
}

// eventsWrittenCollector reports the events written, by type.
type eventsWrittenCollector struct {
	tail *eventTail
	desc *prometheus.Desc
}

func (c eventsWrittenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c eventsWrittenCollector) Collect(ch chan<- prometheus.Metric) {
	for i, t := range eventTypes {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.tail.written[i].Load()), t)
	}
}

// handleCreateTicket serves createEventTicket: POST /v1/events/tickets. It
// answers a single-use ticket that opens one stream, for 60 seconds, with
// the rights of the key that asked for it: a browser's EventSource cannot
// send an Authorization header.
func (f *feed) handleCreateTicket() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := endOfBody(r.Body); err != nil {
			writeError(w, r, f.log, errorf(codeInvalidBody, "createEventTicket takes no request body; send none"))
			return
		}
		key, _ := keyIdentity(r.Context())
		ticket := rand.Text() + rand.Text() // 256 bits
		expires := f.now().Add(ticketTTL).UTC().Truncate(time.Millisecond)
		if err := f.st.storeTicket(r.Context(), ticket, key, expires); err != nil {
			writeError(w, r, f.log, err)
			return
		}
		body := append([]byte(`{"ticket":"`), ticket...)
		body = append(body, `","expiresAt":"`...)
		body = expires.AppendFormat(body, timeLayout)
		body = append(body, "\"}\n"...)
		w.Header().Set("Cache-Control", "no-store")
		writeBody(w, http.StatusCreated, body)
	})
}

// ticketOf returns the ticket of a request that opens a stream with one
// instead of an Authorization header.
func ticketOf(r *http.Request) (string, bool) {
	if r.Header.Get("Authorization") != "" || !strings.Contains(r.URL.RawQuery, "ticket=") {
		return "", false
	}
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(values["ticket"]) != 1 {
		return "", false
	}
	return values["ticket"][0], true
}

// errTicketNotValid is the answer to a ticket that is unknown, used or
// expired.
var errTicketNotValid = errors.New("ticket not valid")

// redeemTicket consumes ticket and returns the key entry it opens a stream
// for, from the keys in force now (a key removed since is refused).
func redeemTicket(ctx context.Context, st *store, kr keyring, now time.Time, ticket string) (keyEntry, error) {
	if ticket == "" || len(ticket) > 128 {
		return keyEntry{}, errTicketNotValid
	}
	id, ok, err := st.takeTicket(ctx, ticket, now)
	if err != nil {
		return keyEntry{}, err
	}
	if !ok {
		return keyEntry{}, errTicketNotValid
	}
	if e, ok := kr.keys().byID(id); ok {
		return e, nil
	}
	return keyEntry{}, errTicketNotValid
}

// readableTypes narrows a type filter (nil: every type) to the event types
// whose resource the caller's key may read: pet.* with pets:read, order.*
// with orders:read. A key that may read neither gets an empty filter, which
// shows nothing.
func readableTypes(ctx context.Context, types []string) []string {
	scopes := callerScopes(ctx)
	if types == nil {
		types = eventTypes
	}
	readable := make([]string, 0, len(types))
	for _, t := range types {
		if r, ok := resourceOfEventType(t); ok && scopes.has(resourceSpecs[r].readScope) {
			readable = append(readable, t)
		}
	}
	if len(readable) == len(eventTypes) {
		return nil // every type: no filter to apply
	}
	return readable
}

// requireKeyOrTicket is auth for the feed: a request for a stream that
// carries a stream ticket and no Authorization header is let through with
// the rights of the key that asked for the ticket; any other is left to
// auth. A ticket that is not valid counts as a failed authentication, as a
// wrong key does. Redeeming a ticket is a write (it is consumed), so two
// requests are refused before it: one for a page of JSON (a ticket opens a
// stream, and stays unused), and one from an address that failed too often
// (the throttle answers first, without a write).
func requireKeyOrTicket(f *feed, kr keyring, guard authGuard, auth func(http.Handler) http.Handler, next http.Handler) http.Handler {
	keyed := auth(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ticket, ok := ticketOf(r)
		if !ok {
			keyed.ServeHTTP(w, r)
			return
		}
		if !wantsStream(r) {
			writeError(w, r, f.log, errorf(codeInvalidParameter, "a ticket opens an event stream only, and was not used: ask for the stream with Accept: %s (an EventSource does), or read pages with the header Authorization: Bearer <API key>", eventStreamType))
			return
		}
		if wait := guard.throttle.waiting(clientAddr(r, guard.proxies)); wait > 0 {
			if info := requestInfoFrom(r.Context()); info != nil {
				info.authFailed, info.client = true, clientAddr(r, guard.proxies).String()
			}
			guard.throttled(w, r, f.log, wait)
			return
		}
		entry, err := redeemTicket(r.Context(), f.st, kr, f.now(), ticket)
		switch {
		case errors.Is(err, errTicketNotValid):
			guard.refuse(w, r, f.log, errorf(codeUnauthorized, "the ticket is not valid: it is unknown, was used already (a ticket opens one stream) or expired (after 60 s); ask for a new one with POST /v1/events/tickets"), `Bearer realm="petstore", error="invalid_token"`)
		case err != nil:
			writeError(w, r, f.log, err)
		case entry.expired(f.now()):
			guard.refuse(w, r, f.log, errorf(codeUnauthorized, "the API key that asked for this ticket has expired (at %s); ask the operator for a new key", entry.expires.Format(time.RFC3339)), `Bearer error="invalid_token", error_description="the key has expired"`)
		default:
			admit(w, r, entry, next)
		}
	})
}
