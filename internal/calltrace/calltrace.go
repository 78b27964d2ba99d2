// Package calltrace writes one record per MCP request end and per tool
// call (as NVIDIA Dynamo's request traces, DYN_REQUEST_TRACE, record types
// request_end and tool): what was called, how long it took and how it
// ended, never the arguments (a hash of them) nor the answers (their
// sizes, and diagnose_hang's headline).
//
// Sinks: a file (JSONL, or rolling gzipped segments), stderr, and the
// active trace span (as span events). Recording never fails a call and
// never holds one up for long: records are queued to one writer goroutine;
// a full queue, a full disk or a vanished directory drops records, which
// are counted and said in the log at most once a minute.
package calltrace

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Schema names this record format; a change that breaks readers gets a
// new one.
const Schema = "probing-mcp.call.v1"

// Record types.
const (
	TypeRequestEnd = "request_end"
	TypeTool       = "tool"
)

// Outcomes. An error that is none of these is OutcomeError, with its Go
// type in ErrorType.
const (
	OutcomeOK        = "ok"
	OutcomeToolError = "tool_error" // the tool answered with isError
	OutcomeError     = "error"
	OutcomeCanceled  = "canceled"
	OutcomeDeadline  = "deadline_exceeded"
)

// Record is one line.
type Record struct {
	Schema string `json:"schema"`
	Type   string `json:"type"`
	// Time is when the request or call ended (RFC 3339, UTC).
	Time       string  `json:"time"`
	TraceID    string  `json:"trace_id,omitempty"`
	SpanID     string  `json:"span_id,omitempty"`
	Session    string  `json:"session,omitempty"`
	Transport  string  `json:"transport,omitempty"` // stdio, http
	DurationMS float64 `json:"duration_ms"`
	Outcome    string  `json:"outcome"`
	ErrorType  string  `json:"error_type,omitempty"`
	ErrorCode  int     `json:"error_code,omitempty"` // request_end: the JSON-RPC error code

	// request_end
	Method    string `json:"method,omitempty"`
	RequestID string `json:"request_id,omitempty"`

	// tool
	Tool            string   `json:"tool,omitempty"`
	ArgsSHA256      string   `json:"args_sha256,omitempty"`
	ArgsBytes       int      `json:"args_bytes,omitempty"`
	TextBytes       int      `json:"text_bytes,omitempty"`
	StructuredBytes int      `json:"structured_bytes,omitempty"`
	Verdict         *Verdict `json:"verdict,omitempty"`
}

// Verdict is diagnose_hang's headline: the state, and the top
// hypothesis' category, culprits and confidence.
type Verdict struct {
	State        string `json:"state"`
	Category     string `json:"category,omitempty"`
	CulpritRanks string `json:"culprit_ranks,omitempty"`
	Confidence   string `json:"confidence,omitempty"`
}

// Options tune a Recorder; zero values are the defaults.
type Options struct {
	// Queue is how many records wait for the writer before new ones are
	// dropped (default 1024, Dynamo's capacity).
	Queue int
	// ReportEvery is the least time between two log lines about drops
	// (default a minute; the first is said at once).
	ReportEvery time.Duration
	// Stderr is where the stderr sink writes (default os.Stderr).
	Stderr interface{ Write([]byte) (int, error) }
	// CloseWait bounds Close's wait for the writer (default 5 s).
	CloseWait time.Duration
}

// Recorder takes records and hands them to the sinks.
type Recorder struct {
	cfg    Config
	logger *slog.Logger
	opt    Options

	file  sink // nil without the file sink
	queue chan []byte
	done  chan struct{}
	idle  chan struct{} // closed when the writer has exited
	once  sync.Once
	shut  atomic.Bool

	// Records dropped and written since Open; the reporter goroutine,
	// nudged at each drop, says the drops with the last reason.
	dropped   atomic.Uint64
	written   atomic.Uint64
	nudge     chan struct{}
	errMu     sync.Mutex
	lastErr   string
	repMu     sync.Mutex
	reportedN uint64 // under repMu
}

// sink is a file the writer appends whole lines to.
type sink interface {
	// write appends lines (each ending in '\n'); n is how many it wrote
	// before failing.
	write(lines [][]byte) (n int, err error)
	close() error
}

