package sqlengine

import (
	"fmt"
	"strings"
)

// allowedFunctions are the functions a query may call: SQLite's built-ins
// whose work is at most linear in their arguments (bounded by the value
// length), or that the engine replaces with such versions (boundfn.c:
// replace, instr, trim, ltrim, rtrim, like, glob). The authorizer refuses
// every other name, so a function a newer SQLite adds is refused until it
// has been looked at (TestEveryFunctionIsDecided).
var allowedFunctions = setOf(
	// operators and core scalars
	"->", "->>", "abs", "changes", "char", "coalesce", "concat", "concat_ws", "format", "glob", "hex",
	"if", "ifnull", "iif", "instr", "last_insert_rowid", "length", "like", "likelihood", "likely", "lower",
	"ltrim", "max", "min", "nullif", "octet_length", "printf", "quote", "random", "randomblob", "replace",
	"round", "rtrim", "sign", "sqlite_compileoption_get", "sqlite_compileoption_used", "sqlite_source_id",
	"sqlite_version", "substr", "substring", "subtype", "total_changes", "trim", "typeof", "unhex",
	"unicode", "unistr", "unistr_quote", "unlikely", "upper", "zeroblob",
	// aggregates and window functions (one VM step per row)
	"avg", "count", "cume_dist", "dense_rank", "first_value", "group_concat", "lag", "last_value", "lead",
	"nth_value", "ntile", "percent_rank", "rank", "row_number", "string_agg", "sum", "total",
	// date and time
	"current_date", "current_time", "current_timestamp", "date", "datetime", "julianday", "strftime",
	"time", "timediff", "unixepoch",
	// JSON (parsing and path lookups are linear; json_patch is not)
	"json", "json_array", "json_array_insert", "json_array_length", "json_error_position", "json_extract",
	"json_group_array", "json_group_object", "json_insert", "json_object", "json_pretty", "json_quote",
	"json_remove", "json_replace", "json_set", "json_type", "json_valid", "jsonb", "jsonb_array",
	"jsonb_array_insert", "jsonb_extract", "jsonb_group_array", "jsonb_group_object", "jsonb_insert",
	"jsonb_object", "jsonb_remove", "jsonb_replace", "jsonb_set",
	// present in builds with SQLite's math and percentile options
	"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos", "cosh", "degrees",
	"exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow", "power", "radians", "sin", "sinh",
	"sqrt", "tan", "tanh", "trunc", "median", "percentile", "percentile_cont", "percentile_disc",
)

// refusedFunctions are built-ins looked at and left out, with the reason.
var refusedFunctions = map[string]string{
	"json_patch":  "its work grows with the product of its two arguments' sizes, in one step the time limit cannot interrupt; merge the JSON in the client",
	"jsonb_patch": "its work grows with the product of its two arguments' sizes, in one step the time limit cannot interrupt; merge the JSON in the client",
	"sqlite_log":  "it writes to SQLite's error log, outside the database",
}

// deniedFunctions reach outside the database or change the process.
var deniedFunctions = setOf("load_extension", "fts3_tokenizer", "readfile", "writefile", "edit")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// functionRefusal is why a query may not call name ("" when it may).
func functionRefusal(name string) string {
	n := strings.ToLower(name)
	switch {
	case allowedFunctions[n]:
		return ""
	case deniedFunctions[n]:
		return fmt.Sprintf("read-only SQL engine: function %s() is not allowed; only SELECT, WITH … SELECT, VALUES and EXPLAIN run here", name)
	case refusedFunctions[n] != "":
		return fmt.Sprintf("function %s() is not offered by this SQL engine: %s", name, refusedFunctions[n])
	}
	return fmt.Sprintf("function %s() is not offered by this SQL engine, which runs SQLite's built-in scalar, aggregate, window, date and JSON functions "+
		"(the ones whose cost the time limit bounds)", name)
}
