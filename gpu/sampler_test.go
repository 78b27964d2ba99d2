package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/tabledocs"
)

// recorder keeps every tick a sampler passes on, and writes it on to the
// real rings when rings is set.
type recorder struct {
	mu    sync.Mutex
	ticks []Tick
	rings *RingSink
}

func (r *recorder) Write(t Tick) error {
	r.mu.Lock()
	r.ticks = append(r.ticks, t)
	r.mu.Unlock()
	if r.rings != nil {
		return r.rings.Write(t)
	}
	return nil
}

func (r *recorder) snapshot() []Tick {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Tick(nil), r.ticks...)
}

// ringRows reads every row of one of the sampler's tables, as a reader
// in another process would.
func ringRows(t *testing.T, path string) int {
	t.Helper()
	tb, err := memt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	n := 0
	if _, err := tb.Scan(memt.ScanOptions{}, func(*memt.Row) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSamplerTicksAndXids(t *testing.T) {
	srv := a100(spinningA100)
	feed := newFeed()
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return feed, nvml.SUCCESS }
	dir := t.TempDir()
	rings, err := OpenRings(dir, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()
	rec := &recorder{rings: rings}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := StartSampler(ctx, SamplerOptions{Interval: 10 * time.Millisecond, Open: func() *NVML { return OpenLib(srv) },
		KmsgPath: "testdata/kmsg-xid.txt", KmsgEvery: 20 * time.Millisecond, Host: "node-a", Sink: rec})
	waitFor(t, "two ticks", func() bool { return len(rec.snapshot()) >= 2 })
	feed.ch <- nvml.EventData{Device: srv.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	waitFor(t, "the NVML event in a tick", func() bool {
		for _, tk := range rec.snapshot() {
			for _, e := range tk.New {
				if e.Source == "nvml" {
					return true
				}
			}
		}
		return false
	})
	// Several more rounds, the kernel log read again each 20 ms: no event
	// is passed on twice.
	n := len(rec.snapshot())
	waitFor(t, "more ticks", func() bool { return len(rec.snapshot()) >= n+5 })
	cancel()
	<-s.Done()
	seen := map[string]int{}
	for _, tk := range rec.snapshot() {
		for _, e := range tk.New {
			seen[e.Source+"/"+strconv.FormatUint(e.Xid, 10)]++
		}
	}
	if seen["kmsg/79"] != 1 || seen["kmsg/43"] != 1 || seen["nvml/79"] != 1 {
		t.Fatalf("events passed on: %v (want each once)", seen)
	}
	r := s.Report()
	if r.Source != SourceLive || len(r.Devices) != 8 || r.Host != "node-a" || r.IntervalMS != 10 {
		t.Fatalf("report: %+v", r)
	}
	var nv *XidEvent
	for i, e := range r.Xids {
		if e.Source == "nvml" {
			nv = &r.Xids[i]
		}
		if e.Source == "kmsg" && e.Time.IsZero() {
			t.Errorf("kmsg event without a wall time: %+v", e)
		}
	}
	if nv == nil || nv.GPU != 3 {
		t.Fatalf("NVML event not in the report with its GPU: %+v", r.Xids)
	}
	if r.Devices[3].Signature != SigLost && r.Devices[3].Signature != SigError {
		t.Errorf("GPU 3 after Xid 79: %s (%s)", r.Devices[3].Signature, r.Devices[3].Why)
	}
	if r.Devices[0].Signature != SigSpinning {
		t.Errorf("GPU 0: %s, want spinning", r.Devices[0].Signature)
	}
	ticks := len(rec.snapshot())
	if got := ringRows(t, filepath.Join(rings.Dir, TableNVML)); got != 8*ticks {
		t.Errorf("gpu.nvml holds %d rows after %d ticks of 8 GPUs", got, ticks)
	}
	if got := ringRows(t, filepath.Join(rings.Dir, TableUtilization)); got != 8*ticks {
		t.Errorf("gpu.utilization holds %d rows after %d ticks", got, ticks)
	}
	if got := ringRows(t, filepath.Join(rings.Dir, TableXid)); got != 3 {
		t.Errorf("gpu.xid holds %d rows, want 3", got)
	}
	if got := ringRows(t, filepath.Join(rings.Dir, TableSampler)); got < 1 {
		t.Errorf("gpu.sampler holds no row")
	}
	id, _, err := procfacts.ReadIdentity(filepath.Join(rings.Dir, procfacts.IdentityFile))
	if err != nil || id.Agent != AgentNode || id.Rank != -1 || id.Role != "node" || id.Host != "node-a" || id.PID != os.Getpid() {
		t.Fatalf("identity %+v, %v", id, err)
	}
}

// A GPU that falls off while the sampler runs: its entry says lost, the
// others are still sampled, and sampling goes on.
func TestSamplerGPULostMidRun(t *testing.T) {
	srv := a100(spinningA100)
	var mu sync.Mutex
	lost := false
	d5 := srv.Devices[5].(*server.Device)
	d5.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		if lost {
			return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Utilization{Gpu: 100}, nvml.SUCCESS
	}
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := StartSampler(ctx, SamplerOptions{Interval: 5 * time.Millisecond, Open: func() *NVML { return OpenLib(srv) }, KmsgPath: "/nonexistent", Sink: rec})
	waitFor(t, "a tick", func() bool { return len(rec.snapshot()) >= 1 })
	mu.Lock()
	lost = true
	mu.Unlock()
	waitFor(t, "GPU 5 lost", func() bool {
		r := s.Report()
		return len(r.Devices) == 8 && r.Devices[5].Lost
	})
	n := len(rec.snapshot())
	waitFor(t, "sampling to go on", func() bool { return len(rec.snapshot()) >= n+3 })
	r := s.Report()
	if r.Devices[5].Signature != SigLost || r.Devices[4].Lost || r.Devices[4].Utilization == nil {
		t.Fatalf("GPU 5 %s, GPU 4 %+v", r.Devices[5].Signature, r.Devices[4])
	}
	found := false
	for _, note := range r.Notes {
		found = found || contains(note, "/nonexistent")
	}
	if !found {
		t.Errorf("the unreadable kernel log is not said: %q", r.Notes)
	}
}

func TestSamplerWithoutLibrary(t *testing.T) {
	rec := &recorder{}
	s := StartSampler(context.Background(), SamplerOptions{Library: "/nonexistent/libnvidia-ml.so.1", Sink: rec})
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a sampler without NVML did not stop")
	}
	r := s.Report()
	if r.Source != SourceNone || r.Status.State != StateNoLibrary || !contains(r.Status.Reason, "/nonexistent/libnvidia-ml.so.1") {
		t.Fatalf("%+v", r)
	}
	if ts := rec.snapshot(); len(ts) != 1 || ts[0].Report.Status.State != StateNoLibrary {
		t.Fatalf("sink got %+v", ts)
	}
	if txt := r.Text(0, time.Now()); !contains(txt, "no_library") {
		t.Errorf("text %q", txt)
	}
}

func TestStartNodeOnePerDataDir(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	withGPU := NodeConfig{On: true, Interval: time.Second, open: func() *NVML { return OpenLib(a100(spinningA100)) }}
	if _, err := StartNode(ctx, withGPU, dir, "h", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := StartNode(ctx, withGPU, dir, "h", nil); !errors.Is(err, ErrSampledElsewhere) {
		t.Fatalf("second sampler on one data dir: %v", err)
	}
	// No GPU: the lock is not kept (every process reads NVML's state
	// itself), and no rings nor pid directory are left behind.
	dir2 := t.TempDir()
	cfg := NodeConfig{On: true, Interval: time.Second, Library: "/nonexistent/libnvidia-ml.so.1"}
	for range 2 {
		a, err := StartNode(ctx, cfg, dir2, "h", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := a.Report(); r.Status.State != StateNoLibrary || a.Rings != nil {
			t.Fatalf("%+v (rings %v)", r, a.Rings)
		}
	}
	if _, err := os.Stat(filepath.Join(dir2, strconv.Itoa(os.Getpid()))); !os.IsNotExist(err) {
		t.Fatalf("pid dir made on a node without GPUs: %v", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if c, err := ConfigFromEnv(env()); err != nil || !c.On || c.Interval != time.Second {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if c, err := ConfigFromEnv(env(EnvGPU, "0", EnvSampleMS, "250")); err != nil || c.On || c.Interval != 250*time.Millisecond {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range [][]string{{EnvGPU, "2"}, {EnvSampleMS, "10"}, {EnvSampleMS, "1s"}, {EnvSampleMS, "999999"}} {
		if _, err := ConfigFromEnv(env(bad...)); err == nil || !contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
	}
}

// Old samplers' directories are pruned to the newest two; a rank's
// directory, a running sampler's and anything else left in one are kept.
func TestPruneNodeDirs(t *testing.T) {
	dir := t.TempDir()
	mk := func(pid int, agent string, start uint64, age time.Duration, extra bool) string {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(procfacts.Identity{Agent: agent, PID: pid, StartTime: start, Rank: -1})
		os.WriteFile(filepath.Join(d, procfacts.IdentityFile), b, 0o644)
		os.WriteFile(filepath.Join(d, TableNVML), []byte("x"), 0o644)
		if extra {
			os.WriteFile(filepath.Join(d, "notes.txt"), []byte("mine"), 0o644)
		}
		mt := time.Now().Add(-age)
		os.Chtimes(d, mt, mt)
		return d
	}
	// Pids of exited processes: a start time no process has.
	old1 := mk(900001, AgentNode, 1, 1*time.Hour, false)
	old2 := mk(900002, AgentNode, 1, 2*time.Hour, false)
	old3 := mk(900003, AgentNode, 1, 3*time.Hour, false)
	old4 := mk(900004, AgentNode, 1, 4*time.Hour, true)
	rank := mk(900005, "probing-mcp", 1, 5*time.Hour, false)
	st, _ := procfacts.StartTime(os.Getppid())
	running := mk(os.Getppid(), AgentNode, st, 6*time.Hour, false)
	pruneNodeDirs(dir, 2, slog.New(slog.DiscardHandler))
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if !exists(old1) || !exists(old2) || exists(old3) || !exists(rank) || !exists(running) {
		t.Fatalf("kept: old1 %v old2 %v old3 %v rank %v running %v", exists(old1), exists(old2), exists(old3), exists(rank), exists(running))
	}
	if !exists(filepath.Join(old4, "notes.txt")) || exists(filepath.Join(old4, TableNVML)) {
		t.Fatal("a pruned directory's other files must stay, its tables go")
	}
}

// The table docs describe exactly the columns the sampler writes, in
// order and type (describe_tables and the model read them).
func TestRingDocs(t *testing.T) {
	for _, d := range ringDefs {
		schema, name, _ := strings.Cut(d.name, ".")
		doc, ok := tabledocs.Lookup(schema, name)
		if !ok {
			t.Errorf("%s: not documented in storage/tabledocs", d.name)
			continue
		}
		if len(doc.Columns) != len(d.cols) {
			t.Errorf("%s: %d columns documented, %d written", d.name, len(doc.Columns), len(d.cols))
			continue
		}
		for i, c := range d.cols {
			if doc.Columns[i].Name != c.Name || doc.Columns[i].Type != c.Type.String() {
				t.Errorf("%s column %d: documented %s %s, written %s %s", d.name, i, doc.Columns[i].Name, doc.Columns[i].Type, c.Name, c.Type)
			}
		}
	}
}

// With GPUs, the node service samples into rings in its pid directory;
// a second service on the same data dir reads instead, and takes over
// once the first stops.
func TestRunNodeWritesRingsAndHandsOver(t *testing.T) {
	old := lockRetry
	lockRetry = 10 * time.Millisecond
	defer func() { lockRetry = old }()
	dir := t.TempDir()
	cfg := NodeConfig{On: true, Interval: 10 * time.Millisecond, open: func() *NVML { return OpenLib(a100(spinningA100)) }}
	ctx1, stop1 := context.WithCancel(context.Background())
	a := RunNode(ctx1, cfg, dir, "h", nil)
	waitFor(t, "the first service to sample", func() bool { return a.Report().Source == SourceLive && len(a.Report().Devices) == 8 })
	ring := filepath.Join(dir, strconv.Itoa(os.Getpid()), TableNVML)
	waitFor(t, "rows in gpu.nvml", func() bool { return ringRows(t, ring) >= 16 })
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	b := RunNode(ctx2, cfg, dir, "h", nil)
	waitFor(t, "the second service to say why it does not sample", func() bool {
		r := b.Report()
		return r.Source == SourceNone && contains(r.Status.Reason, "another process samples")
	})
	stop1()
	waitFor(t, "the second service to take over", func() bool { return b.Report().Source == SourceLive })
}

// TestStartNodeLockOfAnotherUser: a gpu.lock another user made is an
// error naming its owner, not "sampled elsewhere" (which would leave the
// node unsampled, waiting on a sampler that does not exist).
func TestStartNodeLockOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's lock file (chown)")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "probing-mcp", "gpu.lock")
	os.Mkdir(filepath.Dir(p), 0o700)
	os.WriteFile(p, nil, 0o600)
	os.Chown(p, 65534, 65534)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	withGPU := NodeConfig{On: true, Interval: time.Second, open: func() *NVML { return OpenLib(a100(spinningA100)) }}
	if _, err := StartNode(ctx, withGPU, dir, "h", nil); err == nil || errors.Is(err, ErrSampledElsewhere) || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("another user's gpu.lock: %v, want an error naming its owner", err)
	}
}
