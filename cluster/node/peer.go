package node

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Without a token a daemon listens on loopback only, and every local user
// can reach loopback; so it serves only the user it runs as (the job's
// user, who started it) and root. The client of a loopback TCP connection
// is a socket on this host: the kernel lists its owner in /proc/net/tcp
// (tcp6), as the row whose local end is our connection's remote end.

// procNetTCP are the kernel's socket tables read, in order (a test points
// them elsewhere).
var procNetTCP = []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"}

// peerLookupTime bounds one lookup: the tables can be large on a busy node.
const peerLookupTime = 2 * time.Second

// errPeerUnknown: no live socket owns the connection's client end (it
// closed, or it is not on this host).
var errPeerUnknown = errors.New("no live socket on this host owns the client end")

// peerAllowed answers whether the request's client may be served without
// a token, and if not, a message that names the rule and the fix.
func peerAllowed(r *http.Request) (bool, string) {
	self := os.Geteuid()
	uid, err := requestPeerUID(r)
	fix := "run the client as the job's user (or root), or give this daemon and its coordinator the same PROBING_AUTH_TOKEN"
	if err != nil {
		return false, fmt.Sprintf("refused: without PROBING_AUTH_TOKEN this node daemon serves only its job's user (uid %d) and root, and the owner of this connection could not be found (%v); %s", self, err, fix)
	}
	if uid == 0 || uid == self {
		return true, ""
	}
	return false, fmt.Sprintf("refused: without PROBING_AUTH_TOKEN this node daemon serves only its job's user (uid %d) and root, and this client runs as uid %d; %s", self, uid, fix)
}

// requestPeerUID is the uid owning the client socket of r's connection.
func requestPeerUID(r *http.Request) (int, error) {
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return 0, fmt.Errorf("remote address %q is not TCP: %v", r.RemoteAddr, err)
	}
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	ta, ok := la.(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("local address %v is not TCP", la)
	}
	ctx, cancel := context.WithTimeout(r.Context(), peerLookupTime)
	defer cancel()
	return peerUID(ctx, ta.AddrPort(), remote)
}

// peerUID finds, in the kernel's socket tables, the established socket
// whose local end is remote and whose remote end is local, and returns
// its owner. It streams each table, stops at the match and gives up at
// ctx's deadline. Only an established row with an inode counts: a closed
// client's leftover row (TIME_WAIT, orphaned) lists uid 0, which would
// pass for root.
func peerUID(ctx context.Context, local, remote netip.AddrPort) (int, error) {
	keys := [][2]string{
		{kernelAddr(remote, false), kernelAddr(local, false)},
		{kernelAddr(remote, true), kernelAddr(local, true)},
	}
	var errs []error
	for _, path := range procNetTCP {
		uid, err := scanTable(ctx, path, keys)
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, errPeerUnknown) {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	return 0, errPeerUnknown
}

func scanTable(ctx context.Context, path string, keys [][2]string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, errPeerUnknown // no IPv6 on this host
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 512), 4096)
	for n := 0; sc.Scan(); n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return 0, fmt.Errorf("reading %s: no answer within %s", path, peerLookupTime)
		}
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue // the header
		}
		match := false
		for _, k := range keys {
			if k[0] != "" && strings.EqualFold(fs[1], k[0]) && strings.EqualFold(fs[2], k[1]) {
				match = true
			}
		}
		if !match {
			continue
		}
		if fs[3] != "01" || fs[9] == "0" {
			// A closed client's row; the 4-tuple is unique, so no other.
			return 0, fmt.Errorf("the client's socket is no longer open (state %s)", fs[3])
		}
		uid, err := strconv.Atoi(fs[7])
		if err != nil || uid < 0 {
			return 0, fmt.Errorf("%s: uid column %q is not a number", path, fs[7])
		}
		return uid, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading %s: %v", path, err)
	}
	return 0, errPeerUnknown
}

// kernelAddr writes ap as the kernel's tables do: each 32-bit word of the
// address in host byte order, then the port, in hex. v6 asks for the
// tcp6 form (an IPv4 address as v4-mapped); "" when the form does not fit.
func kernelAddr(ap netip.AddrPort, v6 bool) string {
	a := ap.Addr()
	var b strings.Builder
	if v6 {
		x := a.As16()
		for i := 0; i < 16; i += 4 {
			fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(x[i:i+4]))
		}
	} else {
		a = a.Unmap()
		if !a.Is4() {
			return ""
		}
		x := a.As4()
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(x[:]))
	}
	fmt.Fprintf(&b, ":%04X", ap.Port())
	return b.String()
}
