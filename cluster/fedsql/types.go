// Package fedsql is SQL over every node's ring tables: what one node
// serves (Local, over its own sqlengine.Engine) and the wire types the
// coordinator asks it with. It has no MCP and no transport imports.
package fedsql

import "context"

// Node is what one node of the job serves: on the node, Local; on the
// coordinator, a transport client.
type Node interface {
	// ID is the node's address, unique within the job.
	ID() string
	// Tags override the _host, _addr and _node_rank columns of its rows.
	Tags() NodeTags
	Tables(ctx context.Context) ([]Table, error)
	Scan(ctx context.Context, req ScanRequest) (*ScanReply, error)
}

// NodeTags name a node the way its rows' tag columns do.
type NodeTags struct {
	Host     string `json:"host"`
	Addr     string `json:"addr"`
	NodeRank int    `json:"node_rank"`
}

// Table is one ring table of a node, tag columns included.
type Table struct {
	Schema  string   `json:"schema"`
	Name    string   `json:"name"`
	Columns []Column `json:"columns"`
}

// Column is one column of a Table.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Constraint is one filter pushed down to a node: Column Op Value, Op one
// of = != < <= > >=. Value is a number or a string.
type Constraint struct {
	Column string `json:"column"`
	Op     string `json:"op"`
	Value  any    `json:"value"`
}

// ScanRequest asks a node for the rows of one table.
type ScanRequest struct {
	Schema  string       `json:"schema"`
	Table   string       `json:"table"`
	Columns []string     `json:"columns"`
	Where   []Constraint `json:"where,omitempty"`
	Limit   int          `json:"limit,omitempty"`
}

// ScanReply is a node's answer. Truncated: rows were left out (a cap);
// Problems: what the node's data-quality report said.
type ScanReply struct {
	Columns   []string `json:"columns"`
	Rows      [][]any  `json:"rows"`
	Truncated bool     `json:"truncated,omitempty"`
	Problems  []string `json:"problems,omitempty"`
}
