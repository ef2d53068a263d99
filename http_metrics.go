package main

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the service's Prometheus metrics, in a registry of its own
// (not the library's global one, so that tests can run several servers).
type metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	deprecated *prometheus.CounterVec
	orders     *prometheus.CounterVec
	authFails  *prometheus.CounterVec
	forbidden  *prometheus.CounterVec
	plain      prometheus.Counter

	// byRoute keeps the counter and histogram of each route, status and
	// outcome once found, so that a request costs one map lookup, not the
	// labels' hashing of two WithLabelValues and the status written as a
	// string; deprecatedBy does the same for the deprecated calls by
	// operation and caller.
	cacheMu      sync.RWMutex
	byRoute      map[routeStatus]requestObservers
	deprecatedBy map[[2]string]prometheus.Counter
}

// routeStatus is a route, a status of its answers and their outcome.
type routeStatus struct {
	route   string
	status  int
	outcome string
}

// requestObservers are the metrics of the requests of one routeStatus.
type requestObservers struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// newMetrics registers every metric; st supplies the pet counts and the
// database error count when Prometheus scrapes.
func newMetrics(st *store) *metrics {
	m := &metrics{
		byRoute:      map[routeStatus]requestObservers{},
		deprecatedBy: map[[2]string]prometheus.Counter{},
		registry:     prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petstore_http_requests_total",
			Help: "HTTP requests answered, by route (the mux pattern, or unmatched), status code and outcome (forbidden for a 403 for a scope the key lacks, else empty).",
		}, []string{"route", "code", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "petstore_http_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its handler, by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		deprecated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petstore_deprecated_calls_total",
			Help: "Authenticated calls to deprecated operations, by operation and caller label: who still has to migrate.",
		}, []string{"operation", "caller"}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petstore_order_transitions_total",
			Help: "Orders placed (from \"new\") and changed, by the status they left and the one they reached.",
		}, []string{"from", "to"}),
		authFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petstore_auth_failures_total",
			Help: "Requests without a valid API key, by answer: unauthorized (401), invalid_header (400, two Authorization headers) or throttled (429, too many from one address). Their access log lines are sampled; this counts them all.",
		}, []string{"answer"}),
		forbidden: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petstore_forbidden_total",
			Help: "Requests with a valid API key refused 403 (outcome forbidden) for lacking a scope, by caller label and the scope lacked (empty when the answer did not name it).",
		}, []string{"caller", "scope"}),
	}
	m.plain = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "petstore_plain_http_refused_total",
		Help: "Requests refused on the plain listener beside HTTPS (403 https_required): carrying credentials in any form, under /v1 in any spelling, or not a GET or HEAD of a page. A rise means clients still send keys in clear.",
	})
	m.registry.MustRegister(
		m.plain,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.deprecated, m.orders, m.authFails, m.forbidden,
		// The writes keep the pets' counts (migration 0005), so a scrape
		// reads a few dozen rows, not the catalogue, and start-up counts
		// nothing; the idempotency records are counted the same way
		// (migration 0006).
		readCollector{desc: prometheus.NewDesc("petstore_pets", "Pets stored, by status.", []string{"status"}, nil),
			read: func(ctx context.Context, emit func(float64, ...string)) error {
				counts, err := st.countByStatus(ctx)
				for _, s := range petStatuses {
					emit(float64(counts[s]), s)
				}
				return err
			}},
		readCollector{desc: prometheus.NewDesc("petstore_idempotency_records", "Idempotency records stored (each about 1.1 KB), expired ones not yet pruned included.", nil, nil),
			read: func(ctx context.Context, emit func(float64, ...string)) error {
				n, err := st.countIdempotencyRecords(ctx)
				emit(float64(n))
				return err
			}},
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "petstore_db_errors_total",
			Help: "Database operations that failed (a missing pet is not a failure).",
		}, func() float64 { return float64(st.errorCount()) }),
		// Group commit: writes over commits is how many writes shared each
		// commit's fsync. Under concurrent writes it stays near the number
		// of clients writing; near 1, every write is paying an fsync alone.
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "petstore_write_commits_total",
			Help: "Transactions the writer committed: on SQLite each waits for one fsync, shared by the writes of its batch.",
		}, func() float64 { return float64(st.commits.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "petstore_writes_committed_total",
			Help: "Writes (a create, a change, an order...) in the transactions the writer committed; over petstore_write_commits_total, the writes a commit.",
		}, func() float64 { return float64(st.committedWrites.Load()) }),
	)
	if st.replica != nil {
		m.watchReplica(st.replica)
	}
	return m
}

