package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// cmdDoc is one command's own usage: what `COMMAND --help` prints on
// stdout, and what a wrong flag prints on stderr after the error.
type cmdDoc struct {
	Name     string   // "analyze", "skill plan"
	Synopsis string   // the arguments after the name
	About    string   // what it does, a few lines
	Examples []string // whole command lines, each one a user can paste
	Note     string   // exit status and the like, after the flags
}

// newCommand is a flag set whose help and errors go through doc instead
// of the flag package's "Usage of serve:".
func newCommand(doc cmdDoc) *flag.FlagSet {
	fs := flag.NewFlagSet(doc.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseCommand prints; the flag package prints nothing
	fs.Usage = func() {}
	return fs
}

// writeUsage prints doc and fs's flags.
func writeUsage(w io.Writer, doc cmdDoc, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: probing-mcp %s %s\n\n%s\n", doc.Name, doc.Synopsis, strings.TrimRight(doc.About, "\n"))
	n := 0
	if fs != nil {
		fs.VisitAll(func(*flag.Flag) { n++ })
	}
	if n > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	} else {
		fmt.Fprintf(w, "\nFlags: none.\n")
	}
	if doc.Note != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(doc.Note, "\n"))
	}
	if len(doc.Examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range doc.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// parseCommand parses args (flags may follow positional arguments when
// interleaved). done reports that the command must return code now:
// 0 after --help/-h (usage on stdout), 2 after a bad flag (the error, the
// fix and the usage on stderr).
func parseCommand(fs *flag.FlagSet, doc cmdDoc, args []string, interleaved bool, stdout, stderr io.Writer) (pos []string, code int, done bool) {
	var err error
	if interleaved {
		pos, err = parseInterleaved(fs, args)
	} else if err = fs.Parse(args); err == nil {
		pos = fs.Args()
	}
	if errors.Is(err, flag.ErrHelp) {
		writeUsage(stdout, doc, fs)
		return nil, 0, true
	}
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp %s: %v%s\n\n", doc.Name, err, flagHint(fs, err))
		writeUsage(stderr, doc, fs)
		return nil, 2, true
	}
	return pos, 0, false
}

// flagHint names the flag meant by an undefined one, when one is close.
func flagHint(fs *flag.FlagSet, err error) string {
	const undef = "flag provided but not defined: -"
	msg := err.Error()
	if !strings.HasPrefix(msg, undef) {
		return ""
	}
	bad := strings.TrimLeft(strings.TrimPrefix(msg, undef), "-")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(bad, n)
		if strings.HasPrefix(n, bad) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean --%s?)", best)
	}
	if len(names) == 0 {
		return fmt.Sprintf(" (probing-mcp %s takes no flags)", fs.Name())
	}
	return fmt.Sprintf(" (the flags are --%s)", strings.Join(names, ", --"))
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// oneOf checks a switch's value against its valid ones, at start.
func oneOf(flagName, value string, valid ...string) error {
	for _, v := range valid {
		if value == v {
			return nil
		}
	}
	return fmt.Errorf("--%s %q: want one of %s", flagName, value, strings.Join(valid, ", "))
}

// isHelp: a lone --help, -h or -help (for commands that dispatch on a
// subcommand before any flag set exists).
func isHelp(a string) bool {
	return a == "-h" || a == "--help" || a == "-help" || a == "help"
}
