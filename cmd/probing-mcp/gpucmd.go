package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

var gpuDoc = cmdDoc{Name: "gpu", Synopsis: "[flags]",
	About: `Show what this node's GPUs are doing, as the gpu_status tool does: NVML sampled once now (every
GPU's utilisation, memory, power and limit, temperature, clocks and what holds them down, ECC, remapped
rows, NVLink errors, MIG, the compute processes and their ranks) with the kernel log's Xid events, and
each GPU's signature (spinning: pinned at full utilisation at low power, an NCCL kernel waiting on a
peer; idle; busy; lost; error). Without NVML (no driver, no library, PROBING_GPU=0) or with --rings it
shows the newest round a sampler (the node daemon) left in the data dir's gpu.* rings: a dead job's
last minutes. A node without GPUs is a state, not a failure.`,
	Note: "Exit status: 0 when the state was shown (GPUs or none); 1 with --require and no GPU sampled; 2 on bad usage.",
	Examples: []string{
		"probing-mcp gpu",
		"probing-mcp gpu --devices",
		"probing-mcp gpu --json > gpus.json",
		"probing-mcp gpu --rings --data-dir /dev/shm/probing",
	}}

func gpuCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(gpuDoc)
	asJSON := fs.Bool("json", false, "print the whole report as JSON (every field, every missing field's reason)")
	devices := fs.Bool("devices", false, "print every field of every GPU instead of the summary")
	rings := fs.Bool("rings", false, "show the newest round in the data dir's gpu.* rings instead of sampling now")
	require := fs.Bool("require", false, "exit 1 unless at least one GPU was sampled (for scripts and checks)")
	dataDir := fs.String("data-dir", "", "read the rings under `DIR` (default $PROBING_DATA_DIR, else /dev/shm/probing or $TMPDIR/probing)")
	timeout := fs.Duration("timeout", 10*time.Second, "give NVML at most `DURATION` (a wedged GPU answers late or never)")
	pos, code, done := parseCommand(fs, gpuDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp gpu: unexpected argument %q (it takes flags only; probing-mcp gpu --help)\n", pos[0])
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "probing-mcp gpu: --timeout %s: want a positive duration, e.g. 10s\n", *timeout)
		return 2
	}
	cfg, err := gpu.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp gpu: %v\n", err)
		return 2
	}
	dir := *dataDir
	if dir == "" {
		dir = storage.DataDir(os.Getenv)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	host := nodeHost()
	var live evidence.GPUSource
	switch {
	case *rings:
	case !cfg.On:
		live = fixedReport{Source: gpu.SourceNone, Status: gpu.Status{State: gpu.StateNotSampled, Reason: gpu.EnvGPU + "=0: NVML not asked"}}
	default:
		live = fixedReport(gpu.SampleOnce(ctx, cfg.Library, host, *timeout))
	}
	var e *sqlengine.Engine
	if eng, err := sqlengine.New(sqlengine.Options{DataDir: dir, Timeout: *timeout}); err == nil {
		e = eng
	} else {
		fmt.Fprintf(stderr, "probing-mcp gpu: the data dir's rings are not read: %v\n", err)
	}
	r := evidence.NodeGPU(ctx, live, e, host)
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return 1
		}
	case *devices:
		fmt.Fprintln(stdout, reportHead(r))
		for _, d := range r.Devices {
			fmt.Fprintln(stdout, gpu.DeviceText(d))
		}
		for _, x := range r.Xids {
			fmt.Fprintln(stdout, xidText(x))
		}
		for _, n := range r.Notes {
			fmt.Fprintln(stdout, "note: "+n)
		}
	default:
		fmt.Fprintln(stdout, r.Text(0, time.Now()))
		for _, n := range r.Notes {
			fmt.Fprintln(stdout, "note: "+n)
		}
	}
	if *require && len(r.Devices) == 0 {
		fmt.Fprintf(stderr, "probing-mcp gpu: no GPU sampled (%s: %s)\n", r.Status.State, r.Status.Reason)
		return 1
	}
	return 0
}

type fixedReport gpu.Report

func (f fixedReport) Report() gpu.Report { return gpu.Report(f) }

// reportHead is the first line of --devices: the state, where the
// sample came from and when.
func reportHead(r gpu.Report) string {
	s := fmt.Sprintf("%s: NVML %s", r.Host, r.Status.State)
	if r.Status.Driver != "" {
		s += ", driver " + r.Status.Driver
	}
	if r.Status.Reason != "" {
		s += ": " + r.Status.Reason
	}
	switch r.Source {
	case gpu.SourceRings:
		s += fmt.Sprintf("; from the rings of pid %d, sampled %s ago", r.SamplerPID, time.Since(r.SampledAt).Round(time.Second))
	case gpu.SourceLive:
		s += "; sampled now"
	}
	return s
}

func xidText(x gpu.XidEvent) string {
	when := "time unknown"
	if !x.Time.IsZero() {
		when = x.Time.Format(time.RFC3339)
	}
	what := x.Kind
	if x.Kind == "xid" {
		what = fmt.Sprintf("Xid %d", x.Xid)
	}
	gpuName := "GPU ?"
	if x.GPU >= 0 {
		gpuName = fmt.Sprintf("GPU %d", x.GPU)
	}
	s := fmt.Sprintf("%s %s: %s (%s; %s, from %s)", gpuName, x.PCIBusID, what, x.Meaning, when, x.Source)
	if x.PID > 0 {
		s += fmt.Sprintf(", pid %d %s", x.PID, x.Process)
	}
	return strings.TrimSpace(s)
}

// nodeHost names this node as the job's membership does.
func nodeHost() string { return cluster.HostName(os.Getenv) }
