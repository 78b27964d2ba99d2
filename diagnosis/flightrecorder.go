package diagnosis

import (
	"fmt"
	"slices"
	"strings"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// withFlightRecorder weighs the Flight Recorder's analysis against the
// hypotheses of the wait-for graph. Its mismatch findings (ranks that
// called different collectives, sizes or dtypes at one sequence number)
// are collective_mismatch hypotheses, and they explain away an
// "every member is inside" of the same group; its missing-rank finding
// confirms a culprit it agrees with, and, when it names ranks that the
// graph found waiting, it is said to show victims (a rank waiting in a
// sub-group never reaches the next collective of another group: the
// group-by-group view blames it).
func withFlightRecorder(hs []Hypothesis, in Input) []Hypothesis {
	if in.FR == nil {
		return hs
	}
	if len(hs) == 0 {
		hs = fromAcross(in)
	}
	for _, pg := range in.FR.ProcessGroups {
		f := pg.Finding
		culprits := append([]int(nil), pg.CulpritRanks...)
		if len(culprits) == 0 {
			culprits = append(culprits, f.Minority...)
		}
		slices.Sort(culprits)
		switch f.Kind {
		case fr.KindTypeDivergence, fr.KindShapeMismatch, fr.KindDtypeMismatch:
			if len(culprits) == 0 {
				continue
			}
			h := Hypothesis{Category: CatMismatch, culprits: culprits, Confidence: Medium,
				Evidence: []Evidence{{"flight_recorder", frLine(pg, in)}},
				Confirm:  fmt.Sprintf("snapshot_flight_recorder: compare the sizes and dtypes of #%d (its seq) on every member of pg %s", f.Seq, jobtext.Quote(pg.PGName, jobtext.Name)),
				Refute:   "the members' entries for that sequence number agree"}
			if f.Confidence == High {
				h.Confidence = High
			}
			for _, e := range f.Evidence {
				if len(h.Evidence) >= 4 {
					break
				}
				h.Evidence = append(h.Evidence, Evidence{"flight_recorder", e})
			}
			var rest []int
			for _, m := range pg.Members {
				if _, in := slices.BinarySearch(culprits, m); !in { // culprits is sorted; a scan per member is quadratic in a million-rank group
					rest = append(rest, m)
				}
			}
			h.Collateral = rankset.Format(rest)
			h = finish(h, in)
			for _, o := range hs {
				if o.Category == CatMismatch && slices.Equal(o.culprits, culprits) {
					// The rings saw the same mismatch (mismatch.go): two
					// sources, one answer.
					h.Evidence, h.Confidence = append(h.Evidence, o.Evidence...), High
				}
			}
			// It explains an "all inside" of that group, and replaces a
			// graph hypothesis on the same ranks (which said less).
			hs = slices.DeleteFunc(hs, func(o Hypothesis) bool {
				return (o.Category == CatAllIn && o.group == pg.MembersText) || slices.Equal(o.culprits, culprits)
			})
			hs = append([]Hypothesis{h}, hs...)
		case fr.KindMissingRank:
			if len(culprits) == 0 {
				continue
			}
			if len(hs) == 0 {
				// The rings show no wait (none recorded): the recorder's
				// group view is all there is, and it cannot see across
				// groups.
				h := Hypothesis{Category: CatMissing, culprits: culprits, Confidence: Medium,
					Evidence: []Evidence{{"flight_recorder", frLine(pg, in)},
						{"flight_recorder", "from the Flight Recorder alone (the rings show no collective waiting): a rank waiting in another group can look missing from this one"}},
					Confirm: fmt.Sprintf("get_stacks {\"ranks\":\"%s\"}: where the missing rank is", rankset.Format(culprits)),
					Refute:  "its stack is inside a collective of another group that others have not entered"}
				if c := in.Ranks[culprits[0]]; c != nil && !c.Alive {
					h.Category = CatDeadRank
				} else if c != nil && c.Main != nil && !inCollective(c.Main) {
					h.Category = CatCPUStall
				}
				var rest []int
				for _, m := range pg.Members {
					if _, in := slices.BinarySearch(culprits, m); !in { // culprits is sorted; a scan per member is quadratic in a million-rank group
						rest = append(rest, m)
					}
				}
				h.collateral, h.Collateral = rest, rankset.Format(rest)
				hs = append(hs, finish(h, in))
				continue
			}
			top := &hs[0]
			line := frLine(pg, in)
			switch {
			case slices.Equal(top.culprits, culprits):
				top.Evidence = append(top.Evidence, Evidence{"flight_recorder", line + " (agrees)"})
				if top.Confidence == Medium && top.Category != CatAllIn {
					top.Confidence = High // two sources, one answer
				}
			case subset(culprits, top.collateral):
				top.Evidence = append(top.Evidence, Evidence{"flight_recorder", line +
					"; those ranks wait for the culprit (in another group, or through something it holds), so this group's view blames a victim"})
			default:
				top.Evidence = append(top.Evidence, Evidence{"flight_recorder", line + "; this disagrees with the verdict"})
				if top.Confidence == High {
					top.Confidence = Medium
				}
			}
		}
	}
	return hs
}

// fromAcross is the Flight Recorder's reading across groups as the one
// hypothesis, when the rings show no wait: a group's own view can blame a
// rank that waits in another group (fr.Across). Nil when the reading
// names nobody or the groups' views say the same.
func fromAcross(in Input) []Hypothesis {
	x := in.FR.Across
	if x == nil || len(x.Culprits) == 0 || len(x.Victims) == 0 {
		return nil
	}
	culprits := slices.Clone(x.Culprits)
	h := Hypothesis{Category: CatMissing, culprits: culprits, Confidence: Medium,
		Evidence: []Evidence{{"flight_recorder", "across the groups, numbered by the " + frSeq + ": " + x.Line},
			{"flight_recorder", fmt.Sprintf("from the Flight Recorder alone (the rings show no collective waiting); the groups' own views name %s, which wait in other groups", rankWords(x.Victims))}},
		Confirm: fmt.Sprintf("get_stacks {\"ranks\":\"%s\"}: where the culprit is now", rankset.Format(culprits)),
		Refute:  "its stack is inside a collective that its peers have entered too"}
	if x.Kind == fr.AcrossOutside {
		if c := in.Ranks[culprits[0]]; c != nil && !c.Alive {
			h.Category = CatDeadRank
		} else if c != nil && c.Main != nil && !inCollective(c.Main) {
			h.Category = CatCPUStall
		}
	}
	var rest []int
	for _, r := range in.FR.Ranks.Dumped {
		if _, in := slices.BinarySearch(culprits, r); !in {
			rest = append(rest, r)
		}
	}
	h.collateral, h.Collateral = rest, rankset.Format(rest)
	return []Hypothesis{finish(h, in)}
}

// frLine is a process group's finding as an evidence line. A missing
// rank is said from the ranks' views (story.go), so that this line and
// the others name each rank's op alike, with whose number it is; other
// findings are the recorder's own line, its numbering said.
func frLine(pg fr.PGReport, in Input) string {
	f := pg.Finding
	head := fmt.Sprintf("group %s (pg %s)", pg.MembersText, jobtext.Quote(pg.PGName, jobtext.Name))
	if f.Kind == fr.KindMissingRank && !pg.LagTruncated {
		inOp, never := pendingRanks(pg, f.Seq)
		var parts []string
		if len(never) > 0 {
			parts = append(parts, fmt.Sprintf("%s never enqueued #%d", rankWords(never), f.Seq))
		}
		if len(inOp) > 0 {
			w := frWait{Group: pg.MembersText, Name: frOpName(pg.ProfilingName), Seq: f.Seq}
			line := fmt.Sprintf("%s in %s", rankWords(inOp)+plural(len(inOp), " is", " are"), w.String())
			if s := in.storyOf(inOp[0]); s != nil && s.FR != nil && s.FR.Seq == f.Seq && s.FR.Since > 0 {
				line += fmt.Sprintf(", enqueued %s before this read", s.FR.Since.Round(time.Second))
			}
			if t := inOpTimeout(pg, inOp[0]); t > 0 {
				line += fmt.Sprintf(" (the group's timeout: %s)", durWords(t))
			}
			parts = append(parts, line)
		}
		if len(parts) > 0 {
			return head + ": " + strings.Join(parts, "; ")
		}
	}
	return head + ", numbered by the " + frSeq + ": " + f.Line
}

// inOpTimeout is the process group's timeout on rank r's pending op, 0
// when not recorded.
func inOpTimeout(pg fr.PGReport, r int) time.Duration {
	for _, l := range pg.LaggingRanks {
		if l.Rank == r && l.Pending != nil {
			return time.Duration(l.Pending.TimeoutMs) * time.Millisecond
		}
	}
	return 0
}

func subset(a, b []int) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return len(a) > 0
}

// frCoverage says which ranks' Flight Recorder the analysis saw, when not
// every rank's.
func frCoverage(in Input) string {
	if in.FR == nil || in.World <= 0 || len(in.FRRanks) >= in.World {
		return ""
	}
	return fmt.Sprintf("Flight Recorder from %s only, of %d", rankWords(in.FRRanks), in.World)
}
