package flightrecorder

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// Bounds of a rendered report. A report follows its dumps: a group of a
// million members without a dump has a million missing ranks, and sixteen
// such groups (one rank list shared through the pickle memo) wrote 134 MB
// of text and 2 GB of JSON. Rendered, every list of ranks keeps its first
// maxShownRanks (its ranges are in the matching text field), every text
// its first maxShownText bytes, the lists of groups, blocks, lines and
// problems their first entries, and all of it about maxShownBytes: past
// that, what comes later (groups are worst first) is left out. What was
// cut is said in Truncated and Omitted.
const (
	maxShownRanks    = 1024
	maxShownText     = 32 << 10
	maxShownGroups   = 1024
	maxShownLines    = 4096
	maxShownEvidence = 32
	maxShownFrames   = 256
	maxShownBytes    = 16 << 20
)

// Bounded returns the report as it is rendered: a copy whose lists and
// texts are cut to the bounds above, with Truncated set and Omitted saying
// what was cut. The report itself is not changed.
func (r *Report) Bounded() *Report {
	c := *r
	cut := &cutter{left: maxShownBytes}
	c.Summary = cut.text("summary", c.Summary)
	c.Ranks.Dumped = cut.ranks("ranks.dumped (see dumped_ranges)", c.Ranks.Dumped)
	c.Ranks.MissingDump = cut.ranks("ranks.missing_dumps (see missing_dumps_ranges)", c.Ranks.MissingDump)
	if c.Across != nil {
		x := *c.Across
		x.Line = cut.text("across_groups.line", x.Line)
		x.Culprits = cut.ranks("across_groups.culprit_ranks (see culprit_ranges)", x.Culprits)
		x.Victims = cut.ranks("across_groups.victims (see victim_ranges)", x.Victims)
		c.Across = &x
	}
	c.ProcessGroups = slices.Clone(list(cut, "process_groups (worst first)", c.ProcessGroups, maxShownGroups))
	for i := range c.ProcessGroups {
		if cut.left <= 0 {
			cut.note("process_groups", fmt.Sprintf("%d of %d kept: the report passed %d bytes", i, len(r.ProcessGroups), maxShownBytes))
			c.ProcessGroups = c.ProcessGroups[:i:i]
			break
		}
		cut.group(&c.ProcessGroups[i])
	}
	c.FRTrace.Aborted = cut.text("fr_trace.aborted", c.FRTrace.Aborted)
	c.FRTrace.AbortedIncomplete = cut.text("fr_trace.aborted_allow_incomplete", c.FRTrace.AbortedIncomplete)
	c.FRTrace.Blocks = slices.Clone(list(cut, "fr_trace.first_blocks", c.FRTrace.Blocks, maxShownGroups))
	for i := range c.FRTrace.Blocks {
		if cut.left <= 0 {
			cut.note("fr_trace.first_blocks", fmt.Sprintf("%d of %d kept: the report passed %d bytes", i, len(r.FRTrace.Blocks), maxShownBytes))
			c.FRTrace.Blocks = c.FRTrace.Blocks[:i:i]
			break
		}
		b := &c.FRTrace.Blocks[i]
		b.Header = cut.text("fr_trace.first_blocks[].header", b.Header)
		b.MissingRanks = cut.ranks("fr_trace.first_blocks[].missing_ranks", b.MissingRanks)
		b.ExpectedRanks = cut.ranks("fr_trace.first_blocks[].expected_ranks", b.ExpectedRanks)
		b.Errors = list(cut, "fr_trace.first_blocks[].errors", b.Errors, maxShownRanks)
		b.InputSizes = list(cut, "fr_trace.first_blocks[].input_sizes", b.InputSizes, maxShownFrames)
		b.OutputSizes = list(cut, "fr_trace.first_blocks[].output_sizes", b.OutputSizes, maxShownFrames)
	}
	c.FRTrace.Transcript = cut.texts("fr_trace.transcript", c.FRTrace.Transcript)
	c.DataQuality.Files = slices.Clone(list(cut, "data_quality.file_problems", c.DataQuality.Files, maxShownLines))
	for i := range c.DataQuality.Files {
		if cut.left <= 0 {
			cut.note("data_quality.file_problems", fmt.Sprintf("%d of %d kept: the report passed %d bytes", i, len(r.DataQuality.Files), maxShownBytes))
			c.DataQuality.Files = c.DataQuality.Files[:i:i]
			break
		}
		c.DataQuality.Files[i].Path = cut.text("data_quality.file_problems[].path", c.DataQuality.Files[i].Path)
		c.DataQuality.Files[i].Problem = cut.text("data_quality.file_problems[].problem", c.DataQuality.Files[i].Problem)
	}
	c.DataQuality.Warnings = cut.texts("data_quality.warnings", c.DataQuality.Warnings)
	c.Truncated, c.Omitted = len(cut.omitted) > 0, cut.omitted
	return &c
}

