package history

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const (
	helperEnv     = "PROBING_HISTORY_HELPER_DB"
	helperRowsEnv = "PROBING_HISTORY_HELPER_ROWS"
	helperNetEnv  = "PROBING_HISTORY_HELPER_NETWORK"
)

// TestHelperProcess is the child of TestCrashDurability and
// TestTwoProcesses: it inserts rows until killed (or, with helperRowsEnv,
// that many rows) and prints the id of each insert once it has returned.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	detect := local
	if os.Getenv(helperNetEnv) != "" {
		detect = network
	}
	s, err := Open(path, Options{DetectFS: detect})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rows := -1
	if v := os.Getenv(helperRowsEnv); v != "" {
		rows, _ = strconv.Atoi(v)
	}
	blob := make([]byte, 48<<10) // spills to overflow pages
	for i := 0; i != rows; i++ {
		blob[i%len(blob)]++
		var kind string
		var id int64
		if i%2 == 0 {
			kind = "d"
			id, err = s.AddDiagnosis(Diagnosis{Kind: "crash", Verdict: fmt.Sprint("row ", i), Report: []byte(`{"i":` + fmt.Sprint(i) + `}`)})
		} else {
			kind = "s"
			id, err = s.AddSnapshot(Snapshot{Format: "pickle", Rank: &i, Data: blob})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		// os.Stdout is unbuffered: the line is in the pipe when this returns.
		fmt.Printf("%s %d\n", kind, id)
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(0)
}

func helper(path string, network bool, rows int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	if network {
		cmd.Env = append(cmd.Env, helperNetEnv+"=1")
	}
	if rows >= 0 {
		cmd.Env = append(cmd.Env, helperRowsEnv+"="+strconv.Itoa(rows))
	}
	return cmd
}

// TestTwoProcesses: two processes (two servers) write the same file at
// the same time, from its creation on; both must succeed.
func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, net := range []bool{false, true} {
		t.Run(fmt.Sprint("network=", net), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.db")
			const rows = 200
			cmds := []*exec.Cmd{helper(path, net, rows), helper(path, net, rows)}
			outs := make([]strings.Builder, len(cmds))
			errs := make([]strings.Builder, len(cmds))
			for i, c := range cmds {
				c.Stdout, c.Stderr = &outs[i], &errs[i]
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
			}
			for i, c := range cmds {
				if err := c.Wait(); err != nil {
					t.Fatalf("process %d: %v\n%s", i, err, errs[i].String())
				}
				if n := strings.Count(outs[i].String(), "\n"); n != rows {
					t.Errorf("process %d reported %d rows", i, n)
				}
			}
			s := openT(t, path, Options{DetectFS: local})
			var d, sn int
			s.db.QueryRow("SELECT count(*) FROM diagnoses").Scan(&d)
			s.db.QueryRow("SELECT count(*) FROM fr_snapshots").Scan(&sn)
			if d+sn != 2*rows {
				t.Errorf("%d diagnoses + %d snapshots, want %d rows", d, sn, 2*rows)
			}
		})
	}
}

// TestCrashDurability kills a writer with SIGKILL mid-stream and checks
// that every insert it reported is in the reopened database, which must
// pass integrity_check.
func TestCrashDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	for _, detect := range []func(string) (string, bool, error){local, network} {
		name, _, _ := detect("")
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.db")
			// The parent creates the file, so the child's mode is what
			// the parent chose (WAL or the rollback journal).
			p := openT(t, path, Options{DetectFS: detect})
			journal := p.Mode().Journal
			p.Close()

			cmd := helper(path, journal == "delete", -1)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			committed := map[string][]int64{}
			sc := bufio.NewScanner(out)
			n, killed := 0, false
			for sc.Scan() {
				kind, num, ok := strings.Cut(sc.Text(), " ")
				id, err := strconv.ParseInt(num, 10, 64)
				if !ok || err != nil {
					t.Fatalf("child said %q", sc.Text())
				}
				committed[kind] = append(committed[kind], id)
				if n++; n == 300 && !killed {
					cmd.Process.Kill() // SIGKILL: no deferred code, no Close
					killed = true
				}
			}
			err = cmd.Wait()
			if !killed || err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("child: %v (killed=%v)\n%s", err, killed, stderr.String())
			}
			if fi, err := os.Stat(path + "-wal"); journal == "wal" && (err != nil || fi.Size() == 0) {
				t.Errorf("no WAL left to recover: %v", err)
			}
			t.Logf("%s: child reported %d diagnoses and %d snapshots before SIGKILL", journal,
				len(committed["d"]), len(committed["s"]))

			s := openT(t, path, Options{DetectFS: detect})
			if got := s.Mode().Journal; got != journal {
				t.Errorf("journal %s after crash, was %s", got, journal)
			}
			if v := pragma(t, s.db, "integrity_check"); v != "ok" {
				t.Errorf("integrity_check: %s", v)
			}
			present := func(table string, ids []int64) {
				for _, id := range ids {
					var n int
					if err := s.db.QueryRow("SELECT count(*) FROM "+table+" WHERE id = ?", id).Scan(&n); err != nil || n != 1 {
						t.Errorf("%s id %d reported committed, missing after the crash (%v)", table, id, err)
					}
				}
			}
			present("diagnoses", committed["d"])
			present("fr_snapshots", committed["s"])
			// The store keeps working after recovery.
			if _, err := s.AddDiagnosis(Diagnosis{Kind: "after"}); err != nil {
				t.Error(err)
			}
		})
	}
}
