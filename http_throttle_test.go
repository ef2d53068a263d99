package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFailedAuthenticationIsThrottledPerAddress(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, time.March, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	// The test's requests all come from 127.0.0.1, a trusted proxy here:
	// X-Forwarded-For says which client each one stands for.
	proxies, err := parseTrustedProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, withClock(clock.now), withLimits(limits{idempotencyTTL: time.Hour, authFailures: 5, trustedProxies: proxies}))
	from := func(client, key string) response {
		t.Helper()
		hdr := map[string]string{"X-Forwarded-For": client, "Authorization": ""}
		if key != "" {
			hdr["Authorization"] = "Bearer " + key
		}
		return ts.do(t, "GET", "/v1/pets", "", hdr)
	}
	wantRefused := func(t *testing.T, res response, status int, retryAfter string) {
		t.Helper()
		if status == http.StatusTooManyRequests {
			wantError(t, res, status, codeRateLimited, "valid API key", "retry after")
		} else {
			wantError(t, res, status, codeUnauthorized)
		}
		if got := res.Header.Get("Retry-After"); got != retryAfter {
			t.Errorf("Retry-After = %q, want %q", got, retryAfter)
		}
	}

	t.Run("an address may fail its burst, then is answered 429 with Retry-After", func(t *testing.T) {
		for range 5 {
			wantRefused(t, from("203.0.113.1", "wrong-key"), http.StatusUnauthorized, "")
		}
		// 5 a minute: the next failure is allowed in 12 s.
		wantRefused(t, from("203.0.113.1", "wrong-key"), http.StatusTooManyRequests, "12")
		wantRefused(t, from("203.0.113.1", ""), http.StatusTooManyRequests, "12")
	})
	t.Run("a valid key from the same address is never throttled", func(t *testing.T) {
		for range 10 {
			if res := from("203.0.113.1", testKey); res.Status != http.StatusOK {
				t.Fatalf("status %d, want 200", res.Status)
			}
		}
	})
	t.Run("another address has its own budget", func(t *testing.T) {
		wantRefused(t, from("203.0.113.2", "wrong-key"), http.StatusUnauthorized, "")
	})
	t.Run("refused failures spend nothing: the budget refills at its rate", func(t *testing.T) {
		clock.set(start.Add(12 * time.Second))
		wantRefused(t, from("203.0.113.1", "wrong-key"), http.StatusUnauthorized, "")
		wantRefused(t, from("203.0.113.1", "wrong-key"), http.StatusTooManyRequests, "12")
	})
	t.Run("an address written before the trusted proxies' own is ignored", func(t *testing.T) {
		// The client wrote 198.51.100.9; the proxy appended the address it
		// saw, 203.0.113.1, which is throttled.
		wantRefused(t, from("198.51.100.9, 203.0.113.1", "wrong-key"), http.StatusTooManyRequests, "12")
		// A chain of trusted proxies: the client is the last address that
		// is not one of them.
		wantRefused(t, from("203.0.113.1, 127.0.0.1", "wrong-key"), http.StatusTooManyRequests, "12")
	})
	t.Run("the addresses of one IPv6 /64 share a budget", func(t *testing.T) {
		for i := range 5 {
			wantRefused(t, from(fmt.Sprintf("2001:db8::%x", i+1), "wrong-key"), http.StatusUnauthorized, "")
		}
		wantRefused(t, from("2001:db8::ffff", "wrong-key"), http.StatusTooManyRequests, "12")
		wantRefused(t, from("[2001:db8:0:1::1]:4711", "wrong-key"), http.StatusUnauthorized, "")
	})
	t.Run("every failure is counted", func(t *testing.T) {
		body := ts.do(t, "GET", "/metrics", "", nil).Body
		got := map[string]float64{}
		for _, answer := range []string{codeUnauthorized, "throttled"} {
			got[answer] = metricValue(t, body, "petstore_auth_failures_total", map[string]string{"answer": answer})
		}
		if diff := cmp.Diff(map[string]float64{codeUnauthorized: 13, "throttled": 6}, got); diff != "" {
			t.Errorf("petstore_auth_failures_total mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestTheClientAddress(t *testing.T) {
	t.Parallel()
	proxies, err := parseTrustedProxies("10.0.0.0/8, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rule, remote string
		forwarded    []string // X-Forwarded-For lines
		want         string
	}{
		{"a client connected directly", "203.0.113.1:5000", nil, "203.0.113.1"},
		{"X-Forwarded-For from an untrusted peer is ignored", "203.0.113.1:5000", []string{"198.51.100.1"}, "203.0.113.1"},
		{"a trusted proxy names the client", "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"through two trusted proxies", "192.0.2.7:5000", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"what the client wrote before is ignored", "10.1.2.3:5000", []string{"1.1.1.1, 2.2.2.2, 198.51.100.1"}, "198.51.100.1"},
		{"several header lines are one list", "10.1.2.3:5000", []string{"1.1.1.1", "198.51.100.1"}, "198.51.100.1"},
		{"an address with a port", "10.1.2.3:5000", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"a malformed entry stops at the last trusted proxy", "10.1.2.3:5000", []string{"198.51.100.1, not-an-address"}, "10.1.2.3"},
		{"a trusted proxy without X-Forwarded-For is the client", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"an IPv4-mapped peer is the IPv4 address", "[::ffff:192.0.2.7]:5000", []string{"198.51.100.1"}, "198.51.100.1"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.forwarded {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := clientAddr(r, proxies); got != netip.MustParseAddr(tt.want) {
				t.Errorf("clientAddr = %v, want %v", got, tt.want)
			}
		})
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", "10.0.0.1-10.0.0.9"} {
		if _, err := parseTrustedProxies(bad); err == nil {
			t.Errorf("parseTrustedProxies(%q) accepted it", bad)
		}
	}
}

func TestFailedAuthenticationLinesAreSampled(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t) // no throttle: every request is a 401
	// The failures come from several clients at once, faster than
	// authFailureLogRate even on a loaded machine, where one client
	// waiting for each answer may not be.
	guess := func(n int) {
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for range n / 10 {
					ts.do(t, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer wrong-key"})
				}
			})
		}
		wg.Wait()
	}
	start := time.Now()
	const failures = 300
	guess(failures)
	elapsed := time.Since(start)
	lines := func() []logRecord {
		return slices.DeleteFunc(ts.Log.find(t, "INFO", "request"), func(r logRecord) bool { return r["status"] != float64(http.StatusUnauthorized) })
	}
	logged := len(lines())
	most := authFailureLogBurst + int(elapsed.Seconds()*authFailureLogRate) + 1
	if logged > most || logged == 0 {
		t.Errorf("%d of %d failures logged in %v; want 1 to %d", logged, failures, elapsed, most)
	}
	// A line logged after them says how many were left out before it.
	sent := failures
	eventually(t, "a failure is logged with the count of those left out", func() bool {
		guess(20)
		sent += 20
		return slices.ContainsFunc(lines()[logged:], func(r logRecord) bool {
			n, _ := r["unlogged_auth_failures"].(float64)
			return n > 0
		})
	})
	if n := metricValue(t, ts.do(t, "GET", "/metrics", "", nil).Body, "petstore_auth_failures_total", map[string]string{"answer": codeUnauthorized}); n < float64(sent) {
		t.Errorf("petstore_auth_failures_total = %v, want at least %d", n, sent)
	}
}

func TestShortKeysAreReportedAtStartUp(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	rs := startRun(t, map[string]string{
		"PETSTORE_ADDR":     "127.0.0.1:0",
		"PETSTORE_DB":       dbPath,
		"PETSTORE_API_KEYS": "short-key," + testKey,
	}, "-log-format", "json")
	var reported []string
	for _, r := range rs.Stderr.find(t, "WARN", "an API key is shorter than 16 characters, short enough to guess: it is accepted, but replace it with a long random one (openssl rand -base64 32)") {
		reported = append(reported, r.field("caller"))
	}
	if diff := cmp.Diff([]string{callerLabel(secretOf(t, dbPath), "short-key")}, reported); diff != "" {
		t.Errorf("short keys reported mismatch (-want +got):\n%s", diff)
	}
	if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer short-key"}); res.Status != http.StatusOK {
		t.Errorf("a short key is refused: status %d", res.Status)
	}
}
