package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The feed and the key that reads it: a stream lives only as long as its
// key, and shows nothing of what the key may not read, not even an id.

// wantStreamEnd reads the frames of s up to its end and checks that the last
// one is the "end" event whose data is the Error body of a 401 mentioning
// mention, and that no frame before it carried an event (the key had ended
// before anything the test committed after it).
func wantStreamEnd(t *testing.T, s *sseStream, mention string) {
	t.Helper()
	var last sseFrame
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				if last.Event != "end" {
					t.Fatalf("the stream ended with %+v, want an end event", last)
				}
				var body apiError
				if err := json.Unmarshal([]byte(last.Data), &body); err != nil {
					t.Fatalf("end data %q: %v", last.Data, err)
				}
				want := apiError{Code: codeUnauthorized, Status: http.StatusUnauthorized}
				if diff := cmp.Diff(want, body, cmpopts.IgnoreFields(apiError{}, "Message")); diff != "" {
					t.Errorf("end data mismatch (-want +got):\n%s", diff)
				}
				if !strings.Contains(body.Message, mention) {
					t.Errorf("end message %q does not say %q", body.Message, mention)
				}
				return
			}
			if last.Event != "" && last.Event != "bookmark" {
				t.Fatalf("after the key ended the stream sent %+v", last)
			}
			last = f
		case <-time.After(10 * time.Second):
			t.Fatalf("the stream did not end within 10 s; last frame %+v", last)
		}
	}
}

