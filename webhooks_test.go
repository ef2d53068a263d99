package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fastWebhooks are webhook settings for tests: retries and leases in
// milliseconds, and the receivers on loopback allowed.
var fastWebhooks = webhookConfig{backoff: 5 * time.Millisecond, giveUp: time.Hour, timeout: 5 * time.Second, allowPrivate: true,
	leaseTTL: 600 * time.Millisecond, poll: 50 * time.Millisecond}

// startDispatcher runs a dispatcher of ts's store with cfg until the test
// ends (before the store closes), and returns it with its stop function.
func startDispatcher(t testing.TB, ts *testServer, cfg webhookConfig) (*dispatcher, func()) {
	t.Helper()
	return startDispatcherHooked(t, ts, cfg, nil)
}

// startDispatcherHooked is startDispatcher with the dispatcher's afterRead
// hook set.
func startDispatcherHooked(t testing.TB, ts *testServer, cfg webhookConfig, afterRead func()) (*dispatcher, func()) {
	t.Helper()
	u, _ := url.Parse(ts.URL)
	own, _ := net.ResolveTCPAddr("tcp", u.Host)
	d := newDispatcher(slogTo(ts.Log), ts.Store, cfg, []net.Addr{own}, time.Now)
	d.afterRead = afterRead
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return d, stop
}

// received is one request a receiver got.
type received struct {
	ID, Timestamp, Signature string
	Body                     string
	UserAgent, ContentType   string
}

// receiver is a webhook endpoint on 127.0.0.1 that records what it gets
// and answers what answer says (200 unless set).
type receiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	got       []received
	answer    func(n int, r *http.Request, w http.ResponseWriter) int // n counts from 1; returns the status
	inFlight  atomic.Int32
	maxFlight atomic.Int32
}

// newReceiver starts a receiver.
func newReceiver(t testing.TB) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rc.inFlight.Add(1)
		defer rc.inFlight.Add(-1)
		for {
			m := rc.maxFlight.Load()
			if n <= m || rc.maxFlight.CompareAndSwap(m, n) {
				break
			}
		}
		body := make([]byte, 0, 512)
		buf := make([]byte, 512)
		for {
			k, err := r.Body.Read(buf)
			body = append(body, buf[:k]...)
			if err != nil {
				break
			}
		}
		rc.mu.Lock()
		rc.got = append(rc.got, received{ID: r.Header.Get("webhook-id"), Timestamp: r.Header.Get("webhook-timestamp"),
			Signature: r.Header.Get("webhook-signature"), Body: string(body), UserAgent: r.UserAgent(), ContentType: r.Header.Get("Content-Type")})
		count, answer := len(rc.got), rc.answer
		rc.mu.Unlock()
		status := http.StatusOK
		if answer != nil {
			status = answer(count, r, w)
		}
		if status != 0 {
			w.WriteHeader(status)
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// setAnswer replaces how the receiver answers.
func (rc *receiver) setAnswer(f func(n int, r *http.Request, w http.ResponseWriter) int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answer = f
}

// requests returns what the receiver got so far.
func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// ids are the webhook-ids received, in order.
func (rc *receiver) ids() []string {
	var ids []string
	for _, r := range rc.requests() {
		ids = append(ids, r.ID)
	}
	return ids
}

// subscribe creates a subscription through the API and returns it.
func subscribe(t testing.TB, ts *testServer, body string) webhookJSON {
	t.Helper()
	res := ts.do(t, "POST", "/v1/webhooks", body, nil)
	if res.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhooks %s: status %d, body %s", body, res.Status, res.Body)
	}
	return decode[webhookJSON](t, res)
}

// deliveriesOf returns the whole delivery log of the subscription id,
// newest first.
func deliveriesOf(t *testing.T, ts *testServer, id int64) []deliveryJSON {
	t.Helper()
	return listAll[deliveryJSON](t, ts.URL, fmt.Sprintf("/v1/webhooks/%d/deliveries?limit=100", id), nil, nil)
}

// verifySignature is the Standard Webhooks verification, written from the
// specification apart from the service's signer: the secret's part after
// "whsec_" is base64, the signed content is id.timestamp.body, and the
// header holds space-separated "v1,<base64>" signatures, any of which may
// match. It returns how many of them match.
func verifySignature(secret, id, timestamp, body, header string) int {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return 0
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "." + body))
	expected := mac.Sum(nil)
	matches := 0
	for _, sig := range strings.Fields(header) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err == nil && hmac.Equal(got, expected) {
			matches++
		}
	}
	return matches
}

// rawEventsAfter returns the feed's events after the id after, as GET
// /v1/events shows them, each as its exact JSON.
func rawEventsAfter(t *testing.T, ts *testServer, after int64) []string {
	t.Helper()
	res := ts.do(t, "GET", fmt.Sprintf("/v1/events?after=%d&limit=1000", after), "", nil)
	var raw []json.RawMessage
	if err := json.Unmarshal(res.Body, &raw); err != nil {
		t.Fatalf("GET /v1/events: %v (%s)", err, res.Body)
	}
	var out []string
	for _, r := range raw {
		out = append(out, string(r))
	}
	return out
}

