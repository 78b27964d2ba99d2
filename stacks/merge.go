package stacks

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Defaults of MergeOptions.
const (
	DefaultMaxGroups  = 10
	DefaultMaxFrames  = 30
	DefaultMaxMembers = 16
	// outerFramesKept: a cut stack keeps this many outermost frames (the
	// script and the training loop) besides the innermost ones.
	outerFramesKept = 3
	maxFailures     = 32
	summaryParts    = 4
)

// RoleMain is the role of every process's main thread.
const RoleMain = "main thread"

// Rankless ends the role of a thread of a process without a rank when
// ranks are merged with it.
const Rankless = ", process without a rank"

// MergeOptions bound Merge's output; zero values take the defaults.
type MergeOptions struct {
	MaxGroups  int // groups listed; more are counted in OmittedGroups (default 10)
	MaxFrames  int // frames per stack, innermost kept (default 30)
	MaxMembers int // members listed per group (default 16); Ranks/PIDs always cover all
	// IgnoreLines groups stacks that differ only in line numbers (e.g.
	// ranks running two versions of a file). Lines are kept by default: a
	// different line is a different place.
	IgnoreLines bool
	// IncludeIdle lists idle background threads instead of counting them.
	IncludeIdle bool
}

// Member is one thread of a group.
type Member struct {
	PID      int    `json:"pid"`
	Rank     int    `json:"rank"`
	Host     string `json:"host,omitempty"`
	Thread   string `json:"thread,omitempty"` // the name as captured
	ID       uint64 `json:"thread_id,omitempty"`
	NativeID int    `json:"native_id,omitempty"`
	State    string `json:"state,omitempty"`
	WChan    string `json:"wchan,omitempty"`
}

// Group is the threads, across processes, that share one stack and role.
type Group struct {
	// Role is what the threads are for, so that groups compare like with
	// like: RoleMain; "thread <entry function> (<file>)" for threads started
	// by threading (whole stacks); else "thread <normalised name>"; else
	// "thread in <outermost known function> (<file>)"; else "thread without
	// Python frames".
	Role string `json:"role"`
	// Outlier: an odd one out among the groups of its role (see Merge).
	Outlier bool `json:"outlier"`
	// Idle: the stack ends in a standard-library wait (IsIdle).
	Idle      bool   `json:"idle,omitempty"`
	Count     int    `json:"count"`     // threads
	Processes int    `json:"processes"` // distinct processes
	Ranks     string `json:"ranks,omitempty"`
	// PIDs lists the members whose rank is unknown ("host:pid" when the
	// processes span several hosts).
	PIDs  string `json:"pids,omitempty"`
	Where string `json:"where"` // "ranks 0-3, pid 77"
	// Names are the members' thread names, normalised (NormalizeName).
	Names  []string       `json:"names,omitempty"`
	States map[string]int `json:"states,omitempty"` // /proc states, e.g. {"D": 1}
	// Frames are innermost first. A cut stack holds one marker frame with
	// an empty File, "... N frames omitted ...", before the outermost few.
	Frames        []Frame `json:"frames"`
	FramesOmitted int     `json:"frames_omitted,omitempty"`
	// FramesTruncated: the capture itself cut the stack (faulthandler's 100
	// frames), so its outermost frames are unknown.
	FramesTruncated bool     `json:"frames_truncated,omitempty"`
	Members         []Member `json:"members"`
	MembersOmitted  int      `json:"members_omitted,omitempty"`
}

// Failure is a process whose capture failed or is partial.
type Failure struct {
	PID    int    `json:"pid"`
	Rank   int    `json:"rank"`
	Host   string `json:"host,omitempty"`
	Source string `json:"source,omitempty"`
	Err    string `json:"error"`
}

// Merged is the account of many processes' stacks.
type Merged struct {
	// Summary is one line: where the main threads are, the odd ones out
	// marked.
	Summary   string `json:"summary"`
	Processes int    `json:"processes"`
	Ranks     string `json:"ranks,omitempty"`
	Threads   int    `json:"threads"`
	Stacks    int    `json:"distinct_stacks"`
	// Groups: odd ones out first, then the rest, main threads before
	// others; idle groups last and only with IncludeIdle.
	Groups         []Group `json:"groups"`
	OmittedGroups  int     `json:"omitted_groups,omitempty"`
	OmittedThreads int     `json:"omitted_threads,omitempty"`
	// IdleGroups and IdleThreads count the idle groups collapsed away.
	IdleGroups  int `json:"idle_groups,omitempty"`
	IdleThreads int `json:"idle_threads,omitempty"`
	// Truncated: something was left out besides idle threads: groups over
	// MaxGroups, frames over MaxFrames, members over MaxMembers, failures
	// over 32.
	Truncated     bool      `json:"truncated"`
	Failed        []Failure `json:"failed,omitempty"`
	FailedOmitted int       `json:"failed_omitted,omitempty"`
}

