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

// eachRow streams one of the kernel's socket tables, calling fn with each
// row's fields until fn says it is done; it gives up at ctx's deadline. A
// table that does not exist (no IPv6 on this host) has no rows.
func eachRow(ctx context.Context, path string, fn func(fs []string) (done bool, err error)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 512), 4096)
	for n := 0; sc.Scan(); n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return fmt.Errorf("reading %s: no answer within %s", path, peerLookupTime)
		}
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue // the header
		}
		if done, err := fn(fs); done || err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %v", path, err)
	}
	return nil
}

// rowUID is a row's owner column.
func rowUID(path string, fs []string) (int, error) {
	uid, err := strconv.Atoi(fs[7])
	if err != nil || uid < 0 {
		return 0, fmt.Errorf("%s: uid column %q is not a number", path, fs[7])
	}
	return uid, nil
}

func scanTable(ctx context.Context, path string, keys [][2]string) (int, error) {
	uid, found := 0, false
	err := eachRow(ctx, path, func(fs []string) (bool, error) {
		for _, k := range keys {
			if k[0] != "" && strings.EqualFold(fs[1], k[0]) && strings.EqualFold(fs[2], k[1]) {
				if fs[3] != "01" || fs[9] == "0" {
					// A closed client's row; the 4-tuple is unique, so no other.
					return true, fmt.Errorf("the client's socket is no longer open (state %s)", fs[3])
				}
				var err error
				uid, err = rowUID(path, fs)
				found = err == nil
				return true, err
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, errPeerUnknown
	}
	return uid, nil
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

// LoopbackServerOwner says why the server of conn, a loopback connection
// this process dialled, may not be believed without a token ("" when it
// may): the socket listening on its port must be owned by this user or
// root, the rule the daemon applies to its clients, turned round. The
// listening socket is what is checked: it lives as long as the daemon,
// and Linux lets only one user's sockets listen on one address and port.
func LoopbackServerOwner(ctx context.Context, conn net.Conn) string {
	remote, err := netip.ParseAddrPort(conn.RemoteAddr().String())
	if err != nil {
		return fmt.Sprintf("the connection to %s is not TCP", conn.RemoteAddr())
	}
	ctx, cancel := context.WithTimeout(ctx, peerLookupTime)
	defer cancel()
	uid, err := listenerUID(ctx, remote)
	self := os.Geteuid()
	if err != nil {
		return fmt.Sprintf("without a signed answer, a loopback daemon counts only when this user (uid %d) or root runs it, and who runs %s could not be found (%v)", self, remote, err)
	}
	if uid != self && uid != 0 {
		return fmt.Sprintf("without a signed answer, a loopback daemon counts only when this user (uid %d) or root runs it, and %s runs as uid %d: run the coordinator as that user, or give both the job's PROBING_AUTH_TOKEN", self, remote, uid)
	}
	return ""
}

// listenerUID is the owner of the socket listening at ap (bound to ap's
// address or to the wildcard, in either table).
func listenerUID(ctx context.Context, ap netip.AddrPort) (int, error) {
	port := ap.Port()
	want := map[string]bool{
		kernelAddr(ap, false): true, kernelAddr(ap, true): true,
		kernelAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port), false): true,
		kernelAddr(netip.AddrPortFrom(netip.IPv6Unspecified(), port), true):  true,
	}
	delete(want, "")
	owners := map[int]bool{}
	for _, path := range procNetTCP {
		err := eachRow(ctx, path, func(fs []string) (bool, error) {
			if fs[3] != "0A" || !want[strings.ToUpper(fs[1])] {
				return false, nil
			}
			uid, err := rowUID(path, fs)
			owners[uid] = true
			return err != nil, err
		})
		if err != nil {
			return 0, err
		}
	}
	switch len(owners) {
	case 0:
		return 0, errors.New("no socket listens there")
	case 1:
		for u := range owners {
			return u, nil
		}
	}
	return 0, fmt.Errorf("sockets of %d users listen there", len(owners))
}
