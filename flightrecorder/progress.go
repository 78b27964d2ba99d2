package flightrecorder

import "sync"

// Progress is how far a load or an analysis has come, for a caller that
// shows it: a 16384-rank job takes a minute or more.
type Progress struct {
	// Phase is "decode" (files), "analyse" (process groups), or "replay"
	// (the groups are done; fr_trace's replay is finishing).
	Phase   string
	Done    int   // files decoded or refused; groups analysed
	Total   int   // files to decode; groups to analyse
	Bytes   int64 // bytes of the files decoded so far
	Entries int64 // entries decoded so far
}

// progress serialises a caller's Progress function across workers.
type progress struct {
	mu sync.Mutex
	fn func(Progress)
	p  Progress
}

func newProgress(fn func(Progress), phase string, total int) *progress {
	if fn == nil {
		return nil
	}
	return &progress{fn: fn, p: Progress{Phase: phase, Total: total}}
}

// add counts done items and reports; a nil progress does nothing.
func (p *progress) add(done int, bytes, entries int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Done += done
	p.p.Bytes += bytes
	p.p.Entries += entries
	p.fn(p.p)
}

// phase reports a new phase with nothing done yet.
func (p *progress) phase(name string, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p = Progress{Phase: name, Total: total}
	p.fn(p.p)
}
