package hmacauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSignedRequestVerifiesOnceAndOnlyAsSent(t *testing.T) {
	k := NewKey("s3cret")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(NewKey(" s3cret\n"), func() time.Time { return now })
	local := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 9781}
	here := ServedAt(local)
	body := []byte(`{"ranks":"0-3"}`)
	h, nonce := k.Sign("POST", "/v1/stacks", "10.0.0.5:9781", body, now)
	if strings.Contains(h, "s3cret") {
		t.Fatalf("the token travels: %s", h)
	}
	got, err := v.Verify("POST", "/v1/stacks", h, body, here)
	if err != nil || got != nonce {
		t.Fatalf("%q %v", got, err)
	}
	// The same request again is a replay.
	if _, err := v.Verify("POST", "/v1/stacks", h, body, here); err == nil || !strings.Contains(err.Error(), "replay") {
		t.Fatalf("replay: %v", err)
	}
	// Anything changed on the way fails.
	for name, c := range map[string]struct {
		method, target string
		body           []byte
	}{
		"method": {"GET", "/v1/stacks", body},
		"path":   {"POST", "/v1/evidence", body},
		"body":   {"POST", "/v1/stacks", []byte(`{"ranks":"0-4"}`)},
	} {
		h, _ := k.Sign("POST", "/v1/stacks", "10.0.0.5:9781", body, now)
		var e *Error
		if _, err := v.Verify(c.method, c.target, h, c.body, here); !errors.As(err, &e) || e.Status != 401 || !strings.Contains(e.Msg, "signature is wrong") {
			t.Errorf("%s changed: %v", name, err)
		}
	}
	// Another token's signature fails.
	h2, _ := NewKey("other").Sign("POST", "/v1/stacks", "10.0.0.5:9781", body, now)
	if _, err := v.Verify("POST", "/v1/stacks", h2, body, here); err == nil {
		t.Fatal("another token's request accepted")
	}
	// A signature can't be moved to another address: a relay is refused.
	h3, _ := k.Sign("POST", "/v1/stacks", "10.9.9.9:9781", body, now)
	var e *Error
	if _, err := v.Verify("POST", "/v1/stacks", h3, body, here); !errors.As(err, &e) || e.Status != 403 || !strings.Contains(e.Msg, "relayed") {
		t.Fatalf("relay: %v", err)
	}
	// Its advertised address counts (NAT).
	if _, err := v.Verify("POST", "/v1/stacks", h3, body, ServedAt(local, "10.9.9.9:9781")); err != nil {
		t.Fatalf("advertised: %v", err)
	}
}

func TestTimeWindow(t *testing.T) {
	k := NewKey("t")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(k, func() time.Time { return now })
	for _, d := range []time.Duration{-Window - time.Second, Window + time.Second} {
		h, _ := k.Sign("GET", "/v1/node", "127.0.0.1:1", nil, now.Add(d))
		if _, err := v.Verify("GET", "/v1/node", h, nil, nil); err == nil || !strings.Contains(err.Error(), "NTP") {
			t.Errorf("%s: %v", d, err)
		}
	}
	h, _ := k.Sign("GET", "/v1/node", "127.0.0.1:1", nil, now.Add(Window-time.Second))
	if _, err := v.Verify("GET", "/v1/node", h, nil, nil); err != nil {
		t.Error(err)
	}
}

