package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// wireEvent is an event as a client decodes it.
type wireEvent struct {
	ID         int64           `json:"id"`
	Type       string          `json:"type"`
	OccurredAt string          `json:"occurredAt"`
	Subject    string          `json:"subject"`
	Data       json.RawMessage `json:"data"`
}

// eventSummary is what the tests compare of an event: everything but its
// instant, which they check for its form apart.
type eventSummary struct {
	Type    string
	Subject string
	Data    string
}

// occurredAtForm is the form of occurredAt: RFC 3339 in UTC with
// milliseconds.
var occurredAtForm = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// summarise checks the form of each event's instant and id order, and
// returns what the tests compare.
func summarise(t *testing.T, events []wireEvent) []eventSummary {
	t.Helper()
	out := []eventSummary{}
	for i, ev := range events {
		if !occurredAtForm.MatchString(ev.OccurredAt) {
			t.Errorf("event %d: occurredAt %q is not RFC 3339 UTC with milliseconds", ev.ID, ev.OccurredAt)
		}
		if i > 0 && ev.ID <= events[i-1].ID {
			t.Errorf("event ids out of order: %d after %d", ev.ID, events[i-1].ID)
		}
		out = append(out, eventSummary{Type: ev.Type, Subject: ev.Subject, Data: string(ev.Data)})
	}
	return out
}

// eventsAfter reads the feed after id, following next until an empty page.
func eventsAfter(t *testing.T, ts *testServer, after int64) []wireEvent {
	t.Helper()
	return eventPages(t, ts, "/v1/events?after="+strconv.FormatInt(after, 10))
}

// eventPages reads the feed from path, following next until an empty page.
func eventPages(t *testing.T, ts *testServer, path string) []wireEvent {
	t.Helper()
	var all []wireEvent
	for range 10_000 {
		res := ts.do(t, "GET", path, "", nil)
		if res.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, res.Status, res.Body)
		}
		page := decode[[]wireEvent](t, res)
		all = append(all, page...)
		next := nextLinkOf(t, res)
		if len(page) == 0 {
			return all
		}
		path = next
	}
	t.Fatal("the feed never ended")
	return nil
}

// nextLinkOf is the path of a response's rel="next" Link.
func nextLinkOf(t *testing.T, res response) string {
	t.Helper()
	m := regexp.MustCompile(`^<([^>]+)>; rel="next"$`).FindStringSubmatch(res.Header.Get("Link"))
	if m == nil {
		t.Fatalf("Link %q is not one rel=next link", res.Header.Get("Link"))
	}
	return m[1]
}

// feedEnd is the id of the newest event now.
func feedEnd(t *testing.T, ts *testServer) int64 {
	t.Helper()
	b, err := ts.Store.eventBounds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return b.end
}

