package netaddr

import "testing"

func TestLoopback(t *testing.T) {
	for in, want := range map[string]bool{
		"localhost": true, "LOCALHOST": true, "localhost.": true, "localhost:8080": true,
		"127.0.0.1": true, "127.0.0.2:9781": true, "::1": true, "[::1]:80": true, "::ffff:127.0.0.1": true,
		"10.0.0.1": false, "0.0.0.0": false, "::": false, "": false, "localhost.evil.com": false,
		"127.0.0.1.nip.io": false, "node1:9781": false, "[::2]:80": false,
	} {
		if got := Loopback(in); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", in, got, want)
		}
	}
}
