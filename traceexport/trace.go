// Package traceexport writes the collectives the ranks recorded (the
// python.comm_collective rings, or Flight Recorder dumps) as a Chrome
// trace event file that ui.perfetto.dev and chrome://tracing open: one
// track per rank, one slice per collective with its group, sequence number
// and sizes, the calls still running drawn to the moment they were read,
// the ranks that never entered a collective its group waits in marked.
// It has no MCP imports: `probing-mcp export --trace` is its door.
package traceexport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Call is one collective (or point-to-point call) one rank made, from
// whichever source recorded it.
type Call struct {
	Rank int
	// Host is the rank's node ("" unknown): one trace process per node.
	Host string
	// StartUS is when the call was entered (µs since the Unix epoch);
	// DurUS how long it took, negative while it had not returned.
	StartUS int64
	DurUS   float64
	Op      string
	// Group names the process group as its source does (a Flight
	// Recorder's name and description, or the ring's member list);
	// Members is its global ranks as a rank set, "" unknown.
	Group   string
	Members string
	// Seq is the call's number on its group (the ring's group_seq, the
	// Flight Recorder's collective_seq_id), 0 unknown.
	Seq   int64
	Shape string
	Dtype string
	Bytes int64
	// Peer is the other rank of a point-to-point call, -1 none.
	Peer int
	P2P  bool
	// State is the Flight Recorder's (scheduled, started, completed); ""
	// for the rings, whose open calls have DurUS < 0.
	State  string
	Source string // "comm_rings" or "flight_recorder"
}

// Open is whether the call had not returned when its source last saw it.
func (c Call) Open() bool { return c.DurUS < 0 }

// Bounds of what one trace holds.
const (
	// DefaultMaxEvents keeps a trace near 15 MB of JSON, which
	// ui.perfetto.dev opens in seconds.
	DefaultMaxEvents = 50000
	// MaxEvents is the most --max-events accepts (~300 MB of JSON, the
	// most a browser tab loads).
	MaxEvents = 1000000
	// MaxRanks bounds the tracks of one trace: a selection of more ranks
	// is an error (narrow it with --ranks).
	MaxRanks = 16384
	// textBytes bounds every name and value that came from the job.
	textBytes = jobtext.Name
)

// Options say what the trace shows and how it was chosen.
type Options struct {
	// Ranks is the selection: one track each, sorted; empty is every
	// rank that has a call.
	Ranks []int
	// Why says how the selection was made (the culprit and its group,
	// --ranks), for the trace's metadata.
	Why string
	// ReadUS is when the calls were read (µs since the epoch): the end
	// drawn for a call still running.
	ReadUS int64
	// SinceUS, when set, is the start of the window asked for.
	SinceUS int64
	// Gone names the ranks whose process has ended, with when (µs; 0
	// when no record says): their open call ends there, "ended inside",
	// rather than at ReadUS.
	Gone map[int]int64
	// MaxEvents bounds the slices and instants (DefaultMaxEvents when 0).
	MaxEvents int
	// Dropped counts calls a reader left out already (its own cap), with
	// DroppedBeforeUS the newest start among them.
	Dropped         int
	DroppedBeforeUS int64
	// DroppedAtLeast: the reader counted only some of those it left out.
	DroppedAtLeast bool
	// Source names where the calls came from, Version the binary.
	Source, Version string
	// Notes are added to the metadata as they are (the caller's words).
	Notes []string
}

// Event is one trace event (the Trace Event Format's fields; ts and dur
// in µs).
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// Metadata is the trace's own account of what it holds and leaves out.
type Metadata struct {
	Tool       string   `json:"tool"`
	Version    string   `json:"version,omitempty"`
	Source     string   `json:"source"`
	Selection  string   `json:"selection"`
	Why        string   `json:"why,omitempty"`
	ReadAt     string   `json:"read_at"`
	Since      string   `json:"since,omitempty"`
	Clock      string   `json:"clock"`
	Slices     int      `json:"slices"`
	StillIn    int      `json:"still_inside"`
	EndedIn    int      `json:"ended_inside"`
	Never      int      `json:"never_entered"`
	Truncated  bool     `json:"truncated"`
	LeftOut    string   `json:"left_out,omitempty"`
	NoCalls    string   `json:"ranks_without_calls,omitempty"`
	ShownRanks int      `json:"ranks_with_calls"`
	Notes      []string `json:"notes,omitempty"`
}

// Trace is a Chrome trace in the JSON Object Format.
type Trace struct {
	TraceEvents     []Event  `json:"traceEvents"`
	DisplayTimeUnit string   `json:"displayTimeUnit"`
	Metadata        Metadata `json:"metadata"`
}

