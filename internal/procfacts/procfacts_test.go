package procfacts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// statLine is a real /proc/<pid>/stat line (cat's), with the name, state,
// ppid, utime, stime, thread count and start time put in.
func statLine(pid int, comm, state string, ppid, utime, stime, threads int, start uint64) string {
	return fmt.Sprintf("%d (%s) %s %d 20164 9476 0 -1 4194304 103 0 0 0 %d %d 0 0 20 0 %d 0 %d 3133440 412 18446744073709551615 94592610287616 94592610307497 140730426900304 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94592610323504 94592610325120 94592818085888 140730426907331 140730426907351 140730426907351 140730426908651 0\n",
		pid, comm, state, ppid, utime, stime, threads, start)
}

func TestParseStat(t *testing.T) {
	st, err := ParseStat(statLine(7, "a) (b) S 1 (x", "D", 42, 500, 25, 12, 1161132))
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "a) (b) S 1 (x" || st.State != "D" || st.PPID != 42 || st.UTime != 500 || st.STime != 25 || st.Threads != 12 || st.Start != 1161132 {
		t.Errorf("%+v", st)
	}
	for _, bad := range []string{"", "7 a S 1", "7 (a) S 1 2 3", strings.Replace(statLine(7, "a", "S", 1, 1, 1, 1, 1161132), " 1161132", " x", 1)} {
		if _, err := ParseStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ParseStat(strings.Replace(statLine(7, "a", "S", 1, 1, 1, 1, 5), " 5 3133440", " x 3133440", 1)); err == nil || !strings.Contains(err.Error(), "field 22") {
		t.Errorf("bad start time: %v", err)
	}
}

const statusText = "Name:\todd) (name\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\n" +
	"Uid:\t1000\t1001\t1000\t1000\nGid:\t100\t101\t100\t100\nVmPeak:\t 9000 kB\nVmRSS:\t    2048 kB\nThreads:\t3\n" +
	"SigQ:\t0/95038\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n" +
	"SigIgn:\t0000000001001000\nSigCgt:\t0000000200004002\n"

func TestParseStatus(t *testing.T) {
	st := ParseStatus(statusText)
	if st.VmRSS != 2048<<10 || st.UID != [4]int{1000, 1001, 1000, 1000} || st.EUID() != 1001 || st.EGID() != 101 {
		t.Errorf("%+v", st)
	}
	// SigCgt 0x200004002: bits 1 (SIGINT), 14 (SIGTERM) and 33 (signal 34, SIGRTMIN).
	for sig, want := range map[syscall.Signal]bool{syscall.SIGINT: true, syscall.SIGTERM: true, syscall.SIGALRM: false, 34: true, syscall.SIGKILL: false, syscall.SIGUSR2: false, 0: false, 65: false} {
		if st.Catches(sig) != want {
			t.Errorf("Catches(%d) = %v", sig, !want)
		}
	}
	k := ParseStatus("Name:\tkthreadd\n")
	if k.VmRSS != 0 || k.UID[0] != -1 || k.EUID() != -1 || k.SigCgt != 0 {
		t.Errorf("kernel thread status: %+v", k)
	}
}

func TestReadSelf(t *testing.T) {
	st, err := StatAt(Proc, os.Getpid())
	if err != nil || st.PPID != os.Getppid() {
		t.Fatalf("%+v %v", st, err)
	}
	if start, err := StartTime(os.Getpid()); err != nil || start != st.Start || !Alive(os.Getpid(), start) || Alive(os.Getpid(), start+1) {
		t.Errorf("start %d %v", start, err)
	}
	if _, err := StatAt(Proc, 1<<30); !Gone(err) || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("missing pid: %v", err)
	}
}

func TestEnv(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "42", "environ"), []byte("RANK=3\x00WORLD_SIZE=8\x00RANK=9\x00X=a=b\x00=bad\x00noeq\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := EnvAt(root, 42, MaxEnvBytes)
	if err != nil || len(env) != 3 || env["RANK"] != "3" || env["X"] != "a=b" {
		t.Errorf("%v %v", env, err)
	}
}

func TestPlaceFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want Placement
	}{
		{map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0", "ROLE_NAME": "trainer"},
			Placement{3, 8, 1, 4, 0, "trainer"}},
		// MPI before Slurm; a Slurm count like "4(x2)" is not a number.
		{map[string]string{"OMPI_COMM_WORLD_RANK": "5", "SLURM_PROCID": "1", "SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "2"},
			Placement{5, 16, -1, -1, 2, ""}},
		// Parallel coordinates win over ROLE_NAME, sorted; PROBING_* over aliases.
		{map[string]string{"RANK": " 0 ", "PROBING_TP_RANK": "1", "TP_RANK": "7", "DP_RANK": "2", "PROBING_ROLE_STAGE": " fwd ", "ROLE_NAME": "x"},
			Placement{0, -1, -1, -1, -1, "dp=2,stage=fwd,tp=1"}},
		// A launcher: nothing.
		{map[string]string{"PROBING": "2", "RANK": ""}, Placement{-1, -1, -1, -1, -1, ""}},
	} {
		got := PlaceFromEnv(tc.env)
		if got != tc.want {
			t.Errorf("%v: %+v, want %+v", tc.env, got, tc.want)
		}
		if got.HasRank() != (tc.want.Rank >= 0 || tc.want.LocalRank >= 0) {
			t.Errorf("%v: HasRank %v", tc.env, got.HasRank())
		}
	}
}