func TestWebhookSubscriptionsAPI(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
	ts := newTestServer(t, withClock(clock.now))

	created := subscribe(t, ts, `{"url": "https://example.com/hooks/petstore", "types": ["order.*", "pet.deleted"], "description": "the shop's website"}`)
	t.Run("a create answers the subscription with its secret once", func(t *testing.T) {
		if !strings.HasPrefix(created.Secret, "whsec_") {
			t.Fatalf("secret %q does not start with whsec_", created.Secret)
		}
		if key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(created.Secret, "whsec_")); err != nil || len(key) != 32 {
			t.Errorf("secret holds %d bytes (%v), want 32", len(key), err)
		}
		want := webhookJSON{ID: created.ID, URL: "https://example.com/hooks/petstore", Types: []string{"order.*", "pet.deleted"},
			Description: "the shop's website", Status: "active", CreatedAt: "2026-11-24T10:00:00.000Z", Secret: created.Secret}
		if diff := cmp.Diff(want, created); diff != "" {
			t.Errorf("created mismatch (-want +got):\n%s", diff)
		}
		got := decode[webhookJSON](t, ts.do(t, "GET", webhookPath(created.ID), "", nil))
		want.Secret = ""
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("getWebhook mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("types omitted means every type, read back as *", func(t *testing.T) {
		all := subscribe(t, ts, `{"url": "http://example.com/all"}`)
		if diff := cmp.Diff([]string{"*"}, all.Types); diff != "" {
			t.Errorf("types mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the list pages by id with a Link and shows no secret", func(t *testing.T) {
		got := listAll[webhookJSON](t, ts.URL, "/v1/webhooks?limit=1", nil, nil)
		if len(got) != 2 || got[0].ID >= got[1].ID || got[0].Secret != "" || got[1].Secret != "" {
			t.Errorf("listWebhooks = %+v", got)
		}
	})
	t.Run("a merge patch changes the fields given and pauses", func(t *testing.T) {
		res := ts.do(t, "PATCH", webhookPath(created.ID), `{"status": "paused", "types": null, "description": "paused for now"}`, map[string]string{"Content-Type": mergePatchType})
		got := decode[webhookJSON](t, res)
		want := webhookJSON{ID: created.ID, URL: created.URL, Types: []string{"*"}, Description: "paused for now", Status: "paused", CreatedAt: created.CreatedAt}
		if diff := cmp.Diff(want, got); diff != "" || res.Status != http.StatusOK {
			t.Errorf("updateWebhook %d mismatch (-want +got):\n%s", res.Status, diff)
		}
	})
	t.Run("a rotation answers a new secret", func(t *testing.T) {
		got := decode[webhookJSON](t, ts.do(t, "POST", webhookPath(created.ID)+"/secret", "", nil))
		if got.Secret == "" || got.Secret == created.Secret || !strings.HasPrefix(got.Secret, "whsec_") {
			t.Errorf("rotated secret %q (was %q)", got.Secret, created.Secret)
		}
	})
	t.Run("the delivery log of a new subscription is empty", func(t *testing.T) {
		if got := deliveriesOf(t, ts, created.ID); len(got) != 0 {
			t.Errorf("deliveries = %+v", got)
		}
	})
	t.Run("a delete answers 204 and the subscription is gone", func(t *testing.T) {
		if res := ts.do(t, "DELETE", webhookPath(created.ID), "", nil); res.Status != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", res.Status, res.Body)
		}
		for _, p := range []string{webhookPath(created.ID), webhookPath(created.ID) + "/deliveries"} {
			wantError(t, ts.do(t, "GET", p, "", nil), http.StatusNotFound, codeNotFound, "webhook subscription")
		}
		wantError(t, ts.do(t, "DELETE", webhookPath(created.ID), "", nil), http.StatusNotFound, codeNotFound)
		wantError(t, ts.do(t, "POST", webhookPath(created.ID)+"/secret", "", nil), http.StatusNotFound, codeNotFound)
		wantError(t, ts.do(t, "PATCH", webhookPath(created.ID), `{"status":"active"}`, nil), http.StatusNotFound, codeNotFound)
	})

	for _, c := range []struct {
		rule, body, mention string
	}{
		{"the url is required", `{}`, "url"},
		{"the url is absolute", `{"url": "/hooks"}`, "url"},
		{"the url is http or https", `{"url": "ftp://example.com/x"}`, "http or https"},
		{"the url holds no user info", `{"url": "https://user:pw@example.com/x"}`, "user info"},
		{"the url holds no fragment", `{"url": "https://example.com/x#y"}`, "fragment"},
		{"the url is a string", `{"url": 7}`, "url"},
		{"an unknown type is named", `{"url": "https://example.com/x", "types": ["pet.sold"]}`, "pet.sold"},
		{"types is not empty", `{"url": "https://example.com/x", "types": []}`, "types"},
		{"types holds strings", `{"url": "https://example.com/x", "types": [1]}`, "types"},
		{"an unknown field is named", `{"url": "https://example.com/x", "secret": "x"}`, "secret"},
	} {
		t.Run("a create is refused: "+c.rule, func(t *testing.T) {
			wantError(t, ts.do(t, "POST", "/v1/webhooks", c.body, nil), http.StatusBadRequest, codeInvalidField, c.mention)
		})
	}
	t.Run("a patch cannot set failing", func(t *testing.T) {
		other := subscribe(t, ts, `{"url": "https://example.com/x"}`)
		wantError(t, ts.do(t, "PATCH", webhookPath(other.ID), `{"status":"failing"}`, nil), http.StatusBadRequest, codeInvalidField, "active or paused")
	})
	t.Run("at most 100 subscriptions exist", func(t *testing.T) {
		n := len(listAll[webhookJSON](t, ts.URL, "/v1/webhooks?limit=100", nil, nil))
		for range maxWebhooks - n {
			subscribe(t, ts, `{"url": "https://example.com/x"}`)
		}
		wantError(t, ts.do(t, "POST", "/v1/webhooks", `{"url": "https://example.com/x"}`, nil), http.StatusBadRequest, codeInvalidBody, "100")
	})
}

func TestWebhookDeliveryIsSignedToTheSpecification(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	rc := newReceiver(t)
	before := ts.createPet(t, "Before", 1, "") // made before the subscription: never delivered
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL+"/hook?token=abc"))
	pet := ts.createPet(t, "Rex", 1, "")
	eventually(t, "the event delivered", func() bool { return len(rc.requests()) >= 1 })
	got := rc.requests()[0]
	events := rawEventsAfter(t, ts, 0)
	if len(events) != 2 {
		t.Fatalf("feed holds %d events, want 2 (pets %d and %d)", len(events), before.ID, pet.ID)
	}
	t.Run("the body is the event as the feed shows it, the first after the subscription", func(t *testing.T) {
		if diff := cmp.Diff(events[1], got.Body); diff != "" {
			t.Errorf("body mismatch (-feed +delivered):\n%s", diff)
		}
		var ev struct{ ID int64 }
		json.Unmarshal([]byte(got.Body), &ev)
		if got.ID != strconv.FormatInt(ev.ID, 10) {
			t.Errorf("webhook-id %q, want the event id %d", got.ID, ev.ID)
		}
	})
	t.Run("the headers are the specification's", func(t *testing.T) {
		if got.ContentType != "application/json" || !strings.HasPrefix(got.UserAgent, "petstore/") {
			t.Errorf("Content-Type %q, User-Agent %q", got.ContentType, got.UserAgent)
		}
		ts, err := strconv.ParseInt(got.Timestamp, 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Hour {
			t.Errorf("webhook-timestamp %q is not the Unix seconds of now", got.Timestamp)
		}
	})
	t.Run("the signature verifies with the secret", func(t *testing.T) {
		if n := verifySignature(sub.Secret, got.ID, got.Timestamp, got.Body, got.Signature); n != 1 {
			t.Errorf("%d signatures of %q verify, want 1", n, got.Signature)
		}
		if n := verifySignature(sub.Secret, got.ID, got.Timestamp, got.Body+" ", got.Signature); n != 0 {
			t.Errorf("a changed body verifies")
		}
	})
	t.Run("the attempt is in the delivery log", func(t *testing.T) {
		eventually(t, "the attempt recorded", func() bool { return len(deliveriesOf(t, ts, sub.ID)) == 1 })
		d := deliveriesOf(t, ts, sub.ID)[0]
		id, _ := strconv.ParseInt(got.ID, 10, 64)
		if d.EventID != id || d.Attempt != 1 || d.StatusCode == nil || *d.StatusCode != 200 || d.Error != nil || d.NextAttemptAt != nil {
			t.Errorf("delivery = %+v", d)
		}
	})
}

func TestWebhookRetriesKeepTheWebhookID(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	t.Run("after a 500", func(t *testing.T) {
		rc := newReceiver(t)
		rc.setAnswer(func(n int, _ *http.Request, _ http.ResponseWriter) int {
			if n <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusNoContent
		})
		sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
		ts.createPet(t, "Rex", 1, "")
		eventually(t, "three attempts recorded", func() bool { return len(deliveriesOf(t, ts, sub.ID)) == 3 })
		ids := rc.ids()
		if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] {
			t.Errorf("webhook-ids %v, want one id three times", ids)
		}
		log := deliveriesOf(t, ts, sub.ID)
		var attempts, statuses []int
		for _, d := range log {
			attempts, statuses = append(attempts, d.Attempt), append(statuses, *d.StatusCode)
			if (d.NextAttemptAt != nil) != (*d.StatusCode == 500) {
				t.Errorf("attempt %d: nextAttemptAt %v with status %d", d.Attempt, d.NextAttemptAt, *d.StatusCode)
			}
		}
		if diff := cmp.Diff([]int{3, 2, 1}, attempts); diff != "" {
			t.Errorf("attempts, newest first, mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int{204, 500, 500}, statuses); diff != "" {
			t.Errorf("statuses mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("after a refused connection", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String() + "/hook"
		ln.Close() // nothing listens there now: the connection is refused
		sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, closed))
		ts.createPet(t, "Tom", 1, "")
		eventually(t, "a refused attempt recorded", func() bool { return len(deliveriesOf(t, ts, sub.ID)) >= 1 })
		first := deliveriesOf(t, ts, sub.ID)[0]
		if first.StatusCode != nil || first.Error == nil || *first.Error != "connection refused" || first.NextAttemptAt == nil {
			t.Errorf("refused attempt = %+v", first)
		}
		rc := newReceiver(t)
		ts.do(t, "PATCH", webhookPath(sub.ID), fmt.Sprintf(`{"url": %q}`, rc.srv.URL), nil)
		eventually(t, "the event delivered at the new URL", func() bool { return len(rc.requests()) == 1 })
		if got := rc.ids()[0]; got != strconv.FormatInt(first.EventID, 10) {
			t.Errorf("webhook-id %s after the refusal, want %d", got, first.EventID)
		}
	})
}

func TestWebhookOrderUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	rc := newReceiver(t)
	// A slow first answer lets the events pile up behind it.
	rc.setAnswer(func(n int, _ *http.Request, _ http.ResponseWriter) int {
		if n%17 == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				ts.createPet(t, fmt.Sprintf("w%d-%d", w, i), 1, "")
			}
		})
	}
	wg.Wait()
	events := rawEventsAfter(t, ts, 0)
	if len(events) != 200 {
		t.Fatalf("%d events, want 200", len(events))
	}
	// 200 deliveries one after the other, each recorded by a commit, with
	// every 17th failing once: some 10 s alone, and more than 30 s once in
	// five runs of the whole suite on a loaded 2-core machine.
	if !waitUntil(2*time.Minute, 20*time.Millisecond, func() bool { return len(uniqueIDs(rc.ids())) == 200 }) {
		t.Fatalf("after 2m: %d of 200 events delivered", len(uniqueIDs(rc.ids())))
	}
	var want []string
	for _, e := range events {
		var ev struct{ ID int64 }
		json.Unmarshal([]byte(e), &ev)
		want = append(want, strconv.FormatInt(ev.ID, 10))
	}
	if diff := cmp.Diff(want, uniqueIDs(rc.ids())); diff != "" {
		t.Errorf("webhook-ids received, each first time, mismatch (-feed +received):\n%s", diff)
	}
	if got := rc.ids(); !slices.IsSortedFunc(got, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y }) {
		t.Errorf("an event was sent before the previous one succeeded: %v", got)
	}
	if m := rc.maxFlight.Load(); m != 1 {
		t.Errorf("%d deliveries of one subscription at once, want 1", m)
	}
}

