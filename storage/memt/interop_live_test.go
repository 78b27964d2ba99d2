package memt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// agentClient talks HTTP to an agent's Unix socket (Linux abstract socket
// "@probing-<pid>", contract §2.1).
type agentClient struct {
	pid int
	hc  *http.Client
	tr  *http.Transport
}

func newAgentClient(pid int) *agentClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", fmt.Sprintf("@probing-%d", pid))
	}}
	return &agentClient{pid: pid, tr: tr, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (a *agentClient) close() { a.tr.CloseIdleConnections() }

// query sends POST /query with the Message<Query> envelope (contract §2.4)
// and returns the DataFrame payload.
func (a *agentClient) query(sql string) (json.RawMessage, error) {
	body, _ := json.Marshal(map[string]any{
		"version":    map[string]int{"major": 0, "minor": 1, "patch": 0},
		"message_id": nil,
		"timestamp":  time.Now().UnixMicro(),
		"payload":    map[string]any{"expr": sql, "opts": nil},
	})
	resp, err := a.hc.Post("http://probing/query", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var msg struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d, not JSON: %.300s", sql, resp.StatusCode, b)
	}
	var p struct {
		DataFrame json.RawMessage `json:"DataFrame"`
	}
	if json.Unmarshal(msg.Payload, &p) != nil || p.DataFrame == nil {
		return nil, fmt.Errorf("%s: HTTP %d, payload %.300s", sql, resp.StatusCode, msg.Payload)
	}
	return p.DataFrame, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// describeAndSelect asks the agent for a table's columns and Arrow types,
// then for all its rows (casting what the DataFrame encoding cannot carry).
func (a *agentClient) describeAndSelect(exp *interopTable) error {
	df, err := a.query(fmt.Sprintf("SELECT column_name, data_type FROM information_schema.columns "+
		"WHERE table_schema = '%s' AND table_name = '%s' ORDER BY ordinal_position", exp.Schema, exp.Table))
	if err != nil {
		return err
	}
	_, _, rows, err := decodeDataFrame(df)
	if err != nil {
		return err
	}
	var parts []string
	exp.Casts = map[string]string{}
	exp.ArrowTypes = nil
	for _, r := range rows {
		name, arrow := strings.TrimPrefix(r[0], "s:"), strings.TrimPrefix(r[1], "s:")
		exp.ArrowTypes = append(exp.ArrowTypes, arrow)
		switch c := sqlCasts[arrow]; c {
		case "":
			parts = append(parts, quoteIdent(name))
		case "HEX":
			exp.Casts[name] = c
			parts = append(parts, fmt.Sprintf("encode(%s, 'hex') AS %s", quoteIdent(name), quoteIdent(name)))
		default:
			exp.Casts[name] = c
			parts = append(parts, fmt.Sprintf("CAST(%s AS %s) AS %s", quoteIdent(name), c, quoteIdent(name)))
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("the agent knows no table %s", exp.name())
	}
	exp.SQL = fmt.Sprintf("SELECT %s FROM %s.%s", strings.Join(parts, ", "), exp.Schema, quoteIdent(exp.Table))
	exp.DataFrame, err = a.query(exp.SQL)
	return err
}

func interopPython(t *testing.T) string {
	py := os.Getenv("PROBING_INTEROP_PYTHON")
	if py == "" {
		py = "/root/devenv/bin/python"
	}
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no Python with the original Probing agent: %v (set PROBING_INTEROP_PYTHON to an interpreter that has `pip install probing`)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", "import probing")
	cmd.Env = agentEnv(nil)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("%s cannot `import probing` (%v): %s", py, err, bytes.TrimSpace(out))
	}
	return py
}

// agentEnv is this process's environment without PROBING* variables, plus extra.
func agentEnv(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROBING") {
			env = append(env, kv)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

type agentReady struct {
	PID            int            `json:"pid"`
	ProbingVersion string         `json:"probing_version"`
	Error          string         `json:"error"`
	Tables         []interopTable `json:"tables"`
}

func TestProbingLive(t *testing.T) {
	py := interopPython(t)
	gen, err := filepath.Abs(filepath.Join(fixtureRoot, "gen_probing_rings.py"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	work := t.TempDir()
	dataDir, tmpDir := filepath.Join(work, "data"), filepath.Join(work, "tmp")
	for _, d := range []string{dataDir, tmpDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, gen, "--child", "--rows", "1500", "--small-rows", "120")
	cmd.Env = agentEnv(map[string]string{
		"PROBING": "1", "PROBING_DATA_DIR": dataDir, "PROBING_TABLE_DEFAULT_MB": "1", "TMPDIR": tmpDir,
		"PYTHONUNBUFFERED": "1",
	})
	stdout, stderr, release := startHeld(t, cmd)
	defer release()

	readyc := make(chan agentReady, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r agentReady
			if line := sc.Bytes(); bytes.HasPrefix(line, []byte("{")) && json.Unmarshal(line, &r) == nil {
				readyc <- r
				break
			}
		}
		io.Copy(io.Discard, stdout)
		close(readyc)
	}()
	var ready agentReady
	select {
	case r, ok := <-readyc:
		if !ok || r.Error != "" || r.PID == 0 {
			err := release()
			t.Fatalf("agent process did not get ready (%v, %q): %s", err, r.Error, stderr.String())
		}
		ready = r
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatalf("agent process: no ready line in 2 minutes")
	}

	agent := newAgentClient(ready.PID)
	defer agent.close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := agent.query("SELECT 1 AS one"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("agent %d does not answer /query: %v", ready.PID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	dirs := []string{
		filepath.Join(dataDir, strconv.Itoa(ready.PID)),
		filepath.Join(tmpDir, "probing", strconv.Itoa(ready.PID)),
		filepath.Join("/dev/shm/probing", strconv.Itoa(ready.PID)),
	}
	findRings := func() (rings map[string]string, others []string) {
		rings = map[string]string{}
		for _, d := range dirs {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				p := filepath.Join(d, e.Name())
				if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && IsMEMT(p) {
					if _, dup := rings[e.Name()]; !dup {
						rings[e.Name()] = p
					}
				} else {
					others = append(others, p)
				}
			}
		}
		return rings, others
	}
	rings, others := findRings()

	// Our tables, plus any table the agent keeps in a MEMT file of its own
	// (e.g. cpu.utilization), which is compared by containment because its
	// sampler keeps writing.
	tables := ready.Tables
	known := map[string]bool{}
	for i := range tables {
		tables[i].Compare = "exact"
		known[tables[i].name()] = true
	}
	for fname := range rings {
		schema, tbl, ok := strings.Cut(fname, ".")
		if !ok {
			schema, tbl = "memtable", fname
		}
		if !known[schema+"."+tbl] {
			tables = append(tables, interopTable{Schema: schema, Table: tbl, Compare: "contains"})
		}
	}
	for i := range tables {
		if err := agent.describeAndSelect(&tables[i]); err != nil {
			t.Fatalf("agent SQL for %s: %v", tables[i].name(), err)
		}
		tables[i].File = rings[tables[i].Schema+"."+tables[i].Table]
	}

	if len(rings) == 0 {
		err := release()
		// Still check that the harness worked: the agent has every row.
		for i := range tables {
			_, _, rows, derr := decodeDataFrame(tables[i].DataFrame)
			if derr != nil || len(rows) != tables[i].RowsAppended {
				t.Fatalf("agent's SQL answer for %s: %d rows (%v), %d appended", tables[i].name(), len(rows), derr, tables[i].RowsAppended)
			}
		}
		msg := fmt.Sprintf("probing %s (pid %d, exit %v) wrote no MEMT file: searched %s; other files: %q. "+
			"The agent answered SQL for %d tables but keeps their rows in process memory, so there is no ring to compare; "+
			"see testdata/memt/README.md (%.1fs)",
			ready.ProbingVersion, ready.PID, err, strings.Join(dirs, ", "), others, len(tables), time.Since(start).Seconds())
		if os.Getenv("PROBING_INTEROP_REQUIRE_MEMT") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// While the writer process is alive.
	for i := range tables {
		if tables[i].File == "" {
			t.Errorf("%s: no MEMT file, though the agent wrote %d others", tables[i].name(), len(rings))
			continue
		}
		t.Run("alive/"+tables[i].name(), func(t *testing.T) { checkRing(t, tables[i].File, &tables[i], true) })
	}
	// After it exits: the files stay readable (contract §4.1) and the writer
	// reads as dead.
	if err := release(); err != nil {
		t.Errorf("agent process exit: %v: %s", err, stderr.String())
	}
	for i := range tables {
		if tables[i].File == "" {
			continue
		}
		if _, err := os.Stat(tables[i].File); errors.Is(err, os.ErrNotExist) {
			t.Logf("%s: the agent removed %s when it exited", tables[i].name(), tables[i].File)
			continue
		}
		t.Run("exited/"+tables[i].name(), func(t *testing.T) { checkRing(t, tables[i].File, &tables[i], false) })
	}
	t.Logf("live interop with probing %s took %.1fs", ready.ProbingVersion, time.Since(start).Seconds())
}

// ---------------------------------------------------------------------
// The original project's Rust crate: probing-memtable on crates.io
//
// testdata/memt/rustgen is a small Rust program on probing-memtable =0.2.5,
// the newest release (the crate the original agent's memtables come from).
// `rustgen write DIR` writes rings with the crate (every dtype, dedup, a
// timestamp column, rings that wrap) to DIR/<pid>/<schema.table> and, with
// the crate's own reader, DIR/expected.json; `rustgen read FILE` prints what
// the crate's reader makes of FILE. The committed output is
// testdata/memt/probing-memtable-0.2.5/.
//
// Finding: the crate writes MEMT **v3**, not v5 (0.2.4 writes v2). A v3 file
// has a 64-byte header (v5: 128) with no ring counters, no lease fields and
// no instance_id, descriptors at 64+64*i, and no reader-lease area, so
// data_offset = align64(64+64*num_cols). The descriptors themselves, the
// 40-byte chunk headers (generation, used, row_count, state, min_ts, max_ts),
// the row encoding, dedup back-references and the ts_col rule are the same
// as v5. So, as is, our reader rejects every crate ring ("MEMT version 3")
// and the crate rejects every ring our writer makes ("unsupported
// version"). memtV3ToV5 and memtV5ToV3 re-lay only the header and
// descriptors (chunks are copied byte for byte); through them each side
// reads the other's rows.
