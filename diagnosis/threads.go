package diagnosis

import (
	"fmt"
	"path"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// threadFinding is what one rank's threads and ending records say about
// why it does not move, whatever the collectives say.
type threadFinding struct {
	Category string
	Evidence []Evidence
	// Thread is the thread whose code is at fault: the hypothesis's where
	// is its innermost user frame.
	Thread *stacks.Thread
	// Strong: the finding rests on a record or on a wait cycle that can
	// only be a hang (a main_thread_exit record, a lock cycle with known
	// owners, a GIL holder /proc shows outside any wait), not on a reading
	// that a busy or slow process could also give.
	Strong          bool
	Confirm, Refute string
}

// threadsOf reads a live rank's threads, most specific first: a main
// thread that is gone, then locks, then the GIL. nil when they say
// nothing (or the rank is dead, or nothing was captured).
func threadsOf(f *RankFacts) *threadFinding {
	if f == nil || !f.Alive {
		return nil
	}
	if tf := mainThreadDead(f); tf != nil {
		return tf
	}
	if tf := deadlock(f); tf != nil {
		return tf
	}
	return gilHeld(f)
}

// mainThreadDead: the process lives, but its main thread is done: the
// agent recorded it (main_thread_exit, written from threading._shutdown
// when non-daemon threads are still running), or recorded the main
// thread's uncaught exception, or the stacks show no main thread, or one
// inside threading._shutdown. What keeps the process alive is its
// non-daemon threads; a training loop that died with its main thread
// leaves its peers waiting in their next collective. The where is the
// function that raised, when the main thread died of an exception, else
// the innermost user frame of the first thread that keeps it alive.
func mainThreadDead(f *RankFacts) *threadFinding {
	var mte, exc *procfacts.ExitRecord
	if rec := f.Record; rec != nil {
		mte = rec.MainThreadExit
		if x := rec.Exception; x != nil && (x.Thread == nil && x.Hook == "sys.excepthook" || x.Thread != nil && x.Thread.IsMain) {
			exc = x
		}
	}
	inShutdown, absent := false, false
	if f.StackSource == stacks.SourceAgent && len(f.Threads) > 0 {
		absent = true
		for i := range f.Threads {
			if f.Threads[i].IsMain {
				absent = false
				inShutdown = inThreadingShutdown(&f.Threads[i])
			}
		}
	} else if f.Main != nil {
		inShutdown = inThreadingShutdown(f.Main)
	}
	if mte == nil && exc == nil && !inShutdown && !absent {
		return nil
	}
	tf := &threadFinding{Category: CatMainThreadDead, Strong: mte != nil || exc != nil && (inShutdown || absent)}
	how := "ended"
	switch {
	case exc != nil:
		how = "died of " + excWords(exc)
	case mte != nil && mte.Exception != nil:
		how = "died of " + exceptionQuote(mte.Exception.Type, mte.Exception.Message)
	case mte != nil && mte.Outcome == "sys.exit":
		how = "called sys.exit"
	case mte != nil:
		how = "returned"
	}
	when := ""
	if mte != nil && mte.TimeNS > 0 && f.NowNS > mte.TimeNS {
		when = fmt.Sprintf(" %s before this reading", ago(f.NowNS-mte.TimeNS))
	}
	src := "agent"
	if mte == nil && exc == nil {
		src = "stacks"
	}
	tf.Evidence = append(tf.Evidence, Evidence{src, fmt.Sprintf("rank %d's main thread %s%s, yet the process is alive", f.Rank, how, when)})
	// The threads that keep it alive: from the stacks (with where they
	// are), else the record's names.
	var lingering []string
	for i := range f.Threads {
		t := &f.Threads[i]
		if t.IsMain || t.Daemon {
			continue
		}
		lingering = append(lingering, fmt.Sprintf("%s at %s", threadName(t.Name), frameWords(t)))
		if tf.Thread == nil {
			tf.Thread = t
		}
	}
	if len(lingering) == 0 && mte != nil {
		for _, t := range mte.ThreadsAlive {
			lingering = append(lingering, threadName(t.Name))
		}
	}
	switch {
	case len(lingering) > 0:
		tf.Evidence = append(tf.Evidence, Evidence{"stacks", fmt.Sprintf("non-daemon thread(s) keep the process alive: %s", strings.Join(capList(lingering, 6), "; "))})
	default:
		tf.Evidence = append(tf.Evidence, Evidence{"stacks", "which non-daemon threads keep it alive is not known (no stacks of them)"})
	}
	switch {
	case inShutdown:
		tf.Evidence = append(tf.Evidence, Evidence{"stacks", "its main thread waits in threading._shutdown for them to finish"})
	case absent:
		tf.Evidence = append(tf.Evidence, Evidence{"stacks", "its stacks have no main thread"})
	}
	// Where: the line that raised, when the main thread died of an
	// exception; else the thread that keeps the process alive.
	if x := exceptionThread(exc); x != nil {
		tf.Thread = x
	}
	tf.Confirm = fmt.Sprintf("list_processes {\"include_dead\":true} (its ending: the main thread's end) and get_stacks {\"ranks\":\"%d\"}: the lingering threads", f.Rank)
	tf.Refute = "its main thread is alive and running the training loop"
	return tf
}

func inThreadingShutdown(t *stacks.Thread) bool {
	for _, fr := range t.Frames {
		if fr.Function == "_shutdown" && path.Base(fr.File) == "threading.py" {
			return true
		}
	}
	return false
}

// deadlock: threads of the rank blocked entering locks (the agent reads
// which lock each thread's innermost frame enters, and which locks the
// with statements its frames are inside hold; /proc, where known, must
// show the waiting thread asleep on a futex). Three shapes, surest first:
// a cycle of threads each waiting for a lock the next one holds (its
// with statement, or an RLock's owner); two or more threads waiting for
// different held locks whose holders are not all known (a Lock taken
// with acquire() records none); the main thread alone waiting for a held
// lock.
func deadlock(f *RankFacts) *threadFinding {
	var waiting []*stacks.Thread
	byID := map[uint64]*stacks.Thread{}
	heldBy := map[uint64]*stacks.Thread{} // lock id -> the thread whose with statement holds it
	for i := range f.Threads {
		t := &f.Threads[i]
		byID[t.ID] = t
		for _, h := range t.LocksHeld {
			heldBy[h.LockID] = t
		}
		if w := t.LockWait; w != nil && w.Locked && asleep(t) {
			waiting = append(waiting, t)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	holderOf := func(t *stacks.Thread) *stacks.Thread {
		if o := byID[t.LockWait.Owner]; t.LockWait.Owner != 0 && o != nil {
			return o
		}
		if o := heldBy[t.LockWait.LockID]; o != nil && o != t {
			return o
		}
		return nil
	}
	waits := func(t *stacks.Thread) string {
		s := fmt.Sprintf("thread %s waits to acquire %s %s at %s", threadName(t.Name), lockKind(t.LockWait), jobtext.Quote(t.LockWait.Lock, jobtext.Name), frameWords(t))
		if t.WChan != "" {
			s += " (asleep in " + jobtext.Token(t.WChan, jobtext.Name) + ")"
		}
		return s
	}
	holder := func(t *stacks.Thread) string {
		o := holderOf(t)
		switch {
		case o != nil && o.LockWait != nil && o.LockWait.Locked:
			return fmt.Sprintf("it is held by thread %s, itself waiting", threadName(o.Name))
		case o != nil:
			return fmt.Sprintf("it is held by thread %s, at %s", threadName(o.Name), frameWords(o))
		case t.LockWait.Owner != 0:
			return fmt.Sprintf("it is held by thread id %d, not among the captured threads", t.LockWait.Owner)
		}
		return "its holder is not known (no captured thread holds it in a with statement; a threading.Lock taken with acquire() records no holder)"
	}
	// A cycle through the holders: each waiting thread waits for exactly
	// one lock, so following holders from any thread either ends or loops.
	for _, start := range waiting {
		seen := map[*stacks.Thread]int{}
		var chain []*stacks.Thread
		for t := start; t != nil && t.LockWait != nil && t.LockWait.Locked && asleep(t); t = holderOf(t) {
			if k, ok := seen[t]; ok {
				cycle := chain[k:]
				tf := &threadFinding{Category: CatDeadlock, Strong: true, Thread: mainOr(f, cycle)}
				var parts []string
				for _, c := range cycle {
					parts = append(parts, fmt.Sprintf("%s, held by thread %s%s", waits(c), threadName(holderOf(c).Name), heldAs(holderOf(c), c.LockWait)))
				}
				tf.Evidence = []Evidence{{"stacks", fmt.Sprintf("deadlock: %d threads of rank %d wait for each other's locks: %s", len(cycle), f.Rank, strings.Join(parts, "; "))}}
				tf.Confirm = fmt.Sprintf("get_stacks {\"ranks\":\"%d\"} again: the same threads on the same lock lines", f.Rank)
				tf.Refute = "one of these threads moves on (the locks are released)"
				return tf
			}
			seen[t] = len(chain)
			chain = append(chain, t)
		}
	}
	locks := map[uint64]bool{}
	var main *stacks.Thread
	for _, t := range waiting {
		locks[t.LockWait.LockID] = true
		if t.IsMain {
			main = t
		}
	}
	var parts []string
	for _, t := range waiting {
		parts = append(parts, waits(t)+"; "+holder(t))
	}
	switch {
	case len(locks) >= 2:
		tf := &threadFinding{Category: CatDeadlock, Thread: mainOr(f, waiting)}
		tf.Evidence = []Evidence{{"stacks", fmt.Sprintf("deadlock likely: %d threads of rank %d are blocked acquiring %d different held locks: %s", len(waiting), f.Rank, len(locks), strings.Join(capList(parts, 6), "; "))}}
		tf.Confirm = fmt.Sprintf("get_stacks {\"ranks\":\"%d\"} again: the same threads on the same lock lines; eval_python can say which thread took each lock if the code records it", f.Rank)
		tf.Refute = "one of these threads moves on (a lock is released)"
		return tf
	case main != nil:
		tf := &threadFinding{Category: CatDeadlock, Thread: main}
		tf.Evidence = []Evidence{{"stacks", fmt.Sprintf("rank %d's main thread is blocked on a lock: %s", f.Rank, parts[indexOf(waiting, main)])}}
		if o := holderOf(main); o != nil && o.LockWait != nil && o.LockWait.Locked {
			tf.Strong = true
		}
		tf.Confirm = fmt.Sprintf("get_stacks {\"ranks\":\"%d\"} again: the main thread still on the same lock line", f.Rank)
		tf.Refute = "the main thread moves on: the lock was only contended"
		return tf
	}
	return nil
}

// asleep: /proc, when it says anything, shows the thread sleeping on a
// futex (a lock waits there); a running thread is not blocked on a lock.
func asleep(t *stacks.Thread) bool {
	if t.State == "" && t.WChan == "" {
		return true
	}
	if t.State == "R" {
		return false
	}
	return t.WChan == "" || t.WChan == "0" || strings.Contains(t.WChan, "futex")
}

// heldAs names the lock as its holder's with statement does, when that
// name differs from the waiter's (the same lock passed under two names).
func heldAs(holder *stacks.Thread, w *stacks.LockWait) string {
	for _, h := range holder.LocksHeld {
		if h.LockID == w.LockID && h.Lock != w.Lock {
			return " (its " + jobtext.Quote(h.Lock, jobtext.Name) + ")"
		}
	}
	return ""
}

func lockKind(w *stacks.LockWait) string {
	if w.Kind == "rlock" {
		return "RLock"
	}
	return "lock"
}

// mainOr is where a deadlocked rank is stuck: its main thread (in the
// cycle, or waiting on the threads that are, in a join), else the first
// of the deadlocked threads.
func mainOr(f *RankFacts, ts []*stacks.Thread) *stacks.Thread {
	for i := range f.Threads {
		if t := &f.Threads[i]; t.IsMain && len(t.Frames) > 0 {
			return t
		}
	}
	return pickMain(ts)
}

func pickMain(ts []*stacks.Thread) *stacks.Thread {
	for _, t := range ts {
		if t.IsMain {
			return t
		}
	}
	return ts[0]
}

func indexOf(ts []*stacks.Thread, t *stacks.Thread) int {
	for i, x := range ts {
		if x == t {
			return i
		}
	}
	return 0
}

// gilHeld: the agent did not answer in time though the process is alive
// (its server thread needs the GIL), and faulthandler's dump, written
// from a signal handler without the GIL, shows where the threads are.
// The holder is the Python thread /proc shows outside a futex wait (the
// others wait for the GIL on one): running (a C loop) or asleep in
// something else (a C call that sleeps holding the GIL). Only the main
// thread's kernel id is known to faulthandler before 3.14, so a holder
// other than the main thread is named from /proc, not matched to frames.
//
// Without a faulthandler dump (no signal registered, or it did not come),
// the threads are /proc's only: the holder is named by its state, with no
// Python frame, and the reading is weak.
func gilHeld(f *RankFacts) *threadFinding {
	if f.AgentErr != "timeout" || (f.StackSource != stacks.SourceFaulthandler && f.StackSource != stacks.SourceProc) {
		return nil
	}
	var main *stacks.Thread
	osThreads := f.OSThreads
	if f.StackSource == stacks.SourceProc {
		if len(osThreads) == 0 {
			osThreads = f.Threads
		}
	} else {
		for i := range f.Threads {
			if f.Threads[i].IsMain {
				main = &f.Threads[i]
			}
		}
	}
	var osMain *stacks.Thread
	var others []string
	futexes := 0
	for i := range osThreads {
		t := &osThreads[i]
		switch {
		case t.IsMain:
			osMain = t
		case !inFutex(t):
			others = append(others, fmt.Sprintf("tid %d %s (state %s%s)", t.NativeID, threadName(t.Name), jobtext.Token(t.State, 16), wchanWords(t.WChan)))
		default:
			futexes++
		}
	}
	if osMain == nil && main != nil && (main.State != "" || main.WChan != "") {
		osMain = main
	}
	tf := &threadFinding{Category: CatGILHeld}
	tf.Evidence = []Evidence{{"agent", fmt.Sprintf("rank %d's agent did not answer in time while the process is alive: a thread holds the GIL", f.Rank)}}
	// A main thread parked in one of the standard library's blocking
	// waits (Thread.join, Event.wait, queue.get: stacks.IsIdle) waits
	// without the GIL whatever /proc says: the signal that took the
	// faulthandler dump runs on it, so /proc can catch it running.
	mainWaits := main != nil && stacks.IsIdle(main.Frames)
	holdsMain := osMain != nil && !inFutex(osMain) && !mainWaits
	// Asleep in the kernel outside a futex (a socket, a pipe, a poll):
	// Python releases the GIL around most such calls, so /proc contradicts
	// the timeout, which a loaded node explains as well (the agent was
	// asked twice, agent.Stacks). A C call can sleep holding the GIL: then
	// every other thread, the agent's included, waits on a futex for it,
	// which corroborates. Without that, the finding is weak and the
	// contradiction said.
	asleep := holdsMain && osMain.State != "R" && !(len(others) == 0 && futexes > 0)
	switch {
	case asleep:
		tf.Thread = main
		where := ""
		if main != nil {
			where = " in " + frameWords(main)
		}
		tf.Evidence = append(tf.Evidence, Evidence{"proc", fmt.Sprintf("but /proc shows its main thread asleep%s (state %s%s), a wait Python usually makes without the GIL: only a C call that sleeps holding it fits both, and a slow agent on a loaded node explains the timeout as well", where, jobtext.Token(osMain.State, 16), wchanWords(osMain.WChan))})
	case holdsMain && main != nil:
		tf.Strong, tf.Thread = true, main
		tf.Evidence = append(tf.Evidence, Evidence{"stacks", fmt.Sprintf("the GIL-free faulthandler dump shows its main thread in %s, a native call that does not release the GIL; /proc: state %s%s, not waiting for the GIL", frameWords(main), jobtext.Token(osMain.State, 16), wchanWords(osMain.WChan))})
	case holdsMain:
		tf.Evidence = append(tf.Evidence, Evidence{"proc", fmt.Sprintf("no Python frames could be read (no faulthandler dump: %s); /proc: its main thread is in state %s%s, not waiting for the GIL", firstLine(f.StackErr), jobtext.Token(osMain.State, 16), wchanWords(osMain.WChan))})
	case len(others) > 0:
		tf.Evidence = append(tf.Evidence, Evidence{"proc", fmt.Sprintf("its main thread waits on a futex; threads outside a futex wait (one of them holds the GIL; faulthandler's frames cannot be matched to kernel threads): %s", strings.Join(capList(others, 6), "; "))})
		// The likely holder: the one non-main thread whose innermost
		// frame is the job's own code (a call into C from it); threads
		// parked in the standard library's waits are not.
		var cands []*stacks.Thread
		for i := range f.Threads {
			t := &f.Threads[i]
			if !t.IsMain && len(t.Frames) > 0 && userFrame(&stacks.Thread{Frames: t.Frames[:1]}) != nil {
				cands = append(cands, t)
			}
		}
		if len(cands) == 1 {
			tf.Thread = cands[0]
			tf.Evidence = append(tf.Evidence, Evidence{"stacks", fmt.Sprintf("the likely holder: the only other thread in the job's own code, %s", frameWords(cands[0]))})
		} else if main != nil {
			tf.Thread = main
		}
		if main != nil {
			tf.Evidence = append(tf.Evidence, Evidence{"stacks", "its main thread, waiting, is in " + frameWords(main)})
		}
	case main != nil:
		tf.Thread = main
		tf.Evidence = append(tf.Evidence, Evidence{"stacks", "the GIL-free faulthandler dump shows its main thread in " + frameWords(main) + " (no /proc reading says which thread runs)"})
	default:
		return nil
	}
	if futexes > 0 {
		tf.Evidence = append(tf.Evidence, Evidence{"proc", fmt.Sprintf("%d other thread(s) wait on a futex (for the GIL, among others)", futexes)})
	}
	tf.Confirm = fmt.Sprintf("get_stacks {\"ranks\":\"%d\"} twice: the agent still does not answer and faulthandler shows the same frame", f.Rank)
	tf.Refute = "the agent answers on a second try (it was only slow), or the thread's call releases the GIL"
	return tf
}

// inFutex is whether /proc shows t waiting on a futex (for the GIL,
// among others). Its state alone does not say: a thread waiting for the
// GIL wakes every 5 ms to ask for it, so it reads R at times while its
// wchan, read a moment apart, still names the futex (a loaded node made
// the main thread of gil_held_thread, waiting in Thread.start, look like
// the holder).
func inFutex(t *stacks.Thread) bool {
	return strings.Contains(t.WChan, "futex")
}

func wchanWords(w string) string {
	if w == "" || w == "0" {
		return ""
	}
	return ", in " + jobtext.Token(w, jobtext.Name)
}

// exceptionThread is a recorded exception's traceback as a thread, so
// that its innermost user frame can be the hypothesis's where.
func exceptionThread(x *procfacts.ExitRecord) *stacks.Thread {
	if x == nil || len(x.Frames) == 0 {
		return nil
	}
	t := &stacks.Thread{Name: "exception"}
	if x.Thread != nil {
		t.Name, t.IsMain = x.Thread.Name, x.Thread.IsMain
	}
	for _, fr := range x.Frames {
		t.Frames = append(t.Frames, stacks.Frame{File: fr.File, Line: fr.Line, Function: fr.Function})
	}
	return t
}

func excWords(x *procfacts.ExitRecord) string {
	s := exceptionQuote(x.Type, x.Message)
	if len(x.Frames) > 0 {
		fr := x.Frames[0]
		s += fmt.Sprintf(" at %s:%d (%s)", jobtext.QuoteTail(path.Base(fr.File), jobtext.Name), fr.Line, jobtext.Quote(fr.Function, jobtext.Func))
	}
	return s
}

// exceptionQuote is an exception as the job raised it, "Type: message"
// (its first line), quoted: the job wrote both (procfacts.ExceptionText).
func exceptionQuote(typ, msg string) string { return procfacts.ExceptionText(typ, msg) }

// threadName is a thread's name, quoted: the job named it.
func threadName(n string) string { return jobtext.Quote(n, jobtext.Name) }

// firstLine is the first line of a text the job or a node wrote, quoted
// ("…" after it when more lines followed).
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	more := ""
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, more = s[:i], " …"
	}
	return jobtext.Quote(s, jobtext.Message) + more
}

func capList(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(xs[:n:n], fmt.Sprintf("and %d more", len(xs)-n))
}

// refineCPU makes a cpu-side sink the more specific category its threads
// show. The rings already say its peers wait for it; high confidence
// only when the threads' reading is strong too.
func refineCPU(h Hypothesis, s Sink, in Input) Hypothesis {
	f := in.Ranks[s.Ranks[0]]
	tf := threadsOf(f)
	if tf == nil {
		return h
	}
	rings := h.Evidence
	if len(rings) > 2 {
		rings = rings[:2] // the rings' lines; the main thread's line is said again below
	}
	h.Category, h.Confirm, h.Refute, h.whereThread = tf.Category, tf.Confirm, tf.Refute, tf.Thread
	h.Evidence = append(append([]Evidence{}, tf.Evidence...), rings...)
	h.Confidence = Medium
	if tf.Strong {
		h.Confidence = High
	}
	if tf.Thread != nil && tf.Thread.IsMain && inCollective(tf.Thread) {
		if st := in.storyOf(f.Rank); st != nil && st.FR != nil {
			// The recorder has it in a collective the rings do not see:
			// stack and recorder agree, nothing to lower.
			h.Evidence = append(h.Evidence, Evidence{"stacks", "its main thread is inside torch.distributed, in " + st.FR.String() + ", which the rings do not record"})
			return h
		}
		h.Confidence = Low
		h.Evidence = append(h.Evidence, Evidence{"stacks", "but its main thread's stack is inside torch.distributed while the rings say it is in no collective: they disagree"})
	}
	return h
}

// threadHypotheses are the thread findings of live ranks no other
// hypothesis names: a rank nobody is recorded waiting for (no collectives
// recorded, or its peers not in one), or one the rings show inside a
// collective, where the finding contradicts the rings and is weak.
func threadHypotheses(hs []Hypothesis, in Input, m Model) []Hypothesis {
	named := map[int]bool{}
	for _, h := range hs {
		for _, r := range h.culprits {
			named[r] = true
		}
	}
	var out []Hypothesis
	group := map[string]int{}
	for _, f := range sortedFacts(in.Ranks) {
		if named[f.Rank] {
			continue
		}
		tf := threadsOf(f)
		if tf == nil {
			continue
		}
		h := Hypothesis{Category: tf.Category, culprits: []int{f.Rank}, Evidence: tf.Evidence, Confirm: tf.Confirm, Refute: tf.Refute, whereThread: tf.Thread}
		h.Confidence = Low
		if tf.Strong {
			h.Confidence = Medium
		}
		inColl := false
		if rk := m.Ranks[f.Rank]; rk != nil && rk.Status == InCollective && rk.In != nil {
			inColl = true
			h.Confidence = Low
			at := rk.In.String()
			if s := in.storyOf(f.Rank); s != nil {
				at = s.Wait()
			}
			h.Evidence = append(h.Evidence, Evidence{"comm_rings", fmt.Sprintf("but the rings show rank %d inside %s: its threads' state may not be what holds the job", f.Rank, at)})
		} else {
			h.Evidence = append(h.Evidence, Evidence{"comm_rings", fmt.Sprintf("no rank is recorded waiting for rank %d in a collective: the stacks alone say this", f.Rank)})
		}
		// Ranks alike (the same category, confidence and place, as when
		// every rank's main thread ended and a non-daemon thread keeps
		// each alive) are one hypothesis, its evidence the first one's.
		key := fmt.Sprintf("%s|%s|%t|%s", h.Category, h.Confidence, inColl, placeOf(tf.Thread))
		if k, ok := group[key]; ok {
			out[k].culprits = append(out[k].culprits, f.Rank)
			continue
		}
		group[key] = len(out)
		out = append(out, h)
	}
	for i := range out {
		if n := len(out[i].culprits); n > 1 {
			out[i].Evidence = append(out[i].Evidence, Evidence{"stacks", fmt.Sprintf("%d ranks show the same (%s); the lines above are rank %d's", n, rankWords(out[i].culprits), out[i].culprits[0])})
		}
	}
	return out
}

// placeOf is a thread's innermost user frame, to tell ranks stuck at the
// same place.
func placeOf(t *stacks.Thread) string {
	if t == nil {
		return ""
	}
	if w := userFrame(t); w != nil {
		return fmt.Sprintf("%s:%d", w.File, w.Line)
	}
	return ""
}

// hasThreads: the rank's stacks show something (a thread with frames, or
// any thread from the agent), so it is doing something outside the
// recorded collectives.
func hasThreads(f *RankFacts) bool {
	if f.Main != nil && len(f.Main.Frames) > 0 {
		return true
	}
	if f.StackSource == stacks.SourceAgent && len(f.Threads) > 0 {
		return true
	}
	return threadsOf(f) != nil
}

func ago(ns int64) string {
	d := float64(ns) / 1e9
	if d < 1 {
		return fmt.Sprintf("%dms", ns/1e6)
	}
	if d < 10 {
		return fmt.Sprintf("%.1fs", d)
	}
	return fmt.Sprintf("%.0fs", d)
}
