// Package testpython finds, for the end-to-end tests, the Python that
// drives the built binary with the official MCP client: one rule for
// every package (PROBING_E2E_PYTHON, else the repository's .venv, else
// python3), and one reading of PROBING_E2E_REQUIRED.
package testpython

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Required: a missing interpreter or SDK fails the tests instead of
// skipping them (CI sets it).
func Required() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("PROBING_E2E_REQUIRED"))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// Find picks the interpreter for the repository at root and runs probe
// (Python source) with it, in env (nil: this process's). It returns the
// interpreter's path and the probe's output, or a problem saying why the
// interpreter is missing or the probe failed.
func Find(root, probe string, env []string) (path string, out []byte, problem string) {
	python, from := os.Getenv("PROBING_E2E_PYTHON"), "PROBING_E2E_PYTHON"
	if python == "" {
		python, from = "python3", "PATH"
		if venv := filepath.Join(root, ".venv", "bin", "python"); exists(venv) {
			python, from = venv, "the repository's .venv"
		}
	}
	path, err := exec.LookPath(python)
	if err != nil {
		return python, nil, fmt.Sprintf("Python interpreter %q (from %s) not found: %v", python, from, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-c", probe)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		return path, out, fmt.Sprintf("%s (from %s) cannot import the MCP Python SDK (pip package mcp): %v: %s",
			path, from, err, LastLines(stderr.String(), 3))
	}
	return path, out, ""
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Torch is an interpreter with torch.distributed (PROBING_TORCH_PYTHON,
// else /work/torchenv's, else python3), or "" when none has it: the
// tests that need a real torch part then skip (CI has no torch).
func Torch() string {
	for _, py := range []string{os.Getenv("PROBING_TORCH_PYTHON"), "/work/torchenv/bin/python", "python3"} {
		if py != "" && exec.Command(py, "-c", "import torch.distributed as d; d.TCPStore").Run() == nil {
			return py
		}
	}
	return ""
}
