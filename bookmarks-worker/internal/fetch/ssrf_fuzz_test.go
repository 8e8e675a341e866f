package fetch

import (
	"errors"
	"math/big"
	"net/netip"
	"testing"

	"code.dny.dev/ssrf"
)

// specialPurpose is every prefix of the IANA special-purpose address registries, which the
// dial-time guard must refuse whole, plus the other ranges no fetch may reach:
//
//   - IANA IPv4 Special-Purpose Address Registry (RFC 6890),
//     https://www.iana.org/assignments/iana-ipv4-special-registry/iana-ipv4-special-registry.xhtml
//   - IANA IPv6 Special-Purpose Address Registry (RFC 6890),
//     https://www.iana.org/assignments/iana-ipv6-special-registry/iana-ipv6-special-registry.xhtml
//   - multicast (IANA IPv4 and IPv6 Multicast Address Space Registries), which the special-
//     purpose registries leave out, and the cloud metadata addresses.
//
// Entries are listed as the registries list them, nested ones included: each is checked
// at its first, middle and last address.
var specialPurpose = []struct {
	prefix string
	name   string
}{
	// IPv4 Special-Purpose Address Registry.
	{"0.0.0.0/8", `"This network" (RFC 791)`},
	{"0.0.0.0/32", `"This host on this network" (RFC 1122)`},
	{"10.0.0.0/8", "Private-Use (RFC 1918)"},
	{"100.64.0.0/10", "Shared Address Space (RFC 6598)"},
	{"127.0.0.0/8", "Loopback (RFC 1122)"},
	{"169.254.0.0/16", "Link Local (RFC 3927)"},
	{"172.16.0.0/12", "Private-Use (RFC 1918)"},
	{"192.0.0.0/24", "IETF Protocol Assignments (RFC 6890)"},
	{"192.0.0.0/29", "IPv4 Service Continuity Prefix (RFC 7335)"},
	{"192.0.0.8/32", "IPv4 dummy address (RFC 7600)"},
	{"192.0.0.9/32", "Port Control Protocol Anycast (RFC 7723)"},
	{"192.0.0.10/32", "Traversal Using Relays around NAT Anycast (RFC 8155)"},
	{"192.0.0.170/32", "NAT64/DNS64 Discovery (RFC 7050)"},
	{"192.0.0.171/32", "NAT64/DNS64 Discovery (RFC 7050)"},
	{"192.0.2.0/24", "Documentation, TEST-NET-1 (RFC 5737)"},
	{"192.31.196.0/24", "AS112-v4 (RFC 7535)"},
	{"192.52.193.0/24", "AMT (RFC 7450)"},
	{"192.88.99.0/24", "Deprecated 6to4 Relay Anycast (RFC 7526)"},
	{"192.88.99.2/32", "6a44-relay anycast address (RFC 6751)"},
	{"192.168.0.0/16", "Private-Use (RFC 1918)"},
	{"192.175.48.0/24", "Direct Delegation AS112 Service (RFC 7534)"},
	{"198.18.0.0/15", "Benchmarking (RFC 2544)"},
	{"198.51.100.0/24", "Documentation, TEST-NET-2 (RFC 5737)"},
	{"203.0.113.0/24", "Documentation, TEST-NET-3 (RFC 5737)"},
	{"240.0.0.0/4", "Reserved (RFC 1112)"},
	{"255.255.255.255/32", "Limited Broadcast (RFC 8190, RFC 919)"},
	// IPv4 multicast (RFC 5771).
	{"224.0.0.0/4", "Multicast (RFC 5771)"},

	// IPv6 Special-Purpose Address Registry.
	{"::1/128", "Loopback Address (RFC 4291)"},
	{"::/128", "Unspecified Address (RFC 4291)"},
	{"::ffff:0:0/96", "IPv4-mapped Address (RFC 4291)"},
	{"64:ff9b::/96", "IPv4-IPv6 Translation (RFC 6052)"},
	{"64:ff9b:1::/48", "Local-Use IPv4/IPv6 Translation (RFC 8215)"},
	{"100::/64", "Discard-Only Address Block (RFC 6666)"},
	{"100:0:0:1::/64", "Dummy IPv6 Prefix (RFC 9780)"},
	{"2001::/23", "IETF Protocol Assignments (RFC 2928)"},
	{"2001::/32", "TEREDO (RFC 4380, RFC 8190)"},
	{"2001:1::1/128", "Port Control Protocol Anycast (RFC 7723)"},
	{"2001:1::2/128", "Traversal Using Relays around NAT Anycast (RFC 8155)"},
	{"2001:1::3/128", "DNS-SD Service Registration Protocol Anycast (RFC 9665)"},
	{"2001:2::/48", "Benchmarking (RFC 5180)"},
	{"2001:3::/32", "AMT (RFC 7450)"},
	{"2001:4:112::/48", "AS112-v6 (RFC 7535)"},
	{"2001:10::/28", "Deprecated, previously ORCHID (RFC 4843)"},
	{"2001:20::/28", "ORCHIDv2 (RFC 7343)"},
	{"2001:30::/28", "Drone Remote ID Protocol Entity Tags (RFC 9374)"},
	{"2001:db8::/32", "Documentation (RFC 3849)"},
	{"2002::/16", "6to4 (RFC 3056)"},
	{"2620:4f:8000::/48", "Direct Delegation AS112 Service (RFC 7534)"},
	{"3fff::/20", "Documentation (RFC 9637)"},
	{"5f00::/16", "Segment Routing (SRv6) SIDs (RFC 9602)"},
	{"fc00::/7", "Unique-Local (RFC 4193, RFC 8190)"},
	{"fe80::/10", "Link-Local Unicast (RFC 4291)"},
	// IPv6 multicast (RFC 4291); the deprecated site-local range (RFC 3879); the
	// deprecated IPv4-compatible addresses (RFC 4291 section 2.5.5.1).
	{"ff00::/8", "Multicast (RFC 4291)"},
	{"fec0::/10", "Site-Local, deprecated (RFC 3879)"},
	{"::/96", "IPv4-compatible, deprecated (RFC 4291)"},

	// Cloud metadata services.
	{"169.254.169.254/32", "cloud metadata (AWS, GCP, Azure, ...)"},
	{"fd00:ec2::254/128", "AWS metadata over IPv6"},
}

