package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The delivery of webhooks. A dispatcher runs in every process that serves
// the API. It delivers each active subscription from one goroutine, which
// sends the subscription's events one at a time, in id order, and moves the
// subscription's cursor only once the receiver answered 2xx: an event is
// sent until it is acknowledged (at least once), never before the previous
// one was, and a crash between the two resends it with the same
// webhook-id. One slow receiver holds only its own goroutine.
//
// On PostgreSQL every replica runs a dispatcher, and a lease row decides
// which one delivers a subscription: the lease is taken for leaseTTL,
// renewed every tick while delivering, and taken over by another replica
// once it has expired, so within leaseTTL plus a tick of the holder's
// death. A worker whose lease may have run out is cancelled before it
// could overlap with the next holder, and every write it makes is fenced by
// the lease (see store_webhooks.go). On SQLite, whose file one process
// serves, a dispatcher takes over every lease as it starts: one left in the
// file is a dead process's (see freeLeftWebhookLeases).

// The webhooks' settings and limits.
const (
	defaultWebhookBackoff = 5 * time.Second
	defaultWebhookGiveUp  = 72 * time.Hour
	defaultWebhookTimeout = 10 * time.Second
	// maxWebhookBackoff caps the delay between two attempts, a receiver's
	// Retry-After included.
	maxWebhookBackoff = time.Hour
	// defaultWebhookLease is how long a replica's lease of a subscription
	// lasts unless renewed: another replica takes a dead one's
	// subscriptions over within this plus a tick (under 15 s).
	defaultWebhookLease = 10 * time.Second
	// webhookPoll is the longest a dispatcher waits before looking again
	// for new subscriptions, expired leases and events (a fallback to the
	// wake-up of every commit, eventTail.wait).
	webhookPoll = time.Second
	// secretOverlap is how long the secret replaced by a rotation still
	// signs deliveries, beside the new one.
	secretOverlap = 24 * time.Hour
	// maxWebhookResponseBody is the most of a receiver's answer read; the
	// rest is never read (the connection is closed).
	maxWebhookResponseBody = 64 << 10
	// maxWebhookResponseHeader bounds the header block of an answer.
	maxWebhookResponseHeader = 16 << 10
	// secretPrefix starts every signing secret, as the Standard Webhooks
	// specification writes them.
	secretPrefix = "whsec_"
)

// webhookConfig are the webhooks' settings.
type webhookConfig struct {
	backoff      time.Duration // the first retry's delay, doubled at each failure
	giveUp       time.Duration // how long after the first failure an event is retried
	timeout      time.Duration // how long a receiver has to answer
	allowPrivate bool          // deliveries may reach private addresses
	leaseTTL     time.Duration // how long a replica's lease of a subscription lasts unrenewed
	// poll is webhookPoll unless a test shortens it; it has no flag.
	poll time.Duration
}

// defaultWebhookConfig is the webhooks' settings when none is given.
var defaultWebhookConfig = webhookConfig{backoff: defaultWebhookBackoff, giveUp: defaultWebhookGiveUp, timeout: defaultWebhookTimeout, leaseTTL: defaultWebhookLease}

// check refuses settings that cannot work.
func (c webhookConfig) check() error {
	if err := checkDurations(true, map[string]time.Duration{"webhook-backoff": c.backoff, "webhook-give-up": c.giveUp,
		"webhook-timeout": c.timeout, "webhook-lease": c.leaseTTL}); err != nil {
		return err
	}
	if c.leaseTTL < minWebhookLease {
		return &configError{settingName("webhook-lease"), fmt.Sprintf("%v is too short; at least %v, so that a lease can be renewed before it runs out", c.leaseTTL, minWebhookLease)}
	}
	if c.backoff > maxWebhookBackoff {
		return &configError{settingName("webhook-backoff"), fmt.Sprintf("%v is more than the most a retry waits (%v)", c.backoff, maxWebhookBackoff)}
	}
	return nil
}

