package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/envswitch"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// The variables of the node's GPU sampler (Probing's names).
const (
	EnvGPU      = "PROBING_GPU"           // on by default; 0/false/off/no switches it off
	EnvSampleMS = "PROBING_GPU_SAMPLE_MS" // the period in ms (default 1000)
	// EnvLibrary names the NVML library to load instead of
	// libnvidia-ml.so.1 (a driver in a non-standard place).
	EnvLibrary = "PROBING_MCP_NVML_LIBRARY"
)

// Bounds of PROBING_GPU_SAMPLE_MS: NVML's utilisation is averaged over
// 1/6 s to 1 s, so faster sampling reads the same value again; slower
// than a minute misses the minutes before a hang.
const (
	MinSampleMS = 100
	MaxSampleMS = 60_000
)

// NodeConfig is the sampler's configuration read from the environment.
type NodeConfig struct {
	On       bool
	Interval time.Duration
	Library  string
	// open replaces loading the library (tests: a mock server).
	open func() *NVML
}

// ConfigFromEnv reads PROBING_GPU, PROBING_GPU_SAMPLE_MS and
// PROBING_MCP_NVML_LIBRARY; a malformed value is an error naming it and
// what it takes (the command stops at start rather than guess).
func ConfigFromEnv(getenv func(string) string) (NodeConfig, error) {
	cfg := NodeConfig{On: true, Interval: DefaultInterval, Library: strings.TrimSpace(getenv(EnvLibrary))}
	if v := getenv(EnvGPU); strings.TrimSpace(v) != "" {
		on, err := envswitch.Parse(EnvGPU, v)
		if err != nil {
			return cfg, err
		}
		cfg.On = on
	}
	if v := strings.TrimSpace(getenv(EnvSampleMS)); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < MinSampleMS || ms > MaxSampleMS {
			return cfg, fmt.Errorf("%s=%q: want a whole number of milliseconds from %d to %d (default 1000)", EnvSampleMS, v, MinSampleMS, MaxSampleMS)
		}
		cfg.Interval = time.Duration(ms) * time.Millisecond
	}
	return cfg, nil
}

// ErrSampledElsewhere: another process (the node daemon, or a serve)
// already samples this node's GPUs for this data dir; read its rings.
var ErrSampledElsewhere = errors.New("another process samples this node's GPUs for this data dir")

// NodeSampler is a node's sampler with its rings and lock.
type NodeSampler struct {
	*Sampler
	Rings *RingSink
	lock  *os.File
}

// StartNode starts the one GPU sampler of a data dir: it takes the lock
// <dataDir>/probing-mcp/gpu.lock (ErrSampledElsewhere when held), opens
// the rings in dataDir/<pid>/ and samples until ctx ends. Rings that
// cannot be created (a full or read-only data dir) leave the sampler
// running in memory only, said in its notes.
func StartNode(ctx context.Context, cfg NodeConfig, dataDir, host string, logger *slog.Logger) (*NodeSampler, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lock, err := lockFile(filepath.Join(dataDir, "probing-mcp", "gpu.lock"))
	if err != nil {
		return nil, err
	}
	ns := &NodeSampler{lock: lock}
	var n *NVML
	if cfg.open != nil {
		n = cfg.open()
	} else {
		n = Open(cfg.Library)
	}
	opts := SamplerOptions{Interval: cfg.Interval, Host: host, Logger: logger, Open: func() *NVML { return n }, DataDir: dataDir}
	// Rings only where there are GPUs: a CPU-only node's daemon leaves no
	// files behind (its report says why it has no GPU).
	var ringErr error
	if n.Ready() {
		pruneNodeDirs(dataDir, keepDeadNodeDirs, logger)
		if ns.Rings, ringErr = OpenRings(dataDir, host); ringErr != nil {
			logger.Warn("GPU samples are kept in memory only", "err", ringErr)
			// The sampler says a failing sink in every report's notes.
			opts.Sink = failedSink{ringErr}
		} else {
			opts.Sink = ns.Rings
		}
	}
	ns.Sampler = StartSampler(ctx, opts)
	if !n.Ready() {
		// Nothing to sample: the lock is let go at once, so that every
		// other process on the node learns the state from NVML itself
		// rather than waiting on a sampler that will never write.
		lock.Close()
		return ns, nil
	}
	go func() {
		<-ns.Sampler.Done()
		<-ctx.Done()
		if ns.Rings != nil {
			ns.Rings.Close()
		}
		lock.Close()
	}()
	return ns, nil
}

// failedSink stands for rings that could not be created.
type failedSink struct{ err error }

