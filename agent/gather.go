package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// StackOptions bound a stack capture.
type StackOptions struct {
	// AgentTimeout is how long the agent gets to answer before the
	// faulthandler fallback (default 2 s).
	AgentTimeout time.Duration
	// SignalTimeout is how long the faulthandler dump may take to appear
	// (default 2 s).
	SignalTimeout time.Duration
	MaxFrames     int // per thread (default 200)
}

// NodeBudget is how long one node's reading of its processes may take
// when the caller sets no deadline: a get_stacks capture on this node
// (tools), the whole evidence gathering of a node (evidence.Gather's
// default Deadline) and a node daemon's Evidence answer to a request
// without a deadline (cluster/node). Each source inside gets what is
// left of it.
const NodeBudget = 15 * time.Second

func (o *StackOptions) defaults() {
	if o.AgentTimeout <= 0 {
		o.AgentTimeout = 2 * time.Second
	}
	if o.SignalTimeout <= 0 {
		o.SignalTimeout = 2 * time.Second
	}
	if o.MaxFrames <= 0 {
		o.MaxFrames = 200
	}
}

// Stacks captures every thread of one process, by the best way that works:
//  1. ask the agent (all threads, names, frames);
//  2. if it does not answer in time (a thread holds the GIL) and the agent
//     registered a faulthandler signal, send it and read the dump the C
//     handler writes without the GIL;
//  3. always add /proc: thread states and wait channels, which name the
//     kernel wait even when no Python frame can be had.
//
// The returned Process says which source its frames came from; Err says
// what failed on the way.
func Stacks(ctx context.Context, a *Agent, opt StackOptions) *stacks.Process {
	opt.defaults()
	p := &stacks.Process{PID: a.PID, Rank: a.Rank(), CapturedAt: time.Now()}
	if a.Identity != nil {
		p.Host = a.Identity.Host
	}
	var errs []string
	if a.Socket != "" && a.Alive {
		got, err := agentStacks(ctx, a, opt)
		if ae, ok := errors.AsType[*Error](err); ok && ae.Kind == "timeout" && a.Kind != KindProbing {
			// A timeout is evidence of a held GIL only if it holds: on a
			// loaded node a healthy agent can miss its deadline. Unless
			// /proc shows the main thread running (a C loop holding the
			// GIL: no point waiting), ask once more with twice the time.
			if pt := sampleThreads(a.PID, 1, 0); !mainOnCPU(pt) {
				retry := opt
				retry.AgentTimeout = 2 * opt.AgentTimeout
				if got2, err2 := agentStacks(ctx, a, retry); err2 == nil {
					got, err = got2, nil
					errs = append(errs, fmt.Sprintf("pid %d: the agent answered on a second try (the first took over %s): slow, not wedged", a.PID, opt.AgentTimeout))
				}
			}
		}
		if err == nil {
			got.Rank, got.Host = p.Rank, p.Host
			if got.Err != "" {
				errs = append(errs, got.Err) // partial: some threads not read
			}
			p = got
		} else {
			p.AgentErr = "error"
			if ae, ok := errors.AsType[*Error](err); ok {
				p.AgentErr = ae.Kind
			}
			p.OSThreads = sampleThreads(a.PID, 3, 20*time.Millisecond)
			if a.Kind == KindProbing && p.AgentErr == "timeout" {
				errs = append(errs, fmt.Sprintf("pid %d: %s", a.PID, probingTimeoutReason(opt.AgentTimeout, p.OSThreads)))
			} else {
				errs = append(errs, err.Error())
			}
		}
	}
	if p.Source == "" && a.Untrusted == "" && a.Identity != nil && a.Identity.FaulthandlerSignal > 0 && a.Identity.FaulthandlerFile != "" {
		threads, err := faulthandlerStacks(ctx, a, opt.SignalTimeout)
		if err == nil {
			p.Threads, p.Source = threads, "faulthandler"
		} else {
			errs = append(errs, "faulthandler: "+err.Error())
		}
	}
	p.Threads = dropAgentThreads(p.Threads)
	dropAgentWrappers(p.Threads)
	addProc(p)
	metrics.StackCapture(p.Source) // which source answered: agent, faulthandler or /proc
	if len(errs) > 0 {
		p.Err = joinErrs(errs)
	}
	return p
}