// TestAStreamEndsWithItsKey: an open stream checks its key at every
// wake-up, heartbeat and reload. Once the key has expired or was removed, it
// sends nothing committed later and ends with an "end" event whose data says
// why, so that a client stops rather than reconnecting with a dead key. A
// stream opened with a ticket is the ticket's key's. A key whose scopes
// changed ends its streams with a comment: a reconnection gets what the key
// may read now.
func TestAStreamEndsWithItsKey(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const reader = "stream-reader-0123456789"
	expires := start.Add(time.Hour)
	file := fmt.Sprintf("%s admin\n%s shop scopes=pets:read,events:read expires=%s\n", testKey, reader, expires.Format(time.RFC3339))
	newServer := func(t *testing.T, heartbeat time.Duration) (*testServer, *fakeClock) {
		clock := &fakeClock{t: start}
		return newServerWithKeyFile(t, file, clock.now, withFeed(feedConfig{heartbeat: heartbeat, retention: time.Hour, maxStreams: 10})), clock
	}
	openAs := func(t *testing.T, ts *testServer, hdr map[string]string, query string) *sseStream {
		t.Helper()
		s, res := openStream(t, ts.URL, query, hdr)
		if res.Status != http.StatusOK {
			t.Fatalf("open: %d %s", res.Status, res.Body)
		}
		return s
	}
	ticketOf := func(t *testing.T, ts *testServer) string {
		t.Helper()
		res := ts.do(t, "POST", "/v1/events/tickets", "", bearer(reader))
		var tk struct{ Ticket string }
		if err := json.Unmarshal(res.Body, &tk); err != nil || res.Status != http.StatusCreated {
			t.Fatalf("ticket: %d %s", res.Status, res.Body)
		}
		return tk.Ticket
	}
	streams := []struct {
		name string
		open func(t *testing.T, ts *testServer) *sseStream
	}{
		{"opened with the key", func(t *testing.T, ts *testServer) *sseStream { return openAs(t, ts, bearer(reader), "") }},
		{"opened with a ticket of the key", func(t *testing.T, ts *testServer) *sseStream {
			return openAs(t, ts, map[string]string{"Authorization": ""}, "?ticket="+ticketOf(t, ts))
		}},
	}
	for _, st := range streams {
		t.Run(st.name+": expired, at the next commit", func(t *testing.T) {
			ts, clock := newServer(t, time.Hour)
			s := st.open(t, ts)
			ts.createPet(t, "Before", 1, "")
			if f := s.nextEvent(t); f.Event != eventPetCreated {
				t.Fatalf("before the expiry the stream sent %+v", f)
			}
			clock.set(expires)
			ts.createPet(t, "After", 1, "")
			wantStreamEnd(t, s, "expired")
		})
		t.Run(st.name+": expired, at the next heartbeat", func(t *testing.T) {
			ts, clock := newServer(t, 20*time.Millisecond)
			s := st.open(t, ts)
			if f := s.next(t); f.Retry == "" {
				t.Fatalf("first frame %+v", f)
			}
			clock.set(expires.Add(time.Minute))
			wantStreamEnd(t, s, "expired")
		})
		t.Run(st.name+": removed by a reload", func(t *testing.T) {
			ts, _ := newServer(t, time.Hour)
			s := st.open(t, ts)
			writeFile(t, ts.KeyFile, testKey+" admin\n")
			if err := ts.Keys.reload(); err != nil {
				t.Fatal(err)
			}
			ts.createPet(t, "After", 1, "")
			wantStreamEnd(t, s, "removed")
		})
	}
	t.Run("a reload that changes the key's scopes ends its stream with a comment", func(t *testing.T) {
		ts, _ := newServer(t, time.Hour)
		s := openAs(t, ts, bearer(reader), "")
		writeFile(t, ts.KeyFile, testKey+" admin\n"+reader+" shop scopes=orders:read,events:read\n")
		if err := ts.Keys.reload(); err != nil {
			t.Fatal(err)
		}
		ts.createPet(t, "After", 1, "")
		var frames []sseFrame
		for f := range s.frames {
			frames = append(frames, f)
		}
		want := []sseFrame{{Retry: strconv.Itoa(streamRetry)}, {Comment: "the scopes of the API key that opened this stream changed; reconnect for a stream of what it may read now"}}
		if diff := cmp.Diff(want, frames); diff != "" {
			t.Errorf("frames mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("a reload that keeps the key keeps its stream", func(t *testing.T) {
		ts, _ := newServer(t, time.Hour)
		s := openAs(t, ts, bearer(reader), "")
		writeFile(t, ts.KeyFile, file+"# touched\n")
		if err := ts.Keys.reload(); err != nil {
			t.Fatal(err)
		}
		ts.createPet(t, "After", 1, "")
		if f := s.nextEvent(t); f.Event != eventPetCreated {
			t.Errorf("after a reload that kept the key the stream sent %+v", f)
		}
	})
}

// TestABookmarkNeverPassesAnEventTheKeyMayNotRead: a bookmark moves a
// client's Last-Event-ID past the events its filter skipped, but only up to
// the newest one its key may read: an id beyond would tell the key that
// something it may not see happened.
func TestABookmarkNeverPassesAnEventTheKeyMayNotRead(t *testing.T) {
	t.Parallel()
	const ordersKey, petsKey = "orders-reader-0123456789", "pets-reader-0123456789"
	ts := newServerWithKeyFile(t, testKey+" admin\n"+ordersKey+" orders scopes=orders:read,events:read\n"+petsKey+" pets scopes=pets:read,events:read\n",
		time.Now, withFeed(feedConfig{heartbeat: 20 * time.Millisecond, retention: time.Hour, maxStreams: 10}))
	orders, _ := openStream(t, ts.URL, "", bearer(ordersKey))
	pets, _ := openStream(t, ts.URL, "?type=pet.created", bearer(petsKey))
	pet := ts.createPet(t, "Rex", 1, "") // event 1, pet.created
	for _, rq := range []struct{ method, path, body string }{
		{"POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, pet.ID)}, // 2 order.placed, 3 pet.updated
		{"POST", "/v1/pets", `{"name":"Fido","categoryId":1}`},            // 4 pet.created
		{"PATCH", "/v1/store/orders/1", `{"status":"cancelled"}`},         // 5 order.cancelled, 6 pet.updated
	} {
		if res := ts.do(t, rq.method, rq.path, rq.body, nil); res.Status/100 != 2 {
			t.Fatalf("%s %s: %d %s", rq.method, rq.path, res.Status, res.Body)
		}
	}

	// after reads s up to the frame carrying id last, then skips n
	// keep-alives, and returns the next n frames after those skipped.
	after := func(t *testing.T, s *sseStream, last string, skip bool, n int) []sseFrame {
		t.Helper()
		for f := s.next(t); f.ID != last; f = s.next(t) {
		}
		var got []sseFrame
		for len(got) < n {
			f := s.next(t)
			if skip && len(got) == 0 && f.Comment == "keep-alive" {
				continue // sent before the next events were read
			}
			got = append(got, f)
		}
		return got
	}
	var wg sync.WaitGroup
	var ordersGot, petsGot []sseFrame
	wg.Go(func() { ordersGot = after(t, orders, "5", false, 3) })
	wg.Go(func() { petsGot = after(t, pets, "4", true, 3) })
	wg.Wait()
	keepAlive := sseFrame{Comment: "keep-alive"}
	// The orders key read 2 and 5; 6, a pet's, was read with 5 (one
	// commit) and is not the key's to know of.
	if diff := cmp.Diff([]sseFrame{keepAlive, keepAlive, keepAlive}, ordersGot); diff != "" {
		t.Errorf("the orders key's frames after event 5 mismatch (-want +got):\n%s", diff)
	}
	// The pets key's filter skipped 6, which it may read: a bookmark at 6,
	// then keep-alives.
	if diff := cmp.Diff([]sseFrame{{ID: "6", Event: "bookmark", Data: "{}"}, keepAlive, keepAlive}, petsGot); diff != "" {
		t.Errorf("the pets key's frames after event 4 mismatch (-want +got):\n%s", diff)
	}
}

// TestStreamsShareOneReadOfTheirEvents: the streams of a process read the
// newest events from the tail it keeps in memory, not each from the table at
// every commit. On SQLite the writer fills the tail, so streams that keep up
// read the table not once; on PostgreSQL one read per wake-up serves them
// all. Every stream still gets every event, in order.
func TestStreamsShareOneReadOfTheirEvents(t *testing.T) {
	t.Parallel()
	const streams, creates = 20, 10
	ts := newTestServer(t)
	var open []*sseStream
	for range streams {
		s, res := openStream(t, ts.URL, "", nil)
		if res.Status != http.StatusOK {
			t.Fatalf("open: %d %s", res.Status, res.Body)
		}
		open = append(open, s)
	}
	// A first event read by every stream: until the tail knows the feed's
	// end (on PostgreSQL, from the first wake-up), each stream reads the
	// table itself.
	first := strconv.FormatInt(ts.createPet(t, "first", 1, "").ID, 10)
	for i, s := range open {
		if got := s.nextEvent(t).ID; got != first {
			t.Fatalf("stream %d: first event %s, want %s", i, got, first)
		}
	}
	start := time.Now()
	before := ts.Store.streamReads.Load()
	var want []string
	for i := range creates {
		p := ts.createPet(t, fmt.Sprint("p", i), 1, "")
		want = append(want, strconv.FormatInt(p.ID, 10))
	}
	for i, s := range open {
		var got []string
		for range creates {
			got = append(got, s.nextEvent(t).ID)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("stream %d mismatch (-want +got):\n%s", i, diff)
		}
	}
	reads := ts.Store.streamReads.Load() - before
	if ts.Store.dialect == postgresDialect {
		// One read per wake-up at most, whatever the number of streams;
		// not one per stream and commit. A commit wakes the filler twice
		// (the writer's own word and the notification, which this replica
		// hears too), and the poll every streamPoll.
		wakeUps := 2*creates + int(time.Since(start)/streamPoll) + 1
		if reads > uint64(wakeUps) {
			t.Errorf("%d streams read the table %d times in at most %d wake-ups, want one read per wake-up shared by all", streams, reads, wakeUps)
		}
		return
	}
	if reads != 0 {
		t.Errorf("%d streams read the table %d times for %d commits on SQLite, want none: the writer fills the tail", streams, reads, creates)
	}
}

// TestAStreamSleepsThroughWhatItDoesNotWant: a stream is woken only for the
// types it wants, and one that slept through more events than the tail
// keeps still gets the next event it wants from the tail, without a read of
// the table, when none of those it slept through was one it wants; its
// bookmark then moves past them.
func TestAStreamSleepsThroughWhatItDoesNotWant(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withFeed(feedConfig{heartbeat: 50 * time.Millisecond, retention: time.Hour, maxStreams: 10}))
	s, res := openStream(t, ts.URL, "?type=order.*", nil)
	if res.Status != http.StatusOK {
		t.Fatalf("open: %d %s", res.Status, res.Body)
	}
	before := ts.Store.streamReads.Load()
	// Past the tail, in one commit, so that the stream sleeps through them
	// all (in smaller ones its heartbeats move it along the tail between
	// them). On PostgreSQL, where the stream reads the table anyway, in
	// ten: one commit of them all outlasted the write's bound
	// (pgBatchTimeout) under the race detector with other tests running.
	const pets = tailEvents + tailEvents/2 + 10
	commits := 1
	if ts.Store.dialect == postgresDialect {
		commits = 10
	}
	for c := range commits {
		if _, err := write(t.Context(), ts.Store, func(tx *txn) (struct{}, error) {
			for i := c * pets / commits; i < (c+1)*pets/commits; i++ {
				if _, err := tx.insertPet(newPet{Name: fmt.Sprint("p", i), CategoryID: 1, Status: statusAvailable}); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if res := ts.do(t, "POST", "/v1/store/orders", `{"petId":1}`, nil); res.Status != http.StatusCreated {
		t.Fatalf("place: %d %s", res.Status, res.Body)
	}
	// Event pets+1 is the order, pets+2 its pet's update. A heartbeat while
	// the pets' events came in may send a bookmark among them first.
	f := s.nextEvent(t)
	for f.Event == "bookmark" {
		f = s.nextEvent(t)
	}
	if f.Event != eventOrderPlaced || f.ID != strconv.Itoa(pets+1) {
		t.Fatalf("the first event %+v, want order.placed with id %d", f, pets+1)
	}
	if diff := cmp.Diff(sseFrame{ID: strconv.Itoa(pets + 2), Event: "bookmark", Data: "{}"}, s.nextEvent(t)); diff != "" {
		t.Fatalf("the frame after the order mismatch (-want +got):\n%s", diff)
	}
	if reads := ts.Store.streamReads.Load() - before; reads != 0 && ts.Store.dialect != postgresDialect {
		t.Errorf("the stream read the table %d times, want none: the tail tells it that nothing it wants left it", reads)
	}
}

// TestAnEmptyPageNeverTellsTheIDOfAnEventTheKeyMayNotRead: a first page
// without a cursor and without events links to the feed's end for a key
// that may read every type, but only to the prune mark for one that may not:
// the end may be the id of an event it may not see.
func TestAnEmptyPageNeverTellsTheIDOfAnEventTheKeyMayNotRead(t *testing.T) {
	t.Parallel()
	const ordersKey = "orders-reader-0123456789"
	ts := newServerWithKeyFile(t, testKey+" admin\n"+ordersKey+" orders scopes=orders:read,events:read\n", time.Now)
	ts.createPet(t, "Rex", 1, "") // event 1, a pet's
	for _, tt := range []struct {
		key, want string
	}{
		{testKey, "</v1/events?after=1&limit=100&type=order.%2A>; rel=\"next\""},
		{ordersKey, "</v1/events?after=0&limit=100>; rel=\"next\""},
	} {
		res := ts.do(t, "GET", "/v1/events"+map[string]string{testKey: "?type=order.*", ordersKey: ""}[tt.key], "", bearer(tt.key))
		if diff := cmp.Diff(tt.want, res.Header.Get("Link")); diff != "" {
			t.Errorf("Link for %s mismatch (-want +got):\n%s", callerLabel(testSecret, tt.key), diff)
		}
	}
}
