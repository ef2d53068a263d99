package main

import (
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// rateLimiter keeps one token bucket per API key. Only requests that passed
// the key check reach it, so it holds at most one bucket per configured key.
type rateLimiter struct {
	limit rate.Limit // tokens per second; 0 means no limit at all
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[[sha256.Size]byte]*rate.Limiter
}

// newRateLimiter returns a limiter of perSecond requests per second per key,
// with bursts of burst; perSecond 0 turns it off.
func newRateLimiter(perSecond float64, burst int, now func() time.Time) *rateLimiter {
	return &rateLimiter{limit: rate.Limit(perSecond), burst: burst, now: now, buckets: map[[sha256.Size]byte]*rate.Limiter{}}
}

// bucket returns the token bucket of the API key with the given identity
// (see keyIdentity).
func (rl *rateLimiter) bucket(key [sha256.Size]byte) *rate.Limiter {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	b, ok := rl.buckets[key]
	if !ok {
		b = rate.NewLimiter(rl.limit, rl.burst)
		rl.buckets[key] = b
	}
	return b
}

// limitRate answers 429 with Retry-After when the request's API key has
// spent its budget, and passes the request to next otherwise. It must run
// inside requireKey, which names the key.
func limitRate(rl *rateLimiter, log *slog.Logger, next http.Handler) http.Handler {
	if rl.limit == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := keyIdentity(r.Context())
		now := rl.now()
		res := rl.bucket(key).ReserveN(now, 1)
		if wait := res.DelayFrom(now); wait > 0 {
			// The request is refused, so it must not spend a token.
			res.CancelAt(now)
			seconds := retryAfterSeconds(wait)
			w.Header().Set("Retry-After", strconv.Itoa(seconds))
			writeError(w, r, log, errorf(codeRateLimited, "this API key sent more than %g requests per second (bursts of %d); retry after %d s", float64(rl.limit), rl.burst, seconds))
			return
		}
		next.ServeHTTP(w, r)
	})
}
