package pickle

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// tagged renders v in the tagged JSON form of testdata/gen_vectors.py.
func tagged(d *Doc, v Value) any {
	t := func(kind string, val any) map[string]any {
		m := map[string]any{"t": kind}
		if val != nil {
			m["v"] = val
		}
		return m
	}
	switch v.Kind() {
	case None:
		return t("None", nil)
	case Bool:
		b, _ := v.Bool()
		return t("bool", b)
	case Int:
		n, _ := v.Int()
		return t("int", strconv.FormatInt(n, 10))
	case BigInt:
		s, _ := d.Text(v)
		return t("bigint", s)
	case Float:
		f, _ := v.Float()
		return t("float", pyFloat(f))
	case String:
		s, _ := d.Str(v)
		return t("str", s)
	case Bytes:
		s, _ := d.Text(v)
		return t("bytes", base64.StdEncoding.EncodeToString([]byte(s)))
	case List, Tuple:
		out := []any{}
		for _, it := range d.Items(v) {
			out = append(out, tagged(d, it))
		}
		if v.Kind() == Tuple {
			return t("tuple", out)
		}
		return t("list", out)
	case Set:
		var out []any
		var keys []string
		for _, it := range d.Items(v) {
			b, _ := json.Marshal(tagged(d, it))
			keys = append(keys, string(b))
		}
		sort.Strings(keys)
		for _, k := range keys {
			var x any
			_ = json.Unmarshal([]byte(k), &x)
			out = append(out, x)
		}
		if out == nil {
			out = []any{}
		}
		return t("set", out)
	case Dict:
		out := []any{}
		for i := 0; i < d.Len(v); i++ {
			k, val := d.Pair(v, i)
			out = append(out, []any{tagged(d, k), tagged(d, val)})
		}
		return t("dict", out)
	}
	return t("?", nil)
}

// pyFloat formats like Python's repr(float) for the values the vectors use.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if strings.Contains(s, "e") {
		mant, exp, _ := strings.Cut(s, "e")
		if exp[0] == '+' {
			exp = exp[1:]
		}
		if strings.HasPrefix(exp, "-0") {
			exp = "-" + exp[2:]
		}
		return mant + "e" + map[bool]string{true: "", false: "+"}[strings.HasPrefix(exp, "-")] + exp
	}
	if !strings.ContainsAny(s, ".n") {
		s += ".0"
	}
	return s
}

func TestCPythonVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name   string          `json:"name"`
		Pickle string          `json:"pickle"`
		Expect json.RawMessage `json:"expect"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 20 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	for _, vec := range vectors {
		t.Run(vec.Name, func(t *testing.T) {
			data, _ := base64.StdEncoding.DecodeString(vec.Pickle)
			doc, st, err := Decode(data, Limits{})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if st.Protocol < 2 {
				t.Errorf("protocol %d", st.Protocol)
			}
			got, _ := json.Marshal(tagged(doc, doc.Root))
			var want any
			_ = json.Unmarshal(vec.Expect, &want)
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) {
				t.Errorf("decoded\n %s\nwant\n %s", got, wantJSON)
			}
		})
	}
}

// TestJitWriterForm decodes what Writer produces: the C++ pickler's shapes
// (MARK before empty containers, memoized strings, typed int lists, LONG1).
func TestJitWriterForm(t *testing.T) {
	w := NewWriter()
	w.BeginDict()
	w.String("version")
	w.String("2.10")
	w.String("empty")
	w.BeginList()
	w.EndList()
	w.String("sizes")
	w.TypedIntList([]int64{4096, 1024})
	w.String("again")
	w.TypedIntList([]int64{})
	w.String("big")
	w.Int(1767225600123456789)
	w.String("neg")
	w.Int(-1)
	w.String("mid")
	w.Int(70000)
	w.String("f")
	w.Float(2.5)
	w.String("pg")
	w.String("0")
	w.String("default_pg")
	w.Tuple2()
	w.String("frame")
	w.BeginDict()
	w.String("name")
	w.String("version") // a memoized string reused as a value
	w.EndDict()
	id := w.Memo()
	w.String("shared")
	w.BeginList()
	w.Get(id)
	w.Get(id)
	w.EndList()
	w.EndDict()
	doc, st, err := Decode(w.Finish(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	v := doc.Root
	if !st.Globals {
		t.Error("typed list not reported in Stats.Globals")
	}
	want := `{"version": "2.10", "empty": [], "sizes": [4096, 1024], "again": [], "big": 1767225600123456789, "neg": -1, "mid": 70000, "f": 2.5, "pg": ("0", "default_pg"), "frame": {"name": "version"}, "shared": [{"name": "version"}, {"name": "version"}]}`
	if got := doc.Repr(v); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	shared, _ := doc.Get(v, "shared")
	if doc.ID(doc.Items(shared)[0]) != doc.ID(doc.Items(shared)[1]) {
		t.Error("memoized dict not shared")
	}
}

func TestRefusedAndMalformed(t *testing.T) {
	cases := []struct {
		name, data, want string
	}{
		{"os.system", "\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00ls\x85R.", "forbidden global (a 9-byte module.name)"},
		{"rebuild tensor", "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n).", "forbidden global"},
		{"stack global eval", "\x80\x04\x8c\x08builtins\x8c\x04eval\x93.", "forbidden global (a 13-byte module.name)"},
		{"build", "\x80\x02}}b.", "BUILD: refused"},
		{"newobj", "\x80\x02)\x81.", "NEWOBJ: refused"},
		{"persid", "\x80\x02K\x01Q.", "BINPERSID: refused"},
		{"ext1", "\x80\x02\x82\x01.", "EXT1: refused"},
		{"text int", "\x80\x02I1\n.", "text-protocol"},
		{"unknown", "\x80\x02\xff.", "unknown opcode 0xff"},
		{"protocol 1", "\x80\x01N.", "unsupported protocol 1"},
		{"no stop", "\x80\x02N", "no STOP"},
		{"empty", "", "no STOP"},
		{"truncated string", "\x80\x02X\xff\xff\xff\x7fab", "truncated"},
		{"truncated int", "\x80\x02J\x01", "truncated"},
		{"huge binunicode8", "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xffab.", "truncated"},
		{"underflow", "\x80\x02a.", "stack underflow"},
		{"append to dict", "\x80\x02}K\x01a.", "append to dict"},
		{"setitems odd", "\x80\x02}(K\x01u.", "odd number"},
		{"unhashable key", "\x80\x02}]K\x01s.", "unhashable dict key of type list"},
		{"bad memo get", "\x80\x02h\x05.", "memo key 5 was never stored"},
		{"memo bomb", "\x80\x02Nr\xff\xff\xff\x7f.", "out of range"},
		{"no mark", "\x80\x02e.", "no MARK"},
		{"bare callable", "\x80\x02cbuiltins\nset\n.", "bare callable"},
		{"reduce non-callable", "\x80\x02K\x01)R.", "REDUCE of a int"},
		{"intlist bad arg", "\x80\x02ctorch.jit._pickle\nbuild_intlist\nK\x01\x85R.", "expects one list"},
		{"self contain", "\x80\x02]q\x00h\x00a.", "contains itself"},
		{"long4 negative", "\x80\x02\x8b\xff\xff\xff\xff.", "negative length"},
		{"long too big", "\x80\x02\x8b\x00\x10\x00\x00" + strings.Repeat("\x01", 4096) + ".", "longer than"},
		{"mark underflow", "\x80\x02K\x01(a.", "stack underflow"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Decode([]byte(c.data), Limits{})
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to contain %q", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "pickle: offset ") {
				t.Errorf("error %q does not name the offset", err)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	deep := "\x80\x02" + strings.Repeat("](", 100) + strings.Repeat("e", 100) + "."
	if _, _, err := Decode([]byte(deep), Limits{}); err == nil || !strings.Contains(err.Error(), "nesting deeper than 64") {
		t.Errorf("deep nesting: %v", err)
	}
	if _, _, err := Decode([]byte("\x80\x02"+strings.Repeat("N", 100)+"."), Limits{MaxValues: 50}); err == nil || !strings.Contains(err.Error(), "more than 50 values") {
		t.Errorf("value limit: %v", err)
	}
	if _, _, err := Decode([]byte("\x80\x02"+strings.Repeat("(", 2000)+"."), Limits{}); err == nil || !strings.Contains(err.Error(), "nested MARKs") {
		t.Errorf("mark limit: %v", err)
	}
	// A memo cycle passes the decoder (Python allows it too); String must
	// still terminate.
	cyc := "\x80\x02]q\x00]q\x01h\x00aa."
	doc, _, err := Decode([]byte(cyc), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if s := doc.Repr(doc.Root); !strings.Contains(s, "...") {
		t.Errorf("cyclic repr not cut: %s", s)
	}
}

func TestInvalidUTF8Counted(t *testing.T) {
	_, st, err := Decode([]byte("\x80\x02X\x02\x00\x00\x00\xff\xfe."), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.InvalidUTF8 != 1 {
		t.Errorf("InvalidUTF8 = %d", st.InvalidUTF8)
	}
}

func TestTrailingBytesIgnored(t *testing.T) {
	doc, _, err := Decode([]byte("\x80\x02K\x07.garbage"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := doc.Root.Int(); n != 7 {
		t.Errorf("got %v", doc.Repr(doc.Root))
	}
}

// TestPairs: a dict's pairs flat, in insertion order; nothing for a list.
func TestPairs(t *testing.T) {
	w := NewWriter()
	w.BeginDict()
	w.String("b")
	w.Int(2)
	w.String("a")
	w.Int(1)
	w.EndDict()
	doc, _, err := Decode(w.Finish(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := doc.Pairs(doc.Root)
	k0, _ := doc.Str(p[0])
	v1, _ := p[3].Int()
	if len(p) != 4 || k0 != "b" || v1 != 1 {
		t.Errorf("pairs %v", p)
	}
	if doc.Pairs(Value{kind: List}) != nil {
		t.Error("a list has pairs")
	}
}