// Summary is what Build put in the trace, for the command's one line.
type Summary struct {
	Slices, StillInside, NeverEntered int
	// EndedInside: open calls of ranks whose process has ended.
	EndedInside int
	// Ranks have a track with calls; NoCalls are the selected ranks
	// without any (not recorded, not reached, or outside the window).
	Ranks   []int
	NoCalls []int
	// Dropped calls were left out by the cap (the oldest), all entered at
	// or before DroppedBeforeUS.
	Dropped         int
	DroppedBeforeUS int64
	// DroppedAtLeast: Dropped is a lower bound.
	DroppedAtLeast bool
	FromUS, ToUS   int64
}

// Truncated is whether the cap left calls out.
func (s Summary) Truncated() bool { return s.Dropped > 0 }

// Build lays calls out as a trace: one process per node, one thread per
// rank of the selection, an X slice per call. A call still running when
// read ends at opt.ReadUS with "still_inside": true (an X event rather
// than a B without its E, which viewers draw differently or not at all).
// The newest opt.MaxEvents calls are kept, the cut said.
func Build(calls []Call, opt Options) (*Trace, Summary) {
	l := newLayout(calls, opt)
	l.slices()
	l.neverEntered()
	sum := &l.sum
	if sum.FromUS > sum.ToUS {
		sum.FromUS, sum.ToUS = opt.ReadUS, opt.ReadUS
	}
	for _, r := range l.ranks {
		if len(l.byRank[r]) == 0 {
			sum.NoCalls = append(sum.NoCalls, r)
		}
	}
	// A rank without calls gets one instant, so its track shows and says
	// why it is empty (at most MaxRanks of them).
	for _, r := range sum.NoCalls {
		l.body = append(l.body, Event{Name: "no call recorded", Cat: "no_calls", Ph: "i", S: "t", TS: float64(sum.FromUS), PID: l.noHostPID, TID: r,
			Args: map[string]any{"why": "no collective of this rank in the " + sourceWords(opt.Source) + " read (in the window asked, on the nodes that answered)"}})
	}
	t := &Trace{DisplayTimeUnit: "ms", TraceEvents: append(l.metaEvents(), l.body...)}
	t.Metadata = metadata(opt, *sum)
	return t, *sum
}

// layout is one trace being laid out.
type layout struct {
	opt    Options
	maxEv  int
	sel    map[int]bool
	kept   []Call         // the calls shown, by rank and start
	byRank map[int][]Call // kept, per rank
	ranks  []int          // the tracks, sorted
	hosts  []string       // the processes, sorted
	hostOf map[int]string
	pidOf  map[string]int
	// noHostPID is the process of the ranks without calls.
	noHostPID int
	body      []Event
	sum       Summary
	// waiting[group, op, seq] is the earliest start among the ranks
	// inside a call that had not returned, for the members that never
	// entered it; waitOrder the keys as found.
	waiting   map[waitKey]int64
	waitOrder []waitKey
}

type waitKey struct {
	group, op string
	seq       int64
}

// newLayout keeps the selected ranks' newest calls within the cap and
// places the ranks on their nodes.
func newLayout(calls []Call, opt Options) *layout {
	l := &layout{opt: opt, maxEv: opt.MaxEvents, sel: map[int]bool{}, byRank: map[int][]Call{}, hostOf: map[int]string{},
		pidOf: map[string]int{}, waiting: map[waitKey]int64{}}
	if l.maxEv <= 0 {
		l.maxEv = DefaultMaxEvents
	}
	for _, r := range opt.Ranks {
		l.sel[r] = true
	}
	for _, c := range calls {
		if len(l.sel) == 0 || l.sel[c.Rank] {
			l.kept = append(l.kept, c)
		}
	}
	// Newest first to cut, then by rank and start to lay out.
	sort.SliceStable(l.kept, func(i, j int) bool { return l.kept[i].StartUS > l.kept[j].StartUS })
	l.sum = Summary{Dropped: opt.Dropped, DroppedBeforeUS: opt.DroppedBeforeUS, DroppedAtLeast: opt.DroppedAtLeast,
		FromUS: math.MaxInt64, ToUS: math.MinInt64}
	if len(l.kept) > l.maxEv {
		l.sum.Dropped += len(l.kept) - l.maxEv
		l.sum.DroppedBeforeUS = max(l.sum.DroppedBeforeUS, l.kept[l.maxEv].StartUS)
		l.kept = l.kept[:l.maxEv]
	}
	sort.SliceStable(l.kept, func(i, j int) bool {
		if l.kept[i].Rank != l.kept[j].Rank {
			return l.kept[i].Rank < l.kept[j].Rank
		}
		return l.kept[i].StartUS < l.kept[j].StartUS
	})
	for _, c := range l.kept {
		l.byRank[c.Rank] = append(l.byRank[c.Rank], c)
	}
	l.ranks = slices.Clone(opt.Ranks)
	if len(l.ranks) == 0 {
		for r := range l.byRank {
			l.ranks = append(l.ranks, r)
		}
		slices.Sort(l.ranks)
	}
	// One process per node: a rank's node is its newest call's.
	hostSet := map[string]bool{}
	for r, cs := range l.byRank {
		h := cs[len(cs)-1].Host
		l.hostOf[r] = h
		hostSet[h] = true
	}
	for h := range hostSet {
		l.hosts = append(l.hosts, h)
	}
	slices.Sort(l.hosts)
	for i, h := range l.hosts {
		l.pidOf[h] = i + 1
	}
	l.noHostPID = len(l.hosts) + 1
	return l
}