func TestEveryChangeHasOneEvent(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	patch := map[string]string{"Content-Type": "application/merge-patch+json"}
	rex := ts.createPet(t, "Rex", 1, "")
	tom := ts.createPet(t, "Tom", 2, "")
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		hdr    map[string]string
		status int
		want   []eventSummary
	}{
		{"a created pet is pet.created with the pet", "POST", "/v1/pets", `{"name":"Kit","categoryId":3}`, nil, 201,
			[]eventSummary{{eventPetCreated, "/v1/pets/3", `{"id":3,"name":"Kit","categoryId":3,"status":"available"}`}}},
		{"a renamed pet is pet.updated with the pet after", "PATCH", fmt.Sprintf("/v1/pets/%d", rex.ID), `{"name":"Rexy"}`, patch, 200,
			[]eventSummary{{eventPetUpdated, "/v1/pets/1", `{"id":1,"name":"Rexy","categoryId":1,"status":"available"}`}}},
		{"an empty merge patch changes nothing and makes no event", "PATCH", "/v1/pets/1", `{}`, patch, 200, []eventSummary{}},
		{"a patch to the values the pet has makes no event", "PATCH", "/v1/pets/1", `{"name":"Rexy"}`, patch, 200, []eventSummary{}},
		{"a placed order is order.placed then the pet's pet.updated", "POST", "/v1/store/orders", `{"petId":1}`, nil, 201, nil},
		{"an order refused (409) leaves no event", "POST", "/v1/store/orders", `{"petId":1}`, nil, 409, []eventSummary{}},
		{"an order for no pet (422) leaves no event", "POST", "/v1/store/orders", `{"petId":99}`, nil, 422, []eventSummary{}},
		{"a delivered order is order.delivered then the sold pet", "PATCH", "/v1/store/orders/1", `{"status":"delivered"}`, patch, 200, nil},
		{"an order set to the status it has makes no event", "PATCH", "/v1/store/orders/1", `{"status":"delivered"}`, patch, 200, []eventSummary{}},
		{"an invalid transition (409) leaves no event", "PATCH", "/v1/store/orders/1", `{"status":"cancelled"}`, patch, 409, []eventSummary{}},
		{"a cancelled order is order.cancelled then the available pet", "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, tom.ID), nil, 201, nil},
		{"a deleted pet is pet.deleted with the pet as it was", "DELETE", "/v1/pets/3", "", nil, 204,
			[]eventSummary{{eventPetDeleted, "/v1/pets/3", `{"id":3,"name":"Kit","categoryId":3,"status":"available"}`}}},
		{"a refused delete (409) leaves no event", "DELETE", "/v1/pets/1", "", nil, 409, []eventSummary{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := feedEnd(t, ts)
			res := ts.do(t, tt.method, tt.path, tt.body, tt.hdr)
			if res.Status != tt.status {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.path, res.Status, res.Body, tt.status)
			}
			got := eventsAfter(t, ts, before)
			want := tt.want
			if want == nil {
				// The order's event, then its pet's, with consecutive ids:
				// both bodies as GET shows them now.
				order := ts.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", orderIDFrom(t, res)), "", nil)
				var placed struct {
					PetID  int64  `json:"petId"`
					Status string `json:"status"`
				}
				if err := json.Unmarshal(order.Body, &placed); err != nil {
					t.Fatalf("GET the order: %s", order.Body)
				}
				pet := ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", placed.PetID), "", nil)
				want = []eventSummary{
					{"order." + placed.Status, fmt.Sprintf("/v1/store/orders/%d", orderIDFrom(t, res)), strings.TrimSpace(string(order.Body))},
					{eventPetUpdated, fmt.Sprintf("/v1/pets/%d", placed.PetID), strings.TrimSpace(string(pet.Body))},
				}
				if len(got) == 2 && got[1].ID != got[0].ID+1 {
					t.Errorf("the order's and the pet's events have ids %d and %d, want consecutive ids", got[0].ID, got[1].ID)
				}
			}
			if diff := cmp.Diff(want, summarise(t, got)); diff != "" {
				t.Errorf("events after %s %s mismatch (-want +got):\n%s", tt.method, tt.path, diff)
			}
			if tt.name == "a cancelled order is order.cancelled then the available pet" {
				// Placed above; now cancelled.
				before := feedEnd(t, ts)
				id := orderIDFrom(t, res)
				if res := ts.do(t, "PATCH", fmt.Sprintf("/v1/store/orders/%d", id), `{"status":"cancelled"}`, patch); res.Status != 200 {
					t.Fatalf("cancel: %d %s", res.Status, res.Body)
				}
				order := ts.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", id), "", nil)
				want := []eventSummary{
					{eventOrderCancelled, fmt.Sprintf("/v1/store/orders/%d", id), strings.TrimSpace(string(order.Body))},
					{eventPetUpdated, fmt.Sprintf("/v1/pets/%d", tom.ID), fmt.Sprintf(`{"id":%d,"name":"Tom","categoryId":2,"status":"available"}`, tom.ID)},
				}
				if diff := cmp.Diff(want, summarise(t, eventsAfter(t, ts, before))); diff != "" {
					t.Errorf("events after the cancel mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// orderIDFrom is the id of the order a response's Location or path names.
func orderIDFrom(t *testing.T, res response) int64 {
	t.Helper()
	loc := res.Header.Get("Location")
	if loc == "" {
		var o struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(res.Body, &o); err != nil {
			t.Fatalf("no order in %s", res.Body)
		}
		return o.ID
	}
	id, err := strconv.ParseInt(loc[strings.LastIndexByte(loc, '/')+1:], 10, 64)
	if err != nil {
		t.Fatalf("Location %q", loc)
	}
	return id
}

func TestAnIdempotentReplayMakesNoEvent(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	hdr := map[string]string{"Idempotency-Key": "once"}
	if res := ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, hdr); res.Status != 201 {
		t.Fatalf("create: %d %s", res.Status, res.Body)
	}
	end := feedEnd(t, ts)
	res := ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, hdr)
	if res.Status != 201 || res.Header.Get(idempotencyReplayedHdr) != "true" {
		t.Fatalf("replay: %d %v %s", res.Status, res.Header, res.Body)
	}
	if got := eventsAfter(t, ts, end); len(got) != 0 {
		t.Errorf("a replay made events: %+v", got)
	}
}

// TestATypeFilterPagesEveryEventOfItsTypesOnceInOrder guards the type
// filter's statement (one arm per type, merged by id): whatever the types
// kept, the page size and the cursor, following next from a filtered page
// returns exactly the events of those types the unfiltered feed has after
// the cursor, in id order. The events are of every type, pet.deleted rare
// and only early, order.cancelled in one run of 16, so that the arms run
// dry and fill up at different places; the cursors fall before the rare
// type's last event, inside the run, and before the first; a page of 100
// holds most of a filter's events, not all.
func TestATypeFilterPagesEveryEventOfItsTypesOnceInOrder(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const total = 160
	common := []string{eventPetCreated, eventPetUpdated, eventOrderPlaced, eventOrderDelivered}
	var values []string
	var args []any
	for i := 1; i <= total; i++ {
		typ := common[(i*7)%len(common)]
		switch {
		case i%20 == 0 && i <= 60:
			typ = eventPetDeleted
		case i > 80 && i <= 96:
			typ = eventOrderCancelled
		}
		values = append(values, "(?, 0, ?, '{}')")
		args = append(args, typ, fmt.Sprintf("/v1/pets/%d", i))
	}
	if err := ts.exec(t, "INSERT INTO events (type, occurred_at, subject, data) VALUES "+strings.Join(values, ", "), args...); err != nil {
		t.Fatal(err)
	}
	all := eventPages(t, ts, "/v1/events?limit=1000")
	if len(all) != total {
		t.Fatalf("the unfiltered feed holds %d events, want %d", len(all), total)
	}
	tests := []struct {
		rule  string
		types string
		kept  []string
	}{
		{"a rare type alone", "pet.deleted", []string{eventPetDeleted}},
		{"a rare type with a common one", "pet.deleted,pet.created", []string{eventPetDeleted, eventPetCreated}},
		{"a pattern, one of whose types comes in one run", "order.*", []string{eventOrderPlaced, eventOrderDelivered, eventOrderCancelled}},
		{"every type but one", "pet.created,pet.updated,order.placed,order.delivered,order.cancelled",
			[]string{eventPetCreated, eventPetUpdated, eventOrderPlaced, eventOrderDelivered, eventOrderCancelled}},
	}
	for _, tt := range tests {
		for _, limit := range []int{1, 3, 100} {
			for _, after := range []int64{0, 50, 88} {
				t.Run(fmt.Sprintf("%s/limit=%d/after=%d", tt.rule, limit, after), func(t *testing.T) {
					want := []int64{}
					for _, ev := range all {
						if ev.ID > after && slices.Contains(tt.kept, ev.Type) {
							want = append(want, ev.ID)
						}
					}
					got := []int64{}
					for _, ev := range eventPages(t, ts, fmt.Sprintf("/v1/events?after=%d&limit=%d&type=%s", after, limit, tt.types)) {
						got = append(got, ev.ID)
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("ids of type=%s after %d, %d a page (-want +got):\n%s", tt.types, after, limit, diff)
					}
				})
			}
		}
	}
}

func TestFeedParameters(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for range 3 {
		ts.createPet(t, "Rex", 1, "")
	}
	ts.do(t, "POST", "/v1/store/orders", `{"petId":1}`, nil)
	tests := []struct {
		name     string
		query    string
		status   int
		code     string
		wantIDs  []int64
		wantNext string
	}{
		{"without after the feed starts at the oldest event", "", 200, "", []int64{1, 2, 3, 4, 5}, "/v1/events?after=5&limit=100"},
		{"limit bounds the page and next follows it", "?limit=2", 200, "", []int64{1, 2}, "/v1/events?after=2&limit=2"},
		{"after starts after the id", "?after=3&limit=1", 200, "", []int64{4}, "/v1/events?after=4&limit=1"},
		{"an empty page's next keeps the after given", "?after=5", 200, "", []int64{}, "/v1/events?after=5&limit=100"},
		{"after beyond the end is no error", "?after=1000", 200, "", []int64{}, "/v1/events?after=1000&limit=100"},
		{"a type filter keeps only its types, and next keeps it", "?type=order.*", 200, "", []int64{4}, "/v1/events?after=4&limit=100&type=order.%2A"},
		{"types and patterns combine", "?type=pet.created,order.placed", 200, "", []int64{1, 2, 3, 4}, "/v1/events?after=4&limit=100&type=pet.created%2Corder.placed"},
		{"without after and with nothing matching, next is the current end", "?type=pet.deleted", 200, "", []int64{}, "/v1/events?after=5&limit=100&type=pet.deleted"},
		{"next carries the filter in canonical form, whatever its order and repeats", "?type=order.placed,pet.created,order.placed", 200, "", []int64{1, 2, 3, 4},
			"/v1/events?after=4&limit=100&type=pet.created%2Corder.placed"},
		{"next names a resource whose every type is kept by its pattern", "?type=pet.deleted,pet.created,pet.updated", 200, "", []int64{1, 2, 3, 5},
			"/v1/events?after=5&limit=100&type=pet.%2A"},
		{"as many items as there are types and patterns are allowed, repeats too", "?type=pet.created,pet.created,pet.created,pet.created,pet.created,pet.created,pet.created,order.*", 200, "",
			[]int64{1, 2, 3, 4}, "/v1/events?after=4&limit=100&type=pet.created%2Corder.%2A"},
		{"more items than there are types and patterns are refused", "?type=pet.created,pet.created,pet.created,pet.created,pet.created,pet.created,pet.created,pet.created,order.*", 400, codeInvalidParameter, nil, ""},
		{"an empty item is refused", "?type=pet.created,,order.placed", 400, codeInvalidParameter, nil, ""},
		{"an empty filter is refused", "?type=", 400, codeInvalidParameter, nil, ""},
		{"limit 0 is refused", "?limit=0", 400, codeInvalidParameter, nil, ""},
		{"limit above 1000 is refused", "?limit=1001", 400, codeInvalidParameter, nil, ""},
		{"limit 1000 is allowed", "?limit=1000", 200, "", []int64{1, 2, 3, 4, 5}, "/v1/events?after=5&limit=1000"},
		{"a negative after is refused", "?after=-1", 400, codeInvalidParameter, nil, ""},
		{"an unknown type is refused", "?type=pet.sold", 400, codeInvalidParameter, nil, ""},
		{"the bare star is no feed pattern", "?type=*", 400, codeInvalidParameter, nil, ""},
		{"an unknown parameter is refused", "?since=3", 400, codeInvalidParameter, nil, ""},
		{"a repeated parameter is refused", "?after=1&after=2", 400, codeInvalidParameter, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ts.do(t, "GET", "/v1/events"+tt.query, "", nil)
			if tt.status != 200 {
				wantError(t, res, tt.status, tt.code)
				return
			}
			if res.Status != 200 {
				t.Fatalf("status %d %s", res.Status, res.Body)
			}
			ids := []int64{}
			for _, ev := range decode[[]wireEvent](t, res) {
				ids = append(ids, ev.ID)
			}
			if diff := cmp.Diff(tt.wantIDs, ids); diff != "" {
				t.Errorf("ids mismatch (-want +got):\n%s", diff)
			}
			if got := nextLinkOf(t, res); got != tt.wantNext {
				t.Errorf("next = %q, want %q", got, tt.wantNext)
			}
		})
	}
}

func TestPollingSeesEveryEventOnceInOrderWhileWritersRun(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const writers, perWriter = 4, 250
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				res, err := http.DefaultClient.Do(newRequest(t, ts.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":"w%d-%d","categoryId":1}`, w, i), nil))
				if err != nil {
					errs <- err
					return
				}
				res.Body.Close()
				if res.StatusCode != 201 {
					errs <- fmt.Errorf("create: %d", res.StatusCode)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Poll by following next while the writers run, then once more after.
	var seen []int64
	path := "/v1/events?limit=37"
	finished := false
	for !finished {
		select {
		case <-done:
			finished = true
		default:
		}
		for {
			res := ts.do(t, "GET", path, "", nil)
			if res.Status != 200 {
				t.Fatalf("GET %s: %d %s", path, res.Status, res.Body)
			}
			page := decode[[]wireEvent](t, res)
			for _, ev := range page {
				seen = append(seen, ev.ID)
			}
			path = nextLinkOf(t, res)
			if len(page) == 0 {
				break
			}
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != writers*perWriter {
		t.Fatalf("saw %d events, want %d", len(seen), writers*perWriter)
	}
	// Ids may skip numbers (on PostgreSQL a batch run again takes new
	// ones), but never go back nor repeat.
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("event %d has id %d after %d: every event once, in id order, expected", i, seen[i], seen[i-1])
		}
	}
}

// sseFrame is one frame of a Server-Sent Events stream.
type sseFrame struct {
	ID, Event, Data, Comment string
	Retry                    string
}

// sseStream is an open stream that a test reads frame by frame.
type sseStream struct {
	res    *http.Response
	frames chan sseFrame
	cancel context.CancelFunc
}

// openStream opens the feed as a stream with the test key, and hdr.
func openStream(t *testing.T, base, query string, hdr map[string]string) (*sseStream, response) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req := newRequest(t, base, "GET", "/v1/events"+query, "", hdr)
	req = req.WithContext(ctx)
	req.Header.Set("Accept", eventStreamType)
	if v, ok := hdr["Authorization"]; ok && v == "" {
		req.Header.Del("Authorization")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open stream: %v", err)
	}
	if res.StatusCode != http.StatusOK {
		// Read before the request's context ends: over HTTP/2 the end
		// would reset the stream under the body.
		r := readResponse(t, res)
		cancel()
		return nil, r
	}
	s := &sseStream{res: res, frames: make(chan sseFrame, 1024), cancel: cancel}
	go func() {
		defer close(s.frames)
		sc := bufio.NewScanner(res.Body)
		var f sseFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				s.frames <- f
				f = sseFrame{}
			case strings.HasPrefix(line, ":"):
				f.Comment = strings.TrimSpace(line[1:])
			default:
				name, value, _ := strings.Cut(line, ": ")
				switch name {
				case "id":
					f.ID = value
				case "event":
					f.Event = value
				case "data":
					f.Data = value
				case "retry":
					f.Retry = value
				}
			}
		}
	}()
	t.Cleanup(s.close)
	return s, response{Status: 200, Header: res.Header}
}

// close ends the stream from the client's side.
func (s *sseStream) close() {
	s.cancel()
	s.res.Body.Close()
}

// next returns the next frame, failing the test when none comes within
// 10 s or the stream ended.
func (s *sseStream) next(t *testing.T) sseFrame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			t.Fatal("the stream ended")
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10 s")
	}
	return sseFrame{}
}

// nextEvent returns the next frame that carries an event, skipping
// keep-alives.
func (s *sseStream) nextEvent(t *testing.T) sseFrame {
	t.Helper()
	for {
		if f := s.next(t); f.Comment == "" && f.Retry == "" {
			return f
		}
	}
}

func TestStreamSendsNewEventsAndResumesWithoutLossOrRepeat(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	ts.createPet(t, "Before", 1, "")
	s, res := openStream(t, ts.URL, "", nil)
	if res.Status != 200 {
		t.Fatalf("open: %d %s", res.Status, res.Body)
	}
	if diff := cmp.Diff(eventStreamType, s.res.Header.Get("Content-Type")); diff != "" {
		t.Errorf("Content-Type mismatch (-want +got):\n%s", diff)
	}
	if f := s.next(t); f.Retry != strconv.Itoa(streamRetry) {
		t.Errorf("first frame %+v, want the retry field", f)
	}
	// Without a position, the stream starts at the end: only new events.
	for i := range 5 {
		ts.createPet(t, fmt.Sprint("p", i), 1, "")
	}
	var got []int64
	for range 3 {
		f := s.nextEvent(t)
		var ev wireEvent
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			t.Fatalf("data %q: %v", f.Data, err)
		}
		if f.ID != strconv.FormatInt(ev.ID, 10) || f.Event != ev.Type {
			t.Errorf("frame id %q event %q, data says id %d type %q", f.ID, f.Event, ev.ID, ev.Type)
		}
		got = append(got, ev.ID)
	}
	s.close() // mid-stream: two events were sent that the client never read, or not
	resumed, res := openStream(t, ts.URL, "", map[string]string{"Last-Event-ID": strconv.FormatInt(got[len(got)-1], 10)})
	if res.Status != 200 {
		t.Fatalf("resume: %d %s", res.Status, res.Body)
	}
	for range 2 {
		f := resumed.nextEvent(t)
		id, _ := strconv.ParseInt(f.ID, 10, 64)
		got = append(got, id)
	}
	if diff := cmp.Diff([]int64{2, 3, 4, 5, 6}, got); diff != "" {
		t.Errorf("ids across the reconnection mismatch (-want +got):\n%s", diff)
	}
	// The header wins over after.
	again, _ := openStream(t, ts.URL, "?after=0", map[string]string{"Last-Event-ID": "5"})
	if f := again.nextEvent(t); f.ID != "6" {
		t.Errorf("with Last-Event-ID 5 and after=0 the first event is %q, want 6", f.ID)
	}
}

