package redteam

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// Files planted in the shared directories (issue 23): the data dir is
// shared (Probing's default is /dev/shm/probing, 1777), so anyone may
// leave a file, a symlink or a directory under any name there before the
// server or daemon makes it.

// toolTime bounds one tool call on a hostile input that should be refused
// or skipped at once (the query's own timeout is 20 s).
const toolTime = 30 * time.Second

// TestAuditLogSymlink. Attack: a symlink named like the audit log
// (<data dir>/probing-mcp/mcp-audit.jsonl) pointing at a root-owned 0600
// file elsewhere; as root, the same inside a probing-mcp directory the
// attacker (uid 65534) made first in the shared data dir. Before
// (b2aa69a): a root server with write tools on appended its audit records
// to the target. Bound: serve refuses to start (exit 1) naming the audit
// log, the reason and the fix; the target is unchanged; under 512 MB and
// 60 s.
func TestAuditLogSymlink(t *testing.T) {
	attack := func(t *testing.T, data string, theirs bool, want string) {
		target := filepath.Join(t.TempDir(), "root-only")
		if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(data, "probing-mcp", "mcp-audit.jsonl")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if theirs {
			chownAttacker(t, link)
		}
		p := start(t, env(t, data, "PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_HISTORY=off"), strings.NewReader(""), "serve")
		code := p.wait(startTime)
		errOut := p.stderr.String()
		if code != 1 {
			t.Errorf("serve exited %d, want 1 (refused at start):\n%s", code, tail(errOut, 2000))
		}
		mustContain(t, "serve's refusal", errOut, "audit log", want, "PROBING_MCP_AUDIT_LOG")
		said(t, errOut, "audit log")
		if b, _ := os.ReadFile(target); string(b) != "keep\n" {
			t.Errorf("the link's target was written: %q", b)
		}
		bounded(t, "audit-log symlink: "+t.Name(), p, p.took, startTime)
	}
	t.Run("own_dir", func(t *testing.T) {
		data := sharedDir(t)
		os.Mkdir(filepath.Join(data, "probing-mcp"), 0o700)
		attack(t, data, false, "is a symbolic link; refusing to follow it")
	})
	t.Run("attacker_dir", func(t *testing.T) {
		attacker(t)
		data := sharedDir(t)
		dir := filepath.Join(data, "probing-mcp")
		os.Mkdir(dir, 0o777)
		os.Chmod(dir, 0o777)
		chownAttacker(t, dir)
		attack(t, data, true, "belongs to uid 65534")
	})
}

// TestHistoryDanglingSymlink. Attack: a dangling symlink named like the
// persisted history (<data dir>/probing-mcp/history.db); as root, inside
// a probing-mcp directory the attacker made first. Before (b2aa69a): the
// server recursed without bound (a stack overflow after 15 s, 1.1 GB).
// Bound: the server starts and serves; its log says why the history is
// off; a query answers with a data-quality line naming history.db and the
// reason; nothing is created at the link's target; under 512 MB, the query
// within 30 s.
func TestHistoryDanglingSymlink(t *testing.T) {
	attack := func(t *testing.T, data, want string) {
		target := filepath.Join(t.TempDir(), "created-by-the-server")
		link := filepath.Join(data, "probing-mcp", "history.db")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		c := serveStdio(t, env(t, data))
		r := c.call("query", map[string]any{"sql": "SELECT 1 AS x"}, toolTime)
		if r.IsError {
			t.Fatalf("query failed: %s", r.Text)
		}
		mustContain(t, "the query's data quality", r.Text, "problem: ⟦"+link+"⟧: history not attached", want)
		said(t, r.Text, "history not attached")
		took := r.Took
		c.close()
		mustContain(t, "serve's log", c.p.stderr.String(), "persisted history unavailable", want)
		if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the dangling link's target was created (%v)", err)
		}
		bounded(t, "history.db dangling symlink: "+t.Name(), c.p, took, toolTime)
	}
	t.Run("own_dir", func(t *testing.T) {
		data := sharedDir(t)
		os.Mkdir(filepath.Join(data, "probing-mcp"), 0o700)
		attack(t, data, "is a symbolic link; refusing to follow it")
	})
	t.Run("attacker_dir", func(t *testing.T) {
		attacker(t)
		data := sharedDir(t)
		dir := filepath.Join(data, "probing-mcp")
		os.Mkdir(dir, 0o777)
		os.Chmod(dir, 0o777)
		chownAttacker(t, dir)
		attack(t, data, "belongs to uid 65534")
	})
}

