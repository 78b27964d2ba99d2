package tools

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/stacks"
)

type oneRank struct {
	node.Local
	rank int
}

func (o *oneRank) Stacks(context.Context, node.StacksRequest) (*node.StacksReply, error) {
	return &node.StacksReply{Processes: []stacks.Process{{PID: 100 + o.rank, Rank: o.rank, Source: "agent",
		Threads: []stacks.Thread{{Name: "MainThread", IsMain: true, Frames: []stacks.Frame{{File: "train.py", Line: 1, Function: "step"}}}}}}}, nil
}

// TestWholeJobProgress: a client that passes a progressToken gets one
// notifications/progress per node answered while get_stacks fans out.
func TestWholeJobProgress(t *testing.T) {
	var members []cluster.Node
	for r := 0; r < 3; r++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		self := cluster.Node{Host: "n", Addr: ln.Addr().String(), NodeRank: r, Kind: cluster.KindDaemon, Source: "peers"}
		srv := &http.Server{Handler: node.Handler(node.Config{Source: &oneRank{rank: r}})}
		go srv.Serve(ln)
		defer srv.Close()
		members = append(members, self)
	}
	j := fanout.NewJob(func(context.Context) ([]cluster.Node, []string, error) { return members, nil, nil },
		fanout.NewClient("", 4), fanout.Options{Concurrency: 1, PeerTimeout: 30 * time.Second, Deadline: 60 * time.Second})
	env := &Env{Cluster: j}
	s := server.NewMCPServer("t", "0")
	for _, d := range All(env) {
		if d.Tool.Name == "get_stacks" {
			s.AddTool(d.Tool, d.Handler)
		}
	}
	c, err := client.NewInProcessClient(s)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var got []string
	c.OnNotification(func(n mcplib.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			mu.Lock()
			got = append(got, fmt.Sprint(n.Params.AdditionalFields["progress"]))
			mu.Unlock()
		}
	})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var ir mcplib.InitializeRequest
	ir.Params.ProtocolVersion = mcplib.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, ir); err != nil {
		t.Fatal(err)
	}
	var req mcplib.CallToolRequest
	req.Params.Name = "get_stacks"
	req.Params.Meta = &mcplib.Meta{ProgressToken: "p1"}
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("progress notifications %v, want 1, 2, 3", got)
	}
}
