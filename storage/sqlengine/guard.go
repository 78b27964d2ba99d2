package sqlengine

import (
	"fmt"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// checkStatement refuses empty SQL and more than one statement before
// SQLite sees it. go-sqlite3 would run every statement but the last one
// silently and return the last one's rows, so "SELECT 1; SELECT 2" would
// answer a different question than the one the caller reads. This is a
// convenience for clear errors; the authorizer is what keeps the engine
// read-only.
func checkStatement(q string) error {
	stmts := splitStatements(q)
	switch {
	case len(stmts) == 0:
		return &Error{Kind: "empty", Msg: "SQL must not be empty"}
	case len(stmts) > 1:
		return &Error{Kind: "multiple", Msg: fmt.Sprintf("one SQL statement per query, got %d; send them one at a time", len(stmts))}
	}
	// A statement that changes nothing when it runs (DROP VIEW IF EXISTS
	// of a missing view, REINDEX with no index) never reaches the
	// authorizer, so it would "succeed": refuse every statement that is
	// not a query by its first word as well.
	switch kw := firstKeyword(stmts[0]); kw {
	case "SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA", "(":
	case "":
		return &Error{Kind: "read_only", Msg: "read-only SQL engine: a query starts with SELECT, WITH, VALUES or EXPLAIN"}
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT", "CREATE", "DROP", "ALTER", "ATTACH", "DETACH", "VACUUM",
		"REINDEX", "ANALYZE", "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE":
		return &Error{Kind: "read_only", Msg: fmt.Sprintf("read-only SQL engine: %s statements are not allowed; only SELECT, WITH … SELECT, VALUES and EXPLAIN run here", kw)}
	default:
		// Not a statement SQLite knows: most often a typo (SELEC).
		hint := ""
		if near := nearestKeyword(kw); near != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", near)
		}
		return &Error{Kind: "syntax", Msg: fmt.Sprintf("syntax error: a statement cannot start with %q%s; a query starts with SELECT, WITH, VALUES or EXPLAIN", kw, hint)}
	}
	return nil
}

// firstKeyword is the statement's first word, upper-cased ("(" for a
// parenthesised query). splitStatements already dropped leading blanks,
// but comments may still lead.
func firstKeyword(stmt string) string {
	for {
		stmt = strings.TrimLeft(stmt, " \t\n\r\f\v")
		switch {
		case strings.HasPrefix(stmt, "--"):
			i := strings.IndexByte(stmt, '\n')
			if i < 0 {
				return ""
			}
			stmt = stmt[i+1:]
		case strings.HasPrefix(stmt, "/*"):
			i := strings.Index(stmt, "*/")
			if i < 0 {
				return ""
			}
			stmt = stmt[i+2:]
		case strings.HasPrefix(stmt, "("):
			return "("
		default:
			end := 0
			for end < len(stmt) && (stmt[end] == '_' || stmt[end] >= 'a' && stmt[end] <= 'z' || stmt[end] >= 'A' && stmt[end] <= 'Z') {
				end++
			}
			return strings.ToUpper(stmt[:end])
		}
	}
}

// splitStatements cuts q at semicolons outside quotes, identifiers and
// comments, and drops statements that are only blanks and comments.
func splitStatements(q string) []string {
	var out []string
	start := 0
	content := false // the current statement has a token
	flush := func(end int) {
		if content {
			// SQLite's blanks are ASCII only: "\u3000" is a (bad) token.
			out = append(out, strings.Trim(q[start:end], " \t\n\r\f\v"))
		}
		start, content = end+1, false
	}
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == ';':
			flush(i)
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				i = len(q)
			} else {
				i += end + 3
			}
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closer := c
			if c == '[' {
				closer = ']'
			}
			content = true
			for i++; i < len(q); i++ {
				if q[i] == closer {
					// A doubled quote is an escaped quote, not the end.
					if closer != ']' && i+1 < len(q) && q[i+1] == closer {
						i++
						continue
					}
					break
				}
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
		default:
			content = true
		}
	}
	flush(len(q))
	return out
}

// SQLite action code not exported by go-sqlite3.
const sqliteRecursive = 33