func TestStreamHeartbeatAndBookmark(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withFeed(feedConfig{heartbeat: 50 * time.Millisecond, retention: time.Hour, maxStreams: 10}))
	s, _ := openStream(t, ts.URL, "?type=order.*", nil)
	s.next(t) // retry
	if f := s.next(t); f.Comment != "keep-alive" {
		t.Errorf("a silent stream sent %+v, want a keep-alive comment", f)
	}
	pet := ts.createPet(t, "Rex", 1, "")
	// The stream examined the pet's event and skipped it: its next frame
	// is a bookmark at that event, not a plain keep-alive.
	for {
		f := s.next(t)
		if f.Comment == "keep-alive" {
			continue // sent before the stream examined the event
		}
		if diff := cmp.Diff(sseFrame{ID: "1", Event: "bookmark", Data: "{}"}, f); diff != "" {
			t.Errorf("bookmark mismatch (-want +got):\n%s", diff)
		}
		break
	}
	// And then the events it wants.
	ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, pet.ID), nil)
	for {
		f := s.next(t)
		if f.Comment != "" {
			continue
		}
		if f.Event != eventOrderPlaced || f.ID != "2" {
			t.Errorf("frame %+v, want order.placed with id 2", f)
		}
		break
	}
}

func TestPrunedEventsAreGoneAndOldCursorsExpire(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	clock.set(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	ts := newTestServer(t, withClock(clock.now))
	ts.Store.now = clock.now
	for range 3 {
		ts.createPet(t, "Old", 1, "")
	}
	clock.set(clock.now().Add(2 * time.Hour))
	ts.createPet(t, "New", 1, "")
	n, err := ts.Store.pruneEvents(t.Context(), clock.now().Add(-time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("pruneEvents = %d, %v; want 3 events pruned", n, err)
	}
	tests := []struct {
		name   string
		query  string
		stream bool
		hdr    map[string]string
		status int
	}{
		{"a cursor before the pruned events is 410", "?after=2", false, nil, 410},
		{"after 0 on a pruned feed is 410", "?after=0", false, nil, 410},
		{"the last pruned id is no gap: 200", "?after=3", false, nil, 200},
		{"without after it is never 410", "", false, nil, 200},
		{"a stream resuming before the pruned events is 410", "", true, map[string]string{"Last-Event-ID": "1"}, 410},
		{"a stream's after before the pruned events is 410", "?after=1", true, nil, 410},
		{"a stream without a position starts", "", true, nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res response
			if tt.stream {
				_, res = openStream(t, ts.URL, tt.query, tt.hdr)
			} else {
				res = ts.do(t, "GET", "/v1/events"+tt.query, "", tt.hdr)
			}
			if tt.status == 410 {
				wantError(t, res, 410, codeCursorExpired, "without a cursor")
				return
			}
			if res.Status != tt.status {
				t.Errorf("status %d, want %d: %s", res.Status, tt.status, res.Body)
			}
		})
	}
	if got := eventsAfter(t, ts, 3); len(got) != 1 || got[0].ID != 4 {
		t.Errorf("after pruning the feed holds %+v, want event 4 only", got)
	}
}

// TestAStreamBehindThePruneMarkEndsWithoutSkipping: events after a
// stream's position that are pruned before it reads them are a gap it must
// not pass over. It sends nothing after the gap and ends, and reconnecting
// from its position is the 410 that says why.
func TestAStreamBehindThePruneMarkEndsWithoutSkipping(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for range 3 {
		ts.createPet(t, "Rex", 1, "")
	}
	s, res := openStream(t, ts.URL, "", nil) // at the end: event 3
	if res.Status != 200 {
		t.Fatalf("open: %d %s", res.Status, res.Body)
	}
	// Events 4 and 5 commit and 4 is pruned before the stream reads
	// either, in one transaction: a prune that overtakes a slow stream.
	tx, err := ts.Store.writer.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		"INSERT INTO events (id, type, occurred_at, subject, data) VALUES (4, 'pet.created', 0, '/v1/pets/4', '{}'), (5, 'pet.created', 0, '/v1/pets/5', '{}')",
		"UPDATE event_marks SET pruned_through = 4",
		"DELETE FROM events WHERE id <= 4",
	} {
		if _, err := tx.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// As pruneEvents does once its prune commits: the tail's base moves
	// past the pruned events, so the stream must read the table.
	ts.Store.events.pruned(4)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				// Ended, by the prune check and not by a failed read;
				// reconnecting from event 3 is 410.
				if strings.Contains(ts.Log.String(), "reading the events failed") {
					t.Fatalf("the stream ended on a failed read:\n%s", ts.Log)
				}
				_, res := openStream(t, ts.URL, "", map[string]string{"Last-Event-ID": "3"})
				wantError(t, res, 410, codeCursorExpired, "without a cursor")
				return
			}
			if f.ID != "" {
				t.Fatalf("the stream sent %+v past the pruned event 4", f)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream neither ended nor sent within 10 s")
		}
	}
}

