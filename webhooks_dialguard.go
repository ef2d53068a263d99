package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
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
	// addresses and the machine's own addresses (local development,
	// tests); the unspecified address and the service's own listeners
	// stay refused.
	allowPrivate bool
	// own are the service's own listeners, each refused on every address
	// that reaches it. An unspecified address (":8080") means every
	// address of the machine on that port.
	own []netip.AddrPort
	// machineAddrs lists the addresses of the machine's own interfaces. It
	// is called at each check, not once, because they change while the
	// service runs (DHCP, an interface brought up); a test gives its own,
	// so that its answer does not depend on the machine it runs on. Nil
	// is interfaceAddrs.
	machineAddrs func() ([]netip.Addr, error)
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
// are not on the public internet either. The first range that holds an
// address gives the reason, so a range comes before any wider one that
// holds it (Teredo before 2001::/23).
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
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4, broadcast included)"},
	{netip.MustParsePrefix("::/96"), "a deprecated IPv4-compatible address (::/96), which nothing uses any more"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address (64:ff9b:1::/48)"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address (100::/64), whose packets are dropped"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address (2001::/32), which leads through a tunnel relay to an address it hides"},
	{netip.MustParsePrefix("2001:2::/48"), "a benchmarking address (2001:2::/48)"},
	{netip.MustParsePrefix("2001:10::/28"), "an ORCHID identifier (2001:10::/28), not a host's address"},
	{netip.MustParsePrefix("2001:20::/28"), "an ORCHID identifier (2001:20::/28), not a host's address"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol assignment (2001::/23)"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address (2001:db8::/32), which no host has"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address (3fff::/20), which no host has"},
	{netip.MustParsePrefix("5f00::/16"), "an SRv6 segment identifier (5f00::/16), routed only inside an operator's network"},
	{netip.MustParsePrefix("fec0::/10"), "a deprecated site-local address (fec0::/10)"},
}

// globalUnicast6 holds every IPv6 address handed out for the internet:
// outside it, and outside nat64Prefix, an IPv6 address is never a
// public host's.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// nat64Prefix is the NAT64 well-known prefix (RFC 6052): its addresses are
// the IPv4 address of their last 32 bits, reached through a translator.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

// sixToFourPrefix is 6to4 (RFC 3056): its addresses lead, through the
// machine's tunnel or a relay, to the IPv4 address of bits 16 to 48.
var sixToFourPrefix = netip.MustParsePrefix("2002::/16")

// ipv4CompatiblePrefix is the deprecated IPv4-compatible form ::a.b.c.d
// (RFC 4291), which :: and ::1 share.
var ipv4CompatiblePrefix = netip.MustParsePrefix("::/96")

// embeddedIPv4 returns the IPv4 address that an IPv6 address leads to and
// the form that embeds it, or an invalid address when it embeds none. An
// IPv4 address mapped into IPv6 (::ffff:10.0.0.1) is left to Unmap.
func embeddedIPv4(addr netip.Addr) (netip.Addr, string) {
	if !addr.Is6() || addr.Is4In6() {
		return netip.Addr{}, ""
	}
	b := addr.As16()
	switch {
	case nat64Prefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[12:16])), "a NAT64 address (64:ff9b::/96)"
	case sixToFourPrefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[2:6])), "a 6to4 address (2002::/16)"
	case ipv4CompatiblePrefix.Contains(addr) && !addr.IsUnspecified() && !addr.IsLoopback():
		return netip.AddrFrom4([4]byte(b[12:16])), "an IPv4-compatible address (::/96)"
	}
	return netip.Addr{}, ""
}

// privateReason says why addr is not a public address, or "" when it is.
// An IPv4 address mapped into IPv6 (::ffff:10.0.0.1) is judged as the IPv4
// address it is; the IPv4 address another IPv6 form embeds is judged by
// check.
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
	if addr.Is6() && !globalUnicast6.Contains(addr) && !nat64Prefix.Contains(addr) {
		return "not a global unicast address (2000::/3)"
	}
	return ""
}

// check refuses addr:port unless a delivery may connect to it. An IPv6
// address that embeds an IPv4 address (NAT64, 6to4, IPv4-compatible) is
// judged by every rule as that IPv4 address too, since that is where it
// leads.
func (g addressGuard) check(addr netip.Addr, port uint16) error {
	addr = addr.Unmap()
	// The machine's addresses are listed once per check, and only when a
	// rule needs them.
	var machine []netip.Addr
	var machineErr error
	listed := false
	isMachine := func(a netip.Addr) (bool, error) {
		if !listed {
			listed = true
			list := g.machineAddrs
			if list == nil {
				list = interfaceAddrs
			}
			if machine, machineErr = list(); machineErr != nil {
				machineErr = fmt.Errorf("could not list this machine's own addresses, which webhooks may not reach (%w)", machineErr)
			}
		}
		return slices.Contains(machine, a), machineErr
	}
	judge := func(a netip.Addr) string {
		switch own, err := g.isOwnListener(a, port, isMachine); {
		case err != nil:
			return err.Error()
		case own:
			return "the service's own listener, which webhooks never reach"
		case a.IsUnspecified():
			return "the unspecified address, which reaches this machine itself"
		case g.allowPrivate:
			return ""
		}
		const unless = "; webhooks reach only public addresses unless -webhook-allow-private is set"
		if why := privateReason(a); why != "" {
			return why + unless
		}
		switch mine, err := isMachine(a); {
		case err != nil:
			return err.Error()
		case mine:
			return "an address of this machine's own interfaces, where other services may listen" + unless
		}
		return ""
	}
	// The embedded address first: its reason says more than the form's.
	if v4, form := embeddedIPv4(addr); v4.IsValid() {
		if why := judge(v4); why != "" {
			return &refusedAddressError{addr: addr, why: fmt.Sprintf("%s of %s, %s", form, v4, why)}
		}
	}
	if why := judge(addr); why != "" {
		return &refusedAddressError{addr: addr, why: why}
	}
	return nil
}

// isOwnListener reports whether addr:port reaches one of the service's own
// listeners; isMachine tells the machine's own addresses, for a listener on
// an unspecified address.
func (g addressGuard) isOwnListener(addr netip.Addr, port uint16, isMachine func(netip.Addr) (bool, error)) (bool, error) {
	for _, own := range g.own {
		if port != own.Port() {
			continue
		}
		switch a := own.Addr(); {
		case a.IsUnspecified() && (addr.IsLoopback() || addr.IsUnspecified()):
			return true, nil
		case a.IsUnspecified():
			return isMachine(addr)
		case a == addr:
			return true, nil
		}
	}
	return false, nil
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

// newAddressGuard returns the guard of a service listening on own (its
// listeners; none when unknown), which looks the machine's addresses up
// at each check.
func newAddressGuard(allowPrivate bool, own []net.Addr) addressGuard {
	g := addressGuard{allowPrivate: allowPrivate, machineAddrs: interfaceAddrs}
	for _, a := range own {
		if tcp, ok := a.(*net.TCPAddr); ok {
			if ip, ok := netip.AddrFromSlice(tcp.IP); ok && tcp.Port > 0 {
				g.own = append(g.own, netip.AddrPortFrom(ip.Unmap(), uint16(tcp.Port)))
			}
		}
	}
	return g
}

// interfaceAddrs lists the addresses of the machine's own interfaces, IPv4
// ones unmapped. It costs about 18 µs with three interfaces (a loopback
// connection costs 53 µs, one across the internet milliseconds), so it is
// not cached: a cache would miss an address that came since.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
