package membership

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// MaxFile bounds a membership file read back: 16k nodes of JSON fit
// with room to spare.
const MaxFile = 4 << 20

// DefaultPath is where a run's membership is kept:
// <dataDir>/probing-mcp/cluster/<run id, sanitized, or "default">.json.
func DefaultPath(dataDir, runID string) string {
	return filepath.Join(dataDir, "probing-mcp", "cluster", sanitize(runID)+".json")
}

// sanitize keeps a run id a single safe file name.
func sanitize(runID string) string {
	var b strings.Builder
	for _, r := range runID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 128 {
			break
		}
	}
	s := strings.Trim(b.String(), ".")
	if s == "" {
		return "default"
	}
	return s
}

// Save writes ns to path atomically: a temporary file beside it, synced,
// then renamed over it, so a reader sees the old list or the new one.
func Save(path string, ns []cluster.Node) error {
	if len(ns) > MaxNodes {
		return fmt.Errorf("membership file %s: %d nodes, over the %d kept", path, len(ns), MaxNodes)
	}
	if ns == nil {
		ns = []cluster.Node{}
	}
	body, err := json.MarshalIndent(ns, "", " ")
	if err != nil {
		return err
	}
	if len(body) > MaxFile {
		return fmt.Errorf("membership file %s: %d bytes, over the %d Load reads", path, len(body), MaxFile)
	}
	// The file gives the coordinator the addresses it sends the job's
	// token to: it lives in a directory only this user can write.
	dir := filepath.Dir(path)
	if err := safefile.PrivateDir(dir); err != nil {
		return fmt.Errorf("membership file %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("membership file %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("membership file %s: %w", path, err)
	}
	if _, err := f.Write(append(body, '\n')); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("membership file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("membership file %s: %w", path, err)
	}
	// The rename is durable once the directory is synced.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Load reads a file Save wrote; every node's Source becomes "disk". A
// file that is not this user's (or root's), that others can write, or
// that sits in a directory others can write is refused with the reason:
// in a shared data dir anyone could plant one naming their own address.
func Load(path string) ([]cluster.Node, error) {
	if err := safefile.CheckDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("membership file %s ignored: %w", path, err)
	}
	f, err := safefile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("membership file ignored: %w", err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("membership file %s: %w", path, err)
	}
	if len(body) > MaxFile {
		return nil, fmt.Errorf("membership file %s is over %d bytes: not one this program wrote; remove it", path, MaxFile)
	}
	var ns []cluster.Node
	if err := json.Unmarshal(body, &ns); err != nil {
		return nil, fmt.Errorf("membership file %s is not a JSON list of nodes (%v); remove it and let discovery write it again", path, err)
	}
	if len(ns) > MaxNodes {
		return nil, fmt.Errorf("membership file %s lists %d nodes, over %d; remove it", path, len(ns), MaxNodes)
	}
	for i := range ns {
		if _, err := checkHostPort(ns[i].Addr); err != nil {
			return nil, fmt.Errorf("membership file %s: node %d: address %q: %v; remove the file", path, i, clip(ns[i].Addr), err)
		}
		ns[i].Source = "disk"
	}
	return ns, nil
}
