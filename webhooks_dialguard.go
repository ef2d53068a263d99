package main

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// The outbound guard of webhook deliveries. A subscription names a URL that
// any holder of a key chooses, and the service POSTs to it from inside its
// own network: without a guard, a URL such as http://169.254.169.254/ (a
// cloud's metadata service) or http://10.0.0.5:5432/ would make the service
// reach what only it can reach. The check runs in the dialer's Control
// function, on the very address being connected to, after DNS resolution:
// a name that resolves to a public address when the URL is checked and to a
// private one when connecting (DNS rebinding) is still refused, and so is
// every address of a name that has several.

// addressGuard decides which addresses a delivery may connect to.
type addressGuard struct {
	// allowPrivate lets deliveries reach loopback, private and link-local
	// addresses (local development, tests); the service's own listener
	// stays refused.
	allowPrivate bool
	// own is the service's own listener; its port is 0 when unknown. An
	// unspecified address (":8080") means every address of the machine on
	// that port.
	own netip.AddrPort
	// local are the machine's own addresses, for an unspecified own.
	local []netip.Addr
}

// refusedAddressError is a delivery refused by the guard: it names the
// address and why.
type refusedAddressError struct {
	addr netip.Addr
	why  string
}

func (e *refusedAddressError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s", e.addr, e.why)
}

// blockedRanges are the ranges refused beside those netip classifies
// (loopback, private, link-local, multicast, unspecified): addresses that
// are not on the public internet either.
var blockedRanges = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `an address of "this network" (0.0.0.0/8)`},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address (100.64.0.0/10)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment (192.0.0.0/24)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address (192.0.2.0/24), which no host has"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address (198.51.100.0/24), which no host has"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address (203.0.113.0/24), which no host has"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address (2001:db8::/32), which no host has"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4, broadcast included)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address (64:ff9b:1::/48)"},
}

// privateReason says why addr is not a public address, or "" when it is.
// An IPv4 address mapped into IPv6 (::ffff:10.0.0.1) is judged as the IPv4
// address it is.
func privateReason(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid():
		return "not an IP address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsUnspecified():
		return "the unspecified address"
	case addr.IsPrivate():
		return "a private address (RFC 1918 or fc00::/7)"
	case addr.IsLinkLocalUnicast():
		return "a link-local address (169.254.0.0/16 or fe80::/10, cloud metadata services included)"
	case addr.IsMulticast():
		return "a multicast address"
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(addr) {
			return r.why
		}
	}
	return ""
}

// check refuses addr:port unless a delivery may connect to it.
func (g addressGuard) check(addr netip.Addr, port uint16) error {
	addr = addr.Unmap()
	if g.isOwnListener(addr, port) {
		return &refusedAddressError{addr: addr, why: "the service's own listener"}
	}
	if g.allowPrivate {
		return nil
	}
	if why := privateReason(addr); why != "" {
		return &refusedAddressError{addr: addr, why: why + "; webhooks reach only public addresses unless -webhook-allow-private is set"}
	}
	return nil
}

// isOwnListener reports whether addr:port is the service's own listener.
func (g addressGuard) isOwnListener(addr netip.Addr, port uint16) bool {
	if g.own.Port() == 0 || port != g.own.Port() {
		return false
	}
	own := g.own.Addr().Unmap()
	if !own.IsUnspecified() {
		return addr == own
	}
	if addr.IsLoopback() || addr.IsUnspecified() {
		return true
	}
	for _, a := range g.local {
		if a.Unmap() == addr {
			return true
		}
	}
	return false
}

// control is the dialer's Control function: it runs after the address is
// resolved and before the connection is attempted, for every address tried.
// network is "tcp4" or "tcp6", address an IP and a port.
func (g addressGuard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refused to connect to %q (%s): not an IP address and port", address, network)
	}
	return g.check(ap.Addr(), ap.Port())
}

// newAddressGuard returns the guard of a service listening on own (nil
// when unknown).
func newAddressGuard(allowPrivate bool, own net.Addr) addressGuard {
	g := addressGuard{allowPrivate: allowPrivate}
	if tcp, ok := own.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			g.own = netip.AddrPortFrom(ip.Unmap(), uint16(tcp.Port))
			if ip.IsUnspecified() {
				if addrs, err := net.InterfaceAddrs(); err == nil {
					for _, a := range addrs {
						if n, ok := a.(*net.IPNet); ok {
							if ip, ok := netip.AddrFromSlice(n.IP); ok {
								g.local = append(g.local, ip.Unmap())
							}
						}
					}
				}
			}
		}
	}
	return g
}