// pid is a rank's process: its node's, or the one of the ranks without
// calls.
func (l *layout) pid(r int) int {
	if h, ok := l.hostOf[r]; ok {
		return l.pidOf[h]
	}
	return l.noHostPID
}

// slices lays out each rank's calls, an open last call drawn to the read
// time (or to its rank's end), an earlier open one to the next call.
func (l *layout) slices() {
	sum := &l.sum
	for _, r := range l.ranks {
		cs := l.byRank[r]
		if len(cs) == 0 {
			continue
		}
		sum.Ranks = append(sum.Ranks, r)
		pid := l.pid(r)
		for i, c := range cs {
			ev := sliceEvent(c, pid)
			end := float64(c.StartUS) + c.DurUS
			last := i == len(cs)-1
			switch {
			case c.Open() && last:
				end = l.openEnd(c, &ev)
				if g := groupKey(c); g != "" && c.Seq > 0 && !c.P2P {
					k := waitKey{g, c.Op, c.Seq}
					if s, ok := l.waiting[k]; !ok || c.StartUS < s {
						if !ok {
							l.waitOrder = append(l.waitOrder, k)
						}
						l.waiting[k] = c.StartUS
					}
				}
			case c.Open():
				end = float64(cs[i+1].StartUS)
				ev.Args["end_unknown"] = "its " + sourceWords(c.Source) + " never saw it return; drawn to the rank's next call"
			}
			if !last && end > float64(cs[i+1].StartUS) && !c.Open() {
				// Slices on one track must nest: a call that overlaps the
				// next (another thread's, an async launch) is cut there.
				end = float64(cs[i+1].StartUS)
				ev.Args["cut_at_next_call"] = true
			}
			d := math.Round((end-float64(c.StartUS))*1000) / 1000
			ev.Dur = &d
			l.body = append(l.body, ev)
			sum.Slices++
			sum.FromUS, sum.ToUS = min(sum.FromUS, c.StartUS), max(sum.ToUS, int64(math.Ceil(end)))
		}
	}
}

// openEnd is where a rank's last call, not returned, is drawn to: the
// read time while its process lives, its end once it is gone.
func (l *layout) openEnd(c Call, ev *Event) float64 {
	end := float64(max(l.opt.ReadUS, c.StartUS))
	gone, dead := l.opt.Gone[c.Rank]
	switch {
	case dead && gone > 0:
		end = float64(max(gone, c.StartUS))
		ev.Args["drawn_until"] = "the rank's end: its process ended inside the call"
	case dead:
		ev.Args["drawn_until"] = "the read time: its process is gone, its end not recorded"
	default:
		ev.Name += " (still inside)"
		ev.Args["still_inside"] = true
		ev.Args["drawn_until"] = "the read time: it had not returned when its " + sourceWords(c.Source) + " was read"
		l.sum.StillInside++
		return end
	}
	ev.Name += " (ended inside)"
	ev.Args["ended_inside"] = true
	l.sum.EndedInside++
	return end
}

