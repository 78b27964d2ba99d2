package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/tools"
)

// TestServeRefusesSystemFileRoots: an explicit root that would expose the
// system is a start-up error, not a warning nobody reads.
func TestServeRefusesSystemFileRoots(t *testing.T) {
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	for _, dirs := range []string{"/", "/tmp/dumps:/etc"} {
		t.Setenv("PROBING_ALLOWED_FILE_DIRS", dirs)
		code, _, errOut := runCLI("serve")
		if code != 2 || !strings.Contains(errOut, "PROBING_ALLOWED_FILE_DIRS entry") || !strings.Contains(errOut, "name the directories that hold the dumps") {
			t.Errorf("PROBING_ALLOWED_FILE_DIRS=%s: exit %d %q, want 2 and the refusal", dirs, code, errOut)
		}
	}
}

// TestLogFileRoots: the start-up log names every root and why, and every
// default left out and why.
func TestLogFileRoots(t *testing.T) {
	p, err := tools.NewFilePolicy(func(k string) string { return map[string]string{"HOME": "/home/someone"}[k] }, "/", "/dev/shm/probing")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logFileRoots(slog.New(slog.NewTextHandler(&buf, nil)), p)
	logs := buf.String()
	for _, want := range []string{
		`msg="file tools may read" root=/dev/shm/probing why="the data dir (Probing's default)"`,
		`msg="file tools may read" root=/home/someone/.cache/torch why="torch's default Flight Recorder dump directory (newer releases)"`,
		`msg="file tools may read" root=/tmp/nccl_trace_rank_* why=`,
		`msg="file tools may not read" path=/ why="the working directory is the root of the file system"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}
