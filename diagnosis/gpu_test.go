package diagnosis

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// gpuDev is one GPU as a sampler reports it: utilisation and power make
// the signature (gpu.Classify), ranks its processes (pid 1000+rank, as
// scenario's).
func gpuDev(index int, util uint32, power float64, ranks ...int) gpu.DeviceState {
	lim := 700.0
	s := gpu.Snapshot{Index: index, Name: "NVIDIA H100 80GB HBM3", UUID: fmt.Sprintf("GPU-%d", index),
		Utilization: &gpu.Utilization{GPU: util}, PowerW: &power, PowerLimitW: &lim}
	for _, r := range ranks {
		s.Processes = append(s.Processes, gpu.Process{PID: uint32(1000 + r), Rank: r, LocalRank: r % 8, UsedMemory: 40 << 30, GPUInstance: -1})
	}
	sig, why := gpu.Classify(s, nil)
	return gpu.DeviceState{Snapshot: s, Signature: sig, Why: why}
}

func spinning(i int, ranks ...int) gpu.DeviceState { return gpuDev(i, 100, 70+float64(i%3), ranks...) }
func idleGPU(i int, ranks ...int) gpu.DeviceState  { return gpuDev(i, 0, 60, ranks...) }
func busyGPU(i int, ranks ...int) gpu.DeviceState  { return gpuDev(i, 98, 650, ranks...) }

// lostGPU is a GPU NVML lost (Xid 79): no counters, no processes.
func lostGPU(i int) gpu.DeviceState {
	return gpu.DeviceState{Snapshot: gpu.Snapshot{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Lost: true}, Signature: gpu.SigLost, Why: "NVML: GPU is lost"}
}

// node8 is one node of eight GPUs, GPU i running rank base+i, each as
// dev says (spinning when nil), sampled at.
func node8(host string, base int, at time.Time, dev func(i int) gpu.DeviceState) gpu.Report {
	r := gpu.Report{Host: host, Status: gpu.Status{State: gpu.StateOK, Devices: 8}, Source: gpu.SourceLive, SampledAt: at, IntervalMS: 1000}
	for i := 0; i < 8; i++ {
		d := spinning(i, base+i)
		if dev != nil {
			d = dev(i)
		}
		d.Time = at
		r.Devices = append(r.Devices, d)
	}
	return r
}

func xid(gpuIndex int, code uint64, at time.Time) gpu.XidEvent {
	return gpu.XidEvent{Kind: "xid", Xid: code, Meaning: gpu.XidMeaning(code), GPU: gpuIndex, Source: "kmsg", Time: at}
}

// stallAt is when the scenario's ranks last made progress; readAt when
// it was diagnosed.
func stallAt(in Input) time.Time {
	var t int64
	for _, f := range in.Ranks {
		if a := f.Activity; a != nil {
			t = max(t, a.LastComm, a.LastCommDone)
		}
	}
	return time.UnixMicro(t)
}

func readAt(in Input) time.Time {
	for _, f := range in.Ranks {
		return time.Unix(0, f.NowNS)
	}
	return time.Time{}
}

func allIn() map[int]string {
	m := map[int]string{}
	for r := 0; r < 8; r++ {
		m[r] = "default"
	}
	return m
}

func localRanks(in Input) {
	for r, f := range in.Ranks {
		f.LocalRank = r
	}
}

func hasCategory(hs []Hypothesis, c string) bool {
	return slices.ContainsFunc(hs, func(h Hypothesis) bool { return h.Category == c })
}

func evidenceText(h Hypothesis) string {
	var b strings.Builder
	for _, e := range h.Evidence {
		b.WriteString("[" + e.Source + "] " + e.Text + "\n")
	}
	return b.String()
}