// watchBodyBudget reports the bytes of request bodies held in memory (see
// bodyBudget): an operator sees how close the service runs to its budget,
// past which creates and changes answer 503.
func (m *metrics) watchBodyBudget(b *bodyBudget) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "petstore_request_body_bytes",
		Help: "Bytes of request bodies held in memory now, by all requests together (bounded by -max-body-memory).",
	}, func() float64 { return float64(b.held()) }))
}

// watchReplica reports how far the replica in object storage is behind
// (-replicate): the age of the oldest commit not in it, when it was last
// written, and the failures to write it.
func (m *metrics) watchReplica(r *replicator) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "petstore_replica_lag_seconds",
			Help: "Age of the oldest commit not yet in the replica; 0 when it is caught up. What losing the VM now would lose.",
		}, func() float64 { return r.lag(time.Now()).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "petstore_replica_last_sync_timestamp_seconds",
			Help: "When the last successful upload to the replica began (Unix time).",
		}, func() float64 { return float64(r.lastSyncTime().UnixNano()) / 1e9 }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "petstore_replica_errors_total",
			Help: "Uploads to the replica that failed (the store unreachable, or the lease lost); each is retried.",
		}, func() float64 { return float64(r.errorCount()) }),
		r.waits,
	)
}

// watchConns reports the open connections and those closed to make room for
// new ones (see connLimiter): a count of shed connections that keeps rising
// says the cap is held by idle clients, or too low.
func (m *metrics) watchConns(cl *connLimiter) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "petstore_connections_open",
			Help: "HTTP connections open now (bounded by -max-conns).",
		}, func() float64 { return float64(cl.openConns()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "petstore_connections_shed_total",
			Help: "Connections without a request in progress closed to make room for a new one, the cap of open connections being reached.",
		}, func() float64 { return float64(cl.shed.Load()) }),
	)
}

// watchKeys reports when each API key of kr that expires does: an alert can
// fire days before a client is locked out. Keys are named by label and id
// (see keyEntry.shortID), never by anything derived from the key alone.
func (m *metrics) watchKeys(kr keyring) {
	m.registry.MustRegister(keyExpiryCollector{keys: kr, desc: prometheus.NewDesc("petstore_api_key_expiry_timestamp_seconds",
		"When each API key that expires does, in seconds since 1970 (UTC), by its caller label and id; keys that never expire are not listed.",
		[]string{"caller", "id"}, nil)})
}

// keyExpiryCollector reports the expiry of the current keys at each scrape,
// so that a reload shows at once.
type keyExpiryCollector struct {
	keys keyring
	desc *prometheus.Desc
}

func (c keyExpiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c keyExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{} // a key listed twice is reported once
	for _, e := range c.keys.keys().entries {
		if e.expires.IsZero() || seen[e.label+" "+e.shortID()] {
			continue
		}
		seen[e.label+" "+e.shortID()] = true
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(e.expires.Unix()), e.label, e.shortID())
	}
}

// keyForbidden counts a request refused for lacking a scope, by its key's
// caller label and the scope, "" when the answer did not name it.
func (m *metrics) keyForbidden(caller string, need scope) {
	m.forbidden.WithLabelValues(caller, string(need)).Inc()
}

