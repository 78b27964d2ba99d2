// Command gendumps writes synthetic Flight Recorder dumps for benchmarks:
//
//	go run ./evals/bench/gendumps -ranks 1024 -entries 2000 -out /tmp/fr1024
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

func main() {
	spec := frsynth.Spec{}
	flag.IntVar(&spec.Ranks, "ranks", 64, "number of ranks")
	flag.IntVar(&spec.Entries, "entries", 2000, "ring entries per rank")
	flag.IntVar(&spec.TP, "tp", 8, "tensor-parallel group size (0: default group only)")
	flag.BoolVar(&spec.Frames, "frames", true, "record Python stacks")
	flag.BoolVar(&spec.CppStack, "cpp-stack", false, "record native frames too, as TORCH_NCCL_TRACE_CPP_STACK=1 does")
	flag.StringVar(&spec.Fault.Kind, "fault", "missing", "injected fault: none, missing, type, size or dtype")
	flag.IntVar(&spec.Fault.Rank, "fault-rank", 11, "rank that misbehaves")
	flag.IntVar(&spec.Fault.Seq, "fault-seq", 1400, "default-group sequence number of the fault")
	out := flag.String("out", "", "output directory (required)")
	flag.Parse()
	if *out == "" || spec.Ranks <= 0 || spec.Entries <= 0 {
		fmt.Fprintln(os.Stderr, "gendumps: -out, a positive -ranks and -entries are required")
		os.Exit(2)
	}
	if spec.Fault.Kind == "none" {
		spec.Fault = frsynth.Fault{}
	}
	if err := frsynth.Write(*out, spec); err != nil {
		fmt.Fprintln(os.Stderr, "gendumps:", err)
		os.Exit(1)
	}
}