// TestGPUEvidence: each GPU rule on the 8-rank job of the comm tests, on
// one node of eight GPUs.
func TestGPUEvidence(t *testing.T) {
	type want struct {
		cat, culprits, conf, collateral string
		evidence                        []string // substrings of the first hypothesis' evidence
		absent                          []string // categories no hypothesis may have
		dq                              []string // substrings of some data-quality line
		second                          *struct{ cat, conf, evidence string }
	}
	cases := []struct {
		name  string
		build func() Input
		want  want
	}{{
		// Every rank inside one collective because GPU 5 fell off the bus
		// under it: the rings alone say "below the ranks"; the Xid names
		// the rank.
		name: "xid 79 under an all-in collective",
		build: func() Input {
			in := scenario(allIn(), 200)
			at := stallAt(in).Add(2 * time.Second)
			g := node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState {
				if i == 5 {
					return lostGPU(5)
				}
				return spinning(i, i)
			})
			g.Devices[5].Processes = []gpu.Process{{PID: 1005, Rank: 5, LocalRank: 5, GPUInstance: -1}}
			g.Xids = []gpu.XidEvent{xid(5, 79, at)}
			in.GPU = []gpu.Report{g}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "5", conf: High, collateral: "0-4,6-7",
			evidence: []string{"[gpu] rank 5's GPU 5 on ⟦node-a⟧: Xid 79 (GPU has fallen off the bus) at ", ", 2.0s after the job's last progress", "(and 1 more fault event(s) on it)", "every member of group"},
			absent:   []string{CatAllIn}},
	}, {
		name: "xid before the stall",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), nil)}
			in.GPU[0].Xids = []gpu.XidEvent{xid(2, 48, stallAt(in).Add(-time.Second))}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "2", conf: High,
			evidence: []string{"rank 2's GPU 2 on ⟦node-a⟧: Xid 48 (double-bit ECC error: uncorrectable GPU memory error) at ", ", 1.0s before the stall"},
			absent:   []string{CatAllIn}},
	}, {
		// An Xid from before the job's first record is an earlier run's:
		// a note, not proof.
		name: "old xid ignored",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), nil)}
			in.GPU[0].Xids = []gpu.XidEvent{xid(5, 79, stallAt(in).Add(-time.Hour))}
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium, absent: []string{CatGPUFault},
			evidence: []string{"spin at 100% util"},
			dq:       []string{"rank 5's GPU 5 on ⟦node-a⟧: Xid 79 (GPU has fallen off the bus) at ", "before the job's first record here", "not weighed"}},
	}, {
		// The kernel log's time since boot could not be converted: the
		// event counts, at medium confidence, and says so.
		name: "zero-time xid is medium",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), nil)}
			in.GPU[0].Xids = []gpu.XidEvent{xid(5, 79, time.Time{})}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "5", conf: Medium,
			evidence: []string{"rank 5's GPU 5 on ⟦node-a⟧: Xid 79 (GPU has fallen off the bus) at an unknown time"}, absent: []string{CatAllIn}},
	}, {
		// The GPUs list no process (a container hides the pids); the
		// ranks' local ranks are the GPU indices one to one: mapped, as
		// an assumption that never makes a verdict high.
		name: "fallback by local rank",
		build: func() Input {
			in := scenario(allIn(), 200)
			localRanks(in)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState { return spinning(i) })}
			in.GPU[0].Xids = []gpu.XidEvent{xid(5, 79, stallAt(in).Add(time.Second))}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "5", conf: Medium,
			evidence: []string{"rank 5's GPU 5 on ⟦node-a⟧: Xid 79", "assumed by local rank"}, absent: []string{CatAllIn}},
	}, {
		// No processes and no local ranks: nothing maps, nothing is
		// guessed, and the fault is said as a GPU of no known rank.
		name: "no mapping without one-to-one local ranks",
		build: func() Input {
			in := scenario(allIn(), 200)
			for _, f := range in.Ranks {
				f.LocalRank = -1
			}
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState { return spinning(i) })}
			in.GPU[0].Xids = []gpu.XidEvent{xid(5, 79, stallAt(in).Add(time.Second))}
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium, absent: []string{CatGPUFault},
			dq: []string{"not its GPU indices one to one", "GPU 5 on ⟦node-a⟧: Xid 79", "no rank of this job is known on it"}},
	}, {
		// Rank 5 died; its process is no longer on GPU 5, the others are
		// on the GPU of their local rank: GPU 5 is assumed its, and the
		// dead rank is a gpu_fault.
		name: "dead rank whose GPU failed",
		build: func() Input {
			in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
			localRanks(in)
			in.Ranks[5].Alive = false
			in.Ranks[5].Ending = "exited with code 1 after RuntimeError: CUDA error: unspecified launch failure"
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState {
				if i == 5 {
					return idleGPU(5)
				}
				return spinning(i, i)
			})}
			in.GPU[0].Xids = []gpu.XidEvent{xid(5, 79, stallAt(in).Add(-time.Second))}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "5", conf: Medium, collateral: "0-4,6-7",
			evidence: []string{"rank 5's GPU 5 on ⟦node-a⟧: Xid 79", "assumed by local rank", "CUDA error"}, absent: []string{CatDeadRank}},
	}, {
		// The kernel log names the faulting process: the rank of that
		// pid, without any assumption.
		name: "xid pid names the dead rank",
		build: func() Input {
			in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
			in.Ranks[5].Alive = false
			in.Ranks[5].Ending = "exited with code 1 after RuntimeError: CUDA error: an illegal memory access was encountered"
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState {
				if i == 5 {
					return idleGPU(5)
				}
				return spinning(i, i)
			})}
			e := xid(5, 31, stallAt(in).Add(-time.Second))
			e.PID = 1005
			in.GPU[0].Xids = []gpu.XidEvent{e}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "5", conf: High,
			evidence: []string{"rank 5's GPU 5 on ⟦node-a⟧: Xid 31 (GPU memory page fault"}, absent: []string{CatDeadRank}},
	}, {
		// Rank 2 died after rank 5's GPU failed: its death may follow
		// from the fault, so the dead rank is held one step lower.
		name: "a death after the fault",
		build: func() Input {
			in := scenario(everyoneBut(2, 3, "none", "pair"), 200)
			at := stallAt(in).Add(-time.Second)
			in.Ranks[2].Alive = false
			in.Ranks[2].Ending = "exited with code 1 after RuntimeError: NCCL communicator was aborted"
			in.Ranks[2].EndedNS = at.Add(30 * time.Second).UnixNano()
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), nil)}
			in.GPU[0].Xids = []gpu.XidEvent{xid(5, 79, at)}
			return in
		},
		want: want{cat: CatGPUFault, culprits: "5", conf: High,
			second: &struct{ cat, conf, evidence string }{CatDeadRank, Medium, "but rank 5's GPU 5 on ⟦node-a⟧ failed at "}},
	}, {
		name: "all-in with every GPU spinning",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), nil)}
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium, absent: []string{CatGPUFault},
			evidence: []string{"[gpu] the GPUs of ranks 0-7 spin at 100% util, 70-72 W of 700 W: NCCL kernels resident, waiting for data that never arrives: the network or a peer GPU"}},
	}, {
		// One member's GPU idle while the rest spin: it never launched
		// the kernel, whatever the rings say.
		name: "all-in with one idle member",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState {
				if i == 3 {
					return idleGPU(3, 3)
				}
				return spinning(i, i)
			})}
			return in
		},
		want: want{cat: CatCPUStall, culprits: "3", conf: Medium, collateral: "0-2,4-7",
			evidence: []string{"[gpu] rank 3's GPU 3 on ⟦node-a⟧ is idle at 0% util, 60 W of 700 W while the GPUs of ranks 0-2,4-7 spin", "[comm_rings] but the rings record rank 3 inside the collective"},
			second:   &struct{ cat, conf, evidence string }{CatAllIn, Low, "but rank 3's GPU is idle while the GPUs of ranks 0-2,4-7 spin"}},
	}, {
		name: "cpu_stall culprit idle while the waiters spin",
		build: func() Input {
			in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState {
				if i == 3 {
					return idleGPU(3, 3)
				}
				return spinning(i, i)
			})}
			return in
		},
		// Medium stays medium: no stack to go with it.
		want: want{cat: CatCPUStall, culprits: "3", conf: Medium,
			evidence: []string{"[gpu] rank 3's GPU 3 on ⟦node-a⟧ is idle at 0% util, 60 W of 700 W while the GPUs of ranks 0-2,4-7 spin at 100% util, 70-72 W of 700 W: it never launched the collective they wait in"}},
	}, {
		name: "cpu_stall culprit whose GPU computes",
		build: func() Input {
			in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
			in.Ranks[3].Main = &stacks.Thread{IsMain: true, Frames: []stacks.Frame{{File: "/job/train.py", Line: 63, Function: "step"}}}
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState {
				if i == 3 {
					return busyGPU(3, 3)
				}
				return spinning(i, i)
			})}
			return in
		},
		want: want{cat: CatCPUStall, culprits: "3", conf: Medium, // high with its stack, one step lower
			evidence: []string{"[gpu] but rank 3's GPU 3 on ⟦node-a⟧ computes at 98% util, 650 W of 700 W: a long GPU computation", "(confidence lowered)"}},
	}, {
		name: "cpu_stall culprit spinning like its waiters",
		build: func() Input {
			in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), nil)}
			return in
		},
		want: want{cat: CatCPUStall, culprits: "3", conf: Low,
			evidence: []string{"but rank 3's GPU 3 on ⟦node-a⟧ spins at 100% util", "like the GPUs waiting for it"}},
	}, {
		// The sample is old (the sampler stopped after the stall): used,
		// with its age.
		name: "old sample says its age",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, stallAt(in).Add(5*time.Second), nil)}
			in.GPU[0].Source = gpu.SourceRings
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium,
			evidence: []string{"spin at 100% util, 70-72 W of 700 W (the last sample in the rings, 3m15s before the diagnosis): NCCL kernels"}},
	}, {
		// Sampled while the job still stepped: its utilisation says
		// nothing of the hang.
		name: "sample before the stall is not weighed",
		build: func() Input {
			in := scenario(allIn(), 200)
			in.GPU = []gpu.Report{node8("node-a", 0, stallAt(in).Add(-30*time.Second), nil)}
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium, dq: []string{"the GPU samples of 1 node(s) predate the stall"}},
	}, {
		// Rank 5's evidence came from node-b; node-c's GPU lists a rank 5
		// of another job, with a fault: not this job's rank 5.
		name: "a rank's GPU is on its own node",
		build: func() Input {
			in := scenario(allIn(), 200)
			for r, f := range in.Ranks {
				f.Node = fmt.Sprintf("node-%c:7077", 'a'+r/4)
			}
			now := readAt(in)
			a := node8("node-a", 0, now, nil)
			a.Devices = a.Devices[:4]
			b := node8("node-b", 4, now, nil)
			b.Devices = b.Devices[:4]
			c := node8("node-c", 4, now, func(i int) gpu.DeviceState { return spinning(i, 4+i) })
			c.Devices = c.Devices[:4]
			c.Xids = []gpu.XidEvent{xid(1, 79, stallAt(in))}
			in.GPU = []gpu.Report{a, b, c}
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium, absent: []string{CatGPUFault},
			evidence: []string{"the GPUs of ranks 0-7 spin"}, dq: []string{"GPU 1 on ⟦node-c⟧: Xid 79"}},
	}, {
		// Rank 5's own node lists it on no GPU: node-c's rank 5 is still
		// another job's, not a guess for this one.
		name: "another node's rank of the same number is not this one",
		build: func() Input {
			in := scenario(allIn(), 200)
			for r, f := range in.Ranks {
				f.Node = fmt.Sprintf("node-%c:7077", 'a'+r/4)
				f.LocalRank = -1
			}
			now := readAt(in)
			a := node8("node-a", 0, now, nil)
			a.Devices = a.Devices[:4]
			b := node8("node-b", 4, now, nil)
			b.Devices = b.Devices[:4]
			b.Devices[1].Processes = nil
			c := node8("node-c", 4, now, func(i int) gpu.DeviceState { return spinning(i, 4+i) })
			c.Devices = c.Devices[:4]
			c.Xids = []gpu.XidEvent{xid(1, 79, stallAt(in))}
			in.GPU = []gpu.Report{a, b, c}
			return in
		},
		want: want{cat: CatAllIn, culprits: "0-7", conf: Medium, absent: []string{CatGPUFault},
			evidence: []string{"the GPUs of ranks 0-4,6-7 spin"}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := Diagnose(c.build())
			if os.Getenv("SCRATCH") != "" {
				t.Log(rep.Text())
			}
			if len(rep.Hypotheses) == 0 {
				t.Fatalf("no hypothesis: %s", rep.Text())
			}
			h := rep.Hypotheses[0]
			w := c.want
			if h.Category != w.cat || h.Culprits != w.culprits || h.Confidence != w.conf || (w.collateral != "" && h.Collateral != w.collateral) {
				t.Fatalf("got %s %q %s (collateral %q), want %s %q %s (%q)\n%s", h.Category, h.Culprits, h.Confidence, h.Collateral,
					w.cat, w.culprits, w.conf, w.collateral, rep.Text())
			}
			ev := evidenceText(h)
			for _, s := range w.evidence {
				if !strings.Contains(ev, s) {
					t.Errorf("evidence lacks %q:\n%s", s, ev)
				}
			}
			for _, a := range w.absent {
				if hasCategory(rep.Hypotheses, a) {
					t.Errorf("a %s hypothesis is left:\n%s", a, rep.Text())
				}
			}
			dq := strings.Join(rep.DataQuality, "\n")
			for _, s := range w.dq {
				if !strings.Contains(dq, s) {
					t.Errorf("data quality lacks %q:\n%s", s, dq)
				}
			}
			if s := w.second; s != nil {
				if len(rep.Hypotheses) < 2 || rep.Hypotheses[1].Category != s.cat || rep.Hypotheses[1].Confidence != s.conf ||
					!strings.Contains(evidenceText(rep.Hypotheses[1]), s.evidence) {
					t.Errorf("second hypothesis, want %s %s with %q:\n%s", s.cat, s.conf, s.evidence, rep.Text())
				}
			}
			if !strings.Contains(rep.Summary, h.Category) {
				t.Errorf("summary %q", rep.Summary)
			}
		})
	}
}