// Open starts a Recorder for cfg; nil (and no error) when cfg is off. A
// file that may not be used (a symlink, another user's file, a directory
// others can write) is an error naming it and the fix.
func Open(cfg Config, logger *slog.Logger, opt Options) (*Recorder, error) {
	if !cfg.On {
		return nil, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opt.Queue <= 0 {
		opt.Queue = 1024
	}
	if opt.ReportEvery <= 0 {
		opt.ReportEvery = time.Minute
	}
	if opt.Stderr == nil {
		opt.Stderr = os.Stderr
	}
	if opt.CloseWait <= 0 {
		opt.CloseWait = 5 * time.Second
	}
	r := &Recorder{cfg: cfg, logger: logger, opt: opt,
		queue: make(chan []byte, opt.Queue), done: make(chan struct{}), idle: make(chan struct{}), nudge: make(chan struct{}, 1)}
	if cfg.File {
		var err error
		if cfg.Format == FormatJSONL {
			r.file, err = openJSONL(cfg.Path)
		} else {
			r.file, err = openRolling(cfg.Path, cfg.RollBytes, cfg.RollLines, cfg.Segments, logger)
		}
		if err != nil {
			return nil, fmt.Errorf("call records (%s): %w; or set %s to a file in a directory of your own", EnvOn, err, EnvPath)
		}
	}
	go r.writer()
	go r.reporter()
	return r, nil
}

// Emit records rec: its schema, end time and the active span's ids are
// filled in here. It never blocks: with the queue full the record is
// dropped and counted. A nil Recorder does nothing.
func (r *Recorder) Emit(ctx context.Context, rec Record) {
	if r == nil {
		return
	}
	rec.Schema = Schema
	if rec.Time == "" {
		rec.Time = time.Now().UTC().Format(time.RFC3339Nano)
	}
	span := trace.SpanFromContext(ctx)
	if sc := span.SpanContext(); sc.IsValid() {
		rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	if r.cfg.OTel {
		// On the span itself, synchronously: it is in memory and the
		// span ends after the request. A span that does not record (no
		// tracing) takes no event.
		span.AddEvent("probing_mcp."+rec.Type, trace.WithAttributes(attrs(rec)...))
	}
	if r.file == nil && !r.cfg.Stderr {
		return
	}
	line, err := json.Marshal(rec)
	if err != nil { // a Record always marshals; kept for safety
		r.drop(1, err.Error())
		return
	}
	if r.shut.Load() {
		r.drop(1, "recorder closed")
		return
	}
	select {
	case r.queue <- append(line, '\n'):
	default:
		r.drop(1, fmt.Sprintf("the queue of %d records is full (the file or stderr is slow)", cap(r.queue)))
	}
}

// attrs is rec as span event attributes, the same keys as the JSON.
func attrs(rec Record) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.String("schema", rec.Schema),
		attribute.Float64("duration_ms", rec.DurationMS),
		attribute.String("outcome", rec.Outcome),
	}
	str := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	num := func(k string, v int) {
		if v != 0 {
			kv = append(kv, attribute.Int(k, v))
		}
	}
	str("session", rec.Session)
	str("transport", rec.Transport)
	str("error_type", rec.ErrorType)
	num("error_code", rec.ErrorCode)
	str("method", rec.Method)
	str("request_id", rec.RequestID)
	str("tool", rec.Tool)
	str("args_sha256", rec.ArgsSHA256)
	num("args_bytes", rec.ArgsBytes)
	num("text_bytes", rec.TextBytes)
	num("structured_bytes", rec.StructuredBytes)
	if v := rec.Verdict; v != nil {
		str("verdict.state", v.State)
		str("verdict.category", v.Category)
		str("verdict.culprit_ranks", v.CulpritRanks)
		str("verdict.confidence", v.Confidence)
	}
	return kv
}

// Dropped is how many records were dropped since Open (for each sink
// that lost one).
func (r *Recorder) Dropped() uint64 {
	if r == nil {
		return 0
	}
	return r.dropped.Load()
}

