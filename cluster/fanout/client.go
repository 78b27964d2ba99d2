// Package fanout is the coordinator's side of the whole-job view: a
// client of the node daemons (long-lived connections, a token, bounded
// replies, classified errors) and the fan-out over every node (bounded
// concurrency, a per-peer timeout inside one overall deadline, progress,
// and an account of who answered). No MCP imports.
package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/hmacauth"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// Kinds of peer failure.
const (
	KindUnreachable = "unreachable" // nothing listens, or the host is gone
	KindTimeout     = "timeout"     // no answer within its time
	KindAuth        = "auth"        // the signature was refused, or the answer did not prove itself
	KindGarbage     = "garbage"     // the answer is not the node API's
	KindRefused     = "refused"     // the node answered with an error
	KindNotDaemon   = "not_daemon"  // an original Probing agent: listed, not queried
)

// MaxReply bounds one node's answer (its evidence holds every rank's
// threads and raw Flight Recorder dumps: torch keeps 2,000 entries a
// rank, a few MB pickled, so eight ranks' are tens of MB). Read whole and
// then decoded, an answer costs about twice its size: 128 MiB keeps one
// hostile node's answer under 512 MB at the coordinator (issue 23's red
// team: 250 MiB of evidence took it to 1.1 GB).
const MaxReply = 128 << 20

// replyCaps bound the answers that hold no raw dumps far lower: a node's
// 250 MiB stacks took 29 s and 4.3 GB to decode at the coordinator
// (issue 23). A cap is several times what a busy node of 64 ranks sends.
var replyCaps = map[string]int{
	node.PathHealth: 1 << 20, node.PathInfo: 4 << 20, node.PathStacks: 32 << 20,
	node.PathGPU: 8 << 20, node.PathTables: 8 << 20, node.PathScan: 64 << 20,
}

// replyCap is the most a node may answer to path.
func replyCap(path string) int {
	if c, ok := replyCaps[path]; ok {
		return c
	}
	return MaxReply
}

// Client calls node daemons. With the job's token it signs every request
// and believes only answers signed with it (internal/hmacauth): the token
// itself is never sent, so an address planted in the job's store learns
// nothing, and cannot answer as a node. Without a token an answer counts
// only from loopback, from a daemon socket owned by this user or root.
type Client struct {
	hc  *http.Client
	key *hmacauth.Key
	now func() time.Time
}

// NewClient keeps connections to the daemons open between calls: a
// fan-out over hundreds of nodes pays the handshakes once.
func NewClient(token string, concurrency int) *Client {
	key := hmacauth.NewKey(token)
	d := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil || key != nil || !loopback(conn.RemoteAddr().String()) {
				return conn, err // with a token, the answer's signature is the proof
			}
			// Who serves a loopback port: the owner of its listening
			// socket (stable for the daemon's life; an accepted
			// socket's row comes and goes with the connection).
			return &ownedConn{Conn: conn, why: node.LoopbackServerOwner(ctx, conn)}, nil
		},
		MaxIdleConns:        max(concurrency*2, 64),
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     2 * time.Minute,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		Proxy:               nil, // a proxy must never see the token or the job
	}
	return &Client{hc: &http.Client{Transport: tr}, key: key, now: time.Now}
}

// Close drops the idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// LoopbackHost is whether h names this machine only (a loopback address
// or localhost): what a daemon without a token may bind and be asked at.
func LoopbackHost(h string) bool { return cluster.LoopbackHost(h) }

// loopback is whether addr's host is a loopback address or name.
func loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	return err == nil && LoopbackHost(h)
}

