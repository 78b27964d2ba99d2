// Package membership says who the nodes of a job are: from a static
// --peers list, Slurm's node list, the job's TCPStore (our keys and
// Probing's torchrun keys), a file on disk, and this node itself; Merge
// folds the sources into one list and says where they disagree. Every
// input is untrusted and bounded. No MCP imports.
package membership

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// MaxNodes bounds every list this package builds: far above any job that
// exists, far below what would hurt memory.
const MaxNodes = 16384

// ParsePeers reads "host:port,host:port" (IPv6 as [::1]:port, whitespace
// around entries tolerated). Duplicates are kept once and said in the
// problems; a malformed entry is an error naming it.
func ParsePeers(s string) ([]cluster.Node, []string, error) {
	var (
		nodes    []cluster.Node
		problems []string
		seen     = map[string]bool{}
	)
	entries := 0
	for rest := s; rest != ""; {
		var e string
		e, rest, _ = strings.Cut(rest, ",")
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		entries++
		if entries > MaxNodes {
			return nil, nil, fmt.Errorf("--peers: more than %d entries; list at most %d nodes (or use the TCPStore or Slurm discovery)", MaxNodes, MaxNodes)
		}
		host, err := checkHostPort(e)
		if err != nil {
			return nil, nil, fmt.Errorf("--peers entry %q: %v; write host:port, e.g. node-1:9781 or [fd00::1]:9781", e, err)
		}
		if seen[e] {
			problems = append(problems, fmt.Sprintf("--peers lists %s more than once; kept once", e))
			continue
		}
		seen[e] = true
		nodes = append(nodes, cluster.Node{Host: host, Addr: e, NodeRank: len(nodes), Kind: cluster.KindDaemon, Source: "peers"})
	}
	return nodes, problems, nil
}

// checkHostPort validates "host:port" and returns the host.
func checkHostPort(a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", errors.New(ae.Err) // its Addr is the raw text, quoted by the caller
		}
		return "", err
	}
	if host == "" {
		return "", fmt.Errorf("no host")
	}
	if strings.ContainsAny(host, " \t/\\@?#") {
		return "", fmt.Errorf("host %s has characters no host name has", jobtext.Quote(host, jobtext.Name))
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("port %s is not 1..65535", jobtext.Quote(port, 16))
	}
	return host, nil
}
