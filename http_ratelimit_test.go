package main

import (
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, time.March, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	ts := newTestServer(t, withClock(clock.now), withLimits(limits{idempotencyTTL: time.Hour, rateLimit: 2, rateBurst: 3}))
	other := map[string]string{"Authorization": "Bearer " + otherTestKey}
	noKey := map[string]string{"Authorization": ""}

	wantAllowed := func(t *testing.T, n int, hdr map[string]string) {
		t.Helper()
		for i := range n {
			if res := ts.do(t, "GET", "/v1/pets", "", hdr); res.Status != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200; body %s", i+1, res.Status, res.Body)
			}
		}
	}
	wantLimited := func(t *testing.T, hdr map[string]string, retryAfter string) {
		t.Helper()
		res := ts.do(t, "GET", "/v1/pets", "", hdr)
		wantError(t, res, http.StatusTooManyRequests, codeRateLimited, "per second", "retry after")
		if got := res.Header.Get("Retry-After"); got != retryAfter {
			t.Errorf("Retry-After = %q, want %q", got, retryAfter)
		}
	}

	t.Run("a key may spend its burst, then is refused with 429 and Retry-After", func(t *testing.T) {
		wantAllowed(t, 3, nil)
		wantLimited(t, nil, "1")
	})
	t.Run("refused requests spend nothing", func(t *testing.T) {
		for range 5 {
			wantLimited(t, nil, "1")
		}
		clock.set(start.Add(500 * time.Millisecond)) // one token at 2/s
		wantAllowed(t, 1, nil)
		wantLimited(t, nil, "1")
	})
	t.Run("every route behind the key counts, creates and unknown paths included", func(t *testing.T) {
		clock.set(start.Add(time.Second)) // one more token
		res := ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, nil)
		if res.Status != http.StatusCreated {
			t.Fatalf("status %d, body %s", res.Status, res.Body)
		}
		wantError(t, ts.do(t, "GET", "/v1/nowhere", "", nil), http.StatusTooManyRequests, codeRateLimited)
	})
	t.Run("another key has its own budget", func(t *testing.T) {
		wantAllowed(t, 3, other)
		wantLimited(t, other, "1")
	})
	t.Run("a request without a valid key is 401, not 429", func(t *testing.T) {
		wantError(t, ts.do(t, "GET", "/v1/pets", "", noKey), http.StatusUnauthorized, codeUnauthorized)
	})
	t.Run("health checks are never limited", func(t *testing.T) {
		for range 20 {
			for _, path := range []string{"/healthz", "/readyz"} {
				if res := ts.do(t, "GET", path, "", noKey); res.Status != http.StatusOK {
					t.Fatalf("GET %s: status %d, want 200", path, res.Status)
				}
			}
		}
	})
	t.Run("the budget refills at the rate, up to the burst", func(t *testing.T) {
		clock.set(start.Add(time.Hour))
		wantAllowed(t, 3, nil)
		wantLimited(t, nil, "1")
	})
}

func TestRateLimitIsOffByDefault(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	for i := range 200 {
		if res := ts.do(t, "GET", "/v1/pets", "", nil); res.Status != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200; body %s", i+1, res.Status, res.Body)
		}
	}
}

func TestParseConfigLimits(t *testing.T) {
	t.Parallel()
	// defaults fills in the limits a row does not set, as the defaults do.
	defaults := func(l limits) limits {
		if l.maxBodyMemory == 0 {
			l.maxBodyMemory = defaultMaxBodyMemory
		}
		if l.authFailures == 0 {
			l.authFailures = defaultAuthFailures
		}
		if l.maxHeaderBytes == 0 {
			l.maxHeaderBytes = defaultMaxHeaderBytes
		}
		return l
	}
	tests := []struct {
		rule string
		env  map[string]string
		args []string
		want limits
	}{
		{"defaults: keys kept 24 h, no rate limit", nil, nil, limits{idempotencyTTL: 24 * time.Hour}},
		{"flags", nil, []string{"-idempotency-ttl", "90m", "-rate-limit", "10", "-rate-burst", "25"}, limits{idempotencyTTL: 90 * time.Minute, rateLimit: 10, rateBurst: 25}},
		{"environment", map[string]string{"PETSTORE_IDEMPOTENCY_TTL": "1h", "PETSTORE_RATE_LIMIT": "0.5", "PETSTORE_RATE_BURST": "2"}, nil, limits{idempotencyTTL: time.Hour, rateLimit: 0.5, rateBurst: 2}},
		{"a flag wins over its variable", map[string]string{"PETSTORE_RATE_LIMIT": "5"}, []string{"-rate-limit", "7"}, limits{idempotencyTTL: 24 * time.Hour, rateLimit: 7, rateBurst: 7}},
		{"the burst defaults to the rate rounded up", nil, []string{"-rate-limit", "2.5"}, limits{idempotencyTTL: 24 * time.Hour, rateLimit: 2.5, rateBurst: 3}},
		{"a rate below 1 has a burst of 1", nil, []string{"-rate-limit", "0.1"}, limits{idempotencyTTL: 24 * time.Hour, rateLimit: 0.1, rateBurst: 1}},
		{"the body budget, the failures an address may make and the trusted proxies",
			map[string]string{"PETSTORE_MAX_BODY_MEMORY": "4194304", "PETSTORE_TRUSTED_PROXIES": " 10.0.0.0/8, 192.0.2.7 ,2001:db8::/32,::ffff:198.51.100.1"},
			[]string{"-auth-failure-limit", "5"},
			limits{idempotencyTTL: 24 * time.Hour, maxBodyMemory: 4 << 20, authFailures: 5, trustedProxies: trustedProxies{
				netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("198.51.100.1/32"),
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			env := map[string]string{"PETSTORE_DB": filepath.Join(t.TempDir(), "x.db")}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := parseConfig(tt.args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if diff := cmp.Diff(defaults(tt.want), cfg.limits, cmp.AllowUnexported(limits{}), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("limits mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