// uniqueIDs drops repeats of ids (retries), keeping the first of each.
func uniqueIDs(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func TestWebhookPauseAndResume(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	rc := newReceiver(t)
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	ts.createPet(t, "one", 1, "")
	eventually(t, "the first event delivered", func() bool { return len(rc.requests()) == 1 })
	if res := ts.do(t, "PATCH", webhookPath(sub.ID), `{"status":"paused"}`, nil); res.Status != http.StatusOK {
		t.Fatalf("pause: %d %s", res.Status, res.Body)
	}
	// The delivery stops by itself and frees its lease: from then on,
	// nothing is sent.
	eventually(t, "the delivery stopped", func() bool {
		w, err := ts.Store.getWebhook(t.Context(), sub.ID, nil)
		return err == nil && w.leaseOwner == ""
	})
	for _, name := range []string{"two", "three", "four"} {
		ts.createPet(t, name, 1, "")
	}
	if n := len(rc.requests()); n != 1 {
		t.Errorf("%d requests while paused, want the 1 from before", n)
	}
	if res := ts.do(t, "PATCH", webhookPath(sub.ID), `{"status":"active"}`, nil); res.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", res.Status, res.Body)
	}
	eventually(t, "the events of the pause delivered", func() bool { return len(rc.requests()) == 4 })
	var names []string
	for _, r := range rc.requests() {
		var ev struct{ Data Pet }
		json.Unmarshal([]byte(r.Body), &ev)
		names = append(names, ev.Data.Name)
	}
	if diff := cmp.Diff([]string{"one", "two", "three", "four"}, names); diff != "" {
		t.Errorf("delivered pets mismatch (-want +got):\n%s", diff)
	}
}

func TestWebhookGivesUp(t *testing.T) {
	t.Parallel()
	cfg := fastWebhooks
	cfg.giveUp = 100 * time.Millisecond
	ts := newTestServer(t)
	startDispatcher(t, ts, cfg)
	for _, c := range []struct {
		rule   string
		status int
		reason string
	}{
		{"retries stop after the give-up time", http.StatusInternalServerError, "was not delivered in 100ms"},
		{"a 410 stops at once", http.StatusGone, "410 Gone"},
	} {
		t.Run(c.rule, func(t *testing.T) {
			rc := newReceiver(t)
			rc.setAnswer(func(int, *http.Request, http.ResponseWriter) int { return c.status })
			sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
			ts.createPet(t, "Rex", 1, "")
			path := webhookPath(sub.ID)
			eventually(t, "the subscription failing", func() bool {
				return decode[webhookJSON](t, ts.do(t, "GET", path, "", nil)).Status == webhookFailing
			})
			got := decode[webhookJSON](t, ts.do(t, "GET", path, "", nil))
			if got.StatusReason == nil || !strings.Contains(*got.StatusReason, c.reason) {
				t.Errorf("statusReason %v does not say %q", got.StatusReason, c.reason)
			}
			log := deliveriesOf(t, ts, sub.ID)
			if c.status == http.StatusGone && len(log) != 1 {
				t.Errorf("%d attempts after a 410, want 1", len(log))
			}
			if log[0].NextAttemptAt != nil {
				t.Errorf("the last attempt plans another: %+v", log[0])
			}
			// Resuming delivers the event that failed.
			rc.setAnswer(nil)
			n := len(rc.requests())
			ts.do(t, "PATCH", path, `{"status":"active"}`, nil)
			eventually(t, "the event delivered after the resume", func() bool {
				return len(rc.requests()) > n && decode[webhookJSON](t, ts.do(t, "GET", path, "", nil)).Status == webhookActive &&
					len(deliveriesOf(t, ts, sub.ID)) > len(log) && deliveriesOf(t, ts, sub.ID)[0].Error == nil && *deliveriesOf(t, ts, sub.ID)[0].StatusCode == 200
			})
		})
	}
}

func TestWebhookSecretRotationSignsWithBothSecrets(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	rc := newReceiver(t)
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	rotated := decode[webhookJSON](t, ts.do(t, "POST", webhookPath(sub.ID)+"/secret", "", nil))
	ts.createPet(t, "Rex", 1, "")
	eventually(t, "the event delivered", func() bool { return len(rc.requests()) == 1 })
	got := rc.requests()[0]
	if n := len(strings.Fields(got.Signature)); n != 2 {
		t.Fatalf("webhook-signature %q holds %d signatures, want 2", got.Signature, n)
	}
	for name, secret := range map[string]string{"old": sub.Secret, "new": rotated.Secret} {
		if n := verifySignature(secret, got.ID, got.Timestamp, got.Body, got.Signature); n != 1 {
			t.Errorf("the %s secret verifies %d signatures, want 1", name, n)
		}
	}
}