// TestGPUFaultOnAMovingJob: a job that steps is never made a hang by its
// GPUs: the fault is a warning line.
func TestGPUFaultOnAMovingJob(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "default", "pair"), 0.05)
	in.GPU = []gpu.Report{node8("node-a", 0, readAt(in), func(i int) gpu.DeviceState { return busyGPU(i, i) })}
	in.GPU[0].Xids = []gpu.XidEvent{xid(3, 79, stallAt(in))}
	rep := Diagnose(in)
	if rep.State != StateHealthy || len(rep.Hypotheses) != 1 || rep.Hypotheses[0].Category != CatHealthy {
		t.Fatalf("%s", rep.Text())
	}
	if !slices.ContainsFunc(rep.DataQuality, func(s string) bool {
		return strings.HasPrefix(s, "GPU fault while the job moves (no hang: the GPU needs attention): rank 3's GPU 3 on ⟦node-a⟧: Xid 79") &&
			!strings.Contains(s, "stall")
	}) {
		t.Errorf("%q", rep.DataQuality)
	}
}

// TestGPUNotReadChangesNothing: without GPUs (a CPU-only job, no sampler,
// no NVML library) every verdict is the one without GPU evidence; one
// data-quality line at most says the GPUs were not read.
func TestGPUNotReadChangesNothing(t *testing.T) {
	inputs := map[string]func() Input{
		"missing": func() Input { return scenario(everyoneBut(3, 2, "default", "pair"), 200) },
		"cpu":     func() Input { return scenario(everyoneBut(3, 2, "none", "pair"), 200) },
		"all-in":  func() Input { return scenario(allIn(), 200) },
		"healthy": func() Input { return scenario(everyoneBut(3, 2, "default", "pair"), 0.05) },
		"dead": func() Input {
			in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
			in.Ranks[5].Alive = false
			in.Ranks[5].Ending = "exited with code 1"
			return in
		},
	}
	reports := map[string][]gpu.Report{
		"no library":  {{Host: "node-a", Source: gpu.SourceLive, Status: gpu.Status{State: gpu.StateNoLibrary, Reason: "NVML Init: the NVML library was not found"}}},
		"not sampled": {{Host: "node-a", Source: gpu.SourceNone, Status: gpu.Status{State: gpu.StateNotSampled, Reason: "no GPU sampler has written to this data dir"}}},
		"no device":   {{Host: "node-a", Source: gpu.SourceLive, Status: gpu.Status{State: gpu.StateNoDevice}}},
	}
	for name, build := range inputs {
		base := Diagnose(build())
		for rn, rs := range reports {
			in := build()
			in.GPU = rs
			got := Diagnose(in)
			if rn == "no device" && got.Hypotheses[0].Category != CatHealthy {
				// The one thing a node without GPUs changes: the next
				// step says so (next.go), nothing else.
				if !strings.HasSuffix(got.Hypotheses[0].Act, "; no GPUs on this node (no_device): no GPU to check") {
					t.Errorf("%s, no device: act %q", name, got.Hypotheses[0].Act)
				}
				got.Hypotheses[0].Act = strings.TrimSuffix(got.Hypotheses[0].Act, "; no GPUs on this node (no_device): no GPU to check")
			}
			if !reflect.DeepEqual(got.Hypotheses, base.Hypotheses) || got.Summary != base.Summary || got.State != base.State || !reflect.DeepEqual(got.Ranks, base.Ranks) {
				t.Errorf("%s, %s: the verdict changed:\n%s\nwithout GPUs:\n%s", name, rn, got.Text(), base.Text())
			}
			extra := len(got.DataQuality) - len(base.DataQuality)
			if extra > 1 || extra < 0 || (extra == 1 && !strings.HasPrefix(got.DataQuality[len(got.DataQuality)-1], "GPUs not read on 1 node(s)")) {
				t.Errorf("%s, %s: data quality %q, without GPUs %q", name, rn, got.DataQuality, base.DataQuality)
			}
		}
	}
}