// TestNodeLockOfAnotherUser. Attack: another user's flock on the node
// daemon's lock (<data dir>/probing-mcp/node.lock): in a probing-mcp
// directory the attacker made first, or on an older 0644 lock file in
// root's 0755 directory, which anyone can open. Before (b2aa69a): a root
// daemon said "already runs" and exited 0 with nothing running. Bound:
// `probing-mcp node` fails (exit 1) naming the lock file, the other user
// and the fix; under 512 MB and 60 s.
func TestNodeLockOfAnotherUser(t *testing.T) {
	attacker(t)
	run := func(t *testing.T, data, lock string, want ...string) {
		p := start(t, env(t, data), nil, "node", "--http", "127.0.0.1:0", "--no-register", "--idle-exit", "0")
		code := p.wait(startTime)
		errOut := p.stderr.String()
		if code != 1 {
			t.Errorf("node exited %d, want 1 (never 0: nothing would run):\n%s", code, tail(errOut, 2000))
		}
		mustContain(t, "node's refusal", errOut, append([]string{lock, "uid 65534"}, want...)...)
		said(t, errOut, lock)
		if strings.Contains(errOut, "already runs") {
			t.Errorf("another user's lock was taken for a running daemon:\n%s", errOut)
		}
		bounded(t, "node.lock of another user: "+t.Name(), p, p.took, startTime)
	}
	t.Run("attacker_dir", func(t *testing.T) {
		data := sharedDir(t)
		dir := filepath.Join(data, "probing-mcp")
		os.Mkdir(dir, 0o755)
		lock := filepath.Join(dir, "node.lock")
		os.WriteFile(lock, nil, 0o644)
		chownAttacker(t, dir, lock)
		holdFlock(t, lock)
		run(t, data, lock, "belongs to uid 65534", "PROBING_DATA_DIR")
	})
	t.Run("old_lock_file", func(t *testing.T) {
		data := sharedDir(t)
		dir := filepath.Join(data, "probing-mcp")
		os.Mkdir(dir, 0o755)
		os.Chmod(dir, 0o755)
		lock := filepath.Join(dir, "node.lock")
		os.WriteFile(lock, nil, 0o644)
		os.Chmod(lock, 0o644)
		holdFlock(t, lock)
		run(t, data, lock, "another user", "rm "+lock)
	})
}

// TestGPULockOfAnotherUser. Attack: another user's flock on the GPU
// sampler's lock (<data dir>/probing-mcp/gpu.lock, an older 0644 file in
// root's 0755 directory). Before (b2aa69a): the lock taken for "another
// process samples" (a root daemon exited 0 with nothing running on the
// node lock; the GPU lock silenced sampling). Bound: the daemon keeps
// serving, its log names gpu.lock, the other user and the fix, and it
// stops with exit 0 on SIGTERM; under 512 MB.
func TestGPULockOfAnotherUser(t *testing.T) {
	attacker(t)
	data := sharedDir(t)
	dir := filepath.Join(data, "probing-mcp")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o755)
	lock := filepath.Join(dir, "gpu.lock")
	os.WriteFile(lock, nil, 0o644)
	os.Chmod(lock, 0o644)
	holdFlock(t, lock)
	p := start(t, env(t, data, "PROBING_GPU=1"), nil, "node", "--http", "127.0.0.1:0", "--no-register", "--idle-exit", "0")
	addr := p.logLine(serving, startTime)[1]
	// The sampler starts beside the server: its refusal may be logged
	// after the serving line.
	p.logLine(regexp.MustCompile(`no GPU sampling`), startTime)
	errOut := p.stderr.String()
	mustContain(t, "the daemon's log", errOut, "no GPU sampling", lock, "uid 65534", "another user")
	said(t, errOut, "no GPU sampling")
	// It still serves, and its GPU report says why it samples nothing.
	code, body := post(t, "http://"+addr+"/v1/gpu", "{}")
	if code != 200 {
		t.Errorf("POST /v1/gpu: %d %.500s", code, body)
	}
	mustContain(t, "the daemon's GPU report", body, "not_sampled", "gpu.lock", "uid 65534")
	if code := p.stop(); code != 0 {
		t.Errorf("the daemon exited %d on SIGTERM, want 0:\n%s", code, tail(p.stderr.String(), 2000))
	}
	bounded(t, "gpu.lock of another user", p, p.took, startTime)
}

