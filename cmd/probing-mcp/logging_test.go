package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonLines parses every line of s as a log record: a JSON object with
// time, level and msg.
func jsonLines(t *testing.T, what, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.Lines(s) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s: a log line that is not JSON (%v): %q", what, err, l)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: log line without %q: %q", what, k, l)
			}
		}
		out = append(out, m)
	}
	return out
}

func hasMsg(recs []map[string]any, msg string) bool {
	for _, m := range recs {
		if m["msg"] == msg {
			return true
		}
	}
	return false
}

// With PROBING_LOGGING_JSONL=1 the real binary's stderr is JSON lines
// only: serve over stdio (whose stdout stays the protocol's alone), the
// node daemon, and a CLI command.
func TestJSONLLogsFromTheBinary(t *testing.T) {
	bin := buildBinary(t)
	data := t.TempDir()
	env := append(os.Environ(), "PROBING_LOGGING_JSONL=1", "PROBING_LOGLEVEL=debug", "PROBING_DATA_DIR="+data,
		"PROBING_CTRL_ROOT="+t.TempDir(), "PROBING_MCP_HISTORY=off", "PROBING_GPU=0")
	fr, err := filepath.Abs("../../testdata/fr/real")
	if err != nil {
		t.Fatal(err)
	}

	// serve: a piped session, answered before EOF ends it.
	srv := exec.Command(bin, "serve")
	srv.Env = append(env, "PROBING_ALLOWED_FILE_DIRS="+fr)
	srv.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"analyze_flight_recorder","arguments":{"paths":["` + filepath.Join(fr, "missing_rank") + `"]}}}
`)
	var stdout, stderr bytes.Buffer
	srv.Stdout, srv.Stderr = &stdout, &stderr
	if err := srv.Run(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
	for l := range strings.Lines(stdout.String()) {
		var m struct {
			JSONRPC string `json:"jsonrpc"`
			ID      any    `json:"id"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil || m.JSONRPC != "2.0" || m.ID == nil {
			t.Errorf("serve: stdout carries something other than an answer: %q", l)
		}
	}
	if n := strings.Count(stdout.String(), "\n"); n != 2 {
		t.Errorf("serve: %d answers on stdout, want 2:\n%s", n, stdout.String())
	}
	logs := jsonLines(t, "serve", stderr.String())
	for _, msg := range []string{"starting", "tool call"} { // the tool call: logCalls, at debug
		if !hasMsg(logs, msg) {
			t.Errorf("serve: no %q record in the log:\n%s", msg, stderr.String())
		}
	}

	// The node daemon, until it says it serves; then SIGTERM.
	node := exec.Command(bin, "node", "--http", "127.0.0.1:0", "--no-register", "--idle-exit", "0")
	node.Env = env
	pipe, err := node.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	var nodeLog strings.Builder
	serving := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		said := false
		for sc.Scan() {
			nodeLog.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), `"msg":"node daemon serving"`) {
				said = true
				serving <- true
			}
		}
		close(serving)
	}()
	select {
	case ok := <-serving:
		if !ok {
			_ = node.Wait()
			t.Fatalf("node exited before serving")
		}
	case <-time.After(60 * time.Second): // a hang guard
		_ = node.Process.Kill()
		t.Fatal("node did not say it serves")
	}
	_ = node.Process.Signal(syscall.SIGTERM)
	for range serving {
	}
	_ = node.Wait()
	if nl := jsonLines(t, "node", nodeLog.String()); !hasMsg(nl, "node daemon serving") {
		t.Errorf("node: no serving record:\n%s", nodeLog.String())
	}

	// A CLI command.
	an := exec.Command(bin, "analyze", filepath.Join(fr, "missing_rank"), "--json")
	an.Env = env
	stderr.Reset()
	an.Stderr = &stderr
	if _, err := an.Output(); err != nil && an.ProcessState.ExitCode() > 1 {
		t.Fatalf("analyze: %v\n%s", err, stderr.String())
	}
	if al := jsonLines(t, "analyze", stderr.String()); !hasMsg(al, "analysed") {
		t.Errorf("analyze: no debug record:\n%s", stderr.String())
	}
}

// A typo in the switch stops every command that logs, naming it.
func TestJSONLSwitchTypo(t *testing.T) {
	t.Setenv("PROBING_LOGGING_JSONL", "json")
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	for _, args := range [][]string{{"serve"}, {"node", "--http", "127.0.0.1:0"}, {"diagnose"}, {"analyze", "../../testdata/fr/real/missing_rank"}} {
		code, _, errOut := runCLI(args...)
		if code != 2 || !strings.Contains(errOut, `PROBING_LOGGING_JSONL="json": want 1, true, on or yes`) {
			t.Errorf("%v: exit %d %q, want 2 and the variable named", args, code, errOut)
		}
	}
}
