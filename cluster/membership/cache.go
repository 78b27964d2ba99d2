package membership

import (
	"context"
	"fmt"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
)

// CacheTTL is how long a membership read is reused: the job's store was
// re-read on every call (issue 23: 4,000 planted slots cost 2-5 s a
// call), while nodes join a running job rarely.
const CacheTTL = 10 * time.Second

// Cache reuses one membership read for TTL, and one read at a time: the
// callers that arrive while it runs wait for it (or their deadline).
type Cache struct {
	TTL  time.Duration
	Now  func() time.Time
	Read func(ctx context.Context) ([]cluster.Node, []string, error)

	sem      chan struct{}
	at       time.Time
	nodes    []cluster.Node
	problems []string
}

// NewCache wraps read; now nil means time.Now.
func NewCache(ttl time.Duration, now func() time.Time, read func(ctx context.Context) ([]cluster.Node, []string, error)) *Cache {
	if now == nil {
		now = time.Now
	}
	return &Cache{TTL: ttl, Now: now, Read: read, sem: make(chan struct{}, 1)}
}

// Get is the membership, read now or at most TTL ago; a reused one says
// its age among the problems. A failed read is not kept.
func (c *Cache) Get(ctx context.Context) ([]cluster.Node, []string, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("membership: another call is reading the job's store, and no time is left to wait for it (%v)", ctx.Err())
	}
	defer func() { <-c.sem }()
	now := c.Now()
	if !c.at.IsZero() && now.Sub(c.at) < c.TTL && now.Sub(c.at) >= 0 {
		age := now.Sub(c.at)
		var ps []string
		if age >= time.Second {
			// First: what the store said can be thousands of lines, and
			// the tools show the first few.
			ps = append(ps, fmt.Sprintf("membership as read %s ago (the job's store is re-read every %s)", age.Round(time.Second), c.TTL))
		}
		ps = append(ps, c.problems...)
		return append([]cluster.Node(nil), c.nodes...), ps, nil
	}
	ns, ps, err := c.Read(ctx)
	if err != nil {
		c.at = time.Time{}
		return ns, ps, err
	}
	c.at, c.nodes, c.problems = c.Now(), ns, ps
	return append([]cluster.Node(nil), ns...), append([]string(nil), ps...), nil
}