// TestSavedMembershipPlanted. Attack: a saved membership file
// (<data dir>/probing-mcp/cluster/<run>.json) naming the attacker's
// address, while the job's store is down: a symlink to the attacker's
// file, or (as root) the attacker's own file in root's directory or in a
// cluster directory the attacker made. Before (b2aa69a): loaded with no
// owner check; serve --job sent its calls (and the token) to the planted
// address. Bound: the file is ignored with the reason (list_cluster_nodes
// says the store failed and why the saved file was not used); the planted
// address gets no request; under 512 MB, the call within 30 s.
func TestSavedMembershipPlanted(t *testing.T) {
	attack := func(t *testing.T, data string, plant func(path, planted string), want string) {
		evil := newFakeNode(t, "evil", 0, []int{0, 1}, nil)
		planted := filepath.Join(t.TempDir(), "planted.json")
		os.WriteFile(planted, []byte(`[{"host":"evil","addr":"`+evil.node.Addr+`","node_rank":0,"ranks":"0-1","kind":"probing-mcp"}]`), 0o644)
		saved := filepath.Join(data, "probing-mcp", "cluster", runID+".json")
		plant(saved, planted)
		c := serveStdio(t, env(t, data, "TORCHELASTIC_RUN_ID="+runID), "--job", freePort(t))
		r := c.call("list_cluster_nodes", map[string]any{}, toolTime)
		mustContain(t, "list_cluster_nodes", r.Text, "membership file", "ignored", want)
		said(t, r.Text, "ignored")
		if strings.Contains(r.Text, evil.node.Addr) {
			t.Errorf("the planted address is listed:\n%s", r.Text)
		}
		if n := evil.hits.Load(); n != 0 {
			t.Errorf("the planted address got %d requests", n)
		}
		took := r.Took
		c.close()
		bounded(t, "planted membership file: "+t.Name(), c.p, took, toolTime)
	}
	t.Run("symlink", func(t *testing.T) {
		data := sharedDir(t)
		attack(t, data, func(saved, planted string) {
			os.MkdirAll(filepath.Dir(saved), 0o700)
			os.Symlink(planted, saved)
		}, "symbolic link")
	})
	t.Run("attacker_file", func(t *testing.T) {
		attacker(t)
		data := sharedDir(t)
		attack(t, data, func(saved, planted string) {
			os.MkdirAll(filepath.Dir(saved), 0o700)
			b, _ := os.ReadFile(planted)
			os.WriteFile(saved, b, 0o644)
			chownAttacker(t, saved)
		}, "belongs to uid 65534")
	})
	t.Run("attacker_dir", func(t *testing.T) {
		attacker(t)
		data := sharedDir(t)
		attack(t, data, func(saved, planted string) {
			os.Mkdir(filepath.Join(data, "probing-mcp"), 0o700)
			os.Mkdir(filepath.Dir(saved), 0o755)
			b, _ := os.ReadFile(planted)
			os.WriteFile(saved, b, 0o644)
			chownAttacker(t, filepath.Dir(saved), saved)
		}, "belongs to uid 65534")
	})
}

// TestTmpDumpOfAnotherUser. Attack: Flight Recorder dumps named like
// torch's in /tmp (TORCH_FR_DUMP_TEMP_FILE's prefix there, as
// /tmp/nccl_trace_rank_N is by default) written by another user, telling
// of a hang they made up; or a symlink there to a dump. Before (b2aa69a):
// a root server analysed another user's /tmp/nccl_trace_rank_N and stored
// the verdict in its history. Bound: analyze_flight_recorder refuses each
// with "not read" and the reason (the owner and PROBING_MCP_JOB_USER); the
// history holds no diagnosis; under 512 MB, each call within 30 s. The
// control: the same dumps named as the job user's are read.
func TestTmpDumpOfAnotherUser(t *testing.T) {
	// Real /tmp (the rule is about it), under a prefix of this test's own.
	prefix := fmt.Sprintf("/tmp/probing-mcp-redteam-%d-%d-rank_", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		ms, _ := filepath.Glob(prefix + "*")
		for _, m := range ms {
			os.Remove(m)
		}
	})
	spec := frsynth.Spec{Ranks: 4, Entries: 40, Fault: frsynth.Fault{Kind: "missing", Rank: 2, Seq: 30}}
	attack := func(t *testing.T, dumps []string, want string, extra ...string) {
		data := t.TempDir()
		c := serveStdio(t, env(t, data, append([]string{"TORCH_FR_DUMP_TEMP_FILE=" + prefix}, extra...)...))
		r := c.call("analyze_flight_recorder", map[string]any{"paths": dumps}, toolTime)
		took := r.Took
		if !r.IsError {
			t.Errorf("analysed: %.1000s", r.Text)
		}
		mustContain(t, "analyze_flight_recorder", r.Text, "not read", want)
		said(t, r.Text, "not read")
		h := c.call("query", map[string]any{"sql": "SELECT count(*) AS n FROM history.diagnoses"}, toolTime)
		mustContain(t, "the history", h.Text, "1 rows.\nn\n0\n")
		c.close()
		bounded(t, "/tmp dump: "+t.Name(), c.p, max(took, h.Took), toolTime)
	}
	t.Run("symlink", func(t *testing.T) {
		real := prefix + "90"
		os.WriteFile(real, frsynth.Dump(spec, 0), 0o600)
		link := prefix + "91"
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		attack(t, []string{link}, "symbolic link")
	})
	t.Run("attacker_dumps", func(t *testing.T) {
		attacker(t)
		var dumps []string
		for r := 0; r < spec.Ranks; r++ {
			p := fmt.Sprintf("%s%d", prefix, r)
			os.WriteFile(p, frsynth.Dump(spec, r), 0o644)
			chownAttacker(t, p)
			dumps = append(dumps, p)
		}
		attack(t, dumps, "belongs to uid 65534", "PROBING_MCP_JOB_USER")
		// The control: named as the job's user, the same dumps are read
		// (so the refusal above is the owner rule, not a bad dump).
		c := serveStdio(t, env(t, t.TempDir(), "TORCH_FR_DUMP_TEMP_FILE="+prefix, "PROBING_MCP_JOB_USER=65534"))
		r := c.call("analyze_flight_recorder", map[string]any{"paths": dumps}, toolTime)
		if r.IsError || !strings.Contains(r.Text, "MISSING_RANKS") {
			t.Errorf("the job user's dumps: %.1000s", r.Text)
		}
		c.close()
	})
}
