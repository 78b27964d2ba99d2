package procfacts

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// torch's own format, as ErrorHandler.record_exception writes it (a
// chained exception: the last traceback is the one raised).
const elasticJSON = `{"message": {"message": "RuntimeError: shard 7 is corrupt\nsecond line", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/job/train.py\", line 40, in load\n    x = read()\nValueError: bad\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \"/venv/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 355, in wrapper\n    return f(*args, **kwargs)\n  File \"/job/train.py\", line 88, in main\n    check_batch(x)\n  File \"/job/train.py\", line 52, in check_batch\n    raise RuntimeError(...) from e\nRuntimeError: shard 7 is corrupt\nsecond line\n", "timestamp": "1796558514"}, "errorCode": 1}}`

func TestParseElasticError(t *testing.T) {
	e, err := ParseElasticError([]byte(elasticJSON))
	if err != nil || e == nil {
		t.Fatal(e, err)
	}
	if e.Type != "RuntimeError" || e.Message != "shard 7 is corrupt\nsecond line" || e.TimeNS != 1796558514e9 || e.ErrorCode != 1 {
		t.Errorf("%+v", e)
	}
	want := []ExitFrame{{"/job/train.py", 52, "check_batch"}, {"/job/train.py", 88, "main"}}
	if len(e.Frames) != 3 || e.Frames[0] != want[0] || e.Frames[1] != want[1] {
		t.Errorf("frames %+v", e.Frames)
	}
	r := e.Record()
	if r.Kind != "exception" || !r.Thread.IsMain || r.Frames[0].Function != "check_batch" {
		t.Errorf("record %+v", r)
	}

	// The older format: a plain message and a numeric timestamp.
	e, err = ParseElasticError([]byte(`{"message": "Signal 9 (SIGKILL) received by PID 7", "timestamp": 1700000000}`))
	if err != nil || e.Type != "" || !strings.HasPrefix(e.Message, "Signal 9") || e.TimeNS != 1700000000e9 {
		t.Errorf("old format: %+v %v", e, err)
	}
	for _, bad := range []string{`[]`, `{"message": 3}`, `{"message": {"message": 1}}`, `not json "quoted"`} {
		e, err := ParseElasticError([]byte(bad))
		if err == nil && e != nil {
			t.Errorf("%s: %+v", bad, e)
		}
		if err != nil && strings.Contains(err.Error(), "quoted") {
			t.Errorf("the error quotes the file: %v", err)
		}
	}
	// Strings are clipped, frames bounded.
	long := strings.Repeat("x", 10000)
	var cs strings.Builder
	cs.WriteString("Traceback (most recent call last):\n")
	for i := range 500 {
		cs.WriteString("  File \"/f.py\", line " + strconv.Itoa(i+1) + ", in f\n")
	}
	b := []byte(`{"message": {"message": "E: ` + long + `", "extraInfo": {"py_callstack": ` + quote(cs.String()) + `, "timestamp": "-5"}}}`)
	e, err = ParseElasticError(b)
	if err != nil || len(e.Message) > maxElasticText+4 || len(e.Frames) != maxElasticFrames || e.Frames[0].Line != 500 || e.TimeNS != 0 {
		t.Errorf("bounds: %d bytes, %d frames, %+v, %v", len(e.Message), len(e.Frames), e.Frames[:1], err)
	}
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// TestReadElasticError reads only the owner's regular file, bounded.
func TestReadElasticError(t *testing.T) {
	dir := t.TempDir()
	me := Owner{UID: os.Geteuid(), GID: os.Getegid()}
	p := filepath.Join(dir, "error.json")
	if _, err := ReadElasticError(p, me); !os.IsNotExist(err) {
		t.Errorf("absent: %v", err)
	}
	os.WriteFile(p, []byte(elasticJSON), 0o644)
	if e, err := ReadElasticError(p, me); err != nil || e.Type != "RuntimeError" {
		t.Errorf("%+v %v", e, err)
	}
	if _, err := ReadElasticError(p, Owner{UID: me.UID + 1, GID: -1}); err == nil && me.UID != 0 { // root's files speak for anyone
		t.Error("another user's file was believed")
	}
	os.Chmod(p, 0o666)
	if _, err := ReadElasticError(p, me); err == nil {
		t.Error("a file every user can write was believed")
	}
	l := filepath.Join(dir, "link.json")
	os.Chmod(p, 0o644)
	os.Symlink(p, l)
	if _, err := ReadElasticError(l, me); err == nil {
		t.Error("a symlink was followed")
	}
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, make([]byte, MaxElasticErrorBytes+1), 0o644)
	if _, err := ReadElasticError(big, me); err == nil {
		t.Error("an oversized file was read")
	}
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, nil, 0o644)
	if e, err := ReadElasticError(empty, me); e != nil || err != nil {
		t.Errorf("empty: %+v %v", e, err)
	}
}
