package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"4194304": 4194304, "512KB": 512000, "512kib": 512 << 10, "8 M": 8 << 20, "8MiB": 8 << 20, "2GB": 2e9,
		"1G": 1 << 30, "1 TiB": 1 << 40, " 64MiB ": 64 << 20, "7b": 7,
		"": 0, "0": 0, "-1": 0, "1.5G": 0, "12 parsecs": 0, "99999999999999999999": 0, "9223372036854775807K": 0,
	} {
		got, ok := Parse(in)
		if ok != (want > 0) || got != want {
			t.Errorf("Parse(%q) = %d %v, want %d", in, got, ok, want)
		}
	}
	for n, want := range map[int64]string{256 << 20: "256 MiB", 64 << 10: "64 KiB", 1000: "1000 bytes", 3 << 30: "3 GiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
