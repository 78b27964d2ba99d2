package flightrecorder

import "fmt"

// Which dumps an analysis takes: those whose rank is within the ceiling,
// and, in rank order, those whose groups keep the analysis' memberships
// within theirs. The others are file problems that say why.

// checkDumpRanks drops the dumps whose rank is outside [0, MaxRanks) (a
// live snapshot or a mapping can carry any number) and lists them as file
// problems.
func checkDumpRanks(dumps []*Dump, lim Limits, dq *DataQuality) []*Dump {
	kept := dumps
	for i, d := range dumps {
		err := lim.checkRank("rank", int64(d.Rank))
		if err == nil {
			if len(kept) < len(dumps) {
				kept = append(kept, d)
			}
			continue
		}
		if len(kept) == len(dumps) {
			kept = append([]*Dump(nil), dumps[:i]...)
		}
		r := d.Rank
		dq.Files = append(dq.Files, FileProblem{Path: d.Path, Rank: &r, Problem: err.Error() + "; not analysed"})
		dq.Partial = true
	}
	return kept
}

// admitMemberships keeps the dumps, in rank order, while the distinct
// groups they name (by name and member set) add up to at most
// MaxMemberships members; the analysis walks each group's members, so a
// few small files naming many world-sized groups (one rank list shared
// under many names) would cost work far beyond their size. The rest are
// file problems that say so.
func admitMemberships(dumps []*Dump, lim Limits, sets *memberSets, dq *DataQuality) []*Dump {
	seen := map[string]bool{}
	var total int64
	kept := make([]*Dump, 0, len(dumps))
	for _, d := range dumps {
		var add int64
		mine := map[string]bool{}
		for _, pc := range d.PGConfig {
			if pc.Name == "" {
				continue // not a group of the analysis (see buildGroups)
			}
			ms := sets.of(pc.Ranks)
			k := pc.Name + "|" + ms.digest
			if !seen[k] && !mine[k] {
				mine[k] = true
				add += int64(len(ms.members))
			}
		}
		if total+add > lim.MaxMemberships {
			r := d.Rank
			dq.Files = append(dq.Files, FileProblem{Path: d.Path, Rank: &r, Problem: fmt.Sprintf(
				"not analysed: with its groups, the process groups of this analysis would name %d members in all, over the ceiling of %d memberships (set %s higher if a job really has that many)",
				total+add, lim.MaxMemberships, EnvMaxMemberships)})
			dq.Partial = true
			continue
		}
		total += add
		for k := range mine {
			seen[k] = true
		}
		kept = append(kept, d)
	}
	if len(kept) < len(dumps) {
		sets.setDumped(kept)
	}
	return kept
}