// minWebhookLease is the shortest lease: three renewals fit in it even
// when a write takes a few hundred milliseconds.
const minWebhookLease = 500 * time.Millisecond

// lease is the lease's length in effect.
func (c webhookConfig) lease() time.Duration {
	if c.leaseTTL > 0 {
		return c.leaseTTL
	}
	return defaultWebhookLease
}

// tick is the dispatcher's period: often enough to renew a lease three
// times in its life, and at most webhookPoll.
func (c webhookConfig) tick() time.Duration {
	p := webhookPoll
	if c.poll > 0 {
		p = c.poll
	}
	return min(p, c.lease()/3)
}

// dispatcher delivers the webhooks of the subscriptions it holds the lease
// of.
type dispatcher struct {
	log       *slog.Logger
	st        *store
	cfg       webhookConfig
	now       func() time.Time
	owner     string // this process's lease owner id
	client    *http.Client
	userAgent string

	deliveries *prometheus.CounterVec
	inFlight   atomic.Int64

	// afterRead, when set (by tests), runs in deliverAll right after each
	// read of a subscription, before its events are listed.
	afterRead func()
}

// newDispatcher returns the dispatcher of st for a service listening on own,
// each of its listeners (which deliveries may never reach).
func newDispatcher(log *slog.Logger, st *store, cfg webhookConfig, own []net.Addr, now func() time.Time) *dispatcher {
	guard := newAddressGuard(cfg.allowPrivate, own)
	dialer := &net.Dialer{Timeout: cfg.timeout, KeepAlive: 30 * time.Second, Control: guard.control}
	transport := &http.Transport{
		// Never through a proxy from the environment: the guard checks
		// the address connected to, which would be the proxy's.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    cfg.timeout,
		ResponseHeaderTimeout:  cfg.timeout,
		MaxResponseHeaderBytes: maxWebhookResponseHeader,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        90 * time.Second,
		ForceAttemptHTTP2:      true,
	}
	owner := make([]byte, 8)
	rand.Read(owner)
	return &dispatcher{
		log: log, st: st, cfg: cfg, now: now,
		owner: hex.EncodeToString(owner),
		client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			// A redirect is an answer, not followed: following it would
			// send a signed event where the subscription did not say.
			return http.ErrUseLastResponse
		}},
		userAgent: "petstore/" + moduleVersion(),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petstore_webhook_deliveries_total",
			Help: "Webhook delivery attempts, by result: delivered (2xx), failed (another status, a timeout, a connection error) or refused (an address webhooks may not reach).",
		}, []string{"result"}),
	}
}

// moduleVersion is the module version that User-Agent names.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// collectors are the dispatcher's metrics, for the service's registry.
func (d *dispatcher) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		d.deliveries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "petstore_webhook_attempts_in_flight",
			Help: "Webhook delivery attempts waiting for their receiver's answer now, in this process.",
		}, func() float64 { return float64(d.inFlight.Load()) }),
		readCollector{desc: prometheus.NewDesc("petstore_webhook_oldest_undelivered_seconds",
			"Age of each subscription's oldest event not yet delivered (0 when none waits), by subscription id.", []string{"subscription"}, nil),
			read: d.backlog},
	}
}

// worker is a subscription being delivered by this process.
type worker struct {
	cancel     context.CancelFunc
	leaseUntil time.Time
}

// run delivers webhooks until ctx ends, then waits for the deliveries in
// progress to stop and frees its leases, so that another replica takes
// them at once.
func (d *dispatcher) run(ctx context.Context) {
	ws := &workerSet{workers: map[int64]*worker{}, exited: make(chan int64)}
	defer d.stopWorkers(ctx, ws)
	d.freeLeftLeases(ctx)
	tick := time.NewTicker(d.cfg.tick())
	defer tick.Stop()
	var prunedDeliveries int64
	for {
		now := d.now()
		until := now.Add(d.cfg.lease())
		d.renewLeases(ctx, ws, now, until)
		d.startWorkers(ctx, ws, now, until)
		prunedDeliveries = d.pruneDeliveries(ctx, prunedDeliveries)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case id := <-ws.exited:
			ws.workers[id].cancel()
			delete(ws.workers, id)
		}
	}
}