// neverEntered marks each rank of a group others are inside a call of
// that has no call with that number on that group (by its record), at
// the first member's entry.
func (l *layout) neverEntered() {
	members := map[string][]int{}
	for _, k := range l.waitOrder {
		ms, ok := members[k.group]
		if !ok {
			ms = membersOfKey(k.group, l.kept)
			members[k.group] = ms
		}
		for _, m := range ms {
			if !inSel(l.sel, l.byRank, m) || entered(l.byRank[m], k.group, k.seq) {
				continue
			}
			if l.sum.Slices+l.sum.NeverEntered >= l.maxEv {
				return
			}
			args := map[string]any{"seq": k.seq, "op": clip(k.op),
				"why": "others of its group are inside this call and this rank recorded no call with this number on the group"}
			if g, ok := strings.CutPrefix(k.group, "name:"); ok {
				args["group"] = clip(g)
			} else {
				args["group_ranks"] = rankset.ShortTo(k.group, textBytes)
			}
			l.body = append(l.body, Event{Name: "never entered " + clip(k.op) + " #" + strconv.FormatInt(k.seq, 10), Cat: "never_entered",
				Ph: "i", S: "t", TS: float64(l.waiting[k]), PID: l.pid(m), TID: m, Args: args})
			l.sum.NeverEntered++
		}
	}
}

// metaEvents name and order the processes and threads, at the trace's
// start (a ts of 0 could stretch a viewer's timeline back to 1970).
func (l *layout) metaEvents() []Event {
	meta := make([]Event, 0, 2*len(l.hosts)+2*len(l.ranks)+2)
	ts0 := float64(l.sum.FromUS)
	proc := func(pid int, name string) {
		meta = append(meta, Event{Name: "process_name", Ph: "M", TS: ts0, PID: pid, Args: map[string]any{"name": name}},
			Event{Name: "process_sort_index", Ph: "M", TS: ts0, PID: pid, Args: map[string]any{"sort_index": pid}})
	}
	for _, h := range l.hosts {
		name := "node " + clip(h)
		if h == "" {
			name = "node (host unknown)"
		}
		proc(l.pidOf[h], name)
	}
	if len(l.sum.NoCalls) > 0 {
		proc(l.noHostPID, "ranks without calls")
	}
	for _, r := range l.ranks {
		name := "rank " + strconv.Itoa(r)
		if _, ok := l.byRank[r]; !ok {
			name += " (no call recorded)"
		}
		meta = append(meta, Event{Name: "thread_name", Ph: "M", TS: ts0, PID: l.pid(r), TID: r, Args: map[string]any{"name": name}},
			Event{Name: "thread_sort_index", Ph: "M", TS: ts0, PID: l.pid(r), TID: r, Args: map[string]any{"sort_index": r}})
	}
	return meta
}

func inSel(sel map[int]bool, byRank map[int][]Call, r int) bool {
	if len(sel) > 0 {
		return sel[r]
	}
	_, ok := byRank[r]
	return ok
}

// groupKey names a call's group for matching calls across ranks: its
// members when known, else its name ("name:" then the name).
func groupKey(c Call) string {
	if c.Members != "" {
		return c.Members
	}
	if c.Group != "" {
		return "name:" + c.Group
	}
	return ""
}