// Written is how many records the file and stderr sinks took (each sink's
// counted).
func (r *Recorder) Written() uint64 {
	if r == nil {
		return 0
	}
	return r.written.Load()
}

// Config is what the Recorder was opened with.
func (r *Recorder) Config() Config { return r.cfg }

func (r *Recorder) drop(n int, why string) {
	r.dropped.Add(uint64(n))
	r.errMu.Lock()
	r.lastErr = why
	r.errMu.Unlock()
	select {
	case r.nudge <- struct{}{}:
	default:
	}
}

// maxBatch bounds one write's bytes.
const maxBatch = 1 << 20

// writer appends queued lines, as many as are waiting in one write.
func (r *Recorder) writer() {
	defer close(r.idle)
	var batch [][]byte
	for {
		var line []byte
		select {
		case line = <-r.queue:
		case <-r.done:
			// Whatever was queued before Close.
			batch = batch[:0]
		drain:
			for {
				select {
				case line := <-r.queue:
					batch = append(batch, line)
				default:
					break drain
				}
			}
			r.flush(batch)
			return
		}
		batch = append(batch[:0], line)
		size := len(line)
	more:
		for size < maxBatch {
			select {
			case line := <-r.queue:
				batch = append(batch, line)
				size += len(line)
			default:
				break more
			}
		}
		r.flush(batch)
	}
}

func (r *Recorder) flush(batch [][]byte) {
	if len(batch) == 0 {
		return
	}
	if r.file != nil {
		n, err := r.file.write(batch)
		r.written.Add(uint64(n))
		if err != nil {
			r.drop(len(batch)-n, "file: "+err.Error())
		}
	}
	if r.cfg.Stderr {
		// One write: lines of the logger never land inside it.
		var b []byte
		for _, l := range batch {
			b = append(b, l...)
		}
		if _, err := r.opt.Stderr.Write(b); err != nil {
			r.drop(len(batch), "stderr: "+err.Error())
		} else {
			r.written.Add(uint64(len(batch)))
		}
	}
}

// reporter says drops in the log: at once for the first, then at most
// once per ReportEvery, with the count since the last line. It never
// runs on a caller's goroutine, so a blocked stderr holds up no call.
func (r *Recorder) reporter() {
	var last time.Time
	for {
		select {
		case <-r.nudge:
		case <-r.done:
			<-r.idle
			r.report()
			return
		}
		if wait := time.Until(last.Add(r.opt.ReportEvery)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.done:
				t.Stop()
				<-r.idle
				r.report()
				return
			}
		}
		r.report()
		last = time.Now()
	}
}

func (r *Recorder) report() {
	r.repMu.Lock()
	defer r.repMu.Unlock()
	total := r.dropped.Load()
	if total == r.reportedN {
		return
	}
	r.errMu.Lock()
	why := r.lastErr
	r.errMu.Unlock()
	r.logger.Warn("call records dropped; tool calls are not affected", "dropped", total-r.reportedN, "dropped_total", total,
		"last_reason", why, "sinks", r.sinkNames())
	r.reportedN = total
}

func (r *Recorder) sinkNames() string {
	s := ""
	add := func(on bool, name string) {
		if on {
			if s != "" {
				s += ","
			}
			s += name
		}
	}
	add(r.cfg.File, SinkFile+":"+r.cfg.Path)
	add(r.cfg.Stderr, SinkStderr)
	add(r.cfg.OTel, SinkOTel)
	return s
}

// Close writes what is queued, within CloseWait (a hung disk must not
// hold up exit), says any drops, and closes the file. Records emitted
// after Close are dropped.
func (r *Recorder) Close() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		r.shut.Store(true)
		close(r.done)
		t := time.NewTimer(r.opt.CloseWait)
		defer t.Stop()
		select {
		case <-r.idle:
			if r.file != nil {
				if err := r.file.close(); err != nil {
					r.logger.Warn("call records: closing the file", "path", r.cfg.Path, "err", err)
				}
			}
		case <-t.C:
			r.logger.Warn("call records: the writer did not finish in time; records still queued are lost", "path", r.cfg.Path, "waited", r.opt.CloseWait)
			r.report()
		}
	})
}