// workerSet is the dispatcher's running workers, one per subscription it
// holds the lease of, and where each says it has exited.
type workerSet struct {
	workers map[int64]*worker
	exited  chan int64
	wg      sync.WaitGroup
}

// freeLeftLeases frees, on SQLite, the leases a previous process left (see
// freeLeftWebhookLeases).
func (d *dispatcher) freeLeftLeases(ctx context.Context) {
	if n, err := d.st.freeLeftWebhookLeases(ctx); err != nil && ctx.Err() == nil {
		d.log.Warn("webhook leases of a previous process not freed; they are taken over when they expire", "err", err)
	} else if n > 0 {
		d.log.Info("webhook leases of a previous process taken over", "subscriptions", n)
	}
}

// renewLeases renews the leases of the running workers until until, and
// stops each worker whose lease was lost (deleted, taken over) or is about
// to expire while the database does not answer: before another replica
// could take over.
func (d *dispatcher) renewLeases(ctx context.Context, ws *workerSet, now, until time.Time) {
	if len(ws.workers) == 0 {
		return
	}
	held, err := d.st.renewWebhookLeases(ctx, d.owner, until)
	for id, w := range ws.workers {
		switch {
		case err == nil && held[id]:
			w.leaseUntil = until
		case err == nil, !now.Add(d.cfg.tick()).Before(w.leaseUntil):
			w.cancel()
		}
	}
	if err != nil && ctx.Err() == nil {
		d.log.Warn("webhook leases not renewed", "err", err)
	}
}

// startWorkers starts a worker for each subscription with deliveries due
// whose lease this dispatcher takes.
func (d *dispatcher) startWorkers(ctx context.Context, ws *workerSet, now, until time.Time) {
	ids, err := d.st.webhookCandidates(ctx, d.owner, now)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("webhook subscriptions not read", "err", err)
		}
		return
	}
	for _, id := range ids {
		if ws.workers[id] != nil {
			continue
		}
		if ok, err := d.st.takeWebhookLease(ctx, id, d.owner, until, now); err != nil || !ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		ws.workers[id] = &worker{cancel: cancel, leaseUntil: until}
		ws.wg.Go(func() {
			defer func() { ws.exited <- id }()
			d.deliverAll(wctx, id)
			if ctx.Err() == nil && wctx.Err() == nil {
				// Stopped by itself (paused, failing): the lease goes, so
				// that any replica takes the subscription when it is
				// active again.
				d.st.releaseWebhookLeases(ctx, d.owner, id)
			}
		})
	}
}