// countConnectionErrors registers petstore_connection_errors_total, each
// of its kinds at 0, and returns what counts one failure of a kind (see
// connFailures).
func (m *metrics) countConnectionErrors() func(kind string) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "petstore_connection_errors_total",
		Help: "Failures below the handlers, by kind: TLS handshakes that failed (tls_handshake), HTTP/2 connection errors (http2), other errors net/http's servers log (http), failures of the certificates' engine that name a client (acme: a challenge it could not answer), and handler panics that net/http caught (panic). Their log lines are sampled, but panics'; this counts them all.",
	}, []string{"kind"})
	m.registry.MustRegister(c)
	for _, kind := range []string{connErrorTLSHandshake, connErrorHTTP2, connErrorHTTP, connErrorACME, connErrorPanic} {
		c.WithLabelValues(kind)
	}
	return func(kind string) { c.WithLabelValues(kind).Inc() }
}

// plainRefused counts a request refused on the plain listener beside HTTPS.
func (m *metrics) plainRefused() { m.plain.Inc() }

// watchCertificates reports when each certificate the service serves
// expires, by name, read at each scrape: an alert can fire while renewals
// fail.
func (m *metrics) watchCertificates(expiries func() map[string]time.Time) {
	desc := prometheus.NewDesc("petstore_tls_certificate_expiry_timestamp_seconds",
		"When the TLS certificate served for each name expires, in seconds since 1970 (UTC); a name without a certificate yet is not listed.", []string{"name"}, nil)
	m.registry.MustRegister(readCollector{desc: desc, read: func(_ context.Context, emit func(float64, ...string)) error {
		for name, at := range expiries() {
			emit(float64(at.Unix()), name)
		}
		return nil
	}})
}

// authFailed counts a request without a valid key by its answer.
func (m *metrics) authFailed(answer string) { m.authFails.WithLabelValues(answer).Inc() }

// orderPlaced counts an order placed.
func (m *metrics) orderPlaced() { m.orders.WithLabelValues("new", orderPlaced).Inc() }

// orderChanged counts an order moved from one status to another.
func (m *metrics) orderChanged(from, to string) { m.orders.WithLabelValues(from, to).Inc() }

// deprecatedCall counts an authenticated call of a deprecated operation by
// its caller's label.
func (m *metrics) deprecatedCall(operation, caller string) {
	key := [2]string{operation, caller}
	m.cacheMu.RLock()
	c, ok := m.deprecatedBy[key]
	m.cacheMu.RUnlock()
	if !ok {
		c = m.deprecated.WithLabelValues(operation, caller)
		m.cacheMu.Lock()
		m.deprecatedBy[key] = c
		m.cacheMu.Unlock()
	}
	c.Inc()
}

// observeRequest records one answered request.
func (m *metrics) observeRequest(route string, status int, outcome string, elapsed time.Duration) {
	key := routeStatus{route: route, status: status, outcome: outcome}
	m.cacheMu.RLock()
	o, ok := m.byRoute[key]
	m.cacheMu.RUnlock()
	if !ok {
		o = requestObservers{requests: m.requests.WithLabelValues(route, strconv.Itoa(status), outcome), duration: m.duration.WithLabelValues(route)}
		m.cacheMu.Lock()
		m.byRoute[key] = o
		m.cacheMu.Unlock()
	}
	o.requests.Inc()
	o.duration.Observe(elapsed.Seconds())
}

// handler serves the metrics in the Prometheus text format. A metric that
// cannot be gathered (the pet counts, when the database is down) is left out
// rather than failing the whole scrape; the failure shows in
// petstore_db_errors_total. Like every answer with a body, it carries
// nosniff: a browser must not guess another type than the one declared.
func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// readCollector reports a gauge that read computes from the database when
// Prometheus scrapes, within readyTimeout. When read fails, the gauge is an
// invalid metric (what it emitted is dropped), so that the rest of the
// scrape goes on and the failure shows in petstore_db_errors_total.
type readCollector struct {
	desc *prometheus.Desc
	read func(ctx context.Context, emit func(value float64, labels ...string)) error
}

func (c readCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c readCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var read []prometheus.Metric
	err := c.read(ctx, func(value float64, labels ...string) {
		read = append(read, prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, value, labels...))
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, m := range read {
		ch <- m
	}
}
