package procfacts

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// IdentityFile is the file, in a pid directory of the data dir, where our
// agent records who the process is, so that it stays known after the
// process died (a dead process has no /proc/<pid>/environ). Dot files are
// never tables.
const IdentityFile = ".identity.json"

// AgentNode is the identity's agent of a node daemon's (or serve's) pid
// directory: it holds the node's GPU rings, is no rank and answers no
// agent API.
const AgentNode = "probing-mcp-node"

// MaxIdentityBytes bounds an identity file (argv is the only long part).
const MaxIdentityBytes = 256 << 10

// Identity is what our agent writes to <data dir>/<pid>/.identity.json
// (agent/PROTOCOL.md). Unknown numbers are -1.
type Identity struct {
	Agent              string   `json:"agent"`
	AgentVersion       string   `json:"agent_version"`
	PID                int      `json:"pid"`
	StartTime          uint64   `json:"start_time"`
	Host               string   `json:"host"`
	Rank               int      `json:"rank"`
	WorldSize          int      `json:"world_size"`
	LocalRank          int      `json:"local_rank"`
	LocalWorldSize     int      `json:"local_world_size"`
	NodeRank           int      `json:"node_rank"`
	Role               string   `json:"role"`
	Addr               string   `json:"addr"`
	Socket             string   `json:"socket"`
	FaulthandlerSignal int      `json:"faulthandler_signal"`
	FaulthandlerFile   string   `json:"faulthandler_file"`
	EvalAllowed        bool     `json:"eval_allowed"`
	Python             string   `json:"python"`
	Torch              string   `json:"torch"`
	Argv               []string `json:"argv"`
	// FRDumpPrefix and FRPipePrefix are torch's TORCH_FR_DUMP_TEMP_FILE and
	// TORCH_NCCL_DEBUG_INFO_PIPE_FILE in the process: writing a byte to
	// <pipe prefix><rank>.pipe makes ProcessGroupNCCL dump its Flight
	// Recorder to <dump prefix><rank> from a C++ thread, without the GIL.
	FRDumpPrefix string `json:"fr_dump_prefix"`
	FRPipePrefix string `json:"fr_pipe_prefix"`
	// CrashFile is where faulthandler writes the interpreter's last words
	// on a fatal signal (SIGSEGV, SIGABRT, …): the stack it died with.
	CrashFile string `json:"crash_file"`
	// TorchelasticErrorFile is the rank's TORCHELASTIC_ERROR_FILE (set by
	// torchrun): where torchelastic's @record writes the exception that
	// ended it. The agent records it while the rank lives, since a dead
	// process's environ cannot be read.
	TorchelasticErrorFile string `json:"torchelastic_error_file,omitempty"`
}

// ReadIdentity reads an identity file, bounded, and returns it with the
// file's metadata (its owner decides whether it may be believed, see
// CheckFile). It opens without following a symlink and without blocking
// (a FIFO planted under the name would otherwise hang the reader), and
// reads only a regular file.
func ReadIdentity(path string) (*Identity, os.FileInfo, error) {
	f, fi, err := OpenRegular(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi.Size() > MaxIdentityBytes {
		return nil, fi, fmt.Errorf("identity file %s: %d bytes, over the %d-byte limit", path, fi.Size(), MaxIdentityBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxIdentityBytes+1))
	if err != nil {
		return nil, fi, fmt.Errorf("identity file %s: %w", path, err)
	}
	if len(b) > MaxIdentityBytes {
		return nil, fi, fmt.Errorf("identity file %s: over the %d-byte limit", path, MaxIdentityBytes)
	}
	id := Identity{Rank: -1, WorldSize: -1, LocalRank: -1, LocalWorldSize: -1, NodeRank: -1}
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, fi, fmt.Errorf("identity file %s is not valid JSON: %v", path, err)
	}
	return &id, fi, nil
}

// OpenRegular opens path for reading without following a final symlink
// and without blocking on a FIFO, and refuses anything but a regular
// file (safefile.OpenRegular). The FileInfo is of the open file, so it
// cannot be swapped between the check and the read.
func OpenRegular(path string) (*os.File, os.FileInfo, error) {
	return safefile.OpenRegular(path, os.O_RDONLY, 0)
}
