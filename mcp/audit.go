package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/tools"
)

// AuditLog appends one JSON line per write-tool call, before the call
// (intent) and after it (outcome), and syncs each line to disk: a write that
// crashes the server is still on record.
type AuditLog struct {
	mu   sync.Mutex
	f    *os.File
	next atomic.Int64
	// history, when set, gets a copy of every record so audits can be
	// queried (history.audit) next to the verdicts. The JSONL file stays
	// the record that gates a write.
	history *history.Store
}

// AuditRecord is one line of the audit log.
type AuditRecord struct {
	Time       string `json:"time"`
	ID         string `json:"id"`
	Phase      string `json:"phase"` // call or result
	Tool       string `json:"tool"`
	Caller     string `json:"caller"`
	ArgsSHA256 string `json:"args_sha256"`
	ArgsBytes  int    `json:"args_bytes"`
	Outcome    string `json:"outcome,omitempty"` // ok, error or fault
	Error      string `json:"error,omitempty"`
}

// OpenAuditLog opens (creating if needed, mode 0600) the JSONL audit log.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	a := &AuditLog{f: f}
	a.next.Store(time.Now().UnixNano())
	return a, nil
}

func (a *AuditLog) write(rec AuditRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.f.Write(append(line, '\n')); err != nil {
		return err
	}
	if err := a.f.Sync(); err != nil {
		return err
	}
	if a.history != nil {
		args, _ := json.Marshal(map[string]any{"id": rec.ID, "sha256": rec.ArgsSHA256, "bytes": rec.ArgsBytes})
		_, _ = a.history.AddAudit(history.AuditEntry{Tool: rec.Tool, Phase: rec.Phase, Caller: rec.Caller,
			Args: args, Outcome: rec.Outcome, Error: rec.Error})
	}
	return nil
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