func TestWebhookRefusesAddressesOfTheMachine(t *testing.T) {
	t.Parallel()
	// Only addresses that never leave the machine: the receiver listens on
	// 127.0.0.1, so a guard that failed would reach it, and nothing else.
	rc := newReceiver(t)
	port := rc.srv.Listener.Addr().(*net.TCPAddr).Port
	cfg := fastWebhooks
	cfg.allowPrivate = false
	ts := newTestServer(t)
	startDispatcher(t, ts, cfg)
	for _, c := range []struct{ host, refused string }{
		{"127.0.0.1", "127.0.0.1"},
		{"[::1]", "::1"},
		{"0.0.0.0", "0.0.0.0"},
		{"[::ffff:127.0.0.1]", "127.0.0.1"},
		{"localhost", ""},
	} {
		t.Run("a delivery to "+c.host+" is refused and logged", func(t *testing.T) {
			sub := subscribe(t, ts, fmt.Sprintf(`{"url": "http://%s:%d/hook"}`, c.host, port))
			ts.createPet(t, "Rex", 1, "")
			eventually(t, "a refused attempt recorded", func() bool { return len(deliveriesOf(t, ts, sub.ID)) >= 1 })
			d := deliveriesOf(t, ts, sub.ID)
			last := d[len(d)-1]
			if last.Error == nil || !strings.Contains(*last.Error, "refused to connect to "+c.refused) || last.StatusCode != nil {
				t.Errorf("attempt = %+v, want an error naming %s", last, c.refused)
			}
			ts.do(t, "DELETE", webhookPath(sub.ID), "", nil)
		})
	}
	if n := len(rc.requests()); n != 0 {
		t.Errorf("the receiver got %d requests, want none", n)
	}
	if recs := ts.Log.find(t, "WARN", "webhook delivery refused: the address is not one webhooks may reach"); len(recs) == 0 {
		t.Errorf("no refusal in the process log")
	}

	t.Run("the allow switch lets them through", func(t *testing.T) {
		ts := newTestServer(t)
		startDispatcher(t, ts, fastWebhooks)
		subscribe(t, ts, fmt.Sprintf(`{"url": "http://localhost:%d/hook"}`, port))
		ts.createPet(t, "Rex", 1, "")
		eventually(t, "the event delivered", func() bool { return len(rc.requests()) == 1 })
	})
	t.Run("the service's own listener stays refused", func(t *testing.T) {
		ts := newTestServer(t)
		startDispatcher(t, ts, fastWebhooks)
		sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, ts.URL+"/v1/pets"))
		ts.createPet(t, "Rex", 1, "")
		eventually(t, "a refused attempt recorded", func() bool { return len(deliveriesOf(t, ts, sub.ID)) >= 1 })
		if d := deliveriesOf(t, ts, sub.ID)[0]; d.Error == nil || !strings.Contains(*d.Error, "own listener") {
			t.Errorf("attempt = %+v", d)
		}
	})
}