// stopWorkers stops every worker, waits for them, and releases the
// dispatcher's leases, so that another replica need not wait for them to
// expire.
func (d *dispatcher) stopWorkers(ctx context.Context, ws *workerSet) {
	for _, w := range ws.workers {
		w.cancel()
	}
	go func() { ws.wg.Wait(); close(ws.exited) }()
	for range ws.exited {
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.st.releaseWebhookLeases(rctx, d.owner, 0); err != nil {
		d.log.Warn("webhook leases not released; other replicas take them over when they expire", "err", err)
	}
}

// pruneDeliveries deletes the delivery log of the events pruned from the
// feed since done, the prune mark it last saw, and returns the mark.
func (d *dispatcher) pruneDeliveries(ctx context.Context, done int64) int64 {
	b, err := d.st.eventBounds(ctx)
	if err != nil || b.prunedThrough <= done {
		return done
	}
	if _, err := d.st.pruneDeliveries(ctx, b.prunedThrough); err != nil {
		if ctx.Err() == nil {
			d.log.Warn("webhook deliveries not pruned", "err", err)
		}
		return done
	}
	return b.prunedThrough
}

// sleep waits for d or the end of ctx, and reports whether ctx is still on.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// deliverAll delivers the subscription id's events, one at a time, until
// ctx ends (the lease is lost, or the dispatcher stops) or the subscription
// is no longer active.
func (d *dispatcher) deliverAll(ctx context.Context, id int64) {
	poll := d.cfg.tick()
	for ctx.Err() == nil {
		// Taken before reading, so that a commit after the read wakes
		// the wait below.
		wake := d.st.events.wait()
		// The feed's bounds before the subscription: every event up to
		// the end read was committed before the subscription was read, so
		// it goes to the URL in force when it occurred or a later one,
		// never to one that a PATCH answered before it had replaced. An
		// event after the end waits for the next turn, which reads the
		// subscription again. And a list that finds none of the
		// subscription's types up to the end may pass over all of them.
		b, err := d.st.eventBounds(ctx)
		if err != nil {
			sleep(ctx, poll)
			continue
		}
		w, err := d.st.getWebhook(ctx, id, nil)
		if errors.As(err, new(*notFoundError)) {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook subscription not read", "webhook", id, "err", err)
			}
			sleep(ctx, poll)
			continue
		}
		if d.afterRead != nil {
			d.afterRead()
		}
		if w.Status != webhookActive || w.leaseOwner != d.owner {
			return
		}
		if wait := w.nextAttemptAt.Sub(d.now()); !w.nextAttemptAt.IsZero() && wait > 0 {
			// Read again at least every poll: a new URL or a
			// re-activation retries at once.
			sleep(ctx, min(wait, poll))
			continue
		}
		if w.deliveredThrough < b.prunedThrough {
			reason := fmt.Sprintf("the events after %d up to %d were pruned (see -events-retention) before they could be delivered; PATCH status active to resume with the oldest event kept", w.deliveredThrough, b.prunedThrough)
			if err := d.st.failWebhook(ctx, d.owner, w, reason); err != nil {
				sleep(ctx, poll)
				continue
			}
			d.log.Warn("webhook subscription failing: its next events were pruned", "webhook", id, "delivered_through", w.deliveredThrough, "pruned_through", b.prunedThrough)
			continue
		}
		types := subscribedTypes(w.Patterns)
		events, err := d.st.listEvents(ctx, w.deliveredThrough, 1, types)
		if err != nil {
			sleep(ctx, poll)
			continue
		}
		if len(events) == 1 {
			// An event after the end was committed after the
			// subscription was read: the next turn reads it again first.
			if events[0].ID <= b.end {
				d.attempt(ctx, w, events[0])
			}
			continue
		}
		if types != nil && b.end > w.deliveredThrough {
			if err := d.st.passOverEvents(ctx, d.owner, id, b.end); err != nil && ctx.Err() == nil {
				d.log.Warn("webhook cursor not moved past events of other types", "webhook", id, "err", err)
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// subscribedTypes are the event types of a subscription's patterns, nil
// for every type.
func subscribedTypes(patterns []string) []string {
	types, _, _ := expandEventTypes(patterns, true)
	if len(types) == len(eventTypes) {
		return nil
	}
	return types
}

// attemptResult is what one POST to a receiver came to.
type attemptResult struct {
	status     int    // 0: no HTTP answer
	errText    string // "" when an answer came that says it all
	refused    bool   // the guard refused the address
	retryAfter time.Duration
	duration   time.Duration
}

// attempt sends ev to the subscription w once and records the attempt.
func (d *dispatcher) attempt(ctx context.Context, w webhook, ev Event) {
	n := w.attempts + 1
	started := d.now()
	d.inFlight.Add(1)
	res := d.send(ctx, w, ev, started)
	d.inFlight.Add(-1)
	if ctx.Err() != nil {
		// Stopping, or the lease may be lost: the attempt is not
		// recorded, and the event is sent again by the next holder.
		return
	}
	dl := delivery{EventID: ev.ID, Attempt: n, StartedAt: started, Duration: res.duration, StatusCode: res.status, Error: res.errText}
	var out attemptOutcome
	result := "failed"
	switch {
	case res.status >= 200 && res.status < 300:
		out.delivered, result = true, "delivered"
	case res.status == http.StatusGone:
		out.giveUp = "the receiver answered 410 Gone for event " + strconv.FormatInt(ev.ID, 10) + ": the endpoint says it no longer exists; PATCH status active to resume"
	default:
		first := w.firstFailureAt
		if first.IsZero() {
			first = started
		}
		out.firstFailureAt = first
		now := d.now()
		if !now.Before(first.Add(d.cfg.giveUp)) {
			out.giveUp = fmt.Sprintf("event %d was not delivered in %v after its first failure (%d attempts; the last: %s); PATCH status active to resume", ev.ID, d.cfg.giveUp, n, res.describe())
		} else {
			next := now.Add(d.delay(n, res.retryAfter))
			if limit := first.Add(d.cfg.giveUp); next.After(limit) {
				next = limit // one last attempt when the time is up
			}
			out.nextAttemptAt, dl.NextAttemptAt = next, next
		}
	}
	if res.refused {
		result = "refused"
	}
	d.deliveries.WithLabelValues(result).Inc()
	if !out.delivered {
		attrs := []any{"webhook", w.ID, "event", ev.ID, "attempt", n, "host", hostOf(w.URL), "status", res.status, "err", res.errText}
		if !out.nextAttemptAt.IsZero() {
			attrs = append(attrs, "next_attempt_at", out.nextAttemptAt.UTC().Format(timeLayout))
		}
		msg := "webhook delivery failed"
		if res.refused {
			msg = "webhook delivery refused: the address is not one webhooks may reach"
		}
		d.log.Warn(msg, attrs...)
		if out.giveUp != "" {
			d.log.Warn("webhook subscription failing", "webhook", w.ID, "reason", out.giveUp)
		}
	}
	if _, err := d.st.recordAttempt(ctx, d.owner, w, dl, out); err != nil && ctx.Err() == nil {
		d.log.Warn("webhook attempt not recorded; the event will be sent again", "webhook", w.ID, "event", ev.ID, "err", err)
		sleep(ctx, d.cfg.tick())
	}
}

// describe says what an attempt came to, for a reason.
func (r attemptResult) describe() string {
	if r.errText != "" {
		return r.errText
	}
	return "HTTP status " + strconv.Itoa(r.status)
}

// hostOf is the host of a subscription's URL, for the log: the path and
// query may hold a receiver's token.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// delay is how long to wait before attempt+1, after attempt failed:
// backoff doubled at each failure, at most maxWebhookBackoff, less up to a
// fifth at random (so that the retries of receivers that failed together
// spread out); or the receiver's Retry-After, within the same cap.
func (d *dispatcher) delay(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, maxWebhookBackoff)
	}
	b := d.cfg.backoff
	for i := 1; i < attempt && b < maxWebhookBackoff; i++ {
		b *= 2
	}
	b = min(b, maxWebhookBackoff)
	return b - time.Duration(mathrand.Int64N(int64(b/5)+1))
}

// send POSTs ev to the subscription w, signed at the instant at, and reads
// at most maxWebhookResponseBody of the answer, all within the timeout.
func (d *dispatcher) send(ctx context.Context, w webhook, ev Event, at time.Time) (res attemptResult) {
	start := time.Now()
	defer func() { res.duration = time.Since(start) }()
	actx, cancel := context.WithTimeout(ctx, d.cfg.timeout)
	defer cancel()
	body := appendEvent(make([]byte, 0, 256+len(ev.Data)), ev)
	req, err := http.NewRequestWithContext(actx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return attemptResult{errText: "the URL cannot be requested"}
	}
	id, ts := strconv.FormatInt(ev.ID, 10), strconv.FormatInt(at.Unix(), 10)
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", d.userAgent)
	// The specification's names, lowercase as it writes them (header
	// names are case-insensitive; HTTP/2 sends them lowercase anyway).
	h["webhook-id"] = []string{id}
	h["webhook-timestamp"] = []string{ts}
	h["webhook-signature"] = []string{signatures(w, at, id, ts, body)}
	resp, err := d.client.Do(req)
	if err != nil {
		return attemptError(err, actx, ctx, d.cfg.timeout)
	}
	defer resp.Body.Close()
	// Only a bounded prefix is read; a receiver that trickles its body is
	// cut by the timeout. The status alone decides the outcome.
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookResponseBody))
	res.status = resp.StatusCode
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.errText = fmt.Sprintf("redirect not followed: the receiver answered %d", resp.StatusCode)
		if loc := resp.Header.Get("Location"); loc != "" {
			res.errText += " to " + abbreviate(loc)
		}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return res
}