var specialPrefixes = func() []netip.Prefix {
	out := make([]netip.Prefix, len(specialPurpose))
	for i, s := range specialPurpose {
		out[i] = netip.MustParsePrefix(s.prefix)
	}
	return out
}()

// special reports whether a is in the table, or is the IPv4-mapped form of an address that is.
func special(a netip.Addr) (netip.Prefix, bool) {
	for _, p := range specialPrefixes {
		if p.Contains(a) || (a.Is4In6() && p.Contains(a.Unmap())) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// refused calls the Control function for a:port the way net.Dialer does (network tcp4 or
// tcp6, address "ip:port"), without a socket: nothing is dialled.
func refused(t testing.TB, control func(network, address string) error, a netip.Addr, port uint16) error {
	t.Helper()
	network := "tcp6"
	if a.Is4() {
		network = "tcp4"
	}
	return control(network, netip.AddrPortFrom(a, port).String())
}

// defaultControl is the production dial-time guard with the default configuration (ports 80
// and 443, no loopback exception).
func defaultControl() func(network, address string) error {
	ctl := dialControl(Config{}.withDefaults())
	return func(network, address string) error { return ctl(network, address, nil) }
}

func requireProhibitedIP(t testing.TB, err error, a netip.Addr, why string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the guard allows %s (%s)", a, why)
	}
	if !errors.Is(err, ssrf.ErrProhibitedIP) {
		t.Fatalf("the guard refuses %s (%s) with %v, want ssrf.ErrProhibitedIP", a, why, err)
	}
}

// FuzzSSRFGuard: for any address (IPv4, IPv6, IPv4-mapped IPv6) the dial-time guard refuses
// every address in the special-purpose registries, on an allowed port, as tcp4 or tcp6.
// An address outside the table on a forbidden port is refused too (only 80 and 443 pass).
func FuzzSSRFGuard(f *testing.F) {
	for _, s := range specialPurpose {
		p := netip.MustParsePrefix(s.prefix)
		b := p.Addr().As16()
		f.Add(b[:], uint8(0), uint16(80))
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450::1",
		"127.0.0.1", "169.254.169.254", "::ffff:127.0.0.1", "::ffff:10.1.2.3", "fd00:ec2::254", "::", "::1",
		"64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2001::7f00:1", "255.255.255.255", "0.0.0.0"} {
		b := netip.MustParseAddr(a).As16()
		for mode := range uint8(3) {
			f.Add(b[:], mode, uint16(443))
		}
	}
	control := defaultControl()
	f.Fuzz(func(t *testing.T, raw []byte, mode uint8, port uint16) {
		var b [16]byte
		copy(b[:], raw)
		var a netip.Addr
		switch mode % 3 {
		case 0: // IPv4 from the last four bytes (the first twelve are often zero in seeds)
			a = netip.AddrFrom4([4]byte(b[12:]))
		case 1: // any IPv6 address
			a = netip.AddrFrom16(b)
		case 2: // IPv4-mapped IPv6 of the last four bytes
			v4 := [4]byte(b[12:])
			a = netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		}
		p, isSpecial := special(a)
		for _, allowed := range []uint16{80, 443} {
			if isSpecial {
				requireProhibitedIP(t, refused(t, control, a, allowed), a, "in "+p.String())
			}
		}
		if port != 80 && port != 443 {
			if err := refused(t, control, a, port); err == nil {
				t.Fatalf("the guard allows %s on port %d", a, port)
			}
		}
		if !isSpecial {
			// Outside the table, the guard's answer does not depend on which allowed port
			// is dialled.
			e80, e443 := refused(t, control, a, 80), refused(t, control, a, 443)
			if (e80 == nil) != (e443 == nil) {
				t.Fatalf("%s: port 80 %v, port 443 %v", a, e80, e443)
			}
		}
	})
}

// TestSSRFGuardRefusesEverySpecialPurposeRange checks each table entry at its first, last
// and middle address, as tcp4/tcp6 on ports 80 and 443, and as IPv4-mapped IPv6 for IPv4
// entries; and that ordinary public addresses pass (the guard is not refusing everything).
func TestSSRFGuardRefusesEverySpecialPurposeRange(t *testing.T) {
	t.Parallel()
	control := defaultControl()
	for _, s := range specialPurpose {
		p := netip.MustParsePrefix(s.prefix)
		first, last, middle := bounds(p)
		for _, a := range []netip.Addr{first, middle, last} {
			forms := []netip.Addr{a}
			if a.Is4() {
				forms = append(forms, netip.AddrFrom16(a.As16())) // ::ffff:a.b.c.d
			}
			for _, form := range forms {
				for _, port := range []uint16{80, 443} {
					requireProhibitedIP(t, refused(t, control, form, port), form, s.prefix+" "+s.name)
				}
			}
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::1"} {
		addr := netip.MustParseAddr(a)
		if err := refused(t, control, addr, 443); err != nil {
			t.Errorf("the guard refuses the public address %s: %v", a, err)
		}
		if err := refused(t, control, addr, 22); !errors.Is(err, ssrf.ErrProhibitedPort) {
			t.Errorf("the guard allows %s on port 22: %v", a, err)
		}
	}
	// Networks other than TCP are refused whatever the address.
	if err := control("udp4", "8.8.8.8:443"); !errors.Is(err, ssrf.ErrProhibitedNetwork) {
		t.Errorf("udp4: %v", err)
	}
	// The end-to-end test exception admits exactly 127.0.0.1 on its port, nothing else.
	ctl := dialControl(Config{AllowLoopbackPort: 8080}.withDefaults())
	if err := ctl("tcp4", "127.0.0.1:8080", nil); err != nil {
		t.Errorf("loopback exception: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:80", "127.0.0.2:8080", "[::1]:8080", "[::ffff:127.0.0.1]:8080", "10.0.0.1:8080"} {
		if err := ctl("tcp4", addr, nil); err == nil {
			t.Errorf("the loopback exception admits %s", addr)
		}
	}
}

// bounds returns a prefix's first, last and middle addresses.
func bounds(p netip.Prefix) (first, last, middle netip.Addr) {
	p = p.Masked()
	first = p.Addr()
	bits := first.BitLen()
	b := first.AsSlice()
	lo := new(big.Int).SetBytes(b)
	size := new(big.Int).Lsh(big.NewInt(1), uint(bits-p.Bits()))
	hi := new(big.Int).Add(lo, new(big.Int).Sub(size, big.NewInt(1)))
	mid := new(big.Int).Add(lo, new(big.Int).Rsh(size, 1))
	toAddr := func(n *big.Int) netip.Addr {
		out := make([]byte, len(b))
		n.FillBytes(out)
		a, _ := netip.AddrFromSlice(out)
		return a
	}
	return first, toAddr(hi), toAddr(mid)
}
