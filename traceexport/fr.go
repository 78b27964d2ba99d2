package traceexport

import (
	"strconv"
	"strings"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// FromFlightRecorder reads the loaded dumps' entries as calls (post
// mortem: `export --trace FILE --dumps DIR`). An entry's slice runs from
// when the watchdog saw it start (else when it was enqueued) to when it
// saw it complete; one not completed is open. lastUS is the newest time
// any dump recorded: the end drawn for the open ones, the dumps having no
// time of their own.
func FromFlightRecorder(l *fr.Loaded) (calls []Call, lastUS int64) {
	if l == nil {
		return nil, 0
	}
	for _, d := range l.Dumps {
		members := map[string][]int{}
		for _, pc := range d.PGConfig {
			members[pc.Name] = pc.Ranks
		}
		for i := range d.Entries {
			e := &d.Entries[i]
			if e.Shared == nil {
				continue
			}
			startNS := e.TimeStartedNs
			if startNS <= 0 {
				startNS = e.TimeCreatedNs
			}
			if startNS <= 0 {
				continue
			}
			c := Call{Rank: d.Rank, StartUS: startNS / 1000, Op: e.ProfilingName, State: e.State, Peer: -1, P2P: e.IsP2P,
				Source: "flight_recorder", Seq: e.CollectiveSeqID}
			if e.Op != nil && e.Op.Err == "" && e.Op.Type != "" {
				c.Op = e.Op.Type
			}
			c.Group = e.PGName
			if e.PGDesc != "" {
				c.Group += " (" + e.PGDesc + ")"
			}
			rs := members[e.PGName]
			if len(rs) > 0 {
				c.Members = rankset.Format(rs)
			}
			if e.IsP2P {
				c.Seq = e.P2PSeqID
				if e.Op != nil {
					local := e.Op.Dst
					if e.Op.Type == "recv" {
						local = e.Op.Src
					}
					if local >= 0 && local < len(rs) {
						c.Peer = rs[local]
					}
				}
			}
			if e.Tensors != nil {
				c.Shape = sizesText(e.InputSizes)
				c.Dtype = strings.Join(e.InputDtypes, ", ")
			}
			switch {
			case e.State == "completed" && e.TimeCompletedNs >= startNS:
				c.DurUS = float64(e.TimeCompletedNs-startNS) / 1000
			case e.State == "completed" && e.HasDuration:
				c.DurUS = e.DurationMs * 1000
			case e.State == "completed":
				c.DurUS = 0 // completed, its end not recorded
			default:
				c.DurUS = -1
			}
			for _, t := range []int64{e.TimeCreatedNs, e.TimeStartedNs, e.TimeCompletedNs} {
				lastUS = max(lastUS, t/1000)
			}
			calls = append(calls, c)
		}
	}
	return calls, lastUS
}

// sizesText is tensor sizes as torch prints shapes: "[(4, 3), (4, 3)]",
// one tensor "(4, 3)"; bounded by the caller's clip.
func sizesText(sizes [][]int64) string {
	var b strings.Builder
	if len(sizes) != 1 {
		b.WriteByte('[')
	}
	for i, s := range sizes {
		if b.Len() > 4*textBytes {
			b.WriteString(", …")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j, n := range s {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatInt(n, 10))
		}
		b.WriteByte(')')
	}
	if len(sizes) != 1 {
		b.WriteByte(']')
	}
	return b.String()
}