// NormalizeName replaces each run of decimal digits in a thread name with
// "N", so that the same thread on different ranks, or a pool's members,
// read as one: "Thread-3 (worker)" and "Thread-7 (worker)" are both
// "Thread-N (worker)", pt_autograd_0 and pt_autograd_1 are pt_autograd_N.
// Names are not part of the grouping key at all (faulthandler gives none
// before 3.14, /proc only 15 characters); they are shown, normalised.
func NormalizeName(name string) string {
	var b strings.Builder
	digits := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteByte(c)
	}
	return b.String()
}

// group accumulates one group.
type group struct {
	key, role  string
	main, idle bool
	frames     []Frame
	lineVaries []bool
	truncated  bool
	members    []Member
	procs      map[int]bool
	names      map[string]bool
	states     map[string]int
	first      int // order of the first member, for a stable sort
	outlier    bool
}

// Merge groups the threads of procs that share a stack and a role.
//
//   - Key: the role, then every frame's file, function and line (not the
//     line with IgnoreLines). A thread without Python frames (from /proc,
//     or "<no Python frame>") is keyed by its normalised name, /proc state
//     and wait channel instead: without frames that is the only "where".
//   - Odd ones out: within a role, a group whose count is at most half
//     the role's largest group's is an outlier (3 ranks in all_reduce, 1
//     in a data loader: the 1). Near-even splits (4 and 4, 6 and 5) flag
//     nothing: neither side is odd.
//   - Order: outliers first (main threads, then by count, smallest
//     first), then the others (main threads, then by count, largest
//     first), then idle groups; ties by the first member's rank, host and
//     pid, then by key, so the output is deterministic.
//   - Idle: a non-main, non-outlier group whose stack IsIdle, or that has
//     no frame and is not running (R) or in uninterruptible sleep (D), is
//     collapsed into IdleGroups/IdleThreads unless IncludeIdle.
func Merge(procs []Process, opt MergeOptions) Merged {
	opt.MaxGroups = cmp.Or(opt.MaxGroups, DefaultMaxGroups)
	opt.MaxFrames = cmp.Or(opt.MaxFrames, DefaultMaxFrames)
	opt.MaxMembers = cmp.Or(opt.MaxMembers, DefaultMaxMembers)

	order := make([]int, len(procs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpProc(&procs[a], &procs[b]) })
	hosts := map[string]bool{}
	for i := range procs {
		hosts[procs[i].Host] = true
	}
	multiHost := len(hosts) > 1

	// A process without a rank (the torchrun launcher, a helper the job
	// started) is not one of the ranks: compared with them it would always
	// look like an odd one out. Its threads get roles of their own.
	ranked := false
	for i := range procs {
		ranked = ranked || procs[i].Rank >= 0
	}

	m := Merged{Groups: []Group{}}
	byKey := map[string]*group{}
	var groups []*group
	var ranks []int
	seq := 0
	for pi, idx := range order {
		p := &procs[idx]
		m.Processes++
		if p.Rank >= 0 {
			ranks = append(ranks, p.Rank)
		}
		if p.Err != "" {
			if len(m.Failed) < maxFailures {
				m.Failed = append(m.Failed, Failure{PID: p.PID, Rank: p.Rank, Host: jobtext.Clip(p.Host, jobtext.Name), Source: jobtext.Clip(p.Source, jobtext.Name), Err: jobtext.Clip(p.Err, 1<<10)})
			} else {
				m.FailedOmitted++
				m.Truncated = true
			}
		}
		for _, ti := range threadOrder(p.Threads) {
			t := &p.Threads[ti]
			m.Threads++
			role := roleOf(t)
			if ranked && p.Rank < 0 {
				role += Rankless
			}
			key := keyOf(role, t, opt.IgnoreLines)
			g := byKey[key]
			if g == nil {
				g = &group{key: key, role: role, main: t.IsMain, frames: t.Frames, truncated: t.FramesTruncated,
					procs: map[int]bool{}, names: map[string]bool{}, states: map[string]int{}, first: seq}
				if opt.IgnoreLines {
					g.lineVaries = make([]bool, len(t.Frames))
				}
				byKey[key] = g
				groups = append(groups, g)
			} else if opt.IgnoreLines {
				for i, f := range t.Frames {
					if i < len(g.frames) && f.Line != g.frames[i].Line {
						g.lineVaries[i] = true
					}
				}
			}
			seq++
			g.truncated = g.truncated || t.FramesTruncated
			g.procs[pi] = true
			if n := NormalizeName(t.Name); n != "" {
				g.names[n] = true
			}
			if t.State != "" {
				g.states[t.State]++
			}
			g.members = append(g.members, Member{PID: p.PID, Rank: p.Rank, Host: p.Host, Thread: t.Name,
				ID: t.ID, NativeID: t.NativeID, State: t.State, WChan: t.WChan})
		}
	}
	m.Ranks = rankset.Format(ranks)
	m.Stacks = len(groups)

	// Odd ones out, per role.
	largest := map[string]int{}
	for _, g := range groups {
		largest[g.role] = max(largest[g.role], len(g.members))
	}
	for _, g := range groups {
		n, top := len(g.members), largest[g.role]
		g.outlier = n < top && 2*n <= top
		g.idle = !g.main && !g.outlier && collapsible(g)
	}
	slices.SortFunc(groups, cmpGroup)

	for _, g := range groups {
		if g.idle && !opt.IncludeIdle {
			m.IdleGroups++
			m.IdleThreads += len(g.members)
			continue
		}
		if len(m.Groups) >= opt.MaxGroups {
			m.OmittedGroups++
			m.OmittedThreads += len(g.members)
			m.Truncated = true
			continue
		}
		out := g.render(opt, multiHost)
		m.Truncated = m.Truncated || out.FramesOmitted > 0 || out.MembersOmitted > 0
		m.Groups = append(m.Groups, out)
	}
	m.Summary = summarize(groups, &m, multiHost)
	return m
}

