// Package hmacauth proves knowledge of the job's shared token
// (PROBING_AUTH_TOKEN) without sending it. The job's store, heartbeats and
// saved membership files are writable by anyone who reaches them, so an
// address learnt there may be a planted one: a bearer token sent to it is
// stolen. Instead each request carries an HMAC over what it asks (method,
// path, the address it was sent to, a time and a nonce, the body), and
// the answer an HMAC over the request's nonce, its status and its body:
// a planted address learns nothing it can replay or use elsewhere, and
// cannot answer as a node of the job.
//
// The wire form (request header Authorization, answer header
// X-Probing-Signature) is written down in agent/PROTOCOL.md; the Python
// agent's TCP listener implements the same.
package hmacauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Names on the wire.
const (
	// Scheme is the Authorization scheme of a signed request.
	Scheme = "Probing-HMAC-SHA256"
	// ResponseHeader carries the answer's signature.
	ResponseHeader = "X-Probing-Signature"
	// Window is how far a request's time may be from the receiver's
	// clock: nodes' clocks differ by seconds under NTP, and a request is
	// never retried later than its caller's deadline.
	Window = 5 * time.Minute
	// MaxSeen bounds the replay memory: nonces of valid requests within
	// the window (only a token holder can add one).
	MaxSeen = 1 << 17
)

const (
	reqLabel  = "probing-mcp request v1"
	respLabel = "probing-mcp response v1"
	keyLabel  = "probing-mcp hmac key v1"
)

// Key is the signing key derived from the shared token: the token itself
// never enters a message, and a key used here is useless as a bearer
// token anywhere else.
type Key struct{ k []byte }

// NewKey derives the key from token; nil for an empty token.
func NewKey(token string) *Key {
	token = strings.TrimSpace(token)
	if token == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(keyLabel))
	return &Key{k: m.Sum(nil)}
}

func (k *Key) mac(parts ...string) string {
	m := hmac.New(sha256.New, k.k)
	for i, p := range parts {
		if i > 0 {
			m.Write([]byte{'\n'})
		}
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

func bodySum(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// Sign returns the Authorization header value for one request and its
// nonce (to check the answer with). target is the request-target (path
// and query, as sent); addr is host:port the request is sent to.
func (k *Key) Sign(method, target, addr string, body []byte, now time.Time) (header, nonce string) {
	var b [16]byte
	rand.Read(b[:])
	nonce = hex.EncodeToString(b[:])
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := k.mac(reqLabel, method, target, addr, ts, nonce, bodySum(body))
	return fmt.Sprintf("%s ts=%s,nonce=%s,addr=%s,sig=%s", Scheme, ts, nonce, addr, sig), nonce
}

// SignResponse is the X-Probing-Signature value of an answer to the
// request that carried nonce.
func (k *Key) SignResponse(nonce string, status int, body []byte) string {
	return k.mac(respLabel, nonce, strconv.Itoa(status), bodySum(body))
}

// VerifyResponse checks an answer's signature; nil when it proves the
// answering side holds the token.
func (k *Key) VerifyResponse(nonce string, status int, body []byte, sig string) error {
	if sig == "" {
		return errors.New("the answer is not signed: whoever answered did not prove it holds the job's PROBING_AUTH_TOKEN")
	}
	want := k.SignResponse(nonce, status, body)
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(strings.TrimSpace(sig)))) {
		return errors.New("the answer's signature is wrong: whoever answered does not hold the job's PROBING_AUTH_TOKEN (a planted address, or a different token)")
	}
	return nil
}

// Signed is a parsed, not yet verified, request signature.
type Signed struct {
	TS    int64
	Nonce string
	Addr  string // host:port the signer sent the request to
	Sig   string
}

// IsSigned is whether an Authorization header value uses Scheme.
func IsSigned(authz string) bool {
	s, _, _ := strings.Cut(strings.TrimSpace(authz), " ")
	return strings.EqualFold(s, Scheme)
}

// Parse reads an Authorization header value of Scheme.
func Parse(authz string) (*Signed, error) {
	s, rest, _ := strings.Cut(strings.TrimSpace(authz), " ")
	if !strings.EqualFold(s, Scheme) {
		return nil, fmt.Errorf("authorization scheme is not %s", Scheme)
	}
	if len(rest) > 512 {
		return nil, fmt.Errorf("%s header is over 512 bytes", Scheme)
	}
	out := &Signed{}
	seen := map[string]bool{}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return nil, fmt.Errorf("%s header: %q is not one key=value", Scheme, clip(kv))
		}
		seen[k] = true
		switch k {
		case "ts":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s header: ts %q is not seconds since the epoch", Scheme, clip(v))
			}
			out.TS = n
		case "nonce":
			if len(v) != 32 || !isHex(v) {
				return nil, fmt.Errorf("%s header: nonce is not 32 hex digits", Scheme)
			}
			out.Nonce = strings.ToLower(v)
		case "addr":
			if _, _, err := net.SplitHostPort(v); err != nil {
				return nil, fmt.Errorf("%s header: addr %q is not host:port", Scheme, clip(v))
			}
			out.Addr = v
		case "sig":
			if len(v) != 64 || !isHex(v) {
				return nil, fmt.Errorf("%s header: sig is not 64 hex digits", Scheme)
			}
			out.Sig = strings.ToLower(v)
		default:
			return nil, fmt.Errorf("%s header: unknown key %q", Scheme, clip(k))
		}
	}
	if !seen["ts"] || !seen["nonce"] || !seen["addr"] || !seen["sig"] {
		return nil, fmt.Errorf("%s header: ts, nonce, addr and sig are all required", Scheme)
	}
	return out, nil
}

