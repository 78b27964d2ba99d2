package jobtext

import (
	"strings"
	"unicode/utf8"
)

// argMark stands for the bytes cut out of an argument; an argument is
// never cut below it (a value then reads "…", its flag's name stays).
const argMark = "…"

// Args joins a command line within n bytes (raw text, Clip's rules), cut
// in the middle of its long arguments rather than at its end: the flags
// are what tell runs apart (--num-workers, --stream-…), and a cut at the
// end lost exactly them. Every flag name stays whole ("--data=" keeps its
// name and cuts its value); a long value or path keeps its head and its
// tail around "…", down to "…" alone. Only when the flags alone overflow n is the line cut
// at its end, said as Clip says it.
func Args(argv []string, n int) string {
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = strings.ToValidUTF8(unhide(a), "\uFFFD")
	}
	if s := strings.Join(args, " "); len(s) <= n {
		return s
	}
	longest := 0
	for _, a := range args {
		longest = max(longest, len(a))
	}
	// The largest per-argument cap that fits: the line's length grows
	// with the cap, so search it.
	lo, hi := len(argMark), longest
	for lo < hi {
		c := (lo + hi + 1) / 2
		if len(capArgs(args, c)) <= n {
			lo = c
		} else {
			hi = c - 1
		}
	}
	return clip(capArgs(args, lo), n)
}

// capArgs joins args with every value cut to c bytes in the middle; flag
// names are kept whole.
func capArgs(args []string, c int) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if !strings.HasPrefix(a, "-") {
			b.WriteString(middle(a, c))
			continue
		}
		name, val, ok := strings.Cut(a, "=")
		b.WriteString(name)
		if ok {
			b.WriteString("=" + middle(val, c))
		}
	}
	return b.String()
}

// middle cuts s to at most c bytes around "…", keeping a third of the room
// for its head and the rest for its tail (a path's file name).
func middle(s string, c int) string {
	if len(s) <= c {
		return s
	}
	room := c - len(argMark)
	h := room / 3
	t := room - h
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	i := len(s) - t
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[:h] + argMark + s[i:]
}
