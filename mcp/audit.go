package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/tools"
)

// AuditLog appends one JSON line per write-tool call, before the call
// (intent) and after it (outcome), and syncs each line to disk: a write that
// crashes the server is still on record.
//
// A record is a whole line or nothing. Each is one write under an flock
// (other servers may share the file); a write that fails part-way, say on a
// full disk, is cut back off, and a log found ending mid-line (a crash, or a
// cut that failed) first gets a newline and a marker record, so the next
// record always starts a line of its own.
type AuditLog struct {
	mu   sync.Mutex
	f    *os.File
	next atomic.Int64
	// history, when set, gets a copy of every record so audits can be
	// queried (history.audit) next to the verdicts. The JSONL file stays
	// the record that gates a write.
	history *history.Store
	// writeAll writes one record's bytes; tests make it fail mid-record.
	writeAll func(f *os.File, b []byte) (int, error)
}

// AuditRecord is one line of the audit log.
type AuditRecord struct {
	Time       string `json:"time"`
	ID         string `json:"id"`
	Phase      string `json:"phase"` // call, result, or repair (a torn record was found)
	Tool       string `json:"tool"`
	Caller     string `json:"caller"`
	ArgsSHA256 string `json:"args_sha256"`
	ArgsBytes  int    `json:"args_bytes"`
	Outcome    string `json:"outcome,omitempty"` // ok, error or fault; torn for a repair
	Error      string `json:"error,omitempty"`
}

// OpenAuditLog opens (creating if needed, mode 0600) the JSONL audit log. It
// must be a regular file of this user's, not a symlink, in a directory
// only this user (or root) can write (created 0700 when absent), and a
// torn last record is repaired at once.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := safefile.PrivateDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("audit log %s: %w; or set PROBING_MCP_AUDIT_LOG to a file in a directory of your own", path, err)
	}
	f, err := OpenRegular(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w; set PROBING_MCP_AUDIT_LOG to a regular file (default <data dir>/probing-mcp/mcp-audit.jsonl)", err)
	}
	a := &AuditLog{f: f, writeAll: (*os.File).Write}
	a.next.Store(time.Now().UnixNano())
	a.mu.Lock()
	err = a.appendLocked(nil)
	a.mu.Unlock()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("audit log %s ends in a torn record that cannot be repaired: %w", path, err)
	}
	return a, nil
}

func (a *AuditLog) write(rec AuditRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.appendLocked(append(line, '\n')); err != nil {
		return err
	}
	if a.history != nil {
		args, _ := json.Marshal(map[string]any{"id": rec.ID, "sha256": rec.ArgsSHA256, "bytes": rec.ArgsBytes})
		_, _ = a.history.AddAudit(history.AuditEntry{Tool: rec.Tool, Phase: rec.Phase, Caller: rec.Caller,
			Args: args, Outcome: rec.Outcome, Error: rec.Error})
	}
	return nil
}

// appendLocked appends line (which may be empty: repair only) as one write
// and syncs it, or leaves the file as it was.
func (a *AuditLog) appendLocked(line []byte) error {
	fd := int(a.f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock the audit log: %w", err)
	}
	defer func() { _ = syscall.Flock(fd, syscall.LOCK_UN) }()
	fi, err := a.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	torn, err := a.tornAt(size)
	if err != nil {
		return err
	}
	if torn {
		line = append(a.repairLine(), line...)
	}
	if len(line) == 0 {
		return nil
	}
	n, err := a.writeAll(a.f, line)
	if err == nil && n < len(line) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = a.f.Sync()
	}
	if err != nil {
		// Cut the partial record off. Should that fail too, the tail is
		// torn, and the next append repairs it first.
		if terr := a.f.Truncate(size); terr != nil {
			return fmt.Errorf("%w (and the partial record could not be removed: %v)", err, terr)
		}
		_ = a.f.Sync()
		return err
	}
	return nil
}

// tornAt reports whether a file of size bytes ends mid-line.
func (a *AuditLog) tornAt(size int64) (bool, error) {
	if size == 0 {
		return false, nil
	}
	var last [1]byte
	if _, err := a.f.ReadAt(last[:], size-1); err != nil {
		return false, fmt.Errorf("read the audit log's last byte: %w", err)
	}
	return last[0] != '\n', nil
}

// repairLine ends a torn line and records that it was found.
func (a *AuditLog) repairLine() []byte {
	b, _ := json.Marshal(AuditRecord{Time: time.Now().UTC().Format(time.RFC3339Nano), ID: fmt.Sprintf("w%x", a.next.Add(1)),
		Phase: "repair", Caller: "probing-mcp", Outcome: "torn",
		Error: "the record on the line above was cut short (a write that failed part-way, e.g. on a full disk, or a crash)"})
	return append(append([]byte{'\n'}, b...), '\n')
}

// argsDigest is the SHA-256 of the arguments as canonical JSON (Go sorts
// map keys), so equal calls have equal digests without logging the values.
func argsDigest(args any) (string, int) {
	b, err := json.Marshal(args)
	if err != nil {
		b = []byte(fmt.Sprint(args))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), len(b)
}

// wrap audits every call of a write tool. If the intent cannot be recorded
// the call is refused: an unaudited write is worse than none.
func (a *AuditLog) wrap(tool string, next server.ToolHandlerFunc, logger *slog.Logger) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		digest, n := argsDigest(req.GetArguments())
		rec := AuditRecord{Time: time.Now().UTC().Format(time.RFC3339Nano), ID: fmt.Sprintf("w%x", a.next.Add(1)), Phase: "call",
			Tool: tool, Caller: CallerFrom(ctx), ArgsSHA256: digest, ArgsBytes: n}
		if err := a.write(rec); err != nil {
			logger.Error("audit log write failed; write refused", "tool", tool, "err", err)
			return mcplib.NewToolResultError(fmt.Sprintf("%s refused: the audit log cannot be written (%v)", tool, err)), nil
		}
		logger.Info("write tool call", "tool", tool, "caller", rec.Caller, "args_sha256", digest, "audit_id", rec.ID)
		res, err := next(ctx, req)
		rec.Time, rec.Phase = time.Now().UTC().Format(time.RFC3339Nano), "result"
		switch {
		case err != nil:
			rec.Outcome, rec.Error = "fault", err.Error()
		case res != nil && res.IsError:
			rec.Outcome, rec.Error = "error", tools.ResultText(res)
		default:
			rec.Outcome = "ok"
		}
		if werr := a.write(rec); werr != nil {
			logger.Error("audit log write failed after the call", "tool", tool, "err", werr)
		}
		return res, err
	}
}

// Close closes the log file.
func (a *AuditLog) Close() error { return a.f.Close() }
