package membership

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/probing-mcp/probing-mcp/cluster"
)

// SelfNode describes this node's daemon listening at listenAddr. Its
// address is PROBING_ADVERTISE_ADDR, else the listen address; a wildcard
// listen host without PROBING_ADVERTISE_ADDR is an error, because no
// other address is known to be this node's (Probing's fallback to
// MASTER_ADDR makes every node advertise the master).
func SelfNode(getenv func(string) string, listenAddr string) (cluster.Node, error) {
	n := cluster.Node{NodeRank: -1, Kind: cluster.KindDaemon, Source: "self"}
	h, err := cluster.NodeNameFromEnv(getenv)
	if err != nil {
		return n, err
	}
	n.Host = h
	if n.Host == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return n, fmt.Errorf("this node's name: %v; set %s", err, cluster.EnvNodeHost)
		}
		n.Host = h
	}
	if adv := strings.TrimSpace(getenv(cluster.EnvAdvertiseAddr)); adv != "" {
		host, err := checkHostPort(adv)
		if err != nil {
			return n, fmt.Errorf("%s=%q: %v; set it to host:port that other nodes reach this one at", cluster.EnvAdvertiseAddr, clip(adv), err)
		}
		if isWildcard(host) {
			return n, fmt.Errorf("%s=%q is a wildcard address; set it to this node's own reachable host:port", cluster.EnvAdvertiseAddr, adv)
		}
		n.Addr = adv
	} else {
		host, err := checkHostPort(listenAddr)
		if err != nil && !strings.HasPrefix(listenAddr, ":") {
			return n, fmt.Errorf("listen address %q: %v", clip(listenAddr), err)
		}
		if err != nil || isWildcard(host) {
			return n, fmt.Errorf("the daemon listens on %q, every interface, so its address for other nodes is unknown; set %s to this node's reachable host:port (e.g. 10.0.0.5:9781)", listenAddr, cluster.EnvAdvertiseAddr)
		}
		n.Addr = listenAddr
	}
	if n.NodeRank, err = cluster.NodeRankFromEnv(getenv); err != nil {
		return n, err
	}
	return n, nil
}

func isWildcard(host string) bool {
	if host == "" || host == "*" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