// do is Do (tracing.go) untraced; metrics count it (metrics.go).
func (c *Client) do(ctx context.Context, n cluster.Node, method, path string, req, resp any) (err error) {
	defer observe(n.Addr, time.Now(), &err) // metrics.go
	pe := func(kind, format string, args ...any) error {
		return &evidence.PeerError{Addr: n.Addr, Kind: kind, Msg: fmt.Sprintf(format, args...)}
	}
	if n.Kind == cluster.KindProbing {
		return pe(KindNotDaemon, "an original Probing agent, not a node daemon: run `probing-mcp node` on %s to include its ranks", n.Host)
	}
	if c.key == nil && !loopback(n.Addr) {
		return pe(KindAuth, "not asked: this coordinator has no PROBING_AUTH_TOKEN, and a node daemon off loopback serves only with one; run the coordinator with the job's token")
	}
	var reqBody []byte
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return pe(KindGarbage, "request does not encode: %v", err)
		}
		reqBody = b
	}
	var conn net.Conn
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn }}
	hr, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, "http://"+n.Addr+path, bytes.NewReader(reqBody))
	if err != nil {
		return pe(KindUnreachable, "address %q: %v", n.Addr, err)
	}
	var nonce string
	if c.key != nil {
		var authz string
		authz, nonce = c.key.Sign(method, hr.URL.RequestURI(), n.Addr, reqBody, c.now())
		hr.Header.Set("Authorization", authz)
	}
	if req != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	tracing.InjectHTTP(ctx, hr.Header) // not signed, and needs not be: ids only, parsed strictly by the daemon
	if dl, ok := ctx.Deadline(); ok {
		ms := time.Until(dl).Milliseconds()
		if ms <= 0 {
			return pe(KindTimeout, "no time left to ask it")
		}
		hr.Header.Set(node.TimeoutHeader, strconv.FormatInt(ms, 10))
	}
	res, err := c.hc.Do(hr)
	if err != nil {
		return classify(ctx, n.Addr, err)
	}
	defer res.Body.Close()
	tracing.SetAttributes(ctx, attribute.Int("http.response.status_code", res.StatusCode))
	limit := replyCap(path)
	b, err := readReply(res, limit)
	if err != nil {
		return classify(ctx, n.Addr, err)
	}
	if len(b) > limit {
		return pe(KindGarbage, "its answer to %s is over %d MiB: cut off", path, limit>>20)
	}
	if ctx.Err() != nil {
		return classify(ctx, n.Addr, ctx.Err()) // read in time, but no time left to decode it
	}
	if why := c.proved(n.Addr, nonce, res, b, conn); why != "" {
		if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
			var ae struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(b, &ae) == nil && ae.Error != "" {
				return pe(KindAuth, "refused (HTTP %d), in its words: %s", res.StatusCode, jobtext.Quote(ae.Error, jobtext.Line))
			}
		}
		return pe(KindAuth, "not counted: %s", why)
	}
	if res.StatusCode != http.StatusOK {
		var ae struct {
			Error string `json:"error"`
		}
		msg := "no explanation"
		if json.Unmarshal(b, &ae) == nil && ae.Error != "" {
			msg = jobtext.Quote(ae.Error, jobtext.Line) // the node's words
		}
		if res.StatusCode == http.StatusForbidden {
			// A daemon without a token refuses another user's coordinator;
			// its message names the rule and the fix.
			return pe(KindAuth, "refused (HTTP 403): %s", msg)
		}
		if res.StatusCode == http.StatusUnauthorized {
			return pe(KindAuth, "the token was refused (HTTP %d): the coordinator's PROBING_AUTH_TOKEN must be the daemons'", res.StatusCode)
		}
		if res.StatusCode == http.StatusGatewayTimeout {
			return pe(KindTimeout, "%s", msg)
		}
		return pe(KindRefused, "HTTP %d: %s", res.StatusCode, msg)
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return pe(KindGarbage, "its answer is not the node API's JSON: %v", err)
	}
	return nil
}

// ownedConn is a loopback connection with the verdict on who serves it.
type ownedConn struct {
	net.Conn
	why string // "" when its server is this user or root
}

// readReply reads at most limit+1 bytes of the answer, into one buffer
// sized by its Content-Length when it gives one (growing a buffer by
// appending holds two copies at each step).
func readReply(res *http.Response, limit int) ([]byte, error) {
	r := io.LimitReader(res.Body, int64(limit)+1)
	if n := res.ContentLength; n > 0 && n <= int64(limit) {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(r)
}

// proved says why an answer does not count ("" when it does): signed with
// the job's token for the request's nonce, or, unsigned, from a loopback
// daemon whose socket this user or root owns.
func (c *Client) proved(addr, nonce string, res *http.Response, body []byte, conn net.Conn) string {
	if c.key != nil {
		// With the job's token only a signed answer counts, loopback too.
		if err := c.key.VerifyResponse(nonce, res.StatusCode, body, res.Header.Get(hmacauth.ResponseHeader)); err != nil {
			return err.Error()
		}
		return ""
	}
	oc, ok := conn.(*ownedConn)
	if !ok {
		return "who serves it could not be checked"
	}
	return oc.why
}

func classify(ctx context.Context, addr string, err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, os.ErrDeadlineExceeded):
		return &evidence.PeerError{Addr: addr, Kind: KindTimeout, Msg: "no answer in time"}
	case errors.Is(err, context.Canceled):
		return &evidence.PeerError{Addr: addr, Kind: KindTimeout, Msg: "the request was cancelled"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &evidence.PeerError{Addr: addr, Kind: KindUnreachable, Msg: "connection refused: no node daemon listens there (is `probing-mcp node` running on that node?)"}
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return &evidence.PeerError{Addr: addr, Kind: KindUnreachable, Msg: "the connection broke mid-answer (the daemon died?)"}
	}
	if strings.Contains(err.Error(), "malformed HTTP") || strings.Contains(err.Error(), "readLoopPeekFailLocked") {
		// The second: it wrote before it was asked, which no HTTP server does.
		return &evidence.PeerError{Addr: addr, Kind: KindGarbage, Msg: "it does not speak HTTP"}
	}
	return &evidence.PeerError{Addr: addr, Kind: KindUnreachable, Msg: bound(err.Error(), 200)}
}

func bound(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