// threadOrder sorts a process's threads, main first, then by name and
// ids, so that the output does not depend on the order a source lists
// them in.
func threadOrder(ts []Thread) []int {
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		a, b := &ts[i], &ts[j]
		if a.IsMain != b.IsMain {
			if a.IsMain {
				return -1
			}
			return 1
		}
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.NativeID, b.NativeID), cmp.Compare(a.ID, b.ID))
	})
	return order
}

func cmpProc(a, b *Process) int {
	ua, ub := a.Rank < 0, b.Rank < 0
	if ua != ub {
		if ua {
			return 1
		}
		return -1
	}
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), strings.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID))
}

func category(g *group) int {
	switch {
	case g.outlier:
		return 0
	case g.idle:
		return 2
	}
	return 1
}

func cmpGroup(a, b *group) int {
	if c := cmp.Compare(category(a), category(b)); c != 0 {
		return c
	}
	if a.main != b.main {
		if a.main {
			return -1
		}
		return 1
	}
	n := cmp.Compare(len(b.members), len(a.members)) // largest first
	if a.outlier {
		n = -n // the rarest first
	}
	return cmp.Or(n, strings.Compare(a.role, b.role), cmp.Compare(a.first, b.first), strings.Compare(a.key, b.key))
}

// collapsible: nothing to look at in the group's stack.
func collapsible(g *group) bool {
	if len(g.frames) > 0 {
		return IsIdle(g.frames)
	}
	return g.states["R"] == 0 && g.states["D"] == 0
}

// roleOf says what a thread is for; see Group.Role.
func roleOf(t *Thread) string {
	if t.IsMain {
		return RoleMain
	}
	if e, ok := entryFrame(t); ok {
		return "thread " + quoteFunc(e.Function) + " (" + quoteFile(path.Base(e.File)) + ")"
	}
	if n := NormalizeName(t.Name); n != "" {
		return "thread " + jobtext.Quote(n, jobtext.Name)
	}
	if len(t.Frames) == 0 {
		return "thread without Python frames"
	}
	// A cut stack, or a thread not started by threading: its outermost
	// known frame.
	o := t.Frames[len(t.Frames)-1]
	return "thread in " + quoteFunc(o.Function) + " (" + quoteFile(path.Base(o.File)) + ")"
}