// mainOnCPU is mainRunning, replaceable by tests whose fake agent is the
// test process itself (its main thread's state is the Go runtime's).
var mainOnCPU = mainRunning

// mainRunning: /proc shows the main thread on a CPU (R).
func mainRunning(ts []stacks.Thread) bool {
	for _, t := range ts {
		if t.IsMain {
			return t.State == "R"
		}
	}
	return false
}

// sampleThreads reads the process's kernel threads n times, every gap,
// and keeps for each one its futex wait if any sample saw one: a thread
// that waits for the GIL sleeps on a futex and wakes every few ms to
// retry, so one sample may catch it running; only a thread seen outside a
// futex in every sample is taken as not waiting (the GIL's holder, in its
// C call or loop).
func sampleThreads(pid, n int, gap time.Duration) []stacks.Thread {
	var out []stacks.Thread
	at := map[int]int{}
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(gap)
		}
		pr, err := procfacts.ReadProcess(pid)
		if err != nil {
			break
		}
		for _, t := range pr.Threads {
			th := stacks.Thread{NativeID: t.TID, Name: t.Comm, State: t.State, WChan: t.WChan, IsMain: t.TID == pid}
			k, seen := at[t.TID]
			switch {
			case !seen:
				at[t.TID] = len(out)
				out = append(out, th)
			case !strings.Contains(out[k].WChan, "futex"):
				out[k] = th
			}
		}
	}
	return out
}

// dropAgentThreads removes the agent's own threads (its server answering
// this very request, its identity watcher): they are in every process and
// say nothing about the job.
func dropAgentThreads(ts []stacks.Thread) []stacks.Thread {
	out := ts[:0]
	for _, t := range ts {
		if strings.HasPrefix(t.Name, "probing-mcp-") || (!t.IsMain && runsAgentCode(t.Frames)) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// dropAgentWrappers removes the agent's collective wrapper from stacks
// where it only passed the call on: every rank inside a collective would
// otherwise show it between its own line and torch's. It stays where the
// thread is inside the wrapper's own work (the next frame in is not torch),
// since there the agent is what the thread waits on.
func dropAgentWrappers(ts []stacks.Thread) {
	for i := range ts {
		fr := ts[i].Frames
		out := fr[:0]
		for j, f := range fr {
			if j > 0 && isAgentWrapper(f) && strings.Contains(fr[j-1].File, "/torch/distributed/") {
				continue
			}
			out = append(out, f)
		}
		ts[i].Frames = out
	}
}

// DropAgentFRFrames removes the agent's collective wrapper from the
// Python stacks torch recorded with each Flight Recorder entry, as from
// live stacks: it is the agent's frame, not the job's. Exported for the
// coordinator, which decodes the dumps its nodes shipped raw.
func DropAgentFRFrames(d *fr.Dump) {
	d.RewriteFrames(func(fs []fr.Frame) []fr.Frame {
		for j, f := range fs {
			if j > 0 && f.Name == "wrapper" && strings.HasSuffix(f.Filename, "/probing_mcp_agent/collectives.py") {
				out := make([]fr.Frame, 0, len(fs)-1)
				return append(append(out, fs[:j]...), fs[j+1:]...)
			}
		}
		return fs
	})
}

func isAgentWrapper(f stacks.Frame) bool {
	return f.Function == "wrapper" && strings.HasSuffix(f.File, "/probing_mcp_agent/collectives.py")
}

// runsAgentCode: the thread was started by the agent (its outermost
// non-threading frame is in the agent package).
func runsAgentCode(frames []stacks.Frame) bool {
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i].File
		if strings.HasSuffix(f, "/threading.py") || strings.HasSuffix(f, "/socketserver.py") {
			continue
		}
		return strings.Contains(f, "/probing_mcp_agent/")
	}
	return false
}

