package sqlengine

import (
	"strings"

	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/tabledocs"
)

// The documentation tables, Probing's table_docs and column_docs plus
// what this engine knows better: the type of every column (from the ring
// files when they exist), whether a table has data now, and one row per
// ring file (probing.rings) with its writer's liveness and ring counters.
const docsSchema = `
CREATE TABLE probing.table_docs(table_schema TEXT, table_name TEXT, description TEXT, synonyms TEXT, notes TEXT, global_name TEXT, storage TEXT, key_columns TEXT, processes INTEGER);
CREATE TABLE probing.column_docs(table_schema TEXT, table_name TEXT, column_name TEXT, data_type TEXT, unit TEXT, description TEXT, ordinal INTEGER);
CREATE TABLE probing.rings(schema_name TEXT, table_name TEXT, pid INTEGER, path TEXT, writer_alive INTEGER, columns INTEGER, chunks INTEGER, chunk_size INTEGER, bytes INTEGER, dedup INTEGER, chunks_recycled INTEGER, rows_overwritten INTEGER, writes_blocked INTEGER);
`

func (s *session) createDocs() error {
	if err := s.exec(`ATTACH DATABASE ':memory:' AS probing`); err != nil {
		return err
	}
	for _, stmt := range strings.Split(strings.TrimSpace(docsSchema), ";\n") {
		if err := s.exec(strings.TrimSuffix(stmt, ";")); err != nil {
			return err
		}
	}
	if err := s.exec("BEGIN"); err != nil {
		return err
	}
	for _, t := range catalog(s.inv, s.sources) {
		if err := s.exec(`INSERT INTO probing.table_docs VALUES(?,?,?,?,?,?,?,?,?)`,
			t.Schema, t.Name, t.Description, strings.Join(t.Synonyms, ", "), t.Notes,
			"", t.Storage, strings.Join(t.KeyColumns, ", "), int64(t.processes)); err != nil {
			return err
		}
		for i, c := range t.Columns {
			if err := s.exec(`INSERT INTO probing.column_docs VALUES(?,?,?,?,?,?,?)`,
				t.Schema, t.Name, c.Name, c.Type, c.Unit, c.Description, int64(i+1)); err != nil {
				return err
			}
		}
	}
	for _, r := range s.inv.Rings() {
		g := r.Geometry
		if err := s.exec(`INSERT INTO probing.rings VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			r.Schema, r.Table, int64(r.PID), r.Path, b2i(r.WriterAlive), int64(len(r.Columns)),
			int64(g.NumChunks), int64(g.ChunkSize), int64(g.FileSize()), b2i(r.Dedup),
			int64(r.Counters.ChunksRecycled), int64(r.Counters.RowsOverwritten), int64(r.Counters.WritesBlocked)); err != nil {
			return err
		}
	}
	return s.exec("COMMIT")
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// docTable is a documented table with what the data dir says about it.
type docTable struct {
	tabledocs.Table
	processes int
}

// catalog merges the built-in docs with the rings present: a ring table
// nobody documented still gets its columns (types from the file), and a
// documented one gets the types its files really have.
func catalog(inv *storage.Inventory, sources []*source) []docTable {
	present := map[string]*source{}
	for _, src := range sources {
		present[strings.ToLower(src.schema+"."+src.table)] = src
	}
	var out []docTable
	seen := map[string]bool{}
	for _, t := range tabledocs.Builtin() {
		key := strings.ToLower(t.Schema + "." + t.Name)
		seen[key] = true
		d := docTable{Table: t}
		if src := present[key]; src != nil {
			d.processes = len(src.files)
			d.Columns = mergeColumns(t.Columns, src)
		}
		if t.Storage == "ring" {
			d.Columns = append(d.Columns, tabledocs.TagColumns()...)
		}
		out = append(out, d)
	}
	for _, src := range sources {
		key := strings.ToLower(src.schema + "." + src.table)
		if seen[key] {
			continue
		}
		d := docTable{Table: tabledocs.Table{Schema: src.schema, Name: src.table, Storage: "ring",
			Description: "Ring table found in the data dir; not one of the documented built-in tables."},
			processes: len(src.files)}
		d.Columns = append(mergeColumns(nil, src), tabledocs.TagColumns()...)
		out = append(out, d)
	}
	return out
}

// mergeColumns lists a present table's columns in file order, documented
// ones with their docs and the file's dtype, then documented columns the
// files lack.
func mergeColumns(doc []tabledocs.Column, src *source) []tabledocs.Column {
	byName := map[string]tabledocs.Column{}
	for _, c := range doc {
		byName[strings.ToLower(c.Name)] = c
	}
	var out []tabledocs.Column
	used := map[string]bool{}
	for _, c := range src.cols {
		d, ok := byName[strings.ToLower(c.name)]
		if !ok {
			d = tabledocs.Column{Name: c.name, Description: "(undocumented column)"}
		}
		d.Type = c.typ.String()
		used[strings.ToLower(c.name)] = true
		out = append(out, d)
	}
	for _, c := range doc {
		if !used[strings.ToLower(c.Name)] {
			c.Description += " (not in the files recorded here)"
			out = append(out, c)
		}
	}
	return out
}

// createInfoSchema serves information_schema.tables and .columns, which
// Probing's skills and SQL habits expect (its engine is DataFusion). They
// list the ring tables of this data dir (with the tag columns) and the
// documentation tables; SQLite's own catalog stays in pragma_table_list.
func (s *session) createInfoSchema(withDocs bool) error {
	for _, q := range []string{
		`ATTACH DATABASE ':memory:' AS information_schema`,
		`CREATE TABLE information_schema.tables(table_catalog TEXT, table_schema TEXT, table_name TEXT, table_type TEXT)`,
		`CREATE TABLE information_schema.columns(table_catalog TEXT, table_schema TEXT, table_name TEXT, column_name TEXT, ordinal_position INTEGER, data_type TEXT, is_nullable TEXT)`,
		"BEGIN",
	} {
		if err := s.exec(q); err != nil {
			return err
		}
	}
	add := func(schema, table, typ string, cols []string, types []string) error {
		if err := s.exec(`INSERT INTO information_schema.tables VALUES('probe',?,?,?)`, schema, table, typ); err != nil {
			return err
		}
		for i, c := range cols {
			if err := s.exec(`INSERT INTO information_schema.columns VALUES('probe',?,?,?,?,?,'YES')`, schema, table, c, int64(i+1), types[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, src := range s.sources {
		var cols, types []string
		for _, c := range src.cols {
			cols, types = append(cols, c.name), append(types, c.typ.String())
		}
		for _, t := range tagNames {
			cols = append(cols, t)
			if t == "_host" || t == "_addr" || t == "_role" {
				types = append(types, "TEXT")
			} else {
				types = append(types, "INTEGER")
			}
		}
		if err := add(src.schema, src.table, "BASE TABLE", cols, types); err != nil {
			return err
		}
	}
	if withDocs {
		for _, t := range []struct {
			name string
			cols []string
		}{
			{"table_docs", []string{"table_schema", "table_name", "description", "synonyms", "notes", "global_name", "storage", "key_columns", "processes"}},
			{"column_docs", []string{"table_schema", "table_name", "column_name", "data_type", "unit", "description", "ordinal"}},
			{"rings", []string{"schema_name", "table_name", "pid", "path", "writer_alive", "columns", "chunks", "chunk_size", "bytes", "dedup", "chunks_recycled", "rows_overwritten", "writes_blocked"}},
		} {
			types := make([]string, len(t.cols))
			for i := range types {
				types[i] = "TEXT"
			}
			if err := add("probing", t.name, "VIEW", t.cols, types); err != nil {
				return err
			}
		}
	}
	return s.exec("COMMIT")
}
