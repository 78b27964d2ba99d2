package sqlengine

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// TestQuadraticBuiltinsAreBounded: SQLite's replace and instr compared the
// pattern at every byte, and trim every character of its set at every
// character: |X|·|Y| work in one uninterruptible call (trim of 256 KiB
// took 91 s, replace of 1 MiB 6.5 s; these inputs took hours). The
// engine's versions search with memmem, and trim takes a bounded set.
func TestQuadraticBuiltinsAreBounded(t *testing.T) {
	e := newEngine(t, t.TempDir())
	const a4m, a2mb = "printf('%.*c', 4000000, 'a')", "(printf('%.*c', 2000000, 'a') || 'b')"
	for q, want := range map[string]int64{
		"SELECT length(replace(" + a4m + ", " + a2mb + ", 'x')) AS n":             4000000,
		"SELECT instr(" + a4m + ", " + a2mb + ") AS n":                            0,
		"SELECT instr(" + a4m + " || 'b', " + a2mb + ") AS n":                     2000001,
		"SELECT length(replace(" + a4m + ", printf('%.*c', 1000, 'a'), '')) AS n": 0,
	} {
		if v, _ := query(t, e, q, 1).Rows[0].Get("n"); v.(int64) != want {
			t.Errorf("%s = %v, want %d", q, v, want)
		}
	}
	qe := queryErr(t, e, context.Background(), "SELECT length(trim(printf('%.*c', 1000000, 'a'), printf('%.*c', 500000, 'b') || 'a'))")
	wantKind(t, qe, "too_big", "256-byte limit", "trim")
}

// builtin evaluates SQL on a plain connection: SQLite's own functions.
type builtin struct {
	mu   sync.Mutex
	conn *sqlite3.SQLiteConn
}

func newBuiltin(tb testing.TB) *builtin {
	c, err := (&sqlite3.SQLiteDriver{}).Open(":memory:")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	sc := c.(*sqlite3.SQLiteConn)
	for _, l := range connLimits(&Options{MaxValueBytes: DefaultMaxValueBytes}) {
		sc.SetLimit(l[0], l[1])
	}
	return &builtin{conn: sc}
}

// value is one result: the value, or that it failed.
type value struct {
	v      driver.Value
	failed bool
}