func joinErrs(errs []string) string {
	var b bytes.Buffer
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e)
	}
	return b.String()
}

func agentStacks(ctx context.Context, a *Agent, opt StackOptions) (*stacks.Process, error) {
	c, err := NewClient(a)
	if err != nil {
		return nil, err
	}
	if a.Kind == KindProbing {
		// The original agent: one request per thread, its own deadlines.
		return probingStacks(ctx, c, a, opt)
	}
	ctx, cancel := context.WithTimeout(ctx, opt.AgentTimeout)
	defer cancel()
	b, err := c.Do(ctx, http.MethodGet, "/apis/stacks?max_frames="+strconv.Itoa(opt.MaxFrames), nil, "")
	if err != nil {
		return nil, err
	}
	p, err := stacks.ParseAgentJSON(b)
	if err != nil {
		return nil, &Error{PID: a.PID, Kind: "malformed", Msg: err.Error()}
	}
	p.Source = "agent"
	return p, nil
}

// faulthandlerStacks triggers the agent's faulthandler dump and reads it.
// The dump file must be a regular file of the process's owner (never a
// symlink or another user's file the identity points at).
func faulthandlerStacks(ctx context.Context, a *Agent, timeout time.Duration) ([]stacks.Thread, error) {
	id := a.Identity
	owner, err := procfacts.ProcessOwner(a.PID)
	if err != nil {
		return nil, err
	}
	if owner.UID != a.UID {
		return nil, fmt.Errorf("pid %d now runs as %s, not %s", a.PID, procfacts.UserName(owner.UID), procfacts.UserName(a.UID))
	}
	size := func() (int64, error) {
		fi, err := os.Lstat(id.FaulthandlerFile)
		if err != nil {
			return 0, err
		}
		if !fi.Mode().IsRegular() {
			return 0, fmt.Errorf("%s is not a regular file (%s)", id.FaulthandlerFile, fi.Mode().Type())
		}
		if err := procfacts.CheckFile(fi, owner); err != nil {
			return 0, fmt.Errorf("%s: %v", id.FaulthandlerFile, err)
		}
		return fi.Size(), nil
	}
	before, err := size()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := Signal(a, syscall.Signal(id.FaulthandlerSignal)); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	last := before
	stable := 0
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		n, err := size()
		if err != nil {
			continue
		}
		// The handler writes the dump in a burst; it is complete once the
		// size stops moving.
		if n > before && n == last {
			if stable++; stable >= 2 {
				break
			}
		} else {
			stable = 0
		}
		last = n
	}
	if last <= before {
		return nil, fmt.Errorf("no dump appeared in %s within %s", id.FaulthandlerFile, timeout)
	}
	f, fi, err := procfacts.OpenRegular(id.FaulthandlerFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := procfacts.CheckFile(fi, owner); err != nil {
		return nil, fmt.Errorf("%s: %v", id.FaulthandlerFile, err)
	}
	const maxDump = 16 << 20
	n := min(last-before, maxDump)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, before); err != nil {
		return nil, err
	}
	return stacks.ParseFaulthandlerLast(buf, 0)
}

