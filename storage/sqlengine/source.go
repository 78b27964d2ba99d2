package sqlengine

import (
	"fmt"
	"runtime/cgo"
	"strings"

	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// tagNames are the columns appended to every ring table, in vtab.c's order.
var tagNames = []string{"_host", "_addr", "_rank", "_node_rank", "_local_rank", "_role", "_pid"}

// addRing adds one process's file of this table.
func (src *source) addRing(r *storage.Ring, id storage.Identity) {
	f := &fileSrc{ring: r}
	f.tagStr = [3]string{id.Host, id.Addr, id.Role}
	f.tagInt = [4]int64{int64(id.Rank), int64(id.NodeRank), int64(id.LocalRank), int64(r.PID)}
	src.files = append(src.files, f)
}

// fileColumnNames gives a file's columns the names they get in SQL: empty
// names and duplicates (possible in a hostile file) become distinct, and a
// name that would shadow a tag column is suffixed.
func fileColumnNames(cols []memt.Column) []string {
	used := map[string]bool{}
	for _, t := range tagNames {
		used[t] = true
	}
	out := make([]string, len(cols))
	for i, c := range cols {
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("col%d", i)
		}
		base := name
		for n := 2; used[strings.ToLower(name)]; n++ {
			name = fmt.Sprintf("%s_%d", base, n)
		}
		used[strings.ToLower(name)] = true
		out[i] = name
	}
	return out
}

// finalize builds the union of the files' columns (by name, first file's
// order and type first) and each file's mapping onto it.
func (src *source) finalize() {
	index := map[string]int{}
	tsName := ""
	names := make([][]string, len(src.files))
	for fi, f := range src.files {
		names[fi] = fileColumnNames(f.ring.Columns)
		for i, n := range names[fi] {
			if _, ok := index[strings.ToLower(n)]; !ok {
				index[strings.ToLower(n)] = len(src.cols)
				src.cols = append(src.cols, vcol{name: n, typ: f.ring.Columns[i].Type})
			}
		}
		if tsName == "" {
			if tc := f.ring.TsCol; tc > 0 && tc <= len(names[fi]) {
				tsName = strings.ToLower(names[fi][tc-1])
			}
		}
	}
	if tsName != "" {
		src.tsCol = index[tsName]
	}
	for fi, f := range src.files {
		f.colmap = make([]int, len(src.cols))
		f.types = make([]byte, len(src.cols))
		for i := range f.colmap {
			f.colmap[i] = -1
		}
		f.identity = len(names[fi]) == len(src.cols)
		for i, n := range names[fi] {
			v := index[strings.ToLower(n)]
			f.colmap[v] = i
			f.types[v] = byte(f.ring.Columns[i].Type)
			if v != i {
				f.identity = false
			}
		}
		if tc := f.ring.TsCol; tc > 0 && tc <= len(names[fi]) && strings.ToLower(names[fi][tc-1]) == tsName {
			f.tsOK = true
		}
	}
}

// newSourceHandle finalizes src and returns the handle vtab.c knows it by.
func newSourceHandle(src *source) cgo.Handle {
	src.finalize()
	src.handle = cgo.NewHandle(src)
	return src.handle
}

// openTable maps a file on first use; a file that changed since the data
// dir was listed (recreated with other columns) is skipped and reported.
func (f *fileSrc) openTable() error {
	if f.t != nil || f.openErr != nil {
		return f.openErr
	}
	t, err := memt.Open(f.ring.Path)
	if err == nil && !sameColumns(t.Columns, f.ring.Columns) {
		t.Close()
		err = fmt.Errorf("memt: %s: columns changed since the data dir was listed", f.ring.Path)
	}
	f.t, f.openErr = t, err
	if err != nil {
		f.t = nil
	}
	return f.openErr
}

func sameColumns(a, b []memt.Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (src *source) close() {
	for _, f := range src.files {
		if f.t != nil {
			f.t.Close()
			f.t = nil
		}
	}
	if src.handle != 0 {
		src.handle.Delete()
		src.handle = 0
	}
}
