package calltrace

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/bytesize"
	"github.com/probing-mcp/probing-mcp/internal/envswitch"
)

// The variables, modelled on NVIDIA Dynamo's DYN_REQUEST_TRACE family.
const (
	EnvOn        = "PROBING_MCP_TRACE"
	EnvSinks     = "PROBING_MCP_TRACE_SINKS"
	EnvPath      = "PROBING_MCP_TRACE_FILE_PATH"
	EnvFormat    = "PROBING_MCP_TRACE_FILE_FORMAT"
	EnvRollBytes = "PROBING_MCP_TRACE_FILE_ROLL_BYTES"
	EnvRollLines = "PROBING_MCP_TRACE_FILE_ROLL_LINES"
	EnvSegments  = "PROBING_MCP_TRACE_FILE_SEGMENTS"
)

// Sinks and formats.
const (
	SinkFile   = "file"
	SinkStderr = "stderr"
	SinkOTel   = "otel"

	FormatJSONL   = "jsonl"
	FormatJSONLGz = "jsonl_gz"
)

// Defaults. The data dir is /dev/shm by default, memory: the live segment
// is at most DefaultRollBytes, the rest gzipped (JSON lines shrink about
// tenfold), DefaultSegments of them in all.
const (
	DefaultRollBytes = 16 << 20
	DefaultSegments  = 8
	maxSegments      = 100000
	// DefaultName is the file (jsonl) or segment prefix (jsonl_gz) in
	// <data dir>/probing-mcp/.
	DefaultName = "mcp-calls"
)

// Config is what the variables ask for.
type Config struct {
	On        bool
	File      bool
	Stderr    bool
	OTel      bool
	Path      string // jsonl: the file; jsonl_gz: the segments' prefix
	Format    string
	RollBytes int64 // jsonl_gz: a segment holds at most this many bytes (one longer line alone)
	RollLines int64 // jsonl_gz: and at most this many lines; 0: no line threshold
	Segments  int   // jsonl_gz: segments kept, the live one included
	// Unused names the variables set while the switch is off, for a
	// warning: they do nothing.
	Unused []string
}

// FromEnv reads the variables. Each is checked even when the switch is
// off, so a typo is found the day it is made; an error names the
// variable, the value and what is wanted.
func FromEnv(getenv func(string) string, dataDir string) (Config, error) {
	var c Config
	var err error
	if c.On, err = envswitch.Parse(EnvOn, getenv(EnvOn)); err != nil {
		return c, err
	}
	for _, k := range []string{EnvSinks, EnvPath, EnvFormat, EnvRollBytes, EnvRollLines, EnvSegments} {
		if strings.TrimSpace(getenv(k)) != "" && !c.On {
			c.Unused = append(c.Unused, k)
		}
	}
	raw := getenv(EnvSinks)
	sinks := strings.TrimSpace(raw)
	if sinks == "" {
		sinks = SinkFile
	}
	for _, s := range strings.Split(sinks, ",") {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case SinkFile:
			c.File = true
		case SinkStderr:
			c.Stderr = true
		case SinkOTel:
			c.OTel = true
		case "":
		default:
			return c, fmt.Errorf("%s=%q: unknown sink %q; want a comma list of file, stderr and otel", EnvSinks, raw, strings.TrimSpace(s))
		}
	}
	if !c.File && !c.Stderr && !c.OTel {
		return c, fmt.Errorf("%s=%q names no sink; want a comma list of file, stderr and otel", EnvSinks, raw)
	}
	c.Format = strings.ToLower(strings.TrimSpace(getenv(EnvFormat)))
	switch c.Format {
	case "":
		c.Format = FormatJSONLGz
	case FormatJSONL, FormatJSONLGz:
	default:
		return c, fmt.Errorf("%s=%q: want jsonl (one file, appended) or jsonl_gz (rolling gzipped segments)", EnvFormat, getenv(EnvFormat))
	}
	c.RollBytes = DefaultRollBytes
	if v := strings.TrimSpace(getenv(EnvRollBytes)); v != "" {
		n, ok := bytesize.Parse(v)
		if !ok {
			return c, fmt.Errorf("%s=%q: want a positive size in bytes, e.g. 16777216 or 16MiB", EnvRollBytes, v)
		}
		c.RollBytes = n
	}
	if v := strings.TrimSpace(getenv(EnvRollLines)); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%s=%q: want a number of lines (0 or unset: no line threshold)", EnvRollLines, v)
		}
		c.RollLines = n
	}
	c.Segments = DefaultSegments
	if v := strings.TrimSpace(getenv(EnvSegments)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSegments {
			return c, fmt.Errorf("%s=%q: want the number of segments to keep, 1 to %d (the live one included)", EnvSegments, v, maxSegments)
		}
		c.Segments = n
	}
	c.Path = strings.TrimSpace(getenv(EnvPath))
	if c.Path == "" {
		c.Path = filepath.Join(dataDir, "probing-mcp", DefaultName)
		if c.Format == FormatJSONL {
			c.Path += ".jsonl"
		}
	} else if strings.HasSuffix(c.Path, "/") {
		return c, fmt.Errorf("%s=%q is a directory; want a file (jsonl) or a segment prefix (jsonl_gz), e.g. %s", EnvPath, c.Path, filepath.Join(c.Path, DefaultName))
	}
	// Absolute now: a later change of directory must not move it.
	if c.Path, err = filepath.Abs(c.Path); err != nil {
		return c, fmt.Errorf("%s=%q: %v", EnvPath, getenv(EnvPath), err)
	}
	return c, nil
}