func evalOn(ctx context.Context, c *sqlite3.SQLiteConn, q string, args []driver.Value) value {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := c.QueryContext(ctx, q, named)
	if err != nil {
		return value{failed: true}
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil && err != io.EOF {
		return value{failed: true}
	}
	if b, ok := dest[0].([]byte); ok {
		dest[0] = append([]byte(nil), b...)
	}
	return value{v: dest[0]}
}

// bounded evaluates each query on an engine session (the bounded
// functions).
func bounded(tb testing.TB, e *Engine, qs []string, args []driver.Value) []value {
	out, err := withSession(context.Background(), e, false, false, func(s *session) ([]value, error) {
		var out []value
		for _, q := range qs {
			out = append(out, evalOn(context.Background(), s.conn, q, args))
		}
		return out, nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

var boundedQueries = []string{
	"SELECT replace(?1, ?2, ?3)",
	"SELECT instr(?1, ?2)",
	"SELECT instr(?2, ?1)",
	"SELECT trim(?1)", "SELECT ltrim(?1)", "SELECT rtrim(?1)",
	"SELECT trim(?1, ?2)", "SELECT ltrim(?1, ?2)", "SELECT rtrim(?1, ?2)",
	"SELECT ?1 LIKE ?2", "SELECT ?1 GLOB ?2", "SELECT ?1 LIKE ?2 ESCAPE ?3",
	"SELECT ?2 LIKE ?1", "SELECT ?2 GLOB ?1",
}

// compareBounded checks that the engine's functions answer as SQLite's
// own, except where the engine refuses by design.
func compareBounded(t *testing.T, e *Engine, b *builtin, args []driver.Value) {
	t.Helper()
	got := bounded(t, e, boundedQueries, args)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range boundedQueries {
		want := evalOn(context.Background(), b.conn, q, args)
		if reflect.DeepEqual(got[i], want) {
			continue
		}
		if got[i].failed && refusedByDesign(q, args) {
			continue
		}
		t.Errorf("%s with %#v: engine %#v, SQLite %#v", q, args, got[i], want)
	}
}

// refusedByDesign: a trim set over 256 bytes.
func refusedByDesign(q string, args []driver.Value) bool {
	// The C string SQLite's functions see: up to the first NUL.
	text := func(v driver.Value) string {
		s := fmt.Sprint(v)
		switch x := v.(type) {
		case string:
			s = x
		case []byte:
			s = string(x)
		}
		if i := strings.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
		return s
	}
	return strings.Contains(q, "trim(?1, ?2)") && len(text(args[1])) > 256
}

func TestBoundedFunctionsMatchSQLite(t *testing.T) {
	e := newEngine(t, t.TempDir())
	b := newBuiltin(t)
	for _, args := range boundedSeeds() {
		compareBounded(t, e, b, args)
	}
}

func boundedSeeds() [][]driver.Value {
	long := strings.Repeat("ab", 300)
	return [][]driver.Value{
		{"hello world", "o", "0"},
		{"aaaa", "aa", "b"},
		{"aaaa", "", "x"},
		{"", "a", "x"},
		{"héllo wörld", "ö", "oe"},
		{"héllo", "\xa9", "x"},       // a continuation byte alone
		{"\xa9abc\xa9", "\xa9", "!"}, // leading continuation byte
		{"a\x00b\x00c", "\x00", "-"},
		{[]byte("a\x00b\x00c"), []byte{0}, []byte("-")},
		{[]byte{0xc3, 0xa9, 0xa9}, "\xa9", "x"},
		{"éé", []byte{0xa9}, "x"},
		{"  padded\t ", " \t", "x"},
		{"xxhixx", "x", "x"},
		{"[1, 2]", "[]", "x"},
		{"\xc0\x80\x80abc\xc0\x80", "\xc0\x80\x80\xc0\x80", "x"},
		{"abc", "A%", "\\"},
		{"a%c", "a\\%c", "\\"},
		{"a_c", "a__", "_"},
		{"a%c", "a%%c", "%"},
		{"a%c_", "a%%_", "%"},
		{"a%c", "a%", "%"},
		{"a_c%x", "a__c%", "_"},
		{"a\uE000c", "a\uE000%", "%"},
		{"ac", "a%%c", "%"},
		{"abc", "a[bx]c", "x"},
		{"abc", "*[!a]*", "x"},
		{"ÀÉ", "àé", "x"},
		{long, strings.Repeat("a", 101), "x"},
		{long, strings.Repeat("b", 300), "x"},
		{long, "%" + strings.Repeat("ab", 40) + "%", "€"},
		{nil, "a", "b"},
		{"a", nil, "b"},
		{"a", "a", nil},
		{int64(12312), int64(12), int64(9)},
		{3.5, ".", ","},
	}
}

// FuzzBoundedFunctions compares the engine's replace, instr, trim, ltrim,
// rtrim, like and glob with SQLite's built-ins.
//
//	go test ./storage/sqlengine -run '^$' -fuzz FuzzBoundedFunctions -fuzztime 60s
func FuzzBoundedFunctions(f *testing.F) {
	for _, s := range boundedSeeds() {
		var kinds byte
		parts := make([][]byte, 3)
		for i, v := range s {
			switch x := v.(type) {
			case string:
				parts[i] = []byte(x)
			case []byte:
				parts[i], kinds = x, kinds|1<<(2*i)
			default:
				kinds |= 2 << (2 * i)
			}
		}
		f.Add(parts[0], parts[1], parts[2], kinds)
	}
	e, err := New(Options{DataDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	b := newBuiltin(f)
	f.Fuzz(func(t *testing.T, x, y, z []byte, kinds byte) {
		args := make([]driver.Value, 3)
		for i, p := range [][]byte{x, y, z} {
			switch (kinds >> (2 * i)) & 3 {
			case 0:
				args[i] = string(p)
			case 1:
				args[i] = p
			case 2:
				args[i] = nil
			default:
				args[i] = int64(len(p)) * 7
			}
		}
		compareBounded(t, e, b, args)
	})
}

// TestEveryFunctionIsDecided: every function SQLite offers a connection
// was looked at (funcs.go): allowed as bounded, or refused with a reason.
// A newer SQLite's new built-in fails here until someone decides.
func TestEveryFunctionIsDecided(t *testing.T) {
	b := newBuiltin(t)
	rows, err := b.conn.QueryContext(context.Background(), "SELECT DISTINCT name, builtin FROM pragma_function_list", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	dest := make([]driver.Value, 2)
	n := 0
	for rows.Next(dest) == nil {
		n++
		name := dest[0].(string)
		if dest[1].(int64) == 0 {
			// Registered by extensions compiled into go-sqlite3 (FTS3,
			// R-Tree, user auth): their tables cannot be created here.
			if allowedFunctions[name] {
				t.Errorf("%s() comes from an extension and must not be allowed", name)
			}
			continue
		}
		if !allowedFunctions[name] && refusedFunctions[name] == "" && !deniedFunctions[name] {
			t.Errorf("SQLite built-in %s() is neither allowed nor refused: look at its cost and add it to funcs.go", name)
		}
	}
	if n < 100 {
		t.Fatalf("only %d functions listed", n)
	}
	e := newEngine(t, t.TempDir())
	for _, q := range []string{"SELECT json_patch('{}', '{}')", "SELECT sqlite_log(1, 'x')", "SELECT auth_user_add('u', 'p', 1)", "SELECT load_extension('x')"} {
		if qe := queryErr(t, e, context.Background(), q); qe.Kind != "read_only" {
			t.Errorf("%s: %v", q, qe)
		}
	}
}