func (cut *cutter) group(pr *PGReport) {
	pr.MissingRanks = cut.ranks("process_groups[].missing_ranks", pr.MissingRanks)
	pr.CulpritRanks = cut.ranks("process_groups[].culprit_ranks", pr.CulpritRanks)
	pr.MissingDumps = cut.ranks("process_groups[].missing_dumps (see missing_dumps_ranges)", pr.MissingDumps)
	pr.CulpritFrames = list(cut, "process_groups[].culprit_frames", pr.CulpritFrames, maxShownFrames)
	pr.PeerFrames = list(cut, "process_groups[].peer_frames", pr.PeerFrames, maxShownFrames)
	cut.finding(&pr.Finding)
	pr.Secondary = slices.Clone(pr.Secondary)
	for i := range pr.Secondary {
		cut.finding(&pr.Secondary[i])
	}
	if n := pr.FRTrace; n != nil {
		m := *n
		m.Header = cut.text("process_groups[].fr_trace.header", m.Header)
		m.MissingRanks = cut.ranks("process_groups[].fr_trace.missing_ranks", m.MissingRanks)
		m.CulpritRanks = cut.ranks("process_groups[].fr_trace.culprit_ranks", m.CulpritRanks)
		pr.FRTrace = &m
	}
}

func (cut *cutter) finding(f *Finding) {
	f.Line = cut.text("finding.line", f.Line)
	f.Ranks = cut.ranks("finding.ranks", f.Ranks)
	f.Minority = cut.ranks("finding.minority", f.Minority)
	f.Evidence = cut.texts("finding.evidence", list(cut, "finding.evidence", f.Evidence, maxShownEvidence))
}

// cutter cuts, counts what it keeps against its byte budget (left; an
// estimate of the JSON), and remembers what it cut, once per field.
type cutter struct {
	left    int
	omitted []string
	seen    map[string]bool
}

func (cut *cutter) note(field, how string) {
	if cut.seen == nil {
		cut.seen = map[string]bool{}
	}
	if !cut.seen[field] {
		cut.seen[field] = true
		cut.omitted = append(cut.omitted, field+": "+how)
	}
}

func (cut *cutter) ranks(field string, rs []int) []int {
	if len(rs) > maxShownRanks {
		cut.note(field, fmt.Sprintf("lists of more than %d ranks keep their first %d", maxShownRanks, maxShownRanks))
		rs = rs[:maxShownRanks:maxShownRanks]
	}
	cut.left -= 8 * len(rs)
	return rs
}

func (cut *cutter) text(field, s string) string {
	if len(s) > maxShownText {
		cut.note(field, fmt.Sprintf("texts of more than %d bytes keep their first %d", maxShownText, maxShownText))
		s = clipText(s, maxShownText)
	}
	cut.left -= len(s)
	return s
}

// texts cuts a list of lines: at most maxShownLines, each a text, and none
// once the budget is spent.
func (cut *cutter) texts(field string, l []string) []string {
	l = list(cut, field, l, maxShownLines)
	var out []string
	for i, s := range l {
		if cut.left <= 0 {
			cut.note(field+" (in all)", fmt.Sprintf("%d of %d kept: the report passed %d bytes", i, len(l), maxShownBytes))
			if out == nil {
				return l[:i:i]
			}
			return out[:i:i]
		}
		if t := cut.text(field+"[]", s); len(t) != len(s) {
			if out == nil {
				out = slices.Clone(l)
			}
			out[i] = t
		}
	}
	if out == nil {
		return l
	}
	return out
}

func list[T any](cut *cutter, field string, l []T, n int) []T {
	if len(l) <= n {
		return l
	}
	cut.note(field, fmt.Sprintf("%d of %d kept", n, len(l)))
	return l[:n:n]
}

// clipText cuts s to n bytes at a rune boundary, marking the cut with the
// size it had.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… (%d bytes in all)", len(s))
}