// entryFrame is the function a threading.Thread was started with: the
// first frame inside threading's _bootstrap, _bootstrap_inner and
// Thread.run. It needs the whole stack.
func entryFrame(t *Thread) (Frame, bool) {
	fr := t.Frames
	if t.FramesTruncated || len(fr) == 0 {
		return Frame{}, false
	}
	i := len(fr) - 1
	if !hasPathSuffix(fr[i].File, "threading.py") || fr[i].Function != "_bootstrap" {
		return Frame{}, false
	}
	for i > 0 && hasPathSuffix(fr[i].File, "threading.py") && (fr[i].Function == "_bootstrap" || fr[i].Function == "_bootstrap_inner") {
		i--
	}
	// Thread.run calls the target; a subclass's own run is in its file.
	if i > 0 && hasPathSuffix(fr[i].File, "threading.py") && fr[i].Function == "run" && !hasPathSuffix(fr[i-1].File, "threading.py") {
		i--
	}
	return fr[i], true
}

func keyOf(role string, t *Thread, ignoreLines bool) string {
	var b strings.Builder
	b.WriteString(role)
	if len(t.Frames) == 0 {
		fmt.Fprintf(&b, "\x01%s\x00%s\x00%s", NormalizeName(t.Name), t.State, t.WChan)
		return b.String()
	}
	for _, f := range t.Frames {
		b.WriteByte('\x02')
		b.WriteString(f.File)
		b.WriteByte(0)
		b.WriteString(f.Function)
		if !ignoreLines {
			b.WriteByte(0)
			b.WriteString(strconv.Itoa(f.Line))
		}
	}
	if t.FramesTruncated {
		b.WriteString("\x03")
	}
	return b.String()
}

func (g *group) render(opt MergeOptions, multiHost bool) Group {
	out := Group{Role: g.role, Outlier: g.outlier, Idle: g.idle, Count: len(g.members), Processes: len(g.procs),
		FramesTruncated: g.truncated}
	out.Ranks, out.PIDs, out.Where = where(g.members, multiHost)
	for n := range g.names {
		out.Names = append(out.Names, jobtext.Clip(n, jobtext.Name))
	}
	slices.Sort(out.Names)
	if len(g.states) > 0 {
		out.States = make(map[string]int, len(g.states))
		for s, n := range g.states {
			out.States[jobtext.Clip(s, 16)] += n // a /proc state is a letter; a node may send more
		}
	}
	frames := slices.Clone(g.frames)
	for i, v := range g.lineVaries {
		if v {
			frames[i].Line = 0 // the members disagree
		}
	}
	out.Frames, out.FramesOmitted = elide(frames, opt.MaxFrames)
	out.Frames = boundFrames(out.Frames)
	out.Members = g.members
	if len(out.Members) > opt.MaxMembers {
		out.MembersOmitted = len(out.Members) - opt.MaxMembers
		out.Members = out.Members[:opt.MaxMembers:opt.MaxMembers]
	}
	out.Members = slices.Clone(out.Members)
	for i := range out.Members {
		out.Members[i].Thread = jobtext.Clip(out.Members[i].Thread, jobtext.Name)
		out.Members[i].Host = jobtext.Clip(out.Members[i].Host, jobtext.Name)
		out.Members[i].WChan = jobtext.Clip(out.Members[i].WChan, jobtext.Name)
		out.Members[i].State = jobtext.Clip(out.Members[i].State, 16)
	}
	return out
}

// elide keeps the innermost frames (where the thread is) and the
// outermost few (which script, which loop), with a marker between.
func elide(fr []Frame, limit int) ([]Frame, int) {
	if fr == nil {
		fr = []Frame{}
	}
	if len(fr) <= limit {
		return fr, 0
	}
	outer := min(outerFramesKept, limit/4)
	inner := limit - outer
	omitted := len(fr) - limit
	out := make([]Frame, 0, limit+1)
	out = append(out, fr[:inner]...)
	word := "frames"
	if omitted == 1 {
		word = "frame"
	}
	out = append(out, Frame{Function: fmt.Sprintf("... %d %s omitted ...", omitted, word)})
	out = append(out, fr[len(fr)-outer:]...)
	return out, omitted
}

// where says which processes: rank ranges for ranked members, pids for
// the others.
func where(members []Member, multiHost bool) (ranks, pids, text string) {
	var rs []int
	var ps, qs []string // qs: the text's, the host quoted
	seen := map[string]bool{}
	for _, mb := range members {
		if mb.Rank >= 0 {
			rs = append(rs, mb.Rank)
			continue
		}
		p, q := strconv.Itoa(mb.PID), strconv.Itoa(mb.PID)
		if multiHost {
			p = jobtext.Clip(mb.Host, jobtext.Name) + ":" + p
			q = jobtext.Quote(mb.Host, jobtext.Name) + ":" + q
		}
		if !seen[p] {
			seen[p] = true
			ps, qs = append(ps, p), append(qs, q)
		}
	}
	ranks = rankset.Format(rs)
	pids = strings.Join(ps, ",")
	var parts []string
	if ranks != "" {
		parts = append(parts, rankWords(ranks))
	}
	if len(ps) == 1 {
		parts = append(parts, "pid "+qs[0])
	} else if len(ps) > 1 {
		parts = append(parts, "pids "+strings.Join(qs, ","))
	}
	return ranks, pids, strings.Join(parts, ", ")
}

