package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/server"
)

// ServeStdio serves MCP on stdin/stdout until stdin closes or ctx ends.
// stdout carries only the protocol; logs go to the logger (stderr).
func ServeStdio(ctx context.Context, s *server.MCPServer, logger *slog.Logger) error {
	return serveStdio(ctx, s, logger, os.Stdin, os.Stdout, stdioDrainTimeout)
}

// stdioDrainTimeout bounds how long requests still running when stdin
// closes may take to answer.
const stdioDrainTimeout = 60 * time.Second

func serveStdio(ctx context.Context, s *server.MCPServer, logger *slog.Logger, in io.Reader, out io.Writer, drain time.Duration) error {
	defer CloseCallRecords(s)
	caller := fmt.Sprintf("stdio:ppid=%d", os.Getppid())
	std := server.NewStdioServer(s)
	std.SetErrorLogger(slog.NewLogLogger(logger.Handler(), slog.LevelError))
	std.SetContextFunc(func(ctx context.Context) context.Context { return WithCaller(ctx, caller) })
	p := &pending{ids: map[string]bool{}, changed: make(chan struct{}, 1)}
	answers := &answerWriter{w: out, p: p}
	return std.Listen(ctx, &drainingReader{r: bufio.NewReader(in), p: p, answers: answers, timeout: drain, logger: logger}, answers)
}

// mcp-go stops its stdio server as soon as stdin reaches EOF and may drop
// tool calls still queued (a race in its worker loop), which loses the
// answers of piped one-shot use (`printf ... | probing-mcp serve`). The
// reader below holds back EOF until every request read has been answered.

// pending is the set of request ids read but not answered yet.
type pending struct {
	mu      sync.Mutex
	ids     map[string]bool
	changed chan struct{}
}

func (p *pending) update(f func(map[string]bool)) {
	p.mu.Lock()
	f(p.ids)
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *pending) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids) == 0
}

// message is the part of a JSON-RPC message that says whether it is a
// request (method and id) or a response (id and result or error).
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// drainingReader is also where a request that must not run is answered
// (precheck: an id the MCP spec forbids, prompt arguments the prompt
// refuses), before mcp-go can run it.
type drainingReader struct {
	r       *bufio.Reader
	buf     []byte
	p       *pending
	answers *answerWriter
	timeout time.Duration
	logger  *slog.Logger
}

func (d *drainingReader) Read(b []byte) (int, error) {
	for len(d.buf) == 0 {
		line, err := d.r.ReadBytes('\n')
		if len(line) == 0 {
			if err == io.EOF {
				d.wait()
			}
			return 0, err // err is never nil here
		}
		msg := bytes.TrimSpace(line)
		if answer, badID := precheck(msg); answer != nil {
			if badID {
				d.logger.Warn("JSON-RPC request refused", "reason", string(answer))
			}
			if _, werr := d.answers.Write(append(answer, '\n')); werr != nil {
				return 0, werr
			}
			continue // a later ReadBytes returns any error again
		}
		var m message
		if json.Unmarshal(msg, &m) == nil && m.Method != "" && len(m.ID) > 0 {
			d.p.update(func(ids map[string]bool) { ids[string(m.ID)] = true })
		}
		d.buf = line
	}
	n := copy(b, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}

// wait blocks until every request has an answer, or the timeout.
func (d *drainingReader) wait() {
	deadline := time.After(d.timeout)
	for !d.p.empty() {
		select {
		case <-d.p.changed:
		case <-deadline:
			d.logger.Warn("stdin closed with requests unanswered; stopping anyway")
			return
		}
	}
}

// answerWriter is shared by mcp-go's answers and the reader's refusals; mu
// keeps each answer one whole line.
type answerWriter struct {
	mu sync.Mutex
	w  io.Writer
	p  *pending
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, err := a.w.Write(b)
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		var m message
		if len(line) > 0 && json.Unmarshal(line, &m) == nil && m.Method == "" && len(m.ID) > 0 && (m.Result != nil || m.Error != nil) {
			a.p.update(func(ids map[string]bool) { delete(ids, string(m.ID)) })
		}
	}
	return n, err
}