func TestAddressGuardRefusesEveryRangeWithoutConnecting(t *testing.T) {
	t.Parallel()
	// The guard is called as the dialer calls it, with a fake network
	// address and no socket: nothing is ever sent to these addresses. The
	// service listens on every address on 8443 and on 127.0.0.1:8080; the
	// machine's interfaces hold loopback, a private address and a public
	// one (a VM's), given by the test, not read from this machine.
	ownListeners := []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:8443"), netip.MustParseAddrPort("127.0.0.1:8080")}
	machine := []netip.Addr{
		netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("10.0.0.7"),
		netip.MustParseAddr("80.1.2.3"), netip.MustParseAddr("2a01:4f8::7"), netip.MustParseAddr("fe80::1"),
	}
	guardOf := func(allowPrivate bool) addressGuard {
		return addressGuard{allowPrivate: allowPrivate, own: ownListeners, machineAddrs: func() ([]netip.Addr, error) { return machine, nil }}
	}
	for _, c := range []struct {
		rule, address string
		allowPrivate  bool
		refused       bool
	}{
		{"10/8 is private", "10.1.2.3:80", false, true},
		{"172.16/12 is private", "172.16.0.1:443", false, true},
		{"172.31 is the end of 172.16/12", "172.31.255.254:80", false, true},
		{"172.32 is outside 172.16/12", "172.32.0.1:80", false, false},
		{"192.168/16 is private", "192.168.1.1:80", false, true},
		{"169.254/16 is link-local (cloud metadata)", "169.254.169.254:80", false, true},
		{"fc00::/7 is private", "[fd12:3456::1]:80", false, true},
		{"fe80::/10 is link-local", "[fe80::1]:80", false, true},
		{"IPv4 multicast", "224.0.0.1:80", false, true},
		{"IPv6 multicast", "[ff02::1]:80", false, true},
		{"IPv4 unspecified", "0.0.0.0:80", false, true},
		{"IPv6 unspecified", "[::]:80", false, true},
		{"loopback", "127.0.0.1:80", false, true},
		{"IPv6 loopback", "[::1]:80", false, true},
		{"an IPv4-mapped private address", "[::ffff:10.0.0.1]:80", false, true},
		{"carrier-grade NAT", "100.64.0.1:80", false, true},
		{"broadcast", "255.255.255.255:80", false, true},
		{"a documentation address, which the API document's examples use", "192.0.2.10:443", false, true},
		{"a public IPv4 address", "93.184.216.34:443", false, false},
		{"a public IPv6 address", "[2606:2800:220:1:248:1893:25c8:1946]:443", false, false},

		{"NAT64 of 169.254.169.254 is judged as the metadata service", "[64:ff9b::169.254.169.254]:80", false, true},
		{"NAT64 of 10.0.0.1 is judged as private", "[64:ff9b::10.0.0.1]:80", false, true},
		{"NAT64 of 127.0.0.1 is judged as loopback", "[64:ff9b::127.0.0.1]:80", false, true},
		{"NAT64 of a public address is public", "[64:ff9b::93.184.216.34]:443", false, false},
		{"NAT64 of the machine's public address is the machine", "[64:ff9b::80.1.2.3]:443", false, true},
		{"local-use NAT64 is refused whole", "[64:ff9b:1::93.184.216.34]:443", false, true},
		{"6to4 of 192.168.1.1 is judged as private", "[2002:c0a8:101::1]:80", false, true},
		{"6to4 of a public address is public", "[2002:5db8:d822::1]:443", false, false},
		{"IPv4-compatible ::10.0.0.1 is judged as private", "[::10.0.0.1]:80", false, true},
		{"IPv4-compatible of a public address is refused: deprecated, no host has one", "[::93.184.216.34]:443", false, true},
		{"SIIT's ::ffff:0:a.b.c.d is outside 2000::/3", "[::ffff:0:10.0.0.1]:80", false, true},
		{"fec0::/10 is site-local", "[fec0::1]:80", false, true},
		{"Teredo is refused whole: it hides the address it leads to", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:443", false, true},
		{"discard-only 100::/64", "[100::1]:80", false, true},
		{"benchmarking 2001:2::/48", "[2001:2::1]:80", false, true},
		{"ORCHID 2001:10::/28", "[2001:10::1]:80", false, true},
		{"ORCHIDv2 2001:20::/28", "[2001:20::1]:80", false, true},
		{"the rest of 2001::/23 (anycast services, AMT, AS112)", "[2001:1::1]:443", false, true},
		{"documentation 3fff::/20", "[3fff::1]:443", false, true},
		{"SRv6 segment identifiers 5f00::/16", "[5f00::1]:443", false, true},
		{"IPv6 outside 2000::/3 is not global unicast", "[4000::1]:443", false, true},

		{"a machine address on another port than the service's is refused", "80.1.2.3:443", false, true},
		{"a machine IPv6 address on another port than the service's is refused", "[2a01:4f8::7]:22", false, true},
		{"allow-private allows a machine address on another port", "80.1.2.3:443", true, false},
		{"allow-private allows a private machine address on another port", "10.0.0.7:5432", true, false},
		{"a machine address on the own port is the own listener, allow-private or not", "80.1.2.3:8443", true, true},
		{"0.0.0.0 on the own port", "0.0.0.0:8443", false, true},
		{"0.0.0.0 on the own port with allow-private", "0.0.0.0:8443", true, true},
		{"0.0.0.0 on another port with allow-private", "0.0.0.0:9000", true, true},
		{":: on the own port", "[::]:8443", false, true},
		{":: on the own port with allow-private", "[::]:8443", true, true},
		{":: on another port with allow-private", "[::]:9000", true, true},
		{"0.0.0.0 on the port of the listener on 127.0.0.1, with allow-private (the review's case)", "0.0.0.0:8080", true, true},
		{":: on the port of the listener on 127.0.0.1, with allow-private", "[::]:8080", true, true},
		{"::ffff:0.0.0.0 is 0.0.0.0, with allow-private", "[::ffff:0.0.0.0]:9000", true, true},
		{"NAT64 of 0.0.0.0 is judged as 0.0.0.0, with allow-private", "[64:ff9b::]:9000", true, true},
		{"the own listener on loopback, with allow-private", "127.0.0.1:8443", true, true},
		{"the own listener on IPv6 loopback, with allow-private", "[::1]:8443", true, true},
		{"the second own listener, with allow-private", "127.0.0.1:8080", true, true},
		{"the second own listener, IPv4-mapped, with allow-private", "[::ffff:127.0.0.1]:8080", true, true},
		{"the own listener through NAT64 of loopback, with allow-private", "[64:ff9b::127.0.0.1]:8443", true, true},
		{"allow-private allows another loopback port", "127.0.0.1:9000", true, false},
		{"allow-private allows the metadata service through NAT64 as it allows it", "[64:ff9b::169.254.169.254]:80", true, false},
	} {
		t.Run(c.rule, func(t *testing.T) {
			err := guardOf(c.allowPrivate).control("tcp", c.address, nil)
			if (err != nil) != c.refused {
				t.Errorf("control(%s) with allow-private %v = %v, want refused %v", c.address, c.allowPrivate, err, c.refused)
			}
		})
	}
	t.Run("an embedded address is named in the refusal", func(t *testing.T) {
		err := guardOf(false).check(netip.MustParseAddr("64:ff9b::a9fe:a9fe"), 80)
		want := "refused to connect to 64:ff9b::a9fe:a9fe: a NAT64 address (64:ff9b::/96) of 169.254.169.254, a link-local address (169.254.0.0/16 or fe80::/10, cloud metadata services included); webhooks reach only public addresses unless -webhook-allow-private is set"
		if err == nil || err.Error() != want {
			t.Errorf("check = %v, want %s", err, want)
		}
	})
	t.Run("the machine's addresses are looked up at each check", func(t *testing.T) {
		// An address the machine gets while the service runs (DHCP) is
		// refused from then on.
		var now []netip.Addr
		g := addressGuard{machineAddrs: func() ([]netip.Addr, error) { return now, nil }}
		addr := netip.MustParseAddr("80.1.2.3")
		if err := g.check(addr, 443); err != nil {
			t.Errorf("before the machine has the address: %v", err)
		}
		now = []netip.Addr{addr}
		if err := g.check(addr, 443); err == nil {
			t.Errorf("once the machine has the address, it is allowed")
		}
	})
	t.Run("a failed lookup of the machine's addresses refuses", func(t *testing.T) {
		g := addressGuard{machineAddrs: func() ([]netip.Addr, error) { return nil, fmt.Errorf("netlink: %w", syscall.ENOBUFS) }}
		if err := g.check(netip.MustParseAddr("93.184.216.34"), 443); err == nil || !strings.Contains(err.Error(), "could not list this machine's own addresses") {
			t.Errorf("check = %v, want a refusal that says the lookup failed", err)
		}
	})
	t.Run("newAddressGuard holds every listener it is given", func(t *testing.T) {
		own := []net.Addr{&net.TCPAddr{IP: net.IPv4zero, Port: 8443}, &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}}
		g := newAddressGuard(true, own)
		if diff := cmp.Diff([]netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:8443"), netip.MustParseAddrPort("[::1]:8080")}, g.own, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("own listeners mismatch (-want +got):\n%s", diff)
		}
		if err := g.control("tcp4", "10.1.2.3:80", nil); err != nil {
			t.Errorf("10.1.2.3 refused with the switch on: %v", err)
		}
		if err := g.control("tcp4", "127.0.0.1:8443", nil); err == nil {
			t.Errorf("the own listener (0.0.0.0:8443) reached on 127.0.0.1:8443")
		}
		if err := g.control("tcp6", "[::1]:8080", nil); err == nil {
			t.Errorf("the second own listener ([::1]:8080) reached")
		}
	})
}

func TestWebhookTricklingAnswerIsCut(t *testing.T) {
	t.Parallel()
	cfg := fastWebhooks
	cfg.timeout = 300 * time.Millisecond
	ts := newTestServer(t)
	startDispatcher(t, ts, cfg)
	rc := newReceiver(t)
	var sent atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	rc.setAnswer(func(n int, _ *http.Request, w http.ResponseWriter) int {
		if n > 1 {
			return http.StatusOK
		}
		// 10 MiB, a KiB every millisecond: the limit of 64 KiB or the
		// timeout cuts it long before its end.
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 1024)
		for range 10 << 10 {
			if _, err := w.Write(chunk); err != nil {
				return 0
			}
			w.(http.Flusher).Flush()
			sent.Add(1024)
			select {
			case <-stop:
				return 0
			case <-time.After(time.Millisecond):
			}
		}
		return 0
	})
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	ts.createPet(t, "one", 1, "")
	ts.createPet(t, "two", 1, "")
	eventually(t, "both events delivered", func() bool { return len(deliveriesOf(t, ts, sub.ID)) == 2 })
	if n := sent.Load(); n >= 10<<20 {
		t.Errorf("the receiver sent its whole 10 MiB")
	}
	if d := deliveriesOf(t, ts, sub.ID); len(d) < 2 || *d[len(d)-1].StatusCode != 200 {
		t.Errorf("deliveries = %+v", d)
	}
}

