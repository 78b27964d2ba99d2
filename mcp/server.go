// Package mcp assembles the MCP server: it registers the tools of package
// tools (write tools only when allowed, each audited), the prompts, the
// generated instructions, and serves them over stdio or Streamable HTTP.
package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/bytesize"
	"github.com/probing-mcp/probing-mcp/internal/calltrace"
	"github.com/probing-mcp/probing-mcp/internal/envswitch"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/prompts"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
	"github.com/probing-mcp/probing-mcp/tools"
)

// Config is everything the server reads from its environment.
type Config struct {
	Version      string
	AllowWrite   bool   // PROBING_MCP_ALLOW_WRITE
	AuditLogPath string // PROBING_MCP_AUDIT_LOG, default <data dir>/probing-mcp/mcp-audit.jsonl
	DataDir      string
	// HistoryPath is the persisted history (PROBING_MCP_HISTORY, default
	// <data dir>/probing-mcp/history.db; "off" disables it).
	HistoryPath string
	Env         tools.Env
	Records     calltrace.Config // PROBING_MCP_TRACE*: tool-call records (calltrace.go)
}

// ParseSwitch reads an on/off variable (envswitch.Parse): anything but
// 1/true/on/yes or 0/false/off/no/unset is an error, so a typo such as
// PROBING_MCP_ALLOW_WRITE=2 does not quietly mean off.
func ParseSwitch(name, v string) (bool, error) { return envswitch.Parse(name, v) }

// ConfigFromEnv reads the PROBING_* variables. getenv is os.Getenv outside
// tests; level is the live log level the server may change.
func ConfigFromEnv(getenv func(string) string, version string, level *slog.LevelVar, logger *slog.Logger) (Config, error) {
	cfg := Config{Version: version, DataDir: storage.DataDir(getenv)}
	var err error
	if cfg.AllowWrite, err = ParseSwitch("PROBING_MCP_ALLOW_WRITE", getenv("PROBING_MCP_ALLOW_WRITE")); err != nil {
		return cfg, err
	}
	outputSchemas, err := ParseSwitch("PROBING_MCP_OUTPUT_SCHEMAS", getenv("PROBING_MCP_OUTPUT_SCHEMAS"))
	if err != nil {
		return cfg, err
	}
	// Whose processes count on a shared node: refuse a bad value at start.
	if _, err := procfacts.ScopeFromEnv(getenv); err != nil {
		return cfg, err
	}
	if cfg.Records, err = callRecordsFromEnv(getenv, cfg.DataDir, logger); err != nil {
		return cfg, err
	}
	cfg.AuditLogPath = getenv("PROBING_MCP_AUDIT_LOG")
	if cfg.AuditLogPath == "" {
		cfg.AuditLogPath = filepath.Join(cfg.DataDir, "probing-mcp", "mcp-audit.jsonl")
	}
	maxFile := int64(fr.DefaultMaxFileBytes)
	if v := strings.TrimSpace(getenv("PROBING_MAX_FILE_SIZE")); v != "" {
		n, ok := bytesize.Parse(v)
		if !ok {
			return cfg, fmt.Errorf("PROBING_MAX_FILE_SIZE=%q: want a positive size in bytes, e.g. 67108864 or 64MiB", v)
		}
		maxFile = n
	}
	cfg.HistoryPath = strings.TrimSpace(getenv("PROBING_MCP_HISTORY"))
	switch cfg.HistoryPath {
	case "":
		cfg.HistoryPath = history.DefaultPath(cfg.DataDir)
	case "off":
		cfg.HistoryPath = ""
	}
	timeout := 20 * time.Second
	if v := strings.TrimSpace(getenv("PROBING_MCP_QUERY_TIMEOUT")); v != "" {
		d, err := time.ParseDuration(v)
		if n, nerr := strconv.Atoi(v); nerr == nil {
			d, err = time.Duration(n)*time.Second, nil
		}
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("PROBING_MCP_QUERY_TIMEOUT=%q: want a duration such as 20s or a number of seconds", v)
		}
		timeout = d
	}
	sqlOpt := sqlengine.Options{DataDir: cfg.DataDir, HistoryPath: cfg.HistoryPath, Timeout: timeout}
	if err := sqlOpt.FromEnv(getenv); err != nil {
		return cfg, err
	}
	engine, err := sqlengine.New(sqlOpt)
	if err != nil {
		return cfg, err
	}
	wd, err := os.Getwd()
	if err != nil {
		wd = "" // no working directory, no root for it
	}
	files, err := tools.NewFilePolicy(getenv, wd, cfg.DataDir)
	if err != nil {
		return cfg, err
	}
	cfg.Env = tools.Env{
		Files:        files,
		MaxFileBytes: maxFile,
		LogLevel:     level,
		Logger:       logger,
		SQL:          engine,
		Agents:       agent.OptionsFromEnv(getenv),
		Skills:       tools.DefaultSkills,
		AllowWrite:   cfg.AllowWrite,
		// Off by default: 62% of tools/list, and the model reads the
		// text content. Clients that generate typed bindings ask for them.
		OutputSchemas: outputSchemas,
	}
	return cfg, nil
}

