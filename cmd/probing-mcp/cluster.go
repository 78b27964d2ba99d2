package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/membership"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// defaultNodePort is where node daemons listen unless told otherwise.
const defaultNodePort = 9781

// ownAddrToward is, for a daemon bound to a wildcard without
// PROBING_ADVERTISE_ADDR, this host's own address on the route to
// MASTER_ADDR (a UDP "connection" sends nothing; its local end is ours),
// with the listening port: never another host's address. "" otherwise.
func ownAddrToward(bindHost, listen string) string {
	ma := os.Getenv("MASTER_ADDR")
	if os.Getenv(cluster.EnvAdvertiseAddr) != "" || ma == "" || !(bindHost == "" || bindHost == "0.0.0.0" || bindHost == "::") {
		return ""
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	c, err := net.Dial("udp", net.JoinHostPort(ma, "9"))
	if err != nil {
		return ""
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsUnspecified() {
		return ""
	}
	return net.JoinHostPort(ip.String(), port)
}

var nodeDoc = cmdDoc{Name: "node", Synopsis: "[flags]",
	About: `The node daemon: serves this node's ranks (stacks, evidence, Flight Recorder, rings) to the job's
coordinator (probing-mcp serve --job/--peers). Local rank 0's agent starts it; start it by hand
with srun or a DaemonSet. One daemon per data dir (PROBING_DATA_DIR); off loopback it needs
PROBING_AUTH_TOKEN; on loopback without it, it serves only its own user and root.`,
	Note: "Exit status: 0 on Ctrl-C, when idle past --idle-exit, or when a daemon already runs; 1 when serving failed; 2 on bad usage or setup.",
	Examples: []string{
		"probing-mcp node                                   # 127.0.0.1:9781, this node only",
		"PROBING_AUTH_TOKEN=secret probing-mcp node --http 0.0.0.0:9781",
		"srun --ntasks-per-node=1 probing-mcp node --http 0.0.0.0:9781 --idle-exit 0",
	}}

// nodeCmd runs the node daemon.
func nodeCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand(nodeDoc)
	port := defaultNodePort
	if v := os.Getenv("PROBING_MCP_NODE_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			fmt.Fprintf(stderr, "probing-mcp node: PROBING_MCP_NODE_PORT=%q: want a port number\n", v)
			return 2
		}
		port = p
	}
	addr := fs.String("http", "127.0.0.1:"+strconv.Itoa(port), "serve the node API on `ADDR`; off loopback PROBING_AUTH_TOKEN is required")
	idle := fs.Duration("idle-exit", 10*time.Minute, "exit after the node has had no live agent for `DURATION` (0: never)")
	noRegister := fs.Bool("no-register", false, "do not write this daemon's address into the job's TCPStore (MASTER_ADDR:MASTER_PORT)")
	pos, code, done := parseCommand(fs, nodeDoc, args, true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp node: unexpected argument %q (it takes flags only; probing-mcp node --help)\n", pos[0])
		return 2
	}
	logger, err := leveledLogger(stderr, slog.LevelInfo)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 2
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: --http %q: want host:port (e.g. 127.0.0.1:%d)\n", *addr, defaultNodePort)
		return 2
	}
	token := os.Getenv(cluster.EnvAuthToken)
	if token == "" && !fanout.LoopbackHost(host) {
		fmt.Fprintf(stderr, "probing-mcp node: --http %s is reachable from other hosts, and without PROBING_AUTH_TOKEN anyone could read this node's jobs: set PROBING_AUTH_TOKEN (the coordinator uses the same), or bind 127.0.0.1\n", *addr)
		return 2
	}
	gcfg, err := gpu.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 2
	}
	wcfg, err := watcherFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 2
	}
	paths, err := metrics.PathsFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 2
	}
	// The daemon is often started by a rank's agent with the job's
	// environment: a tracing setting it cannot use costs the traces, not
	// the node's evidence.
	stopTracing, err := startTracing("node", logger)
	if err != nil {
		logger.Warn("serving without traces: "+err.Error(), "fix", "correct the variable named, or unset OTEL_EXPORT_ENABLED")
	}
	defer stopTracing()
	dataDir := storage.DataDir(os.Getenv)
	lock, err := node.Lock(filepath.Join(dataDir, "probing-mcp", "node.lock"))
	if errors.Is(err, node.ErrRunning) {
		fmt.Fprintf(stderr, "probing-mcp node: a node daemon already runs for data dir %s; nothing to do (%v)\n", dataDir, err)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 1
	}
	defer lock.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 1
	}
	getenv := os.Getenv
	if a := ownAddrToward(host, ln.Addr().String()); a != "" {
		logger.Info("advertising this host's address on the route to the job's master (set PROBING_ADVERTISE_ADDR to choose another)", "addr", a)
		getenv = func(k string) string {
			if k == cluster.EnvAdvertiseAddr {
				return a
			}
			return os.Getenv(k)
		}
	}
	self, err := membership.SelfNode(getenv, ln.Addr().String())
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 2
	}
	engine, err := sqlengine.New(sqlengine.Options{DataDir: dataDir, Host: self.Host})
	if err != nil {
		logger.Warn("no SQL over this node's rings", "err", err)
		engine = nil
	}
	src := &node.Local{Self: self, Version: versionString(), Agents: agent.OptionsFromEnv(os.Getenv), SQL: engine}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The node's GPUs, sampled into the data dir's gpu.* rings while the
	// daemon runs (the minutes before a hang are there when it is asked).
	src.GPUSampler = gpu.RunNode(ctx, gcfg, dataDir, self.Host, logger)
	if !*noRegister {
		// This daemon's own job, then every later job whose ranks run on
		// this node (a daemon outlives its job by its idle time, and the
		// next job's daemon exits on the data dir's lock).
		own := node.JobStore{Run: membership.RunID(os.Getenv)}
		if ma, mp := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"); ma != "" && mp != "" {
			own.Store = net.JoinHostPort(ma, mp)
		}
		reg := &node.Registrar{Self: self, Logger: logger,
			Jobs: func() []node.JobStore {
				js, _ := src.JobStores(membership.RunID)
				if own.Store != "" {
					js = append([]node.JobStore{own}, js...)
				}
				return js
			},
			Register: func(ctx context.Context, store, run string, n cluster.Node) error {
				return membership.Register(ctx, store, run, n, 10*time.Second)
			}}
		go reg.Run(ctx)
	}
	if wcfg.on {
		// The node's own watch: its ranks, by their pulse; captures kept
		// in the data dir's history.
		hist := openHistory(history.DefaultPath(dataDir), logger)
		if hist != nil {
			defer hist.Close()
		}
		scope := &evidence.Node{Agents: src.Agents, SQL: engine, Sampler: src.GPUSampler, Host: self.Host, History: hist}
		waitWatcher, err := wcfg.start(ctx, scope, hist, self.Host, logger, nil)
		if err != nil {
			fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
			return 1
		}
		defer func() { stop(); waitWatcher() }()
	}
	logger.Info("node daemon serving", "addr", self.Addr, "host", self.Host, "node_rank", self.NodeRank, "data_dir", dataDir, "auth", token != "")
	alive := func(ctx context.Context) bool {
		in, err := src.Info(ctx)
		if err != nil {
			return true // not knowing is no reason to leave
		}
		for _, r := range in.Ranks {
			if r.Alive {
				return true
			}
		}
		return false
	}
	err = node.Run(ctx, node.DaemonOptions{Handler: node.Handler(node.Config{Source: src, Token: token, Advertise: []string{self.Addr}, Version: versionString(), Logger: logger, Paths: paths}),
		Listener: ln, IdleExit: *idle, Alive: alive, Logger: logger})
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp node: %v\n", err)
		return 1
	}
	return 0
}