func (f failedSink) Write(Tick) error { return f.err }

func lockFile(path string) (*os.File, error) {
	f, err := safefile.Lock(path)
	if errors.Is(err, safefile.ErrHeld) {
		return nil, fmt.Errorf("%w (%v)", ErrSampledElsewhere, err)
	}
	if err != nil {
		return nil, fmt.Errorf("GPU sampler %w", err)
	}
	return f, nil
}

// keepDeadNodeDirs is how many pid directories of samplers that have
// exited are kept: the newest is a dead job's last minutes, older ones
// are only disk (a daemon starts with every job).
const keepDeadNodeDirs = 2

// pruneNodeDirs removes the pid directories of exited samplers of this
// user past the newest keep (by modification time). Rank directories
// and other users' are never touched.
func pruneNodeDirs(dataDir string, keep int, logger *slog.Logger) {
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return
	}
	type dead struct {
		dir string
		mt  time.Time
	}
	var ds []dead
	uid := os.Getuid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == os.Getpid() || !e.IsDir() {
			continue
		}
		dir := filepath.Join(dataDir, e.Name())
		id, fi, err := procfacts.ReadIdentity(filepath.Join(dir, procfacts.IdentityFile))
		if err != nil || id.Agent != AgentNode || id.PID != pid || !ownedBy(fi, uid) {
			continue
		}
		if st, err := procfacts.StartTime(pid); err == nil && st == id.StartTime {
			continue // still running
		}
		dfi, err := os.Lstat(dir)
		if err != nil || !dfi.IsDir() || !ownedBy(dfi, uid) {
			continue
		}
		ds = append(ds, dead{dir, dfi.ModTime()})
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].mt.After(ds[j].mt) })
	for i := keep; i < len(ds); i++ {
		if err := removeNodeDir(ds[i].dir); err != nil {
			logger.Warn("old GPU rings not removed", "dir", ds[i].dir, "err", err)
		}
	}
}

// removeNodeDir removes what a sampler writes (its tables and identity)
// and then the directory if it is empty: anything else in it stays.
func removeNodeDir(dir string) error {
	for _, d := range ringDefs {
		if err := os.Remove(filepath.Join(dir, d.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	os.Remove(filepath.Join(dir, procfacts.IdentityFile))
	if err := os.Remove(dir); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	return nil
}

func ownedBy(fi os.FileInfo, uid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

// NodeService keeps one sampler per data dir running on a node: the
// process that holds the lock samples; the others try again every
// lockRetry, so when the sampling process exits (a serve whose session
// ended, a daemon gone idle) another takes over.
type NodeService struct {
	cfg     NodeConfig
	dataDir string
	host    string
	logger  *slog.Logger

	mu  sync.Mutex
	cur *NodeSampler
	why string // why this process does not sample
}

// lockRetry is how often a process that does not sample tries the lock.
var lockRetry = 15 * time.Second

// RunNode starts the service; it returns at once.
func RunNode(ctx context.Context, cfg NodeConfig, dataDir, host string, logger *slog.Logger) *NodeService {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &NodeService{cfg: cfg, dataDir: dataDir, host: host, logger: logger}
	if !cfg.On {
		s.why = EnvGPU + "=0: this process samples no GPU (the GPU rings of another process are still read)"
		return s
	}
	// The first attempt is made now (NVML's Init, well under a second),
	// so that the first question asked gets the node's state.
	if s.try(ctx) {
		go s.run(ctx)
	}
	return s
}

// try starts the sampler; false when done trying (it samples, or the
// failure is not the lock).
func (s *NodeService) try(ctx context.Context) bool {
	ns, err := StartNode(ctx, s.cfg, s.dataDir, s.host, s.logger)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.cur, s.why = ns, ""
		return false
	}
	s.why = err.Error()
	if !errors.Is(err, ErrSampledElsewhere) {
		s.logger.Warn("no GPU sampling", "err", err)
		return false
	}
	return true
}

func (s *NodeService) run(ctx context.Context) {
	s.logger.Info("GPU sampling is another process's; its rings are read", "retry", lockRetry)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(lockRetry):
		}
		if !s.try(ctx) {
			return
		}
	}
}

// Report is this process's sampler's newest round; when this process
// does not sample, a report of source none and state not_sampled that
// says why (the caller reads the rings then).
func (s *NodeService) Report() Report {
	s.mu.Lock()
	cur, why := s.cur, s.why
	s.mu.Unlock()
	if cur != nil {
		return cur.Report()
	}
	return Report{Host: s.host, Source: SourceNone, Status: Status{State: StateNotSampled, Reason: why}}
}