func TestStreamTickets(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	clock.set(time.Now())
	ts := newTestServer(t, withClock(clock.now))
	newTicket := func() string {
		res := ts.do(t, "POST", "/v1/events/tickets", "", nil)
		if res.Status != http.StatusCreated {
			t.Fatalf("POST /v1/events/tickets: %d %s", res.Status, res.Body)
		}
		var tk struct {
			Ticket    string `json:"ticket"`
			ExpiresAt string `json:"expiresAt"`
		}
		if err := json.Unmarshal(res.Body, &tk); err != nil {
			t.Fatal(err)
		}
		want := clock.now().Add(ticketTTL).UTC().Truncate(time.Millisecond).Format(timeLayout)
		if tk.ExpiresAt != want {
			t.Errorf("expiresAt %q, want %q", tk.ExpiresAt, want)
		}
		return tk.Ticket
	}
	noKey := map[string]string{"Authorization": ""}
	ticket := newTicket()
	s, res := openStream(t, ts.URL, "?ticket="+ticket, noKey)
	if res.Status != 200 {
		t.Fatalf("a fresh ticket: %d %s", res.Status, res.Body)
	}
	ts.createPet(t, "Rex", 1, "")
	if f := s.nextEvent(t); f.Event != eventPetCreated {
		t.Errorf("the ticket's stream sent %+v", f)
	}
	if strings.Contains(ts.Log.String(), ticket) {
		t.Error("the log holds the ticket")
	}
	t.Run("a used ticket is 401", func(t *testing.T) {
		_, res := openStream(t, ts.URL, "?ticket="+ticket, noKey)
		wantError(t, res, 401, codeUnauthorized, "ticket")
	})
	t.Run("an unknown ticket is 401", func(t *testing.T) {
		_, res := openStream(t, ts.URL, "?ticket=NOSUCHTICKET", noKey)
		wantError(t, res, 401, codeUnauthorized, "ticket")
	})
	t.Run("an expired ticket is 401", func(t *testing.T) {
		expired := newTicket()
		clock.set(clock.now().Add(ticketTTL + time.Millisecond))
		_, res := openStream(t, ts.URL, "?ticket="+expired, noKey)
		wantError(t, res, 401, codeUnauthorized, "ticket")
	})
	t.Run("a ticket request needs a key", func(t *testing.T) {
		wantError(t, ts.do(t, "POST", "/v1/events/tickets", "", noKey), 401, codeUnauthorized)
	})
	t.Run("a ticket request takes no body", func(t *testing.T) {
		wantError(t, ts.do(t, "POST", "/v1/events/tickets", `{"x":1}`, nil), 400, codeInvalidBody)
	})
}