// membershipTTL is how long one read of the job's store is reused.
var membershipTTL = membership.CacheTTL

// heartbeatRoutes serves Probing's heartbeats beside /mcp (behind its
// token), and refuses them all without a token: on loopback every local
// user could report.
func heartbeatRoutes(beats *membership.Registry, token string, logger *slog.Logger) map[string]http.Handler {
	if beats == nil {
		return nil
	}
	if token == "" {
		logger.Warn("heartbeats (PUT /apis/nodes) refused: they need PROBING_AUTH_TOKEN, loopback included")
		return map[string]http.Handler{"/apis/nodes": membership.Tokenless()}
	}
	return map[string]http.Handler{"/apis/nodes": beats.Handler()}
}

// clusterJob builds the coordinator's view from --job / --peers /
// --slurm-port, or nil for this node's scope.
func clusterJob(job, peers string, slurmPort int, dataDir string, logger *slog.Logger) (*fanout.Job, *membership.Registry, error) {
	if job == "" && peers == "" && slurmPort == 0 {
		if ma, mp := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"); ma != "" && mp != "" {
			job = net.JoinHostPort(ma, mp)
		}
	}
	if job == "off" {
		job = ""
	}
	if job == "" && peers == "" && slurmPort == 0 {
		return nil, nil, nil
	}
	opt, err := fanout.OptionsFromEnv(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	stale, err := membership.StaleAfter(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	// Agents that push (Probing's heartbeats, PUT /apis/nodes on serve
	// --http) are members too.
	beats := membership.NewRegistry(stale, time.Now)
	var static []cluster.Node
	var staticProblems []string
	if peers != "" {
		if static, staticProblems, err = membership.ParsePeers(peers); err != nil {
			return nil, nil, fmt.Errorf("--peers: %w", err)
		}
	}
	if slurmPort > 0 {
		ns, err := membership.FromSlurm(os.Getenv, slurmPort)
		if err != nil {
			return nil, nil, fmt.Errorf("--slurm-port: %w", err)
		}
		static = append(static, ns...)
	}
	if job != "" {
		if _, _, err := net.SplitHostPort(job); err != nil {
			return nil, nil, fmt.Errorf("--job %q: want the job's TCPStore as host:port (MASTER_ADDR:MASTER_PORT), or off", job)
		}
	}
	runID := membership.RunID(os.Getenv)
	saved := membership.DefaultPath(dataDir, runID)
	// The store is read at most once per CacheTTL (planted slots made each
	// call cost seconds); heartbeats and static peers are read every call.
	stored := membership.NewCache(membershipTTL, nil, func(ctx context.Context) ([]cluster.Node, []string, error) {
		var problems []string
		runs, ps := membership.StoreRuns(ctx, job, os.Getenv, 5*time.Second)
		problems = append(problems, ps...)
		var ns []cluster.Node
		var err error
		for _, run := range runs {
			got, ps, rerr := membership.ReadStore(ctx, job, run, 5*time.Second)
			problems = append(problems, ps...)
			if rerr != nil {
				err = rerr
				break // the store itself failed: the other runs would too
			}
			ns = append(ns, got...)
		}
		if err != nil {
			// A dead job's store is gone: what was last known still
			// names its nodes.
			old, lerr := membership.Load(saved)
			if lerr != nil {
				return nil, problems, fmt.Errorf("the job's TCPStore %s: %v; and no membership was saved before (%v)", job, err, lerr)
			}
			problems = append(problems, fmt.Sprintf("the job's TCPStore %s: %v; using the membership last saved (%s)", job, err, saved))
			ns = old
		} else if len(ns) > 0 {
			if err := membership.Save(saved, ns); err != nil {
				logger.Warn("membership not saved", "path", saved, "err", err)
			}
		}
		return ns, problems, nil
	})
	members := func(ctx context.Context) ([]cluster.Node, []string, error) {
		problems := append([]string(nil), staticProblems...)
		lists := [][]cluster.Node{static}
		if job != "" {
			ns, ps, err := stored.Get(ctx)
			problems = append(problems, ps...)
			if err != nil {
				return nil, problems, err
			}
			lists = append(lists, ns)
		}
		hb, hbProblems := beats.Nodes()
		lists = append(lists, hb)
		problems = append(problems, hbProblems...)
		ns, conflicts := membership.Merge(lists...)
		return ns, append(problems, conflicts...), nil
	}
	if os.Getenv(cluster.EnvAuthToken) == "" {
		logger.Warn("no PROBING_AUTH_TOKEN: only node daemons on loopback can be asked; set the job's token to reach other hosts")
	}
	logger.Info("whole-job scope", "store", job, "peers", len(static), "run", runID, "concurrency", opt.Concurrency,
		"peer_timeout", opt.PeerTimeout, "deadline", opt.Deadline, "strict", opt.Strict)
	return fanout.NewJob(members, fanout.NewClient(os.Getenv(cluster.EnvAuthToken), opt.Concurrency), opt), beats, nil
}
