package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestServeRefusesAFIFOLogFile: opening a FIFO for writing blocks until a
// reader comes; the server must refuse it at once instead.
func TestServeRefusesAFIFOLogFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "log.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		errOut string
	}
	got := make(chan result, 1)
	go func() {
		code, _, errOut := runCLI("serve", "--log-file", fifo)
		got <- result{code, errOut}
	}()
	select {
	case r := <-got:
		if r.code != 1 || !strings.Contains(r.errOut, "named pipe (FIFO), not a regular file") {
			t.Errorf("exit %d %q, want 1 and the refusal", r.code, r.errOut)
		}
	case <-time.After(30 * time.Second): // an overall bound: the refusal is immediate
		if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer f.Close() // lets the blocked open return
		}
		t.Fatal("serve --log-file FIFO blocked")
	}
}