// readOnlyPragmas may run without a value: they only describe the schema.
var readOnlyPragmas = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true,
	"index_info": true, "index_xinfo": true, "database_list": true, "function_list": true,
	"module_list": true, "pragma_list": true, "collation_list": true, "foreign_key_list": true,
}

// authorize is the SQLite authorizer installed after setup: reads only,
// and only the functions funcs.go allows.
func (s *session) authorize(op int, a1, a2, a3 string) int {
	if op == sqlite3.SQLITE_FUNCTION {
		msg := functionRefusal(a2)
		if msg == "" {
			return sqlite3.SQLITE_OK
		}
		if s.denied == "" {
			s.denied, s.deniedFunc = "function "+a2+"()", msg
		}
		return sqlite3.SQLITE_DENY
	}
	allow, what := policy(op, a1, a2)
	if allow {
		return sqlite3.SQLITE_OK
	}
	if s.denied == "" {
		s.denied = what
	}
	return sqlite3.SQLITE_DENY
}

// policy decides one authorizer request and names a denied one.
func policy(op int, a1, a2 string) (bool, string) {
	switch op {
	case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqliteRecursive:
		return true, ""
	case sqlite3.SQLITE_PRAGMA:
		// These only describe the schema; their argument (a2) names a
		// table or index, it does not set anything.
		if readOnlyPragmas[strings.ToLower(a1)] {
			return true, ""
		}
		if a2 != "" {
			return false, fmt.Sprintf("PRAGMA %s = %s", a1, a2)
		}
		return false, "PRAGMA " + a1
	case sqlite3.SQLITE_INSERT:
		return false, "INSERT into " + a1
	case sqlite3.SQLITE_UPDATE:
		return false, "UPDATE of " + a1
	case sqlite3.SQLITE_DELETE:
		return false, "DELETE from " + a1
	case sqlite3.SQLITE_ATTACH:
		return false, "ATTACH"
	case sqlite3.SQLITE_DETACH:
		return false, "DETACH"
	case sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT:
		return false, "transaction control"
	case sqlite3.SQLITE_CREATE_TEMP_TABLE, sqlite3.SQLITE_CREATE_TEMP_INDEX, sqlite3.SQLITE_CREATE_TEMP_VIEW, sqlite3.SQLITE_CREATE_TEMP_TRIGGER:
		return false, "creating temporary " + a1
	case sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_CREATE_VIEW, sqlite3.SQLITE_CREATE_TRIGGER, sqlite3.SQLITE_CREATE_VTABLE:
		return false, "CREATE " + a1
	case sqlite3.SQLITE_DROP_TABLE, sqlite3.SQLITE_DROP_INDEX, sqlite3.SQLITE_DROP_VIEW, sqlite3.SQLITE_DROP_TRIGGER, sqlite3.SQLITE_DROP_VTABLE,
		sqlite3.SQLITE_DROP_TEMP_TABLE, sqlite3.SQLITE_DROP_TEMP_INDEX, sqlite3.SQLITE_DROP_TEMP_VIEW, sqlite3.SQLITE_DROP_TEMP_TRIGGER:
		return false, "DROP " + a1
	case sqlite3.SQLITE_ALTER_TABLE:
		return false, "ALTER TABLE " + a2
	case sqlite3.SQLITE_REINDEX:
		return false, "REINDEX"
	case sqlite3.SQLITE_ANALYZE:
		return false, "ANALYZE"
	}
	return false, fmt.Sprintf("SQLite action %d", op)
}

// nearestKeyword is the query keyword word is a typo of (one edit away, or
// a prefix of three letters or more), or "".
func nearestKeyword(word string) string {
	for _, k := range []string{"SELECT", "WITH", "VALUES", "EXPLAIN"} {
		if (len(word) >= 3 && strings.HasPrefix(k, word)) || editDistance1(word, k) {
			return k
		}
	}
	return ""
}

// editDistance1: a and b differ by one insertion, deletion or substitution,
// or one swap of neighbours.
func editDistance1(a, b string) bool {
	if a == b || len(a) > len(b)+1 || len(b) > len(a)+1 {
		return false
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	switch {
	case len(a) == len(b):
		return a[i+1:] == b[i+1:] || (i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:])
	case len(a) < len(b):
		return a[i:] == b[i+1:]
	default:
		return a[i+1:] == b[i:]
	}
}
