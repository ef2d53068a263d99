package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// requestInfo is what the middlewares learn about a request on its way down
// the handler chain, for the access log and the metrics on its way back.
type requestInfo struct {
	id     string // echoed in X-Request-Id
	route  string // the mux pattern that served it; "" when none did
	caller string // the label of its API key, once authenticated
	// gone says the client went away before its answer (see clientGone):
	// nothing was sent, and the request is counted as statusClientGone.
	gone bool
	// authFailed says the request had no valid key; client is the address
	// it came from (see clientAddr), logged with it.
	authFailed bool
	client     string
	// forbidden says the key was valid but lacked a scope: the answer is a
	// 403 insufficient_scope, which writeError marks whoever wrote it. Its
	// outcome is "forbidden" in the access log and the metrics, and lacked
	// is the scope, when the answer named it (writeInsufficientScope).
	forbidden bool
	lacked    scope
	// keyID and scopes are the identity and the scopes of the API key that
	// authenticated the request (see keyIdentity and callerScopes), when
	// keyed says one did. They are kept here, not in context values of
	// their own, so that admitting a request costs no copy of it.
	keyID  [sha256.Size]byte
	scopes scopeSet
	keyed  bool
	// lease is the request's lease on the bodies' budget (see
	// budgetBodies), when its budget is set.
	lease bodyLease
}

// observedRequest is what observe keeps of one request, made in one
// allocation: its info, the writer that records its status, and the value
// of its X-Request-Id header.
type observedRequest struct {
	info     requestInfo
	sw       statusWriter
	idHeader [1]string
}

// The access log lines of requests without a valid key are sampled: at most
// authFailureLogRate a second, in bursts of authFailureLogBurst, so that a
// guesser cannot fill the disk (one wrote 24 MB in 13 s). The next line
// logged says how many were left out; petstore_auth_failures_total counts
// them all. The lines of failures below the handlers (a failed TLS
// handshake, see connFailures) are sampled by the same rule.
const (
	authFailureLogRate  = 10
	authFailureLogBurst = 50
)

// sampledLines is the sampling of a kind of failure line: at most
// authFailureLogRate a second, in bursts of authFailureLogBurst, each line
// logged telling how many were left out since the one before.
type sampledLines struct {
	limiter  *rate.Limiter
	unlogged atomic.Int64
}

// newSampledLines starts a sampling with its burst whole.
func newSampledLines() *sampledLines {
	return &sampledLines{limiter: rate.NewLimiter(authFailureLogRate, authFailureLogBurst)}
}

// take reports whether a line may be logged now and, when it may, how many
// were left out before it; a line that may not is counted as left out.
func (s *sampledLines) take() (ok bool, unlogged int64) {
	if !s.limiter.Allow() {
		s.unlogged.Add(1)
		return false, 0
	}
	return true, s.unlogged.Swap(0)
}

// statusClientGone is the status the access log and the metrics give a
// request whose client went away before it was answered. No answer is sent
// (no one is there to read it); it is counted apart from the server's
// errors, under nginx's code for a closed client request.
const statusClientGone = 499

// outcomeForbidden is the outcome of a request whose valid key lacked a
// scope (see requestInfo.forbidden): the access log's outcome attribute and
// the outcome label of petstore_http_requests_total. Every other request has
// none.
const outcomeForbidden = "forbidden"

// requestInfoKey is the context key of the *requestInfo.
type requestInfoKey struct{}

// requestInfoFrom returns the request's *requestInfo, or nil outside observe.
func requestInfoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return info
}

// maxRequestIDLen bounds an incoming X-Request-Id; longer ones are replaced.
const maxRequestIDLen = 128

// requestID returns the incoming id when it is sane (1 to 128 characters
// among letters, digits and "._:-", which covers UUIDs, ULIDs and hex ids),
// and a fresh random one otherwise, so that an id never carries spaces,
// quotes or control characters into logs and headers.
func requestID(incoming string) string {
	if len(incoming) >= 1 && len(incoming) <= maxRequestIDLen &&
		strings.Trim(incoming, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == "" {
		return incoming
	}
	return newRequestID()
}

// requestIDAlphabet is RFC 4648's base32 alphabet, which crypto/rand.Text
// writes too.
const requestIDAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// newRequestID returns a fresh request id: 26 characters of the base32
// alphabet, 130 random bits, the shape of crypto/rand.Text. Its bits come
// from math/rand/v2, the runtime's per-thread ChaCha8 generator, seeded
// from the system's random source: an id must not repeat, but needs no
// secrecy (a client may send its own, which is echoed), and taking them
// from crypto/rand was 8% of the CPU of a cached getPet (the profile of
// BenchmarkHandlerChain).
func newRequestID() string {
	var id [26]byte
	var bits uint64
	for i := range id {
		if i%12 == 0 { // 12 characters of 5 bits use 60 of a draw's 64
			bits = mrand.Uint64()
		}
		id[i] = requestIDAlphabet[bits&31]
		bits >>= 5
	}
	return string(id[:])
}

// observe gives each request an id, then writes one access log line and
// records the metrics once the request is answered. Health checks are logged
// at debug level only: probes call them every few seconds.
func observe(log *slog.Logger, m *metrics, next http.Handler) http.Handler {
	failureLines := newSampledLines()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		o := &observedRequest{info: requestInfo{id: requestID(r.Header.Get("X-Request-Id"))}, sw: statusWriter{ResponseWriter: w}}
		info, sw := &o.info, &o.sw
		o.idHeader[0] = info.id
		w.Header()["X-Request-Id"] = o.idHeader[:] // the canonical name, as Set would write it
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info))
		next.ServeHTTP(sw, r)

		elapsed := time.Since(start)
		status := sw.status
		switch {
		case info.gone:
			status = statusClientGone
		case status == 0:
			status = http.StatusOK // nothing written: net/http sends 200
		}
		route := info.route
		if route == "" {
			route = "unmatched"
		}
		outcome := ""
		if info.forbidden {
			outcome = outcomeForbidden
			m.keyForbidden(info.caller, info.lacked)
		}
		m.observeRequest(route, status, outcome, elapsed)
		level := slog.LevelInfo
		if route == "GET /healthz" || route == "GET /readyz" {
			level = slog.LevelDebug
		}
		var unlogged int64
		if info.authFailed {
			var ok bool
			if ok, unlogged = failureLines.take(); !ok {
				return
			}
		}
		ctx := r.Context()
		h := log.Handler()
		if !h.Enabled(ctx, level) {
			return
		}
		// Its time is the end of the request, taken above.
		line := accessLine{
			at: start.Add(elapsed), level: level,
			method: abbreviate(r.Method), path: abbreviate(r.URL.Path),
			status: status, bytes: sw.bytes, duration: elapsed,
			requestID: info.id, caller: info.caller,
			forbidden: info.forbidden, authFailed: info.authFailed,
		}
		if info.authFailed {
			line.client = info.client
			line.unloggedAuthFailures = unlogged
		}
		logAccess(ctx, h, &line)
	})
}

// statusWriter records the status and the number of body bytes written.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
