package membership

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
)

// TestCacheReusesAReadAndSaysItsAge: calls within the TTL reuse one read
// of the store and say how old it is; after the TTL, or after a failed
// read, the store is read again.
func TestCacheReusesAReadAndSaysItsAge(t *testing.T) {
	now := time.Unix(1000, 0)
	var reads atomic.Int32
	fail := false
	c := NewCache(10*time.Second, func() time.Time { return now }, func(ctx context.Context) ([]cluster.Node, []string, error) {
		reads.Add(1)
		if fail {
			return nil, []string{"store down"}, errors.New("store down")
		}
		return []cluster.Node{{Host: "a", Addr: "10.0.0.1:1"}}, []string{"slot 3 skipped"}, nil
	})
	ctx := context.Background()
	ns, ps, err := c.Get(ctx)
	if err != nil || len(ns) != 1 || len(ps) != 1 || reads.Load() != 1 {
		t.Fatalf("%v %v %v", ns, ps, err)
	}
	now = now.Add(4 * time.Second)
	ns, ps, err = c.Get(ctx)
	if err != nil || len(ns) != 1 || reads.Load() != 1 || !strings.Contains(strings.Join(ps, ";"), "membership as read 4s ago") {
		t.Fatalf("cached: %v %v %v (%d reads)", ns, ps, err, reads.Load())
	}
	now = now.Add(7 * time.Second)
	fail = true
	if _, _, err := c.Get(ctx); err == nil || reads.Load() != 2 {
		t.Fatalf("after the TTL: %v (%d reads)", err, reads.Load())
	}
	fail = false
	if _, ps, err := c.Get(ctx); err != nil || reads.Load() != 3 || strings.Contains(strings.Join(ps, ";"), "ago") {
		t.Fatalf("after a failure: %v %v (%d reads)", ps, err, reads.Load())
	}
}

// TestCacheWaitIsBoundedByTheCaller: a call that arrives while another
// reads the store waits only until its own deadline.
func TestCacheWaitIsBoundedByTheCaller(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	c := NewCache(time.Minute, nil, func(ctx context.Context) ([]cluster.Node, []string, error) {
		close(started)
		<-release
		return nil, nil, nil
	})
	go c.Get(context.Background())
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.Get(ctx); err == nil || !strings.Contains(err.Error(), "no time is left") {
		t.Fatal(err)
	}
	close(release)
}