func TestReplayMemoryIsBoundedAndForgets(t *testing.T) {
	k := NewKey("t")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(k, func() time.Time { return now })
	for i := 0; i < MaxSeen; i++ {
		v.seen[fmt.Sprintf("%032x", i)] = now.Unix() + 10
	}
	h, _ := k.Sign("GET", "/v1/node", "127.0.0.1:1", nil, now)
	var e *Error
	if _, err := v.Verify("GET", "/v1/node", h, nil, nil); !errors.As(err, &e) || e.Status != 503 {
		t.Fatalf("full: %v", err)
	}
	now = now.Add(time.Minute) // the old ones expired
	h, _ = k.Sign("GET", "/v1/node", "127.0.0.1:1", nil, now)
	if _, err := v.Verify("GET", "/v1/node", h, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(v.seen) != 1 {
		t.Fatalf("%d remembered", len(v.seen))
	}
}

func TestResponseSignature(t *testing.T) {
	k := NewKey("t")
	body := []byte(`{"ok":true}`)
	sig := k.SignResponse("abc", 200, body)
	if err := k.VerifyResponse("abc", 200, body, sig); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"unsigned":     k.VerifyResponse("abc", 200, body, ""),
		"other nonce":  k.VerifyResponse("abd", 200, body, sig),
		"other status": k.VerifyResponse("abc", 500, body, sig),
		"other body":   k.VerifyResponse("abc", 200, []byte(`{"ok":false}`), sig),
		"other token":  NewKey("u").VerifyResponse("abc", 200, body, sig),
	} {
		if err == nil || !strings.Contains(err.Error(), "PROBING_AUTH_TOKEN") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	ok := "Probing-HMAC-SHA256 ts=1,nonce=" + strings.Repeat("a", 32) + ",addr=h:1,sig=" + strings.Repeat("b", 64)
	if _, err := Parse(ok); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{
		"Bearer x",
		"Probing-HMAC-SHA256 ts=1",
		"Probing-HMAC-SHA256 ts=x,nonce=" + strings.Repeat("a", 32) + ",addr=h:1,sig=" + strings.Repeat("b", 64),
		strings.Replace(ok, "addr=h:1", "addr=h", 1),
		strings.Replace(ok, "ts=1", "ts=1,ts=2", 1),
		ok + ",extra=1",
		strings.Replace(ok, "addr=h:1", "addr="+strings.Repeat("h", 600)+":1", 1),
	} {
		if _, err := Parse(h); err == nil {
			t.Errorf("accepted %q", h)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("Probing-HMAC-SHA256 ts=1,nonce=" + strings.Repeat("a", 32) + ",addr=h:1,sig=" + strings.Repeat("b", 64))
	f.Add("Probing-HMAC-SHA256 ,,,===")
	k := NewKey("t")
	v := NewVerifier(k, nil)
	f.Fuzz(func(t *testing.T, h string) {
		v.Verify("GET", "/", h, nil, nil) // never panics; fails unless signed with the key
		if s, err := Parse(h); err == nil && (len(s.Nonce) != 32 || len(s.Sig) != 64) {
			t.Fatalf("%+v", s)
		}
	})
}

// TestVectors: the wire form is fixed by testdata/vectors.json, which the
// Python agent's tests check too (agent/python/tests): both sides compute
// the same signatures, byte for byte.
func TestVectors(t *testing.T) {
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Token, Method, Target, Addr, Nonce, Body, Header, Response string
		TS, Status                                                 int64
	}
	if err := json.Unmarshal(b, &vs); err != nil || len(vs) < 2 {
		t.Fatalf("%d vectors: %v", len(vs), err)
	}
	for _, v := range vs {
		k := NewKey(v.Token)
		sig := k.mac(reqLabel, v.Method, v.Target, v.Addr, strconv.FormatInt(v.TS, 10), v.Nonce, bodySum([]byte(v.Body)))
		h := fmt.Sprintf("%s ts=%d,nonce=%s,addr=%s,sig=%s", Scheme, v.TS, v.Nonce, v.Addr, sig)
		if h != v.Header {
			t.Errorf("%+v: header %s", v, h)
		}
		ver := NewVerifier(k, func() time.Time { return time.Unix(v.TS, 0) })
		if n, err := ver.Verify(v.Method, v.Target, v.Header, []byte(v.Body), nil); err != nil || n != v.Nonce {
			t.Errorf("%+v: %v", v, err)
		}
		if r := k.SignResponse(v.Nonce, int(v.Status), []byte(v.Body)); r != v.Response {
			t.Errorf("%+v: response %s", v, r)
		}
	}
}

// BenchmarkSignedRoundTrip: what signing costs one request and its answer
// (sign, verify, sign the answer, verify it), for a 1 KiB request and a
// 1 MiB answer (docs/BENCHMARKS.md).
func BenchmarkSignedRoundTrip(b *testing.B) {
	k := NewKey("bench-token")
	v := NewVerifier(k, nil)
	req := make([]byte, 1<<10)
	ans := make([]byte, 1<<20)
	b.SetBytes(int64(len(req) + len(ans)))
	for b.Loop() {
		h, nonce := k.Sign("POST", "/v1/evidence", "10.0.0.5:9781", req, time.Now())
		if _, err := v.Verify("POST", "/v1/evidence", h, req, nil); err != nil {
			b.Fatal(err)
		}
		if err := k.VerifyResponse(nonce, 200, ans, k.SignResponse(nonce, 200, ans)); err != nil {
			b.Fatal(err)
		}
	}
}