func TestWebhookReplicasDeliverOnceInOrderAndTakeOver(t *testing.T) {
	t.Parallel()
	rs, _ := replicas(t, 2)
	rc := newReceiver(t)
	// A lease of 3 s, not fastWebhooks' 600 ms: "once" holds while the
	// holder renews its lease in time, and on a loaded machine running the
	// whole suite a holder was held up past 600 ms, the other took over,
	// and an event was delivered twice (which the receivers' deduplication
	// by webhook-id is for, but not what this test is about).
	cfg := fastWebhooks
	cfg.leaseTTL = 3 * time.Second
	var dispatchers []*dispatcher
	var stops []func()
	for _, r := range rs {
		d, stop := startDispatcher(t, r, cfg)
		dispatchers, stops = append(dispatchers, d), append(stops, stop)
	}
	sub := subscribe(t, rs[0], fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	feedIDs := func(ts *testServer) []string {
		var ids []string
		for _, e := range rawEventsAfter(t, ts, 0) {
			var ev struct{ ID int64 }
			json.Unmarshal([]byte(e), &ev)
			ids = append(ids, strconv.FormatInt(ev.ID, 10))
		}
		return ids
	}
	for i := range 40 {
		rs[i%2].createPet(t, fmt.Sprint("pet-", i), 1, "")
	}
	eventually(t, "40 events delivered", func() bool { return len(rc.requests()) >= 40 })
	t.Run("each event is delivered once, in id order, one at a time", func(t *testing.T) {
		if diff := cmp.Diff(feedIDs(rs[0]), rc.ids()); diff != "" {
			t.Errorf("webhook-ids mismatch (-feed +received):\n%s", diff)
		}
		if m := rc.maxFlight.Load(); m != 1 {
			t.Errorf("%d deliveries of one subscription at once, want 1", m)
		}
	})

	// The replica that holds the lease stops abruptly: its store closes
	// under it, so it can neither record nor release anything, and the
	// other must wait for the lease to expire.
	w, err := rs[0].Store.getWebhook(t.Context(), sub.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	holder := slices.IndexFunc(dispatchers, func(d *dispatcher) bool { return d.owner == w.leaseOwner })
	if holder < 0 {
		t.Fatalf("the lease owner %q is neither replica", w.leaseOwner)
	}
	other := rs[1-holder]
	rs[holder].Store.Close()
	stops[holder]()
	for i := range 20 {
		other.createPet(t, fmt.Sprint("after-", i), 1, "")
	}
	eventually(t, "the other replica delivers the rest", func() bool { return len(uniqueIDs(rc.ids())) >= 60 })
	t.Run("after the takeover nothing is missed, and the order holds", func(t *testing.T) {
		if diff := cmp.Diff(feedIDs(other), uniqueIDs(rc.ids())); diff != "" {
			t.Errorf("webhook-ids, each first time, mismatch (-feed +received):\n%s", diff)
		}
		w, err := other.Store.getWebhook(t.Context(), sub.ID, nil)
		if err != nil || w.leaseOwner != dispatchers[1-holder].owner {
			t.Errorf("lease owner %q (%v), want the surviving replica's", w.leaseOwner, err)
		}
	})
}

func TestWebhookSettings(t *testing.T) {
	t.Parallel()
	t.Run("-h lists every webhook setting with its variable and default", func(t *testing.T) {
		var out strings.Builder
		run(t.Context(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), &out, &out)
		for _, want := range [][]string{
			{"-webhook-backoff", "PETSTORE_WEBHOOK_BACKOFF", "5s"},
			{"-webhook-give-up", "PETSTORE_WEBHOOK_GIVE_UP", "72h0m0s"},
			{"-webhook-timeout", "PETSTORE_WEBHOOK_TIMEOUT", "10s"},
			{"-webhook-allow-private", "PETSTORE_WEBHOOK_ALLOW_PRIVATE", "false"},
			{"-webhook-lease", "PETSTORE_WEBHOOK_LEASE", "10s"},
		} {
			found := false
			for line := range strings.SplitSeq(out.String(), "\n") {
				found = found || containsAll(strings.Fields(line), want)
			}
			if !found {
				t.Errorf("-h output has no line with %q", want)
			}
		}
	})
	for _, c := range []struct{ rule, name, value string }{
		{"a backoff is positive", "PETSTORE_WEBHOOK_BACKOFF", "0s"},
		{"a backoff is at most the cap", "PETSTORE_WEBHOOK_BACKOFF", "2h"},
		{"a give-up time is positive", "PETSTORE_WEBHOOK_GIVE_UP", "-1h"},
		{"a timeout is positive", "PETSTORE_WEBHOOK_TIMEOUT", "0"},
		{"the allow switch is a boolean", "PETSTORE_WEBHOOK_ALLOW_PRIVATE", "maybe"},
		{"a lease lasts long enough to be renewed", "PETSTORE_WEBHOOK_LEASE", "100ms"},
	} {
		t.Run("refused: "+c.rule, func(t *testing.T) {
			env := map[string]string{"PETSTORE_DB": ":memory:", "PETSTORE_API_KEYS": testKey, c.name: c.value}
			_, err := parseConfig(nil, mapEnv(env), &strings.Builder{})
			if ce, ok := err.(*configError); !ok || !strings.Contains(ce.setting, c.name) {
				t.Errorf("parseConfig with %s=%s: %v, want a configError naming it", c.name, c.value, err)
			}
		})
	}
	t.Run("the service delivers, and stops cleanly", func(t *testing.T) {
		rc := newReceiver(t)
		rs := startRun(t, map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": filepath.Join(t.TempDir(), "pets.db"),
			"PETSTORE_API_KEYS": testKey, "PETSTORE_WEBHOOK_ALLOW_PRIVATE": "1", "PETSTORE_LOG_FORMAT": "json"})
		if res := doRequest(t, rs.URL, "POST", "/v1/webhooks", fmt.Sprintf(`{"url": %q}`, rc.srv.URL), nil); res.Status != http.StatusCreated {
			t.Fatalf("create: %d %s", res.Status, res.Body)
		}
		if res := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name": "Rex", "categoryId": 1}`, nil); res.Status != http.StatusCreated {
			t.Fatalf("create pet: %d %s", res.Status, res.Body)
		}
		// A scrape reads each metric at its own moment, so the three
		// lines agree only once the delivery is recorded: wait for all.
		want := []string{"petstore_webhook_oldest_undelivered_seconds{subscription=\"1\"} 0\n",
			"petstore_webhook_deliveries_total{result=\"delivered\"} 1\n", "petstore_webhook_attempts_in_flight 0\n"}
		var metrics string
		eventually(t, "the delivery recorded", func() bool {
			metrics = string(doRequest(t, rs.URL, "GET", "/metrics", "", nil).Body)
			return strings.Contains(metrics, want[0]) && strings.Contains(metrics, want[1]) && strings.Contains(metrics, want[2])
		})
		if got := linesWith(metrics, "petstore_webhook_deliveries_total{"); got != want[1] || len(rc.requests()) != 1 {
			t.Errorf("deliveries: %q, the receiver got %d requests; want one delivery", got, len(rc.requests()))
		}
		if err := rs.stop(t); err != nil {
			t.Errorf("run returned %v", err)
		}
	})
}