// membersOfKey is a group's ranks: its members when known, else the
// ranks with a call on a group of that name.
func membersOfKey(key string, calls []Call) []int {
	if !strings.HasPrefix(key, "name:") {
		rs, _ := rankset.Parse(key)
		return rs
	}
	set := map[int]bool{}
	for _, c := range calls {
		if groupKey(c) == key {
			set[c.Rank] = true
		}
	}
	out := make([]int, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// entered is whether a rank's calls include number seq on the group.
func entered(cs []Call, group string, seq int64) bool {
	for i := len(cs) - 1; i >= 0; i-- {
		if groupKey(cs[i]) == group && !cs[i].P2P && cs[i].Seq >= seq {
			return true
		}
	}
	return false
}

func sliceEvent(c Call, pid int) Event {
	cat := "collective"
	if c.P2P {
		cat = "p2p"
	}
	args := map[string]any{"op": clip(c.Op), "source": c.Source, "start_us": c.StartUS}
	if c.Group != "" {
		args["group"] = clip(c.Group)
	}
	if c.Members != "" {
		args["group_ranks"] = rankset.ShortTo(c.Members, textBytes)
	}
	if c.Seq > 0 {
		args["seq"] = c.Seq
	}
	if c.Shape != "" {
		args["shape"] = clip(c.Shape)
	}
	if c.Dtype != "" {
		args["dtype"] = clip(c.Dtype)
	}
	if c.Bytes > 0 {
		args["bytes"] = c.Bytes
	}
	if c.Peer >= 0 {
		args["peer"] = c.Peer
	}
	if c.State != "" {
		args["state"] = clip(c.State)
	}
	if !c.Open() {
		args["duration_ms"] = math.Round(c.DurUS) / 1000
	}
	name := clip(c.Op)
	if name == "" {
		name = "(unnamed call)"
	}
	if c.Seq > 0 {
		name += " #" + strconv.FormatInt(c.Seq, 10)
	}
	return Event{Name: name, Cat: cat, Ph: "X", TS: float64(c.StartUS), PID: pid, TID: c.Rank, Args: args}
}

// clip bounds job text: valid UTF-8, invisible runes escaped, at most
// textBytes (the JSON encoder escapes the rest, < and > included).
func clip(s string) string { return jobtext.Clip(s, textBytes) }

func sourceWords(src string) string {
	switch src {
	case "flight_recorder":
		return "Flight Recorder dump"
	case "", "comm_rings":
		return "ring (python.comm_collective)"
	}
	return src
}

func metadata(opt Options, sum Summary) Metadata {
	m := Metadata{Tool: "probing-mcp export --trace", Version: opt.Version, Source: sourceWords(opt.Source), Why: opt.Why,
		ReadAt: time.UnixMicro(opt.ReadUS).UTC().Format(time.RFC3339Nano),
		Clock:  "ts is µs since the Unix epoch, by each node's own clock (nodes' clocks may differ)",
		Slices: sum.Slices, StillIn: sum.StillInside, EndedIn: sum.EndedInside, Never: sum.NeverEntered,
		Truncated: sum.Truncated(), ShownRanks: len(sum.Ranks), Notes: opt.Notes}
	m.Selection = "every rank with a call"
	if len(opt.Ranks) > 0 {
		m.Selection = "ranks " + rankset.FormatMax(opt.Ranks, 4096)
	}
	if opt.SinceUS > 0 {
		m.Since = time.UnixMicro(opt.SinceUS).UTC().Format(time.RFC3339Nano)
	}
	if sum.Truncated() {
		n := strconv.Itoa(sum.Dropped)
		if sum.DroppedAtLeast {
			n = "at least " + n
		}
		m.LeftOut = fmt.Sprintf("%s older call(s), all entered at or before %s: the trace keeps the newest %d events (raise --max-events or narrow --ranks/--since)",
			n, time.UnixMicro(sum.DroppedBeforeUS).UTC().Format(time.RFC3339Nano), maxOr(opt.MaxEvents))
	}
	if len(sum.NoCalls) > 0 {
		m.NoCalls = rankset.FormatMax(sum.NoCalls, 4096)
	}
	return m
}

func maxOr(n int) int {
	if n <= 0 {
		return DefaultMaxEvents
	}
	return n
}

// Write writes the trace as JSON, HTML characters escaped (a name with a
// script tag stays text wherever the file is shown).
func (t *Trace) Write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	// displayTimeUnit first (Perfetto reads it from the first chunk
	// only), the events next, the metadata last: Perfetto's importer has
	// stopped at a key it did not know, or after the metadata, in some
	// versions. One event a line: a person can grep the file.
	if _, err := io.WriteString(bw, "{\"displayTimeUnit\":\"ms\",\n\"traceEvents\":["); err != nil {
		return err
	}
	for i, e := range t.TraceEvents {
		sep := ",\n"
		if i == 0 {
			sep = "\n"
		}
		if _, err := io.WriteString(bw, sep); err != nil {
			return err
		}
		if err := writeJSON(bw, e); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(bw, "\n],\n\"metadata\":"); err != nil {
		return err
	}
	if err := writeJSON(bw, t.Metadata); err != nil {
		return err
	}
	if _, err := io.WriteString(bw, "}\n"); err != nil {
		return err
	}
	return bw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v) // escapes <, > and & as \u003c, \u003e, \u0026
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Words is the command's one line: what the trace shows and leaves out.
func (s Summary) Words() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d collective slice(s) on %d rank track(s)", s.Slices, len(s.Ranks))
	if len(s.Ranks) > 0 {
		fmt.Fprintf(&b, " (ranks %s)", rankset.Short(rankset.Format(s.Ranks)))
	}
	if s.StillInside > 0 {
		fmt.Fprintf(&b, ", %d still inside", s.StillInside)
	}
	if s.EndedInside > 0 {
		fmt.Fprintf(&b, ", %d ended inside (the rank's process is gone)", s.EndedInside)
	}
	if s.NeverEntered > 0 {
		fmt.Fprintf(&b, ", %d never-entered mark(s)", s.NeverEntered)
	}
	if s.Slices > 0 {
		fmt.Fprintf(&b, ", from %s to %s", time.UnixMicro(s.FromUS).UTC().Format("15:04:05.000"), time.UnixMicro(s.ToUS).UTC().Format("15:04:05.000 UTC"))
	}
	if len(s.NoCalls) > 0 {
		fmt.Fprintf(&b, "; no call recorded for %s", rankWords(s.NoCalls))
	}
	return b.String()
}

func rankWords(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	return "ranks " + rankset.Short(rankset.Format(rs))
}
