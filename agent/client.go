package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// Client calls one agent's control socket.
type Client struct {
	PID    int
	Socket string
	// MaxReply caps a reply body (default 8 MiB; Flight Recorder snapshots
	// ask for more).
	MaxReply int64
	http     *http.Client
}

// DefaultTimeout bounds one call when the caller's context has no deadline.
const DefaultTimeout = 5 * time.Second

// NewClient returns a client for a, or an error if a has no socket.
func NewClient(a *Agent) (*Client, error) {
	if a.Socket == "" {
		return nil, fmt.Errorf("pid %d has no control socket (no agent running in it)", a.PID)
	}
	if a.Untrusted != "" {
		return nil, &Error{PID: a.PID, Kind: "denied", Msg: "untrusted, not called: " + a.Untrusted}
	}
	c := &Client{PID: a.PID, Socket: a.Socket, MaxReply: 8 << 20}
	addr := a.Socket
	pid, uid := a.PID, a.UID
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	c.http = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, "unix", addr)
			if err != nil {
				return nil, err
			}
			if err := checkPeer(conn, pid, uid); err != nil {
				conn.Close()
				return nil, &Error{PID: pid, Kind: "denied", Msg: fmt.Sprintf("control socket %s: %v; not called", addr, err)}
			}
			return conn, nil
		},
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 0, // the context's deadline governs
	}}
	return c, nil
}

// checkPeer makes sure the socket is served by the process it is meant to
// reach: anyone can bind an abstract socket named @probing-<pid>, or leave
// a socket file in a shared directory, and answer with made-up stacks.
// The listener's credentials (SO_PEERCRED, fixed when it called listen)
// must show the process's pid, when visible in our pid namespace, and its
// owner (or root).
func checkPeer(conn net.Conn, pid, uid int) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("its peer credentials cannot be read (%v)", cerr)
	}
	if cred.Pid != 0 && int(cred.Pid) != pid {
		return fmt.Errorf("it is served by pid %d (%s), not by pid %d", cred.Pid, procfacts.UserName(int(cred.Uid)), pid)
	}
	if uid >= 0 && int(cred.Uid) != uid && cred.Uid != 0 {
		return fmt.Errorf("it is served by %s, but pid %d runs as %s", procfacts.UserName(int(cred.Uid)), pid, procfacts.UserName(uid))
	}
	return nil
}

// Error is a failed call, classified so tools can say what happened.
type Error struct {
	PID  int
	Kind string // "dead", "refused", "timeout", "denied", "http", "malformed"
	Msg  string
	// Status is the HTTP status for Kind "http".
	Status int
}

func (e *Error) Error() string { return fmt.Sprintf("pid %d: %s", e.PID, e.Msg) }

// do is Do (tracing.go) untraced; metrics count it (metrics.go).
func (c *Client) do(ctx context.Context, method, path string, body []byte, contentType string) (_ []byte, err error) {
	defer observeCall(time.Now(), &err) // metrics.go
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.classify(ctx, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxReply+1))
	if err != nil {
		return nil, c.classify(ctx, err)
	}
	if int64(len(b)) > c.MaxReply {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: fmt.Sprintf("reply larger than %d bytes", c.MaxReply)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, &Error{PID: c.PID, Kind: "http", Status: resp.StatusCode, Msg: fmt.Sprintf("agent answered %d: %s", resp.StatusCode, jobtext.Quote(errorText(b), jobtext.Line))}
	}
	return b, nil
}

// GetJSON fetches path and decodes the reply into v.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	b, err := c.Do(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	return c.decode(b, v)
}

func (c *Client) decode(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return &Error{PID: c.PID, Kind: "malformed", Msg: fmt.Sprintf("reply is not the JSON expected (%v): %s", err, jobtext.Quote(string(b), 200))}
	}
	return nil
}

func (c *Client) classify(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{PID: c.PID, Kind: "timeout", Msg: "the agent did not answer in time (the process may be stuck holding the GIL)"}
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		return &Error{PID: c.PID, Kind: "refused", Msg: fmt.Sprintf("control socket %s refuses connections: the agent is gone (stale socket)", c.Socket)}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &Error{PID: c.PID, Kind: "denied", Msg: fmt.Sprintf("control socket %s: permission denied (owned by another user?)", c.Socket)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &Error{PID: c.PID, Kind: "dead", Msg: "the connection closed before a reply: the process exited, or the agent refused this user"}
	}
	return &Error{PID: c.PID, Kind: "refused", Msg: err.Error()}
}

// errorText pulls the message out of an error envelope, whatever its shape.
func errorText(b []byte) string {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && len(env.Error) > 0 {
		var s string
		if json.Unmarshal(env.Error, &s) == nil {
			return s
		}
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(env.Error, &o) == nil && o.Message != "" {
			return o.Message
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