// addProc adds thread states from /proc, matching Python threads by
// native id; threads with no Python frames still appear, with their
// kernel wait channel.
func addProc(p *stacks.Process) {
	pr, err := procfacts.ReadProcess(p.PID)
	if err != nil {
		return
	}
	byTID := map[int]int{}
	for i, t := range p.Threads {
		// faulthandler names threads by pthread id, not kernel id; only
		// the main thread's kernel id is known (it is the pid).
		if t.NativeID == 0 && t.IsMain {
			p.Threads[i].NativeID = p.PID
			t.NativeID = p.PID
		}
		if t.NativeID > 0 {
			byTID[t.NativeID] = i
		}
	}
	for _, t := range pr.Threads {
		if i, ok := byTID[t.TID]; ok {
			p.Threads[i].State, p.Threads[i].WChan = t.State, t.WChan
			continue
		}
		if p.Source == "" || p.Source == "proc" {
			p.Threads = append(p.Threads, stacks.Thread{NativeID: t.TID, Name: t.Comm, State: t.State, WChan: t.WChan, IsMain: t.TID == p.PID})
		}
	}
	if p.Source == "" {
		p.Source = "proc"
	}
}

// CollectStacks captures many processes at once (bounded parallelism);
// the result is in the order of agents.
func CollectStacks(ctx context.Context, agents []*Agent, opt StackOptions) []stacks.Process {
	out := make([]stacks.Process, len(agents))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, a := range agents {
		wg.Add(1)
		go func(i int, a *Agent) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = *Stacks(ctx, a, opt)
		}(i, a)
	}
	wg.Wait()
	return out
}

// FRCollection is the Flight Recorder dumps of several ranks, ready for
// the analysis, with what went wrong per process.
type FRCollection struct {
	Loaded    *fr.Loaded
	Snapshots map[int]*Snapshot // by pid
	Errors    map[int]error     // by pid
}

// CollectFlightRecorder snapshots every agent and decodes the dumps.
func CollectFlightRecorder(ctx context.Context, agents []*Agent, onlyActive bool) *FRCollection {
	col := &FRCollection{Loaded: &fr.Loaded{}, Snapshots: map[int]*Snapshot{}, Errors: map[int]error{}}
	var mu sync.Mutex
	errs := ForEach(ctx, agents, 16, func(ctx context.Context, a *Agent) error {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		s, err := SnapshotFlightRecorder(actx, a, onlyActive, true)
		cancel()
		if err != nil {
			// A process whose agent cannot answer (GIL held) may still dump
			// through torch's pipe.
			ps, perr := SnapshotViaPipe(ctx, a, 10*time.Second)
			if perr != nil {
				return fmt.Errorf("%v; torch's dump pipe: %v", err, perr)
			}
			s = ps
		}
		d, err := fr.DecodeContext(ctx, s.Data, fr.Limits{})
		if err != nil {
			return fmt.Errorf("pid %d: its dump does not decode: %w", a.PID, err)
		}
		DropAgentFRFrames(d)
		d.Rank = s.Rank
		if d.Rank < 0 {
			d.Rank = a.Rank()
		}
		d.Path = fmt.Sprintf("pid %d (rank %d)", a.PID, d.Rank)
		mu.Lock()
		col.Snapshots[a.PID] = s
		col.Loaded.Dumps = append(col.Loaded.Dumps, d)
		mu.Unlock()
		return nil
	})
	for pid, err := range errs {
		col.Errors[pid] = err
		r := -1
		for _, a := range agents {
			if a.PID == pid {
				r = a.Rank()
			}
		}
		rr := r
		col.Loaded.Problems = append(col.Loaded.Problems, fr.FileProblem{Path: fmt.Sprintf("pid %d", pid), Rank: &rr, Problem: err.Error()})
	}
	sortDumps(col.Loaded.Dumps)
	return col
}

