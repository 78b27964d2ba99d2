package procfacts

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FuzzParse feeds the /proc parsers and the identity reader bytes that
// another user may have written: they must return an error or a value,
// never panic, and the identity reader must stay within its bound.
func FuzzParse(f *testing.F) {
	f.Add([]byte(statLine(7, "a) (b", "S", 1, 2, 3, 4, 5)))
	f.Add([]byte(statusText))
	f.Add([]byte("RANK=1\x00X=a=b\x00\x00=\x00"))
	f.Add([]byte(`{"agent":"probing-mcp","pid":7,"start_time":1,"faulthandler_signal":9,"fr_pipe_prefix":"/etc/passwd"}`))
	f.Add([]byte(`{"pid":-1,"rank":1e99,"argv":[` + "\"x\"," + `"y"]}`))
	f.Add([]byte(`{"v":1,"kind":"main_thread_exit","exception":{"type":"E","message":"m"},"threads_alive":[{"name":"k"}]}` + "\n" + `{"v":1,"kind":"exit","code":-1,"signal":15}`))
	f.Add([]byte(elasticJSON))
	f.Add([]byte(`{"message": "Signal 9", "timestamp": "1e99"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseStat(string(b))
		st := ParseStatus(string(b))
		for sig := -1; sig < 70; sig++ {
			_ = st.Catches(syscall.Signal(sig))
		}
		_ = ParseEnv(b)
		p := filepath.Join(dir, IdentityFile)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if id, _, err := ReadIdentity(p); err == nil && id == nil {
			t.Fatal("no identity and no error")
		}
		if e, err := ParseElasticError(b); err == nil && e != nil {
			if len(e.Frames) > maxElasticFrames || len(e.Message) > maxElasticText+4 {
				t.Fatalf("unbounded: %d frames, %d bytes", len(e.Frames), len(e.Message))
			}
			_ = e.Record()
		}
		if err := os.WriteFile(filepath.Join(dir, ExitsFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if e, err := ReadEnding(dir, 0, Owner{UID: os.Geteuid(), GID: os.Getegid()}); err == nil && e != nil {
			_ = e.Summary(false)
		}
	})
}
