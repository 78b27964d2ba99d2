package redteam

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// runID is the run every fake job registers under (TORCHELASTIC_RUN_ID in
// the coordinator's environment).
const runID = "redteam"

// fakeStore is a hostile job's c10d TCPStore: torch's wire protocol
// (cluster/tcpstore: a query byte, u64-length strings, int64 numbers,
// VALIDATE first), the keys as anyone who reaches MASTER_ADDR:MASTER_PORT
// could write them. Values may be shared buffers: 300 slots of 1 MB cost
// the test 1 MB.
type fakeStore struct {
	ln   net.Listener
	mu   sync.Mutex
	vals map[string][]byte // torch's keys without its "/" prefix
	gets atomic.Int64
	wg   sync.WaitGroup
}

func newFakeStore(t *testing.T) *fakeStore {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeStore{ln: ln, vals: map[string][]byte{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *fakeStore) addr() string { return s.ln.Addr().String() }

func (s *fakeStore) set(key string, v []byte) {
	s.mu.Lock()
	s.vals[key] = v
	s.mu.Unlock()
}

// register writes nodes into the run's slots, as our daemons do.
func (s *fakeStore) register(nodes ...cluster.Node) {
	s.mu.Lock()
	first := 0
	if b, ok := s.vals["probing-mcp/"+runID+"/nodes"]; ok {
		first, _ = strconv.Atoi(string(b))
	}
	s.mu.Unlock()
	for i, n := range nodes {
		if n.Kind == "" {
			n.Kind = cluster.KindDaemon
		}
		b, _ := json.Marshal(n)
		s.set(fmt.Sprintf("probing-mcp/%s/node/%d", runID, first+i), b)
	}
	s.set("probing-mcp/"+runID+"/nodes", []byte(strconv.Itoa(first+len(nodes))))
}

// serve answers one connection until the client goes.
func (s *fakeStore) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	w := bufio.NewWriterSize(c, 1<<16)
	u64 := func() (uint64, error) {
		var b [8]byte
		_, err := io.ReadFull(r, b[:])
		return binary.LittleEndian.Uint64(b[:]), err
	}
	str := func() (string, error) {
		n, err := u64()
		if err != nil {
			return "", err
		}
		if n > 1<<20 {
			return "", errors.New("key too long")
		}
		b := make([]byte, n)
		_, err = io.ReadFull(r, b)
		return strings.TrimPrefix(string(b), "/"), err
	}
	putU64 := func(v uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		w.Write(b[:])
	}
	for {
		q, err := r.ReadByte()
		if err != nil {
			return
		}
		switch q {
		case 0: // VALIDATE magic
			var b [4]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return
			}
			continue
		case 1: // SET key value
			k, err := str()
			if err != nil {
				return
			}
			n, err := u64()
			if err != nil || n > 64<<20 {
				return
			}
			v := make([]byte, n)
			if _, err := io.ReadFull(r, v); err != nil {
				return
			}
			s.set(k, v)
			continue
		case 3: // GET key
			k, err := str()
			if err != nil {
				return
			}
			s.gets.Add(1)
			s.mu.Lock()
			v := s.vals[k]
			s.mu.Unlock()
			putU64(uint64(len(v)))
			w.Write(v)
		case 4: // ADD key delta
			k, err := str()
			if err != nil {
				return
			}
			d, err := u64()
			if err != nil {
				return
			}
			s.mu.Lock()
			n, _ := strconv.ParseInt(string(s.vals[k]), 10, 64)
			n += int64(d)
			s.vals[k] = []byte(strconv.FormatInt(n, 10))
			s.mu.Unlock()
			putU64(uint64(n))
		case 5: // CHECK n keys
			n, err := u64()
			if err != nil || n > 1<<16 {
				return
			}
			ready := byte(0)
			for i := uint64(0); i < n; i++ {
				k, err := str()
				if err != nil {
					return
				}
				s.mu.Lock()
				_, ok := s.vals[k]
				s.mu.Unlock()
				if !ok {
					ready = 1
				}
			}
			w.WriteByte(ready)
		default:
			return // not a query this fake knows: the client sees the close
		}
		if w.Flush() != nil {
			return
		}
	}
}

// fakeNode is a node daemon as an in-process httptest server speaking the
// node API (cluster/node/wire.go): honest or hostile as its handlers are.
// It counts the requests it gets and the Authorization headers it saw.
type fakeNode struct {
	srv      *httptest.Server
	node     cluster.Node
	hits     atomic.Int64
	mu       sync.Mutex
	handlers map[string]http.HandlerFunc
	authSeen []string
}

// newFakeNode serves info for its ranks, and whatever handlers add.
func newFakeNode(t *testing.T, host string, nodeRank int, ranks []int, handlers map[string]http.HandlerFunc) *fakeNode {
	t.Helper()
	f := &fakeNode{handlers: handlers}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if a := r.Header.Get("Authorization"); a != "" {
			f.mu.Lock()
			f.authSeen = append(f.authSeen, a)
			f.mu.Unlock()
		}
		if h := f.handlers[r.URL.Path]; h != nil {
			h(w, r)
			return
		}
		switch r.URL.Path {
		case node.PathHealth:
			writeJSON(w, map[string]any{"status": "ok", "version": "fake"})
		case node.PathInfo:
			in := node.Info{Node: f.node, Version: "fake", NowNS: time.Now().UnixNano(), World: 4}
			for i, rk := range ranks {
				in.Ranks = append(in.Ranks, node.RankInfo{Rank: rk, LocalRank: i, PID: 1000 + rk, Alive: true, Kind: "probing-mcp"})
			}
			writeJSON(w, in)
		default:
			w.WriteHeader(http.StatusNotFound)
			writeJSON(w, map[string]string{"error": "no route for " + r.URL.Path})
		}
	}))
	t.Cleanup(f.srv.Close)
	f.node = cluster.Node{Host: host, Addr: strings.TrimPrefix(f.srv.URL, "http://"), NodeRank: nodeRank, Ranks: rankRange(ranks), Kind: cluster.KindDaemon}
	return f
}

func rankRange(ranks []int) string {
	var s []string
	for _, r := range ranks {
		s = append(s, strconv.Itoa(r))
	}
	return strings.Join(s, ",")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// rankProcess is one rank's process with its main thread in fn (file:line).
func rankProcess(rank int, file string, line int, fn string) stacks.Process {
	return stacks.Process{PID: 1000 + rank, Rank: rank, Source: stacks.SourceAgent, CapturedAt: time.Now(),
		Threads: []stacks.Thread{{ID: 1, NativeID: 1000 + rank, Name: "MainThread", IsMain: true, State: "S",
			Frames: []stacks.Frame{{File: file, Line: line, Function: fn}, {File: "/job/train.py", Line: 3, Function: "<module>"}}}}}
}

// rankEvidence is a live rank's evidence with its main thread in fn.
func rankEvidence(rank int, file string, line int, fn string) *evidence.RankEvidence {
	p := rankProcess(rank, file, line, fn)
	return &evidence.RankEvidence{Rank: rank, PID: p.PID, Alive: true, Main: &p.Threads[0], Threads: p.Threads,
		StackSource: stacks.SourceAgent, NowNS: time.Now().UnixNano()}
}

// evidenceReply is a node's bundle of these ranks' evidence.
func evidenceReply(world int, ranks ...*evidence.RankEvidence) node.EvidenceReply {
	b := &evidence.Bundle{World: world, Ranks: map[int]*evidence.RankEvidence{}}
	for _, r := range ranks {
		b.Ranks[r.Rank] = r
	}
	return node.EvidenceReply{Bundle: b}
}