// TestGPUFault4096Ranks: 512 nodes of eight GPUs, every rank inside one
// collective, rank 2053's GPU lost: the verdict names that rank, and
// stays as small as the bounds say however many GPUs.
func TestGPUFault4096Ranks(t *testing.T) {
	const culprit = 2053
	in := job4096(culprit)
	rep := Diagnose(in)
	rep.Bound()
	h := rep.Hypotheses[0]
	if h.Category != CatGPUFault || h.Culprits != fmt.Sprint(culprit) {
		t.Fatalf("%s", rep.Text())
	}
	if len(h.Evidence) > 6 || len(rep.Hypotheses) > MaxHypotheses || len(rep.DataQuality) > MaxDataLines+1 {
		t.Errorf("%d evidence lines, %d hypotheses, %d data-quality lines", len(h.Evidence), len(rep.Hypotheses), len(rep.DataQuality))
	}
	text := rep.Text()
	if os.Getenv("SCRATCH") != "" {
		t.Log(len(text), text)
	}
	if len(text) > 6000 || !strings.Contains(text, "rank 2053's GPU 5 on ⟦node-256⟧: Xid 79 (GPU has fallen off the bus)") {
		t.Errorf("%d bytes:\n%s", len(text), text)
	}
}

// job4096 is a job of 4096 ranks on 512 nodes of eight GPUs, every rank
// inside one all_reduce, every GPU spinning but the culprit's, which is
// lost (Xid 79). The culprit's process is gone from its GPU: it is found
// by its local rank, the others confirming the convention on its node.
func job4096(culprit int) Input {
	const world = 4096
	grp := make([]string, world)
	for r := range grp {
		grp[r] = fmt.Sprint(r)
	}
	all := "[" + strings.Join(grp, ", ") + "]"
	in := Input{World: world, Ranks: map[int]*RankFacts{}}
	ts := int64(1_700_000_000_000_000)
	for r := 0; r < world; r++ {
		for s := int64(1); s <= 3; s++ {
			in.Comm = append(in.Comm, evidence.CommRow{Rank: r, TimestampUS: ts + s*500_000, Op: "all_reduce", Ranks: all, GroupSeq: s, DurationMS: 1})
		}
		in.Comm = append(in.Comm, evidence.CommRow{Rank: r, TimestampUS: ts + 2_000_000, Op: "all_reduce", Ranks: all, GroupSeq: 4, DurationMS: -1})
		in.Ranks[r] = &RankFacts{Rank: r, PID: 1000 + r%8, Alive: true, LocalRank: r % 8, Node: fmt.Sprintf("node-%03d:7077", r/8),
			NowNS:    (ts + 2_000_000 + 200_000_000) * 1000,
			Activity: &evidence.RankActivity{Rank: r, LastComm: ts + 2_000_000, LastCommDone: ts + 1_500_000 + 1000}}
	}
	now := time.Unix(0, in.Ranks[0].NowNS)
	for n := 0; n < world/8; n++ {
		g := node8(fmt.Sprintf("node-%03d", n), n*8, now, func(i int) gpu.DeviceState {
			if n*8+i == culprit {
				return lostGPU(i)
			}
			// Pids are per node: the same numbers on every node.
			d := spinning(i, n*8+i)
			d.Processes[0].PID = uint32(1000 + i)
			return d
		})
		if n == culprit/8 {
			g.Xids = []gpu.XidEvent{xid(culprit%8, 79, time.UnixMicro(ts+2_100_000))}
		}
		in.GPU = append(in.GPU, g)
	}
	return in
}

// TestFromBundleGPU: the bundle's GPU reports, each rank's node and
// local rank reach the diagnosis.
func TestFromBundleGPU(t *testing.T) {
	l := 3
	b := &evidence.Bundle{World: 2, Ranks: map[int]*evidence.RankEvidence{
		0: {Rank: 0, Alive: true, Node: "node-a:7077", LocalRank: &l},
		1: {Rank: 1, Alive: true}},
		GPU: []gpu.Report{{Host: "node-a", Source: gpu.SourceLive}}}
	in := FromBundle(b, StateOptions{})
	if in.Ranks[0].LocalRank != 3 || in.Ranks[0].Node != "node-a:7077" || in.Ranks[1].LocalRank != -1 || len(in.GPU) != 1 || in.GPU[0].Host != "node-a" {
		t.Errorf("%+v %+v %+v", in.Ranks[0], in.Ranks[1], in.GPU)
	}
}
