package gpu

import (
	"context"
	"testing"
)

// BenchmarkRingRound is one sampling round of a DGX A100 (8 GPUs, every
// field, one process each) written into the gpu.* rings: the sampler's
// own cost per period besides NVML's calls.
//
//	go test ./gpu -run '^$' -bench RingRound -benchmem
func BenchmarkRingRound(b *testing.B) {
	l := spinningA100
	n := OpenLib(a100(l))
	snaps, err := n.Sample(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for i := range snaps {
		snaps[i].Processes = []Process{{PID: uint32(1000 + i), UsedMemory: 30 << 30, GPUInstance: -1, Rank: i, LocalRank: i}}
	}
	rep := NewReport("node-a", n.Status(), snaps, nil, 0)
	rings, err := OpenRings(b.TempDir(), "node-a")
	if err != nil {
		b.Fatal(err)
	}
	defer rings.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := rings.Write(Tick{Report: rep}); err != nil {
			b.Fatal(err)
		}
	}
}
