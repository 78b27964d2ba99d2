// Package netaddr answers the one address question every door asks before
// it serves or sends without a token: is this host this machine only?
package netaddr

import (
	"net"
	"net/netip"
	"strings"
)

// Loopback is whether host (a name or an address, with or without a port
// or brackets) names this machine only: localhost (any case, a trailing
// dot allowed), 127.0.0.0/8, ::1, or an IPv4-mapped loopback address.
// Any other name is not loopback: it could resolve anywhere.
func Loopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
