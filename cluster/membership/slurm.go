package membership

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/cluster"
)

// ExpandSlurmNodelist expands Slurm's compact host list
// ("node[001-004,007],gpu-a[1-2],login1", several bracket groups per
// name) into host names, in order, zero padding kept. The count is
// computed before anything is expanded, so a list naming more than max
// hosts (max <= 0: MaxNodes) is an error without the allocation.
func ExpandSlurmNodelist(list string, max int) ([]string, error) {
	if max <= 0 || max > MaxNodes {
		max = MaxNodes
	}
	names, err := splitTop(list)
	if err != nil {
		return nil, err
	}
	parsed := make([][]segment, 0, len(names))
	total := 0
	for _, name := range names {
		segs, n, err := parseName(name, max)
		if err != nil {
			return nil, fmt.Errorf("Slurm node list %q: %w", clip(list), err)
		}
		if total += n; total > max {
			return nil, fmt.Errorf("Slurm node list %q names more than %d hosts", clip(list), max)
		}
		parsed = append(parsed, segs)
	}
	out := make([]string, 0, total)
	for _, segs := range parsed {
		out = expand(out, segs)
	}
	return out, nil
}

// segment is a literal (ranges nil) or a bracket group of ranges.
type segment struct {
	lit    string
	ranges []span
}

type span struct{ lo, hi, width int }

func (s segment) count() int {
	n := 0
	for _, r := range s.ranges {
		n += r.hi - r.lo + 1
	}
	return n
}

// splitTop splits at commas outside brackets.
func splitTop(list string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) {
			switch list[i] {
			case '[':
				if depth++; depth > 1 {
					return nil, fmt.Errorf("Slurm node list %q: nested '[' at byte %d", clip(list), i)
				}
				continue
			case ']':
				if depth--; depth < 0 {
					return nil, fmt.Errorf("Slurm node list %q: ']' without '[' at byte %d", clip(list), i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		} else if depth != 0 {
			return nil, fmt.Errorf("Slurm node list %q: '[' not closed", clip(list))
		}
		if name := strings.TrimSpace(list[start:i]); name != "" {
			out = append(out, name)
		}
		start = i + 1
	}
	return out, nil
}

// parseName parses one name into segments and the number of hosts it
// names (stopping once past max, so the product cannot overflow).
func parseName(name string, max int) ([]segment, int, error) {
	var segs []segment
	count := 1
	for name != "" {
		i := strings.IndexByte(name, '[')
		if i < 0 {
			segs = append(segs, segment{lit: name})
			break
		}
		if i > 0 {
			segs = append(segs, segment{lit: name[:i]})
		}
		j := strings.IndexByte(name, ']')
		if j < i {
			return nil, 0, fmt.Errorf("%q: '[' not closed", name)
		}
		g, err := parseGroup(name[i+1:j], max)
		if err != nil {
			return nil, 0, fmt.Errorf("%q: %w", name, err)
		}
		segs = append(segs, g)
		if count *= g.count(); count > max {
			return nil, max + 1, nil
		}
		name = name[j+1:]
	}
	for _, s := range segs {
		if s.ranges == nil && strings.ContainsAny(s.lit, " \t,[]") {
			return nil, 0, fmt.Errorf("%q is not a host name", s.lit)
		}
	}
	return segs, count, nil
}

func parseGroup(g string, max int) (segment, error) {
	var s segment
	n := 0
	for _, part := range strings.Split(g, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := digits(lo)
		if err != nil {
			return s, fmt.Errorf("[%s]: %q is not a number or a range like 001-004", g, part)
		}
		b := a
		if isRange {
			if b, err = digits(hi); err != nil || b < a {
				return s, fmt.Errorf("[%s]: %q is not a range like 001-004", g, part)
			}
		}
		// Slurm pads to the width of the range's start ("001-010").
		s.ranges = append(s.ranges, span{a, b, len(lo)})
		if n += b - a + 1; n > max {
			// The caller sees a count past max and errors.
			s.ranges = []span{{0, max, 1}}
			return s, nil
		}
	}
	return s, nil
}

// digits reads a non-negative decimal of at most 9 digits (no overflow).
func digits(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("bad number")
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad number")
		}
		v = v*10 + int(s[i]-'0')
	}
	return v, nil
}

// expand appends every host segs names, first group varying slowest.
func expand(out []string, segs []segment) []string {
	var rec func(prefix string, k int)
	rec = func(prefix string, k int) {
		if k == len(segs) {
			out = append(out, prefix)
			return
		}
		s := segs[k]
		if s.ranges == nil {
			rec(prefix+s.lit, k+1)
			return
		}
		for _, r := range s.ranges {
			for v := r.lo; v <= r.hi; v++ {
				num := strconv.Itoa(v)
				if len(num) < r.width {
					num = strings.Repeat("0", r.width-len(num)) + num
				}
				rec(prefix+num, k+1)
			}
		}
	}
	rec("", 0)
	return out
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// FromSlurm lists the job's nodes from SLURM_JOB_NODELIST (else
// SLURM_NODELIST), each at host:port; NodeRank is the index, which is
// Slurm's SLURM_NODEID order.
func FromSlurm(getenv func(string) string, port int) ([]cluster.Node, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("Slurm discovery: port %d is not 1..65535; pass the port every node daemon listens on", port)
	}
	list, from := getenv("SLURM_JOB_NODELIST"), "SLURM_JOB_NODELIST"
	if strings.TrimSpace(list) == "" {
		list, from = getenv("SLURM_NODELIST"), "SLURM_NODELIST"
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("Slurm discovery: neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set; run inside the job's allocation or pass --peers")
	}
	hosts, err := ExpandSlurmNodelist(list, MaxNodes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	ns := make([]cluster.Node, len(hosts))
	p := strconv.Itoa(port)
	for i, h := range hosts {
		ns[i] = cluster.Node{Host: h, Addr: net.JoinHostPort(h, p), NodeRank: i, Kind: cluster.KindDaemon, Source: "slurm"}
	}
	return ns, nil
}
