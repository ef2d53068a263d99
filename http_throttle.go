package main

import (
	"container/list"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failed authentication costs a guesser nothing but costs the service a key
// check and a log line: one client sent 17,000 guesses a second. So failures
// are throttled per client address: once an address has failed more than a
// burst, it is answered 429 with Retry-After until its budget refills. A
// request with a valid key is never throttled, whatever its address has
// done (behind a NAT or a proxy, a guesser and a real client may share it),
// and one address's failures never touch another's budget.

// maxThrottledAddrs bounds the addresses whose failures are remembered
// (about 200 bytes each): past it, the one that failed least recently is
// forgotten.
const maxThrottledAddrs = 1 << 16

// authThrottle keeps a token bucket of failures per client address. IPv6
// addresses are taken by /64, the block a single subscriber usually holds,
// so that a client cannot step around its budget by changing its address
// within its own network.
type authThrottle struct {
	limit rate.Limit // failures per second; 0 turns the throttle off
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[netip.Prefix]*list.Element // value: *addrBucket
	recent  *list.List                     // least recently failed first
}

// addrBucket is the failure budget of one address.
type addrBucket struct {
	addr netip.Prefix
	lim  *rate.Limiter
}

// newAuthThrottle allows perMinute failures a minute per address, in bursts
// of as many; 0 turns it off.
func newAuthThrottle(perMinute int, now func() time.Time) *authThrottle {
	return &authThrottle{limit: rate.Limit(float64(perMinute) / 60), burst: perMinute, now: now,
		buckets: map[netip.Prefix]*list.Element{}, recent: list.New()}
}

// throttleKey is the block an address is throttled by: itself for IPv4, its
// /64 for IPv6.
func throttleKey(addr netip.Addr) netip.Prefix {
	if addr.Is4() {
		return netip.PrefixFrom(addr, 32)
	}
	p, _ := addr.Prefix(64)
	return p
}

// fail counts a failed authentication from addr. It returns 0 when the
// failure may be answered (401), or how long the address must wait before
// its next failure is answered rather than refused (429). A refused failure
// spends nothing of the budget.
func (at *authThrottle) fail(addr netip.Addr) time.Duration {
	if at.limit == 0 || !addr.IsValid() {
		return 0
	}
	key := throttleKey(addr)
	at.mu.Lock()
	defer at.mu.Unlock()
	var b *addrBucket
	if e, ok := at.buckets[key]; ok {
		at.recent.MoveToBack(e)
		b = e.Value.(*addrBucket)
	} else {
		if at.recent.Len() >= maxThrottledAddrs {
			oldest := at.recent.Front()
			delete(at.buckets, oldest.Value.(*addrBucket).addr)
			at.recent.Remove(oldest)
		}
		b = &addrBucket{addr: key, lim: rate.NewLimiter(at.limit, at.burst)}
		at.buckets[key] = at.recent.PushBack(b)
	}
	now := at.now()
	res := b.lim.ReserveN(now, 1)
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		return wait
	}
	return 0
}

// waiting returns how long addr must wait before its next failure is
// answered rather than refused, as fail would, without counting a failure:
// 0 while it has budget left. It lets a request whose check costs a write
// (a stream ticket is consumed by a DELETE) be refused before that check.
func (at *authThrottle) waiting(addr netip.Addr) time.Duration {
	if at.limit == 0 || !addr.IsValid() {
		return 0
	}
	at.mu.Lock()
	defer at.mu.Unlock()
	e, ok := at.buckets[throttleKey(addr)]
	if !ok {
		return 0
	}
	lim, now := e.Value.(*addrBucket).lim, at.now()
	if lim.TokensAt(now) >= 1 {
		return 0
	}
	res := lim.ReserveN(now, 1)
	defer res.CancelAt(now)
	return res.DelayFrom(now)
}

// retryAfterSeconds is a wait in whole seconds for Retry-After, rounded up.
func retryAfterSeconds(wait time.Duration) int { return int(math.Ceil(wait.Seconds())) }

// trustedProxies are the addresses (-trusted-proxies) whose X-Forwarded-For
// the service believes.
type trustedProxies []netip.Prefix

// parseTrustedProxies reads a comma-separated list of addresses and CIDR
// blocks, such as "10.0.0.0/8, 192.0.2.7".
func parseTrustedProxies(list string) (trustedProxies, error) {
	var tp trustedProxies
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			tp = append(tp, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR block (such as 10.0.0.0/8)", abbreviate(item))
		}
		a = a.Unmap()
		tp = append(tp, netip.PrefixFrom(a, a.BitLen()))
	}
	return tp, nil
}

// trusts reports whether addr is one of the trusted proxies.
func (tp trustedProxies) trusts(addr netip.Addr) bool {
	for _, p := range tp {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// clientAddr is the address of the client that sent r: the peer of the
// connection, unless the peer is a trusted proxy. Then X-Forwarded-For is
// read from its end, the hop nearest this service, towards its start: each
// address that is a trusted proxy passed the request on, and the first one
// that is not is the client. A client can write anything at the start of
// the header, but never the addresses the trusted proxies append after it,
// and anyone else's X-Forwarded-For is ignored. A malformed entry ends the
// walk at the last proxy that was trusted.
func clientAddr(r *http.Request, tp trustedProxies) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	addr := ap.Addr().Unmap()
	if len(tp) == 0 || !tp.trusts(addr) {
		return addr
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(strings.TrimSpace(hops[i]))
		if !ok {
			return addr
		}
		addr = hop
		if !tp.trusts(addr) {
			return addr
		}
	}
	return addr
}

// parseHop reads one entry of X-Forwarded-For: an address, with a port or
// not (some proxies add it).
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}