// SnapshotViaPipe asks torch itself for the Flight Recorder dump, through
// the FIFO ProcessGroupNCCL watches (TORCH_NCCL_DEBUG_INFO_PIPE_FILE): one
// byte written to <pipe prefix><rank>.pipe makes a C++ thread write the
// dump to <dump prefix><rank>, with no Python and no GIL involved. Only
// NCCL process groups create the pipe.
func SnapshotViaPipe(ctx context.Context, a *Agent, timeout time.Duration) (*Snapshot, error) {
	id := a.Identity
	if id == nil || id.FRPipePrefix == "" || id.FRDumpPrefix == "" || id.Rank < 0 {
		return nil, errors.New("the process published no dump pipe (needs the agent's identity, a known rank and TORCH_NCCL_DEBUG_INFO_PIPE_FILE)")
	}
	if a.Untrusted != "" {
		return nil, fmt.Errorf("pid %d is untrusted (%s): its dump pipe is not used", a.PID, a.Untrusted)
	}
	owner, err := procfacts.ProcessOwner(a.PID)
	if err != nil {
		return nil, err
	}
	pipe := id.FRPipePrefix + strconv.Itoa(id.Rank) + ".pipe"
	dump := id.FRDumpPrefix + strconv.Itoa(id.Rank)
	var before time.Time
	if fi, err := os.Lstat(dump); err == nil {
		before = fi.ModTime()
	}
	f, err := openPipe(pipe, owner)
	if err != nil {
		return nil, err
	}
	_, err = f.Write([]byte{'1'})
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", pipe, err)
	}
	deadline := time.Now().Add(timeout)
	var lastSize int64 = -1
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		fi, err := os.Lstat(dump)
		if err == nil && fi.ModTime().After(before) && fi.Size() > 0 {
			if fi.Size() == lastSize {
				break // written and no longer growing
			}
			lastSize = fi.Size()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("torch wrote no new %s within %s of the pipe request", dump, timeout)
		}
	}
	df, fi, err := procfacts.OpenRegular(dump)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	if err := procfacts.CheckFile(fi, owner); err != nil {
		return nil, fmt.Errorf("%s: %v; not read", dump, err)
	}
	if fi.Size() > MaxSnapshotBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit", dump, fi.Size(), MaxSnapshotBytes)
	}
	data, err := io.ReadAll(io.LimitReader(df, MaxSnapshotBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSnapshotBytes {
		return nil, fmt.Errorf("%s grew over the %d-byte limit while read", dump, MaxSnapshotBytes)
	}
	format := "pickle"
	if len(data) > 0 && data[0] == '{' {
		format = "json"
	}
	return &Snapshot{OK: true, Rank: id.Rank, WorldSize: id.WorldSize, Format: format, DumpFunction: "pipe " + pipe, Bytes: len(data), Data: data}, nil
}

// openPipe opens torch's dump FIFO for writing. The path comes from a file
// in a shared directory, so it must be a FIFO of the process's owner: a
// regular file or device in its place would take the byte (or block), and
// a symlink could point anywhere. Non-blocking: with nobody reading the
// FIFO, open fails (ENXIO) instead of hanging. The watcher reopens the
// FIFO after each request, so a missing reader is retried for a moment
// before giving up.
func openPipe(pipe string, owner procfacts.Owner) (*os.File, error) {
	fi, err := os.Lstat(pipe)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Type() != os.ModeNamedPipe {
		return nil, fmt.Errorf("%s is not a FIFO (%s); not written", pipe, fi.Mode().Type())
	}
	if err := procfacts.CheckFile(fi, owner); err != nil {
		return nil, fmt.Errorf("%s: %v; not written", pipe, err)
	}
	var f *os.File
	for try := 0; ; try++ {
		f, err = os.OpenFile(pipe, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
		if err == nil || !errors.Is(err, syscall.ENXIO) || try == 10 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("%s has no reader: no NCCL process group watches it", pipe)
		}
		return nil, err
	}
	// The file opened must be the FIFO checked, not one swapped in since.
	if ofi, err := f.Stat(); err != nil || !os.SameFile(fi, ofi) || ofi.Mode().Type() != os.ModeNamedPipe {
		f.Close()
		return nil, fmt.Errorf("%s changed while it was opened; not written", pipe)
	}
	return f, nil
}

func sortDumps(d []*fr.Dump) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j].Rank < d[j-1].Rank; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}