// TestATicketIsSpentOnlyOnAStream: redeeming a ticket consumes it (a
// write), so it happens only for a request that can use it. A request for a
// page of JSON is refused, and the ticket stays unused; so is a request
// from an address that failed authentication too often, answered by the
// throttle before any write.
func TestATicketIsSpentOnlyOnAStream(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	clock.set(time.Now())
	ts := newTestServer(t, withClock(clock.now), withLimits(limits{idempotencyTTL: defaultIdempotencyTTL, authFailures: 2}))
	res := ts.do(t, "POST", "/v1/events/tickets", "", nil)
	var tk struct{ Ticket string }
	if err := json.Unmarshal(res.Body, &tk); err != nil || res.Status != http.StatusCreated {
		t.Fatalf("ticket: %d %s", res.Status, res.Body)
	}
	noKey := map[string]string{"Authorization": ""}
	wantError(t, ts.do(t, "GET", "/v1/events?ticket="+tk.Ticket, "", noKey), http.StatusBadRequest, codeInvalidParameter, "event stream", "Accept: text/event-stream")
	for range 2 {
		wantError(t, ts.do(t, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer wrong-key-0123456789"}), http.StatusUnauthorized, codeUnauthorized)
	}
	_, res = openStream(t, ts.URL, "?ticket="+tk.Ticket, noKey)
	wantError(t, res, http.StatusTooManyRequests, codeRateLimited, "retry after")
	clock.set(clock.now().Add(ticketTTL / 2)) // the address's budget refills; the ticket is still valid
	if _, res := openStream(t, ts.URL, "?ticket="+tk.Ticket, noKey); res.Status != http.StatusOK {
		t.Errorf("the ticket, after a request for a page and a throttled one: %d %s, want the stream", res.Status, res.Body)
	}
}

func TestStreamsAreCappedPerKey(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, withFeed(feedConfig{heartbeat: time.Minute, retention: time.Hour, maxStreams: 2}))
	for range 2 {
		if _, res := openStream(t, ts.URL, "", nil); res.Status != 200 {
			t.Fatalf("stream within the cap: %d %s", res.Status, res.Body)
		}
	}
	_, res := openStream(t, ts.URL, "", nil)
	wantError(t, res, 429, codeRateLimited, "2 event streams")
	// Another key has its own streams.
	if _, res := openStream(t, ts.URL, "", map[string]string{"Authorization": "Bearer " + otherTestKey}); res.Status != 200 {
		t.Errorf("another key's stream: %d %s", res.Status, res.Body)
	}
}

// TestEveryWriteRecordsEachRowItChanges holds the mutation point to its
// promise: for a batch of every kind of write, the rows of every resource
// table before and after are compared with the change records the writes
// made, through the events derived from them.
func TestEveryWriteRecordsEachRowItChanges(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	snapshot := func() map[string]string {
		rows := map[string]string{}
		for _, p := range listAll[Pet](t, ts.URL, "/v1/pets?limit=100", nil, nil) {
			b, _ := json.Marshal(p)
			rows[resourceSpecs[petsResource].collection+"/"+strconv.FormatInt(p.ID, 10)] = string(b)
		}
		for _, o := range listAll[json.RawMessage](t, ts.URL, "/v1/store/orders?limit=100", nil, nil) {
			var id struct {
				ID int64 `json:"id"`
			}
			json.Unmarshal(o, &id)
			rows[resourceSpecs[ordersResource].collection+"/"+strconv.FormatInt(id.ID, 10)] = string(o)
		}
		return rows
	}
	patch := map[string]string{"Content-Type": "application/merge-patch+json"}
	for i := range 6 {
		ts.createPet(t, fmt.Sprint("pet", i), 1, "")
	}
	before := snapshot()
	end := feedEnd(t, ts)
	var wg sync.WaitGroup
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/v1/pets", `{"name":"new","categoryId":2}`},
		{"PATCH", "/v1/pets/1", `{"name":"renamed"}`},
		{"DELETE", "/v1/pets/2", ""},
		{"POST", "/v1/store/orders", `{"petId":3}`},
		{"POST", "/v1/store/orders", `{"petId":4}`},
		{"PATCH", "/v1/pets/5", `{"status":"sold"}`},
	} {
		wg.Go(func() {
			hdr := map[string]string(nil)
			if w.method == "PATCH" {
				hdr = patch
			}
			res, err := http.DefaultClient.Do(newRequest(t, ts.URL, w.method, w.path, w.body, hdr))
			if err == nil {
				res.Body.Close()
			}
		})
	}
	wg.Wait()
	after := snapshot()
	// Replay the events over the snapshot before: the result must be the
	// snapshot after, so no row changed without its record.
	replayed := map[string]string{}
	for k, v := range before {
		replayed[k] = v
	}
	for _, ev := range eventsAfter(t, ts, end) {
		if strings.HasSuffix(ev.Type, ".deleted") {
			delete(replayed, ev.Subject)
			continue
		}
		var v any
		json.Unmarshal(ev.Data, &v)
		b, _ := json.Marshal(v)
		replayed[ev.Subject] = string(b)
	}
	normal := func(m map[string]string) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			var x any
			json.Unmarshal([]byte(v), &x)
			out[k] = x
		}
		return out
	}
	if diff := cmp.Diff(normal(after), normal(replayed), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the rows after the writes differ from the rows before with the changes recorded applied (-stored +replayed):\n%s", diff)
	}
}