// place is "in all_reduce (distributed_c10d.py:2050)", or the /proc state
// of a thread without frames.
func place(g *group) string {
	if f, ok := headFrame(g.frames); ok {
		return fmt.Sprintf("in %s (%s:%d)", quoteFunc(f.Function), quoteFile(path.Base(f.File)), f.Line)
	}
	var st []string
	for s, n := range g.states {
		st = append(st, fmt.Sprintf("%s×%d", s, n))
	}
	slices.Sort(st)
	w := ""
	if len(g.members) > 0 && g.members[0].WChan != "" {
		w = ", wchan " + jobtext.Quote(g.members[0].WChan, jobtext.Name)
	}
	if len(st) > 0 {
		return "with no Python frame (state " + strings.Join(st, " ") + w + ")"
	}
	return "with no Python frame"
}

// summarize writes the one-liner: the main threads' groups, majority
// first and odd ones out marked, then other roles' odd ones out.
func summarize(groups []*group, m *Merged, multiHost bool) string {
	if m.Threads == 0 {
		s := fmt.Sprintf("no threads captured from %d process(es)", m.Processes)
		return s + failures(m)
	}
	role := ""
	for _, g := range groups {
		if g.main {
			role = RoleMain
			break
		}
	}
	if role == "" {
		for _, g := range groups {
			if !g.idle {
				role = g.role
				break
			}
		}
	}
	if role == "" {
		return fmt.Sprintf("all %d threads idle (waiting in the standard library)", m.Threads) + failures(m)
	}
	var mine []*group
	for _, g := range groups {
		if g.role == role {
			mine = append(mine, g)
		}
	}
	// Majority first, largest first; then odd ones out, rarest first.
	slices.SortStableFunc(mine, func(a, b *group) int {
		if a.outlier != b.outlier {
			if a.outlier {
				return 1
			}
			return -1
		}
		if a.outlier {
			return cmp.Compare(len(a.members), len(b.members))
		}
		return cmp.Compare(len(b.members), len(a.members))
	})
	var parts []string
	for i, g := range mine {
		if i == summaryParts {
			parts = append(parts, fmt.Sprintf("%d more stack(s)", len(mine)-i))
			break
		}
		_, _, w := where(g.members, multiHost)
		s := w + " " + place(g)
		if g.outlier {
			s += " ← odd one out"
		}
		parts = append(parts, s)
	}
	s := role + ": " + strings.Join(parts, "; ")
	others := 0
	for _, g := range groups {
		if g.outlier && g.role != role {
			if others == 2 {
				s += " | more odd ones out below"
				break
			}
			_, _, w := where(g.members, multiHost)
			s += " | " + g.role + ": " + w + " " + place(g) + " ← odd one out"
			others++
		}
	}
	// Processes without a rank are not compared with the ranks, but a main
	// thread of one is still said, so that nothing is hidden.
	for _, g := range groups {
		if g.main && g.role == RoleMain+Rankless {
			_, _, w := where(g.members, multiHost)
			s += " | without a rank: " + w + " " + place(g)
			break
		}
	}
	return s + failures(m)
}

func failures(m *Merged) string {
	n := len(m.Failed) + m.FailedOmitted
	if n == 0 {
		return ""
	}
	var rs []int
	var ps []string
	for _, f := range m.Failed {
		if f.Rank >= 0 {
			rs = append(rs, f.Rank)
		} else {
			ps = append(ps, strconv.Itoa(f.PID))
		}
	}
	var who []string
	if r := rankset.Format(rs); r != "" {
		who = append(who, rankWords(r))
	}
	if len(ps) == 1 {
		who = append(who, "pid "+ps[0])
	} else if len(ps) > 1 {
		who = append(who, "pids "+strings.Join(ps, ","))
	}
	return fmt.Sprintf("; %d capture(s) failed or partial (%s)", n, strings.Join(who, ", "))
}

// rankWords is "rank 3" or "ranks 0-3,7".
func rankWords(ranks string) string {
	if strings.ContainsAny(ranks, ",-") {
		return "ranks " + ranks
	}
	return "rank " + ranks
}
