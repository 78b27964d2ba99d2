package calltrace

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestConfigDefaults(t *testing.T) {
	c, err := FromEnv(env(map[string]string{EnvOn: "1"}), "/dev/shm/probing")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{On: true, File: true, Path: "/dev/shm/probing/probing-mcp/mcp-calls", Format: FormatJSONLGz,
		RollBytes: DefaultRollBytes, Segments: DefaultSegments}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	c, err = FromEnv(env(map[string]string{EnvOn: "on", EnvFormat: "JSONL", EnvSinks: " stderr , otel,file,"}), "/d")
	if err != nil || c.Path != "/d/probing-mcp/mcp-calls.jsonl" || !c.File || !c.Stderr || !c.OTel || c.Format != FormatJSONL {
		t.Errorf("jsonl, three sinks: %+v %v", c, err)
	}
	c, err = FromEnv(env(map[string]string{EnvOn: "yes", EnvPath: "rel/calls", EnvRollBytes: "1MiB", EnvRollLines: "500", EnvSegments: "3"}), "/d")
	if err != nil || !filepath.IsAbs(c.Path) || !strings.HasSuffix(c.Path, "/rel/calls") || c.RollBytes != 1<<20 || c.RollLines != 500 || c.Segments != 3 {
		t.Errorf("set: %+v %v", c, err)
	}
	// Off, the variables are still checked, and the ones set are named.
	c, err = FromEnv(env(map[string]string{EnvSinks: "stderr", EnvSegments: "4"}), "/d")
	if err != nil || c.On || !reflect.DeepEqual(c.Unused, []string{EnvSinks, EnvSegments}) {
		t.Errorf("off with sinks set: %+v %v", c, err)
	}
}

// Bad values stop the server at start with the variable, the value and
// what is wanted.
func TestConfigRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		kv   map[string]string
		want string
	}{
		{map[string]string{EnvOn: "2"}, `PROBING_MCP_TRACE="2": want 1, true, on or yes`},
		{map[string]string{EnvOn: "1", EnvSinks: "file,kafka"}, `PROBING_MCP_TRACE_SINKS="file,kafka": unknown sink "kafka"; want a comma list of file, stderr and otel`},
		{map[string]string{EnvOn: "1", EnvSinks: " , "}, `PROBING_MCP_TRACE_SINKS=" , " names no sink`},
		{map[string]string{EnvOn: "1", EnvFormat: "gz"}, `PROBING_MCP_TRACE_FILE_FORMAT="gz": want jsonl (one file, appended) or jsonl_gz`},
		{map[string]string{EnvOn: "1", EnvRollBytes: "0"}, `PROBING_MCP_TRACE_FILE_ROLL_BYTES="0": want a positive size in bytes`},
		{map[string]string{EnvOn: "1", EnvRollBytes: "lots"}, `PROBING_MCP_TRACE_FILE_ROLL_BYTES="lots"`},
		{map[string]string{EnvOn: "1", EnvRollLines: "-1"}, `PROBING_MCP_TRACE_FILE_ROLL_LINES="-1": want a number of lines`},
		{map[string]string{EnvOn: "1", EnvSegments: "0"}, `PROBING_MCP_TRACE_FILE_SEGMENTS="0": want the number of segments to keep, 1 to 100000`},
		{map[string]string{EnvSegments: "many"}, `PROBING_MCP_TRACE_FILE_SEGMENTS="many"`},
		{map[string]string{EnvOn: "1", EnvPath: "/var/log/"}, `PROBING_MCP_TRACE_FILE_PATH="/var/log/" is a directory; want a file (jsonl) or a segment prefix (jsonl_gz), e.g. /var/log/mcp-calls`},
	} {
		_, err := FromEnv(env(tc.kv), "/d")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %s", tc.kv, err, tc.want)
		}
	}
}
