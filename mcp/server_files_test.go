package mcp

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/tools"
)

// TestFileToolsStartedInRootDir: a client that spawns the server in / with
// no PROBING_ALLOWED_FILE_DIRS must not get the whole file system: the
// working directory is a root only when it is a project directory.
func TestFileToolsStartedInRootDir(t *testing.T) {
	t.Chdir("/")
	s, _ := testServer(t, false, "")
	c := connect(t, s)
	for _, path := range []string{"/etc/shadow", "/proc/self/environ", "/etc/passwd", "/"} {
		_, res := analyze(t, c, map[string]any{"paths": []string{path}})
		if text := tools.ResultText(res); !res.IsError || !strings.Contains(text, "outside the allowed") {
			t.Errorf("%s: isError=%v %q, want a refusal: the path is outside the allowed roots", path, res.IsError, text)
		}
	}
}

// TestFileToolsNoExistenceOracle: outside the roots the answer is the same
// whether or not the path exists, so the tool cannot be used to probe the
// file system.
func TestFileToolsNoExistenceOracle(t *testing.T) {
	s, _ := testServer(t, false, t.TempDir())
	c := connect(t, s)
	answer := func(path string) string {
		_, res := analyze(t, c, map[string]any{"paths": []string{path}})
		if !res.IsError {
			t.Fatalf("%s: not refused", path)
		}
		return strings.ReplaceAll(tools.ResultText(res), path, "PATH")
	}
	for _, pair := range [][2]string{
		{"/etc/passwd", "/etc/no-such-file-probing"},
		{"/root", "/no-such-dir-probing"},
		{"/etc/passwd/../shadow", "/etc/no-such-dir/../x"},
	} {
		if a, b := answer(pair[0]), answer(pair[1]); a != b {
			t.Errorf("existing %s and missing %s are told apart:\n  %s\n  %s", pair[0], pair[1], a, b)
		}
	}
}