// checkFeedMatchesTables checks, in the database at dbPath as a separate
// process would see it after a crash, that the events and the tables agree:
// replaying every event's data over an empty catalogue gives exactly the
// pets and orders stored. So every change that committed has its event, and
// no event describes a change that did not commit.
func checkFeedMatchesTables(t *testing.T, round int, dbPath string) {
	t.Helper()
	db := openDB(t, dbPath)
	replayed := map[string]string{}
	rows, err := db.QueryContext(t.Context(), "SELECT type, subject, data FROM events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var typ, subject, data string
		if err := rows.Scan(&typ, &subject, &data); err != nil {
			t.Fatal(err)
		}
		n++
		if typ == eventPetDeleted {
			delete(replayed, subject)
			continue
		}
		replayed[subject] = data
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{}
	pets, err := db.QueryContext(t.Context(), "SELECT "+petColumns+" FROM pets")
	if err != nil {
		t.Fatal(err)
	}
	defer pets.Close()
	for pets.Next() {
		var p Pet
		if err := scanPet(pets, &p); err != nil {
			t.Fatal(err)
		}
		stored[petsResource.pathOf(p.ID)] = string(appendPet(nil, p))
	}
	orders, err := db.QueryContext(t.Context(), "SELECT "+orderColumns+" FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer orders.Close()
	for orders.Next() {
		var o Order
		if err := scanOrder(orders, &o); err != nil {
			t.Fatal(err)
		}
		stored[ordersResource.pathOf(o.ID)] = string(appendOrder(nil, o))
	}
	if diff := cmp.Diff(stored, replayed); diff != "" {
		t.Errorf("round %d: the rows stored and the rows the %d events replay to differ (-stored +replayed):\n%s", round, n, diff)
	}
}

func TestStreamsOnTwoReplicasSeeTheSameEvents(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 2)
	var streams []*sseStream
	for _, r := range rs {
		s, res := openStream(t, r.URL, "?after=0", nil)
		if res.Status != 200 {
			t.Fatalf("open: %d %s", res.Status, res.Body)
		}
		streams = append(streams, s)
	}
	const perWriter = 40
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			for j := range perWriter {
				res, err := http.DefaultClient.Do(newRequest(t, r.URL, "POST", "/v1/pets", fmt.Sprintf(`{"name":"r%d-%d","categoryId":1}`, i, j), nil))
				if err == nil {
					res.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	var seqs [][]string
	for _, s := range streams {
		var ids []string
		for len(ids) < 2*perWriter {
			ids = append(ids, s.nextEvent(t).ID)
		}
		seqs = append(seqs, ids)
	}
	if diff := cmp.Diff(seqs[0], seqs[1]); diff != "" {
		t.Errorf("the two replicas' streams differ (-first +second):\n%s", diff)
	}
	stored := eventsAfter(t, rs[0], 0)
	if len(stored) != 2*perWriter {
		t.Errorf("the feed holds %d events, want %d", len(stored), 2*perWriter)
	}
}

func TestStreamOutlivesTheServerTimeoutsAndEndsAtShutdown(t *testing.T) {
	t.Parallel()
	rs := startRun(t, map[string]string{
		"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": filepath.Join(t.TempDir(), "pets.db"), "PETSTORE_API_KEYS": testKey,
		"PETSTORE_WRITE_TIMEOUT": "200ms", "PETSTORE_READ_TIMEOUT": "200ms", "PETSTORE_EVENTS_HEARTBEAT": "100ms", "PETSTORE_LOG_FORMAT": "json",
	})
	s, res := openStream(t, rs.URL, "", nil)
	if res.Status != 200 {
		t.Fatalf("open: %d %s", res.Status, res.Body)
	}
	// Ten heartbeats take a second at least: five times the write and read
	// timeouts, which would have cut a stream that kept the server's.
	for range 10 {
		if f := s.next(t); f.Comment != "keep-alive" && f.Retry == "" {
			t.Fatalf("frame %+v, want keep-alives", f)
		}
	}
	if err := rs.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	// The stream ended with the drain, which finished in time.
	for range s.frames {
	}
	if got := rs.Stderr.find(t, "WARN", "drain timed out; closing the remaining connections"); len(got) > 0 {
		t.Errorf("the drain timed out with a stream open: %v", got)
	}
	if got := rs.Stderr.find(t, "INFO", "stopped"); len(got) != 1 {
		t.Errorf("no clean stop logged; stderr:\n%s", rs.Stderr)
	}
}

func TestTheFeedShowsAKeyOnlyWhatItMayRead(t *testing.T) {
	t.Parallel()
	const petsKey, ordersKey, feedOnlyKey = "pets-reader-0123456789", "orders-reader-0123456789", "feed-only-0123456789"
	ts := newServerWithKeyFile(t, testKey+" all\n"+
		petsKey+" pets scopes=pets:read,events:read\n"+
		ordersKey+" orders scopes=orders:write,events:read\n"+
		feedOnlyKey+" feed scopes=events:read\n", time.Now)
	pet := ts.createPet(t, "Rex", 1, "")
	if res := ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, pet.ID), nil); res.Status != 201 {
		t.Fatalf("place: %d %s", res.Status, res.Body)
	}
	tests := []struct {
		name  string
		key   string
		query string
		want  []string
	}{
		{"a key with every scope sees every event", testKey, "", []string{eventPetCreated, eventOrderPlaced, eventPetUpdated}},
		{"pets:read sees the pets' events only", petsKey, "", []string{eventPetCreated, eventPetUpdated}},
		{"orders:write includes orders:read: the orders' events only", ordersKey, "", []string{eventOrderPlaced}},
		{"a filter for what the key may not read shows nothing", petsKey, "?type=order.*", []string{}},
		{"events:read alone reads the feed but sees no event", feedOnlyKey, "", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth := map[string]string{"Authorization": "Bearer " + tt.key}
			res := ts.do(t, "GET", "/v1/events"+tt.query, "", auth)
			if res.Status != 200 {
				t.Fatalf("GET: %d %s", res.Status, res.Body)
			}
			got := []string{}
			for _, ev := range decode[[]wireEvent](t, res) {
				got = append(got, ev.Type)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("page mismatch (-want +got):\n%s", diff)
			}
			// The stream shows the same.
			s, sres := openStream(t, ts.URL, "?after=0"+strings.Replace(tt.query, "?", "&", 1), auth)
			if sres.Status != 200 {
				t.Fatalf("stream: %d %s", sres.Status, sres.Body)
			}
			streamed := []string{}
			for len(streamed) < len(tt.want) {
				if f := s.nextEvent(t); f.Event != "bookmark" {
					streamed = append(streamed, f.Event)
				}
			}
			if diff := cmp.Diff(tt.want, streamed); diff != "" {
				t.Errorf("stream mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a ticket carries the rights of the key that asked for it", func(t *testing.T) {
		res := ts.do(t, "POST", "/v1/events/tickets", "", map[string]string{"Authorization": "Bearer " + ordersKey})
		var tk struct {
			Ticket string `json:"ticket"`
		}
		if err := json.Unmarshal(res.Body, &tk); err != nil || res.Status != 201 {
			t.Fatalf("ticket: %d %s", res.Status, res.Body)
		}
		s, res := openStream(t, ts.URL, "?after=0&ticket="+tk.Ticket, map[string]string{"Authorization": ""})
		if res.Status != http.StatusOK {
			t.Fatalf("stream: %d %s", res.Status, res.Body)
		}
		if f := s.nextEvent(t); f.Event != eventOrderPlaced {
			t.Errorf("the ticket's stream sent %+v first, want the order's event", f)
		}
	})
}

func TestTheFeedsMetrics(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	pet := ts.createPet(t, "Rex", 1, "")
	ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, pet.ID), nil)
	// A stream that read nothing yet: its cursor is at the end it opened at,
	// so it lags by what came after.
	s, res := openStream(t, ts.URL, "?after=0&type=order.*", nil)
	if res.Status != 200 {
		t.Fatalf("stream: %d %s", res.Status, res.Body)
	}
	if f := s.nextEvent(t); f.Event != eventOrderPlaced {
		t.Fatalf("first frame %+v", f)
	}
	body := ts.do(t, "GET", "/metrics", "", nil).Body
	got := map[string]float64{"streams": metricValue(t, body, "petstore_event_streams", map[string]string{})}
	for _, typ := range eventTypes {
		got[typ] = metricValue(t, body, "petstore_events_written_total", map[string]string{"type": typ})
	}
	want := map[string]float64{"streams": 1, eventPetCreated: 1, eventPetUpdated: 1, eventPetDeleted: 0,
		eventOrderPlaced: 1, eventOrderDelivered: 0, eventOrderCancelled: 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the feed's metrics mismatch (-want +got):\n%s", diff)
	}
	// The stream examined every event (its cursor is the newest): no lag.
	if lag := metricValue(t, body, "petstore_event_stream_lag_events", map[string]string{}); lag != 0 {
		t.Errorf("petstore_event_stream_lag_events = %v, want 0 for a stream that examined every event", lag)
	}
}

func TestASubscriptionDeliversWhatItsKeyMayRead(t *testing.T) {
	t.Parallel()
	const petsKey, hooksOnly = "pets-reader-0123456789", "hooks-only-0123456789"
	ts := newServerWithKeyFile(t, testKey+" all\n"+
		petsKey+" pets scopes=pets:read,webhooks:write\n"+
		hooksOnly+" hooks scopes=webhooks:write\n", time.Now)
	tests := []struct {
		name, key, body string
		status          int
		types           []string
	}{
		{"a key with every scope keeps its patterns", testKey, `{"url":"https://192.0.2.10/a"}`, 201, []string{"*"}},
		{"every type becomes the pets' types for a pets:read key", petsKey, `{"url":"https://192.0.2.10/b"}`, 201, []string{eventPetCreated, eventPetUpdated, eventPetDeleted}},
		{"patterns the key may read whole are kept as given", petsKey, `{"url":"https://192.0.2.10/c","types":["pet.*"]}`, 201, []string{"pet.*"}},
		{"what the key may not read is left out", petsKey, `{"url":"https://192.0.2.10/d","types":["pet.deleted","order.*"]}`, 201, []string{eventPetDeleted}},
		{"a key that may read no event is refused", hooksOnly, `{"url":"https://192.0.2.10/e"}`, 400, nil},
		{"a subscription to nothing the key may read is refused", petsKey, `{"url":"https://192.0.2.10/f","types":["order.placed"]}`, 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ts.do(t, "POST", "/v1/webhooks", tt.body, map[string]string{"Authorization": "Bearer " + tt.key})
			if tt.status != 201 {
				wantError(t, res, tt.status, codeInvalidField, "may read none")
				return
			}
			var got struct {
				Types []string `json:"types"`
			}
			if err := json.Unmarshal(res.Body, &got); err != nil || res.Status != 201 {
				t.Fatalf("create: %d %s", res.Status, res.Body)
			}
			if diff := cmp.Diff(tt.types, got.Types); diff != "" {
				t.Errorf("types mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTheStreamIsServedOnlyToAnAcceptThatTakesIt: the feed streams when the
// Accept header names text/event-stream, unless with q=0, which says the
// client does not accept it (it then gets a page of JSON).
func TestTheStreamIsServedOnlyToAnAcceptThatTakesIt(t *testing.T) {
	t.Parallel()
	want := map[string]bool{
		"text/event-stream":                       true,
		"application/json, text/event-stream":     true,
		"text/event-stream;q=0.5":                 true,
		"Text/Event-Stream; Q=1":                  true,
		"text/event-stream;q=0":                   false,
		"text/event-stream; q=0.000, */*":         false,
		"text/event-stream;q=0, application/json": false,
		"application/json":                        false,
		"*/*":                                     false,
		"":                                        false,
	}
	got := map[string]bool{}
	for accept := range want {
		r := httptest.NewRequest("GET", "/v1/events", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		got[accept] = wantsStream(r)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("whether each Accept gets the stream (-want +got):\n%s", diff)
	}

	ts := newTestServer(t)
	// Headers only: a stream, served by mistake, would not end.
	req := newRequest(t, ts.URL, "GET", "/v1/events", "", map[string]string{"Accept": "text/event-stream;q=0, application/json"})
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if diff := cmp.Diff([]any{200, "application/json"}, []any{res.StatusCode, res.Header.Get("Content-Type")}); diff != "" {
		t.Errorf("GET /v1/events refusing the stream (-want +got):\n%s", diff)
	}
}
