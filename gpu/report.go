package gpu

import (
	"time"
)

// Report is one node's GPUs as a diagnosis or a person reads them: the
// NVML state, the newest snapshot of every device, the Xid events known,
// and notes on what could not be read.
type Report struct {
	Host   string `json:"host,omitempty"`
	Status Status `json:"status"`
	// Devices are the newest snapshots, in index order; each carries its
	// signature (Classify) against Xids.
	Devices []DeviceState `json:"devices,omitempty"`
	// Xids are the events known for this node, oldest first (the kernel
	// log's from before the sampler started, then NVML's); XidsDropped
	// older ones were not kept.
	Xids        []XidEvent `json:"xids,omitempty"`
	XidsDropped int        `json:"xids_dropped,omitempty"`
	Notes       []string   `json:"notes,omitempty"`
	// Source is where this came from: SourceLive (this process samples),
	// SourceRings (another process's samples, read from the data dir),
	// SourceNone (nothing sampled; Status says why).
	Source string `json:"source"`
	// SampledAt is when Devices were sampled; IntervalMS the sampler's
	// period (0: a one-off sample).
	SampledAt  time.Time `json:"sampled_at,omitzero"`
	IntervalMS int       `json:"interval_ms,omitempty"`
	// SamplerPID is the process that sampled (the node daemon, or serve).
	SamplerPID int `json:"sampler_pid,omitempty"`
}

// DeviceState is one GPU's snapshot with its signature.
type DeviceState struct {
	Snapshot
	Signature Signature `json:"signature"`
	// Why is the signature's reason in words.
	Why string `json:"signature_why,omitempty"`
}

// Where a Report came from.
const (
	SourceLive  = "live"
	SourceRings = "rings"
	SourceNone  = "none"
)

// NewReport classifies snaps against xids and assigns bus-only events to
// their GPU.
func NewReport(host string, st Status, snaps []Snapshot, xids []XidEvent, dropped int) Report {
	xids = append([]XidEvent(nil), xids...)
	AssignGPUs(xids, snaps)
	r := Report{Host: host, Status: st, Xids: xids, XidsDropped: dropped}
	for _, s := range snaps {
		sig, why := Classify(s, xids)
		r.Devices = append(r.Devices, DeviceState{Snapshot: s, Signature: sig, Why: why})
		if s.Time.After(r.SampledAt) {
			r.SampledAt = s.Time
		}
	}
	return r
}

// Snapshots are the devices' snapshots without their signatures.
func (r Report) Snapshots() []Snapshot {
	out := make([]Snapshot, len(r.Devices))
	for i, d := range r.Devices {
		out[i] = d.Snapshot
	}
	return out
}

// Text is the report for an LLM, within limit bytes (Summarize), with how
// old the sample is.
func (r Report) Text(limit int, now time.Time) string {
	head := ""
	if r.Host != "" {
		head = r.Host + ": "
	}
	switch {
	case r.Source == SourceNone || len(r.Devices) == 0 && r.Status.State != StateOK:
		return head + Summarize(r.Status, nil, r.Xids, limit)
	case r.Stale(now) != "":
		head += r.Stale(now) + ": "
	}
	return head + Summarize(r.Status, r.Snapshots(), r.Xids, limit)
}

// Stale says the sample's age when its sampler seems to have stopped
// (more than two periods, at least 2 s, without a newer one); "" else.
func (r Report) Stale(now time.Time) string {
	if r.SampledAt.IsZero() {
		return ""
	}
	age := now.Sub(r.SampledAt).Round(100 * time.Millisecond)
	if age > 2*time.Duration(max(r.IntervalMS, 1000))*time.Millisecond {
		return "sampled " + age.String() + " ago (the sampler is not running now)"
	}
	return ""
}