// ParseLogLevel reads PROBING_LOGLEVEL.
func ParseLogLevel(v string) (slog.Level, error) {
	l, err := tools.ParseLogLevel(v)
	if err != nil {
		return 0, fmt.Errorf("PROBING_LOGLEVEL=%q: want debug, info, warn or error", v)
	}
	return l, nil
}

// New builds the server: the tools of package tools (plus extra, for
// tests), gated and audited, the prompts, and instructions generated from
// what was registered.
func New(cfg Config, logger *slog.Logger, extra ...tools.Def) (*server.MCPServer, error) {
	if cfg.HistoryPath != "" && cfg.Env.History == nil {
		// History is worth having, not worth refusing to start over: a
		// read-only or full data dir still leaves every tool usable.
		h, err := history.Open(cfg.HistoryPath, history.Options{})
		if err != nil {
			logger.Warn("persisted history unavailable; verdicts will not be recorded", "path", cfg.HistoryPath, "err", err)
		} else {
			cfg.Env.History = h
			logger.Debug("persisted history", "path", h.Path(), "mode", h.Mode().String())
		}
	}
	defs := append(tools.All(&cfg.Env), extra...)
	var audit *AuditLog
	if cfg.AllowWrite {
		var err error
		if audit, err = OpenAuditLog(cfg.AuditLogPath); err != nil {
			return nil, fmt.Errorf("writes are enabled (PROBING_MCP_ALLOW_WRITE) but the audit log cannot be opened: %w", err)
		}
		audit.history = cfg.Env.History
	}
	reg, err := newRegistry(defs, cfg.AllowWrite, audit, logger)
	if err != nil {
		return nil, err
	}
	records, err := openCallRecords(cfg.Records, logger)
	if err != nil {
		return nil, err
	}
	s := server.NewMCPServer("probing-mcp", cfg.Version,
		server.WithInstructions(reg.instructions()),
		server.WithToolCapabilities(false),
		server.WithPromptCapabilities(false),
		server.WithResourceCapabilities(true, false), // subscribe: the watcher's alerts
		server.WithRecovery(),
		server.WithLogger(logger),
		traceRequests(), // before the other tool middlewares: their context holds the span
		server.WithToolHandlerMiddleware(logCalls(logger)),
		withCallRecords(records),
		withMetrics(), // mcp/metrics.go
		withPictures(cfg.Env.History, logger),
	)
	for _, d := range reg.enabled {
		s.AddTool(d.Tool, d.Handler)
	}
	// Prompts may name the skills that load now, as "skill:<id>".
	names := reg.names()
	if cfg.Env.Skills != nil && names["run_skill"] {
		cat, _ := cfg.Env.Skills()
		for _, sk := range cat.Skills {
			names["skill:"+sk.ID] = true
		}
	}
	s.AddPrompts(prompts.All(names)...)
	if res, tmpls := tools.SchemaResources(&cfg.Env); len(res) > 0 {
		s.AddResources(res...)
		s.AddResourceTemplates(tmpls...)
	}
	s.AddResourceTemplates(tools.SkillResources(&cfg.Env)...)
	s.AddResources(tools.AlertsResource(&cfg.Env))
	withAlertSubscriptions(s)
	return s, nil
}

// logCalls logs every tool call at debug level: name, caller, duration and
// outcome (arguments stay out of the log; write calls are in the audit log).
func logCalls(logger *slog.Logger) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
			start := time.Now()
			res, err := next(ctx, req)
			logger.DebugContext(ctx, "tool call", "tool", req.Params.Name, "caller", CallerFrom(ctx), "took", time.Since(start),
				"is_error", res != nil && res.IsError, "fault", err)
			return res, err
		}
	}
}

// ParseByteSize reads a size such as 67108864, 64MiB or 512KB.
func ParseByteSize(s string) (int64, error) {
	n, ok := bytesize.Parse(s)
	if !ok {
		return 0, fmt.Errorf("%q is not a positive size in bytes (e.g. 67108864, 64MiB, 512KB)", s)
	}
	return n, nil
}