// TestWebhookDeliveryCutBySIGKILLIsSentAgain kills the process while a
// delivery is in flight, with the default lease (10 s): the restarted
// process sends the event again, with its webhook-id, at once, without
// waiting for the dead process's lease, since a SQLite file is one
// process's.
func TestWebhookDeliveryCutBySIGKILLIsSentAgain(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db := filepath.Join(t.TempDir(), "pets.db")
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + db, "PETSTORE_API_KEYS=" + testKey,
		"PETSTORE_WEBHOOK_ALLOW_PRIVATE=1", "PETSTORE_LOG_FORMAT=json"}
	rc := newReceiver(t)
	held, again := make(chan struct{}), make(chan struct{})
	rc.setAnswer(func(n int, r *http.Request, _ http.ResponseWriter) int {
		switch n {
		case 1:
			// The first delivery is held until the service dies under it.
			close(held)
			<-r.Context().Done()
			return 0
		case 2:
			close(again)
		}
		return http.StatusOK
	})
	first := startBinary(t, bin, env...)
	if res := doRequest(t, first.URL, "POST", "/v1/webhooks", fmt.Sprintf(`{"url": %q}`, rc.srv.URL), nil); res.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.Status, res.Body)
	}
	pet := decode[Pet](t, doRequest(t, first.URL, "POST", "/v1/pets", `{"name": "Rex", "categoryId": 1}`, nil))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery reached the receiver")
	}
	first.Cmd.Process.Kill()
	first.wait()

	restarted := time.Now()
	second := startBinary(t, bin, env...)
	select {
	case <-again:
		t.Logf("the delivery was sent again %v after the restart began", time.Since(restarted).Round(time.Millisecond))
	case <-time.After(defaultWebhookLease / 2):
		t.Fatalf("the delivery was not sent again within %v of the restart: the restart waits for the dead process's lease (%v)", defaultWebhookLease/2, defaultWebhookLease)
	}
	ids := rc.ids()
	if ids[0] != ids[1] {
		t.Errorf("webhook-ids %v: the retry after the crash has another id", ids)
	}
	var ev struct {
		Data Pet
	}
	json.Unmarshal([]byte(rc.requests()[1].Body), &ev)
	if ev.Data != pet {
		t.Errorf("the event sent again is of %+v, want %+v", ev.Data, pet)
	}
	eventually(t, "the delivery recorded", func() bool {
		return len(listAll[deliveryJSON](t, second.URL, "/v1/webhooks/1/deliveries", nil, nil)) == 1
	})
}

// TestWebhookLeaseLeftByADeadProcess: a lease left in the database by a
// process that died (it will never renew it) holds its subscription back
// on PostgreSQL until it expires, since it may be a live replica's; on
// SQLite, whose file one process serves, a starting dispatcher takes it
// over at once.
func TestWebhookLeaseLeftByADeadProcess(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	rc := newReceiver(t)
	arrived := make(chan time.Time, 1)
	rc.setAnswer(func(n int, _ *http.Request, _ http.ResponseWriter) int {
		if n == 1 {
			arrived <- time.Now()
		}
		return http.StatusOK
	})
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	ts.createPet(t, "Rex", 1, "")
	const left = 3 * time.Second // what remains of the dead process's lease
	until := time.Now().Add(left)
	if err := ts.exec(t, "UPDATE webhooks SET lease_owner = ?, lease_until = ? WHERE id = ?", "a-dead-process", until.UnixMilli(), sub.ID); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	startDispatcher(t, ts, fastWebhooks)
	var at time.Time
	select {
	case at = <-arrived:
	case <-time.After(left + 10*time.Second):
		t.Fatalf("no delivery within %v of the lease's expiry", 10*time.Second)
	}
	t.Logf("on %s, delivered %v after the dispatcher started, the lease expiring %v after it", ts.Store.dialect.name,
		at.Sub(started).Round(time.Millisecond), until.Sub(started).Round(time.Millisecond))
	if ts.Store.dialect == postgresDialect {
		if at.Before(until) {
			t.Errorf("on PostgreSQL, delivered %v before the lease expired: a lease that may be a live replica's was taken", until.Sub(at))
		}
		return
	}
	if limit := started.Add(left / 3); at.After(limit) {
		t.Errorf("on SQLite, delivered %v after the dispatcher started, want within %v: it waited for the dead process's lease", at.Sub(started), left/3)
	}
}

func TestWebhookRetrySchedule(t *testing.T) {
	t.Parallel()
	d := &dispatcher{cfg: webhookConfig{backoff: 5 * time.Second}}
	for _, c := range []struct {
		rule       string
		attempt    int
		retryAfter time.Duration
		low, high  time.Duration
	}{
		{"the first retry waits the backoff, less up to a fifth", 1, 0, 4 * time.Second, 5 * time.Second},
		{"each failure doubles it", 2, 0, 8 * time.Second, 10 * time.Second},
		{"the tenth failure waits 2560 s", 10, 0, 2048 * time.Second, 2560 * time.Second},
		{"the delay is capped at 1 hour", 11, 0, 48 * time.Minute, time.Hour},
		{"and stays capped", 40, 0, 48 * time.Minute, time.Hour},
		{"a Retry-After is honoured as it is", 1, 90 * time.Second, 90 * time.Second, 90 * time.Second},
		{"a Retry-After is capped at 1 hour", 1, 5 * time.Hour, time.Hour, time.Hour},
	} {
		t.Run(c.rule, func(t *testing.T) {
			for range 100 {
				if got := d.delay(c.attempt, c.retryAfter); got < c.low || got > c.high {
					t.Fatalf("delay(%d, %v) = %v, want within [%v, %v]", c.attempt, c.retryAfter, got, c.low, c.high)
				}
			}
		})
	}
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rule, value string
		want        time.Duration
	}{
		{"seconds", "120", 2 * time.Minute},
		{"an HTTP date", now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{"a date in the past is none", now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"garbage is none", "soon", 0},
		{"a huge number is capped", "99999999999", time.Hour},
	} {
		t.Run("Retry-After: "+c.rule, func(t *testing.T) {
			if got := parseRetryAfter(c.value, now); got != c.want {
				t.Errorf("parseRetryAfter(%q) = %v, want %v", c.value, got, c.want)
			}
		})
	}
}

func TestWebhookHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	rc := newReceiver(t)
	rc.setAnswer(func(n int, _ *http.Request, w http.ResponseWriter) int {
		if n == 1 {
			w.Header().Set("Retry-After", "3600")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
	ts.createPet(t, "Rex", 1, "")
	eventually(t, "the 429 recorded", func() bool { return len(deliveriesOf(t, ts, sub.ID)) == 1 })
	d := deliveriesOf(t, ts, sub.ID)[0]
	started, _ := time.Parse(time.RFC3339Nano, d.StartedAt)
	if d.NextAttemptAt == nil {
		t.Fatalf("no next attempt after a 429: %+v", d)
	}
	next, _ := time.Parse(time.RFC3339Nano, *d.NextAttemptAt)
	if wait := next.Sub(started); wait < 59*time.Minute || wait > 61*time.Minute {
		t.Errorf("next attempt %v after the start, want the Retry-After's hour", wait)
	}
}

func TestWebhookAnswersThatFailTheAttempt(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	startDispatcher(t, ts, fastWebhooks)
	for _, c := range []struct {
		rule   string
		answer func(w http.ResponseWriter) int
		status int // 0: none recorded
		error  string
	}{
		{"a redirect is not followed", func(w http.ResponseWriter) int {
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
			return http.StatusFound
		}, http.StatusFound, "redirect not followed: the receiver answered 302 to http://127.0.0.1:1/elsewhere"},
		{"a header block over 16 KiB is refused", func(w http.ResponseWriter) int {
			w.Header().Set("X-Padding", strings.Repeat("x", 20<<10))
			return http.StatusOK
		}, 0, "the answer's headers are larger than 16 KiB"},
		{"another status is a failure with no error text", func(w http.ResponseWriter) int {
			return http.StatusBadRequest
		}, http.StatusBadRequest, ""},
	} {
		t.Run(c.rule, func(t *testing.T) {
			rc := newReceiver(t)
			rc.setAnswer(func(n int, _ *http.Request, w http.ResponseWriter) int {
				if n == 1 {
					return c.answer(w)
				}
				return http.StatusOK
			})
			sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.srv.URL))
			ts.createPet(t, "Rex", 1, "")
			eventually(t, "the retry delivered", func() bool { return len(deliveriesOf(t, ts, sub.ID)) == 2 })
			d := deliveriesOf(t, ts, sub.ID)
			first := d[1]
			gotStatus, gotError := 0, ""
			if first.StatusCode != nil {
				gotStatus = *first.StatusCode
			}
			if first.Error != nil {
				gotError = *first.Error
			}
			if gotStatus != c.status || gotError != c.error || first.NextAttemptAt == nil {
				t.Errorf("first attempt = status %d, error %q, next %v; want status %d, error %q and a next attempt", gotStatus, gotError, first.NextAttemptAt, c.status, c.error)
			}
			if n := len(rc.requests()); n != 2 {
				t.Errorf("the receiver got %d requests, want 2 (nothing followed the redirect)", n)
			}
			ts.do(t, "DELETE", webhookPath(sub.ID), "", nil)
		})
	}
}

// verify is docs/webhooks.md's verification example, word for word
// (TestWebhookVerificationExampleIsTheDocs holds the two together).
func verify(secret string, h http.Header, body []byte) bool {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", h.Get("webhook-id"), h.Get("webhook-timestamp"), body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	fresh := err == nil && time.Since(time.Unix(ts, 0)).Abs() < 5*time.Minute
	return fresh && slices.ContainsFunc(strings.Fields(h.Get("webhook-signature")),
		func(s string) bool { return hmac.Equal([]byte(s), []byte(want)) })
}

func TestWebhookVerificationExampleIsTheDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("webhooks_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(doc), "```go\n")
	block, _, _ = strings.Cut(block, "```")
	_, fn, _ := strings.Cut(string(src), "\nfunc verify(")
	fn, _, _ = strings.Cut(fn, "\n}\n")
	if want := "func verify(" + fn + "\n}\n"; block != want {
		t.Errorf("docs/webhooks.md's example is not verify in webhooks_test.go:\n%s\nwant:\n%s", block, want)
	}

	t.Run("it accepts a real delivery, and refuses a changed one", func(t *testing.T) {
		ts := newTestServer(t)
		startDispatcher(t, ts, fastWebhooks)
		var mu sync.Mutex
		var verdicts []bool
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			secret := r.URL.Query().Get("secret") // the test's own shortcut
			verdicts = append(verdicts, verify(secret, r.Header, body), verify(secret, r.Header, append(body, ' ')))
		}))
		defer rc.Close()
		sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, rc.URL))
		ts.do(t, "PATCH", webhookPath(sub.ID), fmt.Sprintf(`{"url": %q}`, rc.URL+"?secret="+url.QueryEscape(sub.Secret)), nil)
		ts.createPet(t, "Rex", 1, "")
		eventually(t, "the delivery verified", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(verdicts) == 2
		})
		if diff := cmp.Diff([]bool{true, false}, verdicts); diff != "" {
			t.Errorf("verify of the delivery, then of a changed body, mismatch (-want +got):\n%s", diff)
		}
	})
}

// TestAnEventGoesToTheURLInForceWhenItOccurred: an event that occurs after
// a PATCH of a subscription's URL has been answered goes to the new URL,
// even when the dispatcher read the subscription before the PATCH and
// lists the subscription's events after the event (the test holds it
// between the two). The dispatcher reads the feed's end before the
// subscription, and leaves an event after that end to its next turn.
func TestAnEventGoesToTheURLInForceWhenItOccurred(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	before, after := newReceiver(t), newReceiver(t)
	var armed atomic.Bool
	held, proceed := make(chan struct{}, 1), make(chan struct{})
	startDispatcherHooked(t, ts, fastWebhooks, func() {
		if armed.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-proceed
		}
	})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(release) // before the dispatcher's stop, which waits for it
	sub := subscribe(t, ts, fmt.Sprintf(`{"url": %q}`, before.srv.URL))
	armed.Store(true)
	select {
	case <-held:
	case <-time.After(eventuallyWithin):
		t.Fatal("the dispatcher did not read the subscription")
	}
	ts.do(t, "PATCH", webhookPath(sub.ID), fmt.Sprintf(`{"url": %q}`, after.srv.URL), nil)
	ts.createPet(t, "Rex", 1, "")
	release()
	eventually(t, "the event delivered", func() bool { return len(before.requests())+len(after.requests()) > 0 })
	got := map[string]int{"old URL": len(before.requests()), "new URL": len(after.requests())}
	if diff := cmp.Diff(map[string]int{"old URL": 0, "new URL": 1}, got); diff != "" {
		t.Errorf("deliveries of the event that followed the PATCH mismatch (-want +got):\n%s", diff)
	}
}

// TestWebhooksNeverReachTheProfilesListener: the profiles' listener
// (-pprof-addr) answers without a key, so it is one of the service's own
// listeners that a delivery never reaches, even with -webhook-allow-private
// (which lets deliveries reach other loopback ports).
func TestWebhooksNeverReachTheProfilesListener(t *testing.T) {
	t.Parallel()
	lines, _ := runLines(t, map[string]string{"PETSTORE_PPROF_ADDR": "127.0.0.1:0", "PETSTORE_WEBHOOK_ALLOW_PRIVATE": "1"}, 3)
	api := strings.TrimPrefix(lines[0], "petstore listening on ")
	profiles := strings.TrimPrefix(lines[2], "petstore profiles on ")
	res := doRequest(t, api, "POST", "/v1/webhooks", fmt.Sprintf(`{"url": %q}`, profiles), nil)
	if res.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhooks: status %d, body %s", res.Status, res.Body)
	}
	sub := decode[webhookJSON](t, res)
	if res := doRequest(t, api, "POST", "/v1/pets", `{"name": "Rex", "categoryId": 1}`, nil); res.Status != http.StatusCreated {
		t.Fatalf("POST /v1/pets: status %d, body %s", res.Status, res.Body)
	}
	var attempts []deliveryJSON
	eventually(t, "an attempt recorded", func() bool {
		attempts = listAll[deliveryJSON](t, api, fmt.Sprintf("/v1/webhooks/%d/deliveries", sub.ID), nil, nil)
		return len(attempts) >= 1
	})
	if d := attempts[len(attempts)-1]; d.StatusCode != nil || d.Error == nil || !strings.Contains(*d.Error, "own listener") {
		t.Errorf("first attempt = %+v, want refused as the service's own listener", d)
	}
}

// linesWith is the lines of text that contain s, for a failure message.
func linesWith(text, s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, s) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
