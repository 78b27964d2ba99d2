package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The probing-mcp binary beside the interpreter: the agent of each node's
// local rank 0 starts `probing-mcp node` from it (agent/PROTOCOL.md, "Node
// daemon start"). Install copies the running executable there and records
// what it wrote in the package, so that the agent finds it and Uninstall
// removes that file and no other.
const (
	binName = "probing-mcp"
	// binRecordName, in the installed package dir, is read by the Python
	// agent (nodestart.py): keep the two in step.
	binRecordName = "node_bin.json"
	// binFallbackDir, in the package dir, takes the binary when the
	// scripts dir cannot: it goes away with the package.
	binFallbackDir = "bin"
	maxRecordBytes = 64 << 10
)

// selfExecutable is the binary Install copies; tests replace it.
var selfExecutable = os.Executable

// binRecord says where the binary is and whether Install wrote it.
type binRecord struct {
	Path string `json:"path"`
	// Ours: Install wrote the file, whose content then hashed to SHA256.
	// A file that was already there (the running binary itself) is
	// recorded, for the agent to use, but not ours.
	Ours    bool   `json:"ours"`
	SHA256  string `json:"sha256,omitempty"`
	Version string `json:"version,omitempty"`
}

// readBinRecord reads pkg's record; nil when there is none or it is not
// one of ours (a hand-edited or truncated file is ignored, never trusted).
func readBinRecord(pkg string) *binRecord {
	f, err := os.Open(filepath.Join(pkg, binRecordName))
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil || len(b) > maxRecordBytes {
		return nil
	}
	var r binRecord
	if json.Unmarshal(b, &r) != nil || !filepath.IsAbs(r.Path) {
		return nil
	}
	return &r
}

func writeBinRecord(pkg string, r *binRecord) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(pkg, binRecordName), append(b, '\n'), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stillOurs reports whether r names a file Install wrote that nobody has
// changed since.
func (r *binRecord) stillOurs() bool {
	if r == nil || !r.Ours || r.SHA256 == "" {
		return false
	}
	sum, err := fileSHA256(r.Path)
	return err == nil && sum == r.SHA256
}

// copyExecutable writes src to dst atomically (a temp file in dst's dir,
// then rename), mode 0755 whatever the umask; it returns the content's hash.
func copyExecutable(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+binName+".tmp-*")
	if err != nil {
		return "", err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	done = true
	return hex.EncodeToString(h.Sum(nil)), nil
}

func onPath(dir string) bool {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d != "" && filepath.Clean(d) == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// placeBinary puts the running executable at scripts/probing-mcp, or in
// pkg/bin when scripts cannot take it (not writable, no such dir, a file
// there that is not ours), records where in pkg, and returns what it did.
// prev is the record of the install being replaced (nil if none): a file
// it names that is still ours may be overwritten or removed.
func placeBinary(scripts, pkg, version string, prev *binRecord) ([]string, error) {
	self, err := selfExecutable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot find the running probing-mcp executable to place beside the interpreter: %w", err)
	}
	var did []string
	var rec *binRecord
	var why string // why not scripts, when it falls back
	if scripts == "" {
		why = "the interpreter names no scripts dir"
	} else {
		dst := filepath.Join(scripts, binName)
		st, statErr := os.Stat(dst)
		selfSt, selfErr := os.Stat(self)
		switch {
		case statErr == nil && selfErr == nil && os.SameFile(st, selfSt):
			// The running binary is already there: use it, do not copy it
			// onto itself, and keep whether it was ours.
			rec = &binRecord{Path: dst, Version: version}
			if prev != nil && prev.Path == dst && prev.stillOurs() {
				rec.Ours, rec.SHA256 = true, prev.SHA256
			}
			did = append(did, "the probing-mcp binary is already at "+dst+" (the one running): left as it is")
		case statErr == nil && !(prev != nil && prev.Path == dst && prev.stillOurs()):
			why = dst + " exists and was not placed by probing-mcp (left as it is)"
		default:
			if err := os.MkdirAll(scripts, 0o755); err != nil {
				why = fmt.Sprintf("cannot create %s: %v", scripts, err)
				break
			}
			sum, err := copyExecutable(self, dst)
			if err != nil {
				why = fmt.Sprintf("cannot write %s: %v", dst, err)
				break
			}
			rec = &binRecord{Path: dst, Ours: true, SHA256: sum, Version: version}
			line := "wrote the probing-mcp binary " + dst + " (the agent of each node's local rank 0 starts `probing-mcp node` from it)"
			if !onPath(scripts) {
				line += "; " + scripts + " is not on PATH: add it to run probing-mcp by name"
			}
			did = append(did, line)
		}
	}
	if rec == nil {
		dir := filepath.Join(pkg, binFallbackDir)
		dst := filepath.Join(dir, binName)
		var sum string
		err := os.MkdirAll(dir, 0o755)
		if err == nil {
			sum, err = copyExecutable(self, dst)
		}
		if err != nil {
			return did, fmt.Errorf("installed the agent, but could not place the probing-mcp binary: %s, and %s: %v; "+
				"the node daemon will not start by itself: give write access to %s and rerun, or set PROBING_MCP_BIN in the job's environment to a probing-mcp binary",
				why, dst, err, scripts)
		}
		rec = &binRecord{Path: dst, Ours: true, SHA256: sum, Version: version}
		fix := "not on PATH; the agent finds it through " + filepath.Join(pkg, binRecordName)
		if scripts != "" {
			fix += "; to have it in " + scripts + " instead, rerun once that can take it"
		}
		did = append(did, fmt.Sprintf("warning: %s; wrote the probing-mcp binary to %s instead (%s)", why, dst, fix))
	}
	if prev != nil && prev.Path != rec.Path && prev.stillOurs() {
		if err := os.Remove(prev.Path); err == nil {
			did = append(did, "removed the previous install's binary "+prev.Path)
		}
	}
	if err := writeBinRecord(pkg, rec); err != nil {
		return did, fmt.Errorf("installed the agent and placed %s, but cannot record it in %s: %w", rec.Path, pkg, err)
	}
	return did, nil
}

// removeBinary removes the binary pkg's record names if Install wrote it
// and nobody changed it since; one line of what it did, "" for nothing.
func removeBinary(pkg string) (string, error) {
	rec := readBinRecord(pkg)
	if rec == nil {
		return "", nil
	}
	if strings.HasPrefix(rec.Path, filepath.Clean(pkg)+string(filepath.Separator)) {
		return "", nil // goes with the package
	}
	if _, err := os.Lstat(rec.Path); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if !rec.stillOurs() {
		return "left " + rec.Path + ": not written by probing-mcp, or changed since", nil
	}
	if err := os.Remove(rec.Path); err != nil {
		return "", fmt.Errorf("removing %s: %w", rec.Path, err)
	}
	return "removed " + rec.Path, nil
}
