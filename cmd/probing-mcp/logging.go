package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/probing-mcp/probing-mcp/internal/logjson"
)

// leveledLogger is the logger every command builds (serve, node, the CLI;
// the GPU watcher and the node daemon get it from them): text, or JSON
// lines with PROBING_LOGGING_JSONL, on w, which is never stdout where
// stdout carries MCP.
func leveledLogger(w io.Writer, level slog.Leveler) (*slog.Logger, error) {
	h, err := logjson.NewFromEnv(os.Getenv, w, &slog.HandlerOptions{Level: level})
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}
