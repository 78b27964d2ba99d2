package fedsql

import "strings"

// unGlobal drops Probing's "global." qualifier from table names
// (global.python.comm_collective is Probing's federated view of every
// rank): here every table of a whole-job query is already every node's.
// Quoted strings and identifiers are left as they are.
func unGlobal(sql string) string {
	const g = "global."
	if !strings.Contains(strings.ToLower(sql), g) {
		return sql
	}
	var b strings.Builder
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(sql) {
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c { // doubled: escaped
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(sql))
			b.WriteString(sql[i:j])
			i = j
		case (i == 0 || !identByte(sql[i-1])) && len(sql)-i > len(g) && strings.EqualFold(sql[i:i+len(g)], g) && identByte(sql[i+len(g)]):
			i += len(g)
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func identByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
