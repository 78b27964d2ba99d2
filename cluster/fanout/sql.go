package fanout

import (
	"context"
	"net/http"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// remote is one node daemon as fedsql sees it.
type remote struct {
	c *Client
	n cluster.Node
}

func (r remote) ID() string { return r.n.Addr }
func (r remote) Tags() fedsql.NodeTags {
	return fedsql.NodeTags{Host: r.n.Host, Addr: r.n.Addr, NodeRank: r.n.NodeRank}
}

func (r remote) Tables(ctx context.Context) ([]fedsql.Table, error) {
	var ts []fedsql.Table
	return ts, r.c.Do(ctx, r.n, http.MethodPost, node.PathTables, struct{}{}, &ts)
}

func (r remote) Scan(ctx context.Context, req fedsql.ScanRequest) (*fedsql.ScanReply, error) {
	var rep fedsql.ScanReply
	if err := r.c.Do(ctx, r.n, http.MethodPost, node.PathScan, req, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Query is SQL over every node's ring tables (cluster_query): fedsql
// over the daemons, within the fan-out's deadline and concurrency.
func (j *Job) Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, &sqlengine.Error{Kind: "membership", Msg: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, j.Opt.Deadline)
	defer cancel()
	var fn []fedsql.Node
	for _, n := range ns {
		fn = append(fn, remote{j.Client, n})
	}
	res, err := fedsql.Query(ctx, fn, sql, limit, fedsql.Options{Concurrency: j.Opt.Concurrency, Strict: j.Opt.Strict, Limiter: j.Opt.SQL})
	if err == nil && len(problems) > 0 && res.DataQuality != nil {
		res.DataQuality.Notes = append(res.DataQuality.Notes, problems...)
	}
	return res, err
}
