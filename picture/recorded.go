package picture

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// maxRecordedBytes bounds a recorded report read back for a page (the
// history keeps bounded answers; anything larger is not one of them).
const maxRecordedBytes = 8 << 20

// FromRecorded is the page of a diagnosis kept in the history
// (history.diagnoses): kind "watch" holds a diagnose_hang report, kind
// "flight_recorder" an analyze_flight_recorder answer. What was not kept
// (each wait's collective, the lanes, the stacks) the page says it lacks.
func FromRecorded(kind string, report []byte) (Page, error) {
	if len(report) == 0 {
		return Page{}, fmt.Errorf("the %s diagnosis kept no report to draw", kind)
	}
	if len(report) > maxRecordedBytes {
		return Page{}, fmt.Errorf("the %s diagnosis' report is %d bytes, over the %d a page reads", kind, len(report), maxRecordedBytes)
	}
	switch kind {
	case "watch", "diagnose_hang":
		var rep diagnosis.Report
		if err := json.Unmarshal(report, &rep); err != nil {
			return Page{}, fmt.Errorf("the %s diagnosis' report is not a verdict: %v", kind, err)
		}
		return FromDiagnosis(&rep), nil
	case "flight_recorder":
		var v fr.View
		if err := json.Unmarshal(report, &v); err != nil {
			return Page{}, fmt.Errorf("the %s diagnosis' report is not an analysis: %v", kind, err)
		}
		return FromView(v), nil
	}
	return Page{}, fmt.Errorf("a %q diagnosis has no picture (only watch and flight_recorder ones do)", clip(kind, 40))
}

// FromView is the page of a Flight Recorder answer (fr.View) without the
// report behind it: the worst group's members wait for its culprits.
func FromView(v fr.View) Page {
	p := Page{Title: "Flight Recorder analysis", From: "a recorded Flight Recorder answer (its verdicts; the lanes and the waits across groups were not kept)",
		State: v.Verdict, Summary: clipLine(v.Summary)}
	if v.Ranks.MissingDumps != "" {
		p.Shows = append(p.Shows, clip("No dump from ranks "+v.Ranks.MissingDumps+".", 2*MaxText))
	}
	culprit, member := map[int]bool{}, map[int]bool{}
	var top *fr.GroupView
	if len(v.ProcessGroups) > 0 && v.ProcessGroups[0].Verdict != fr.VerdictOK {
		top = &v.ProcessGroups[0]
	}
	if v.Across != nil && v.Across.Culprits != "" {
		for _, r := range rankset.Known(v.Across.Culprits) {
			culprit[r] = true
		}
	} else if top != nil {
		for _, r := range rankset.Known(top.CulpritRanks) {
			culprit[r] = true
		}
	}
	doing := map[int]string{}
	label := ""
	if top != nil {
		label = clip(opName(top.ProfilingName)+" #"+strconv.FormatInt(top.CollectiveSeqID, 10)+" pg "+top.PGName, 80)
		for _, r := range rankset.Known(top.Ranks) {
			member[r] = true
			doing[r] = "in pg " + clip(top.PGName, 40) + " (" + strings.ToLower(top.Kind) + ")"
		}
	}
	for r := range culprit {
		doing[r] = "culprit across groups"
		if top != nil {
			doing[r] = clip(strings.ToLower(top.Kind)+" at "+label, MaxText)
		}
	}
	role := func(r int) string {
		switch {
		case culprit[r]:
			return RoleCulprit
		case member[r]:
			return RoleVictim
		}
		return RoleOther
	}
	nodes, of, merged := groupNodes(doing, role)
	var es edgeSet
	if cs := sortedKeys(culprit); len(cs) > 0 {
		for _, r := range sortedKeys(member) {
			if !culprit[r] {
				es.add(of[r], of[cs[0]], label)
			}
		}
	}
	p.Graph = Graph{Nodes: nodes, Edges: es.done(len(nodes)), Merged: merged}
	if len(nodes) == 0 {
		p.Shows = append(p.Shows, "No group with a problem: there is no graph to draw.")
	}
	p.Shows = append(p.Shows, "Drawn from a recorded answer: no lanes and no stacks (the dumps were not kept with it).")
	viewLines(&p, v)
	return p
}
