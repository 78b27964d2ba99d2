package procfacts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// MaxElasticErrorBytes bounds a torchelastic error file. torch writes the
// exception's message and its formatted traceback: a deep one is tens of
// KiB; anything larger is not what torch writes.
const MaxElasticErrorBytes = 1 << 20

// maxElasticFrames and maxElasticText bound what is kept of one file.
const (
	maxElasticFrames = 100
	maxElasticText   = 4 << 10
)

// ElasticError is what torchelastic's @record wrote to the rank's
// TORCHELASTIC_ERROR_FILE as its entrypoint raised: the exception's type
// and message, the traceback's frames (innermost first) and when.
type ElasticError struct {
	Type, Message string
	Frames        []ExitFrame
	// TimeNS is the failure's time (torch records whole seconds), 0
	// when the file gives none.
	TimeNS int64
	// ErrorCode is the exit code torchrun's agent put in ("errorCode"),
	// 0 when none.
	ErrorCode int
}

// ReadElasticError reads the error file torchelastic's @record wrote for
// a rank, as hostile input: only the path the agent recorded, the owner's
// regular file (no link, no FIFO, nobody else can write it), bounded, the
// JSON decoded from at most MaxElasticErrorBytes, every string clipped.
// nil, nil when there is no file or it is empty.
func ReadElasticError(path string, owner Owner) (*ElasticError, error) {
	f, fi, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := CheckFile(fi, owner); err != nil {
		return nil, err
	}
	if fi.Size() > MaxElasticErrorBytes {
		return nil, fmt.Errorf("%d bytes, more than the %d read", fi.Size(), MaxElasticErrorBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxElasticErrorBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxElasticErrorBytes {
		return nil, fmt.Errorf("more than the %d bytes read", MaxElasticErrorBytes)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	return ParseElasticError(b)
}

// elasticFile is torch's two formats (torch/distributed/elastic/
// multiprocessing/errors): {"message": {"message": "Type: text",
// "extraInfo": {"py_callstack": "...", "timestamp": "<unix s>"},
// "errorCode": n}}, and the older {"message": "text", "timestamp": n}.
type elasticFile struct {
	Message   json.RawMessage `json:"message"`
	Timestamp json.RawMessage `json:"timestamp"`
}

type elasticMessage struct {
	Message   json.RawMessage `json:"message"`
	ErrorCode json.RawMessage `json:"errorCode"`
	ExtraInfo struct {
		PyCallstack json.RawMessage `json:"py_callstack"`
		Timestamp   json.RawMessage `json:"timestamp"`
	} `json:"extraInfo"`
}

// ParseElasticError decodes an error file's bytes. Fields of the wrong
// JSON type are left out, not errors: the file is torch's, its content
// the job's.
func ParseElasticError(b []byte) (*ElasticError, error) {
	var ef elasticFile
	if err := json.Unmarshal(b, &ef); err != nil {
		return nil, fmt.Errorf("not a torchelastic error file: %s", jsonErr(err))
	}
	e := &ElasticError{}
	var msg, stack string
	var ts json.RawMessage
	if s, ok := jsonString(ef.Message); ok {
		msg, ts = s, ef.Timestamp
	} else {
		var m elasticMessage
		if json.Unmarshal(ef.Message, &m) != nil {
			return nil, fmt.Errorf("not a torchelastic error file: its message is neither text nor an object")
		}
		msg, _ = jsonString(m.Message)
		stack, _ = jsonString(m.ExtraInfo.PyCallstack)
		ts = m.ExtraInfo.Timestamp
		if n, ok := jsonInt(m.ErrorCode); ok && n >= -1<<31 && n < 1<<31 {
			e.ErrorCode = int(n)
		}
	}
	if sec, ok := jsonInt(ts); ok && sec > 0 && sec < 1<<33 {
		e.TimeNS = sec * 1e9
	}
	e.Type, e.Message = splitException(msg)
	e.Frames = tracebackFrames(stack)
	if e.Type == "" && e.Message == "" && len(e.Frames) == 0 {
		return nil, nil
	}
	return e, nil
}

// jsonErr is a decoding error without the input's bytes (json's syntax
// errors quote the character they stopped at).
func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at offset %d", se.Offset)
	}
	return "unexpected JSON types"
}

func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonInt reads a number or a string holding one (torch writes the
// timestamp as a string).
func jsonInt(raw json.RawMessage) (int64, bool) {
	if s, ok := jsonString(raw); ok {
		raw = json.RawMessage(strings.TrimSpace(s))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// exceptionType is a (dotted) Python class name, as torch writes
// f"{type(e).__name__}: {e}".
var exceptionType = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]{0,200}$`)

func splitException(msg string) (typ, text string) {
	msg = strings.TrimSpace(msg)
	if t, rest, ok := strings.Cut(msg, ":"); ok && exceptionType.MatchString(t) {
		return clip(t, 200), clip(strings.TrimSpace(rest), maxElasticText)
	}
	if exceptionType.MatchString(msg) {
		return clip(msg, 200), ""
	}
	return "", clip(msg, maxElasticText)
}

// tracebackLine is one frame's header in traceback.format_exc().
var tracebackLine = regexp.MustCompile(`^\s*File "(.+)", line (\d{1,9}), in (.+)$`)

// tracebackFrames reads the frames of the last traceback in a formatted
// exception (the one raised; earlier ones are the exceptions it was
// raised while handling), innermost first, at most maxElasticFrames.
func tracebackFrames(s string) []ExitFrame {
	if i := strings.LastIndex(s, "Traceback (most recent call last):"); i >= 0 {
		s = s[i:]
	} else {
		return nil
	}
	var out []ExitFrame
	for line := range strings.SplitSeq(s, "\n") {
		m := tracebackLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		out = append(out, ExitFrame{File: clip(m[1], 1024), Line: n, Function: clip(m[3], 256)})
		if len(out) > maxElasticFrames {
			out = out[1:] // the innermost frames are the ones that say where
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// clip cuts s to at most n bytes on a rune boundary and makes it valid
// UTF-8.
func clip(s string, n int) string {
	c, cut := Clip(s, n)
	if cut {
		c += "…"
	}
	return c
}

// Record is the error as one of the agent's exception records, for a
// rank whose agent recorded none: the main thread's exception (@record
// wraps the entrypoint, which runs on it).
func (e *ElasticError) Record() *ExitRecord {
	return &ExitRecord{V: 1, Kind: "exception", Hook: "torchelastic", TimeNS: e.TimeNS,
		Thread: &ExitThread{Name: "MainThread", IsMain: true},
		Type:   e.Type, Message: e.Message, Frames: e.Frames}
}