// attemptError says why a request got no answer: actx is the attempt's
// context, ctx the worker's.
func attemptError(err error, actx, ctx context.Context, timeout time.Duration) attemptResult {
	if ra, ok := errors.AsType[*refusedAddressError](err); ok {
		return attemptResult{errText: ra.Error(), refused: true}
	}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	switch {
	case ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return attemptResult{errText: fmt.Sprintf("timeout: no answer within %v", timeout)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return attemptResult{errText: "connection refused"}
	case errors.As(err, &dnsErr):
		return attemptResult{errText: "the host name does not resolve (" + abbreviate(dnsErr.Name) + ")"}
	case errors.As(err, &certErr), errors.As(err, &unknownAuthority), errors.As(err, &hostnameErr):
		return attemptResult{errText: "TLS: the receiver's certificate is not valid for its host"}
	case strings.Contains(err.Error(), "server response headers exceeded"):
		return attemptResult{errText: fmt.Sprintf("the answer's headers are larger than %d KiB", maxWebhookResponseHeader>>10)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return attemptResult{errText: "connection closed before an answer"}
	}
	// A *url.Error names the URL, which may hold a receiver's token.
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return attemptResult{errText: "connection failed: " + abbreviateLong(err.Error())}
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// abbreviateLong shortens a message to 200 bytes at most.
func abbreviateLong(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:200] + "..."
}

// parseRetryAfter reads a Retry-After value (seconds, or an HTTP date),
// 0 when there is none or it cannot be read.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, ok := parseDecimal(v); ok {
		return time.Duration(min(n, int64(maxWebhookBackoff/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// newWebhookSecret returns a new signing secret: whsec_ and the base64 of
// 32 random bytes.
func newWebhookSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// sign is the Standard Webhooks signature of a delivery under secret:
// "v1," and the base64 of the HMAC-SHA256, keyed with the secret's
// base64-decoded bytes, of "<webhook-id>.<webhook-timestamp>.<body>".
func sign(secret, id, ts string, body []byte) string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signatures is the webhook-signature header of a delivery of w at the
// instant at: the current secret's signature, and during the overlap after
// a rotation the previous secret's too, separated by a space.
func signatures(w webhook, at time.Time, id, ts string, body []byte) string {
	s := sign(w.secret, id, ts, body)
	if w.previousSecret != "" && at.Before(w.previousUntil) {
		s += " " + sign(w.previousSecret, id, ts, body)
	}
	return s
}

// backlog emits the age of each subscription's oldest undelivered event,
// when Prometheus scrapes: at most maxWebhooks subscriptions, one indexed
// read each.
func (d *dispatcher) backlog(ctx context.Context, emit func(float64, ...string)) error {
	p, err := d.st.listWebhooks(ctx, "", pageRequest{limit: maxWebhooks}, nil)
	if err != nil {
		return err
	}
	now := d.now()
	for _, w := range p.items {
		events, err := d.st.listEvents(ctx, w.deliveredThrough, 1, subscribedTypes(w.Patterns))
		if err != nil {
			return err
		}
		age := 0.0
		if len(events) > 0 {
			age = max(0, now.Sub(events[0].OccurredAt).Seconds())
		}
		emit(age, strconv.FormatInt(w.ID, 10))
	}
	return nil
}