// Verifier checks signed requests: the signature, the time window, that
// the request was meant for this listener, and that no nonce is used
// twice. Safe for concurrent use.
type Verifier struct {
	key *Key
	now func() time.Time

	mu   sync.Mutex
	seen map[string]int64 // nonce → unix time after which it may be forgotten
}

// NewVerifier checks against key; now nil means time.Now.
func NewVerifier(key *Key, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{key: key, now: now, seen: map[string]int64{}}
}

// Key is the verifier's key (to sign answers with).
func (v *Verifier) Key() *Key { return v.key }

// Error is a refused request: Status is the HTTP status to answer.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Verify checks one request. servedHere says whether the address the
// signer sent it to reaches this listener (a relay by another address is
// refused). It returns the nonce to sign the answer with.
func (v *Verifier) Verify(method, target, authz string, body []byte, servedHere func(addr string) bool) (string, error) {
	s, err := Parse(authz)
	if err != nil {
		return "", &Error{401, err.Error()}
	}
	want := v.key.mac(reqLabel, method, target, s.Addr, strconv.FormatInt(s.TS, 10), s.Nonce, bodySum(body))
	if !hmac.Equal([]byte(want), []byte(s.Sig)) {
		return "", &Error{401, "the request's signature is wrong: the caller does not hold this node's PROBING_AUTH_TOKEN, or the request was changed on its way"}
	}
	now := v.now()
	skew := now.Sub(time.Unix(s.TS, 0))
	if skew > Window || skew < -Window {
		return "", &Error{401, fmt.Sprintf("the request was signed %s from this node's clock (the window is ±%s): a replay, or clocks out of step (synchronise them with NTP)", skew.Round(time.Second), Window)}
	}
	if servedHere != nil && !servedHere(s.Addr) {
		return "", &Error{403, fmt.Sprintf("the request was signed for %s, which is not this listener: relayed by another address? (if this node is reached through NAT, set PROBING_ADVERTISE_ADDR to the address the coordinator dials)", clip(s.Addr))}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, dup := v.seen[s.Nonce]; dup {
		return "", &Error{401, "the request's nonce was used before: a replayed request is refused"}
	}
	if len(v.seen) >= MaxSeen {
		for n, until := range v.seen {
			if until < now.Unix() {
				delete(v.seen, n)
			}
		}
		if len(v.seen) >= MaxSeen {
			return "", &Error{503, fmt.Sprintf("over %d signed requests within %s: try again shortly", MaxSeen, Window)}
		}
	}
	v.seen[s.Nonce] = s.TS + int64(Window/time.Second) + 1
	return s.Nonce, nil
}

// ServedAt is the usual servedHere: addr names local (the connection's
// own end) or one of the listener's advertised addresses, compared as
// host and port; a loopback local end also accepts "localhost".
func ServedAt(local net.Addr, advertised ...string) func(addr string) bool {
	return func(addr string) bool {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return false
		}
		for _, a := range advertised {
			if ah, ap, err := net.SplitHostPort(a); err == nil && ap == p && sameHost(ah, h) {
				return true
			}
		}
		ta, ok := local.(*net.TCPAddr)
		if !ok || strconv.Itoa(ta.Port) != p {
			return false
		}
		if ip := net.ParseIP(h); ip != nil {
			return ip.Equal(ta.IP)
		}
		return strings.EqualFold(h, "localhost") && ta.IP.IsLoopback()
	}
}

func sameHost(a, b string) bool {
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	if ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(a, b)
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
