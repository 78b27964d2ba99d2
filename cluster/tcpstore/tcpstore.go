// Package tcpstore is a client of torch's c10d TCPStore, the key-value
// store every torch.distributed job already runs (MASTER_ADDR:MASTER_PORT).
// The cluster discovery reads and writes a few keys in it; it never waits
// on a key: CHECK says whether keys exist, and only then GET reads them,
// so a rank that never registered costs nothing but a "not there".
//
// Wire format (torch 2.x, both the classic and the libuv server): one
// query-type byte, then arguments; strings and byte values are a
// native-endian (little on every platform torch ships) uint64 length and
// the bytes; integers are int64. A connection starts with VALIDATE and
// the store's magic number. torch's client stores every key under "/"
// (its key prefix), so this one does too: keys here are torch's keys.
package tcpstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Query types, in torch's order.
const (
	qValidate byte = iota
	qSet
	qCompareSet
	qGet
	qAdd
	qCheck
)

const magic uint32 = 0x3C85F7CE

// MaxValue bounds a value read from the store: ours are addresses and
// small JSON, and the store is another process's (untrusted) answer.
const MaxValue = 1 << 20

// MaxKeys bounds one CHECK.
const MaxKeys = 4096

// Client is one connection to a store. It is not safe for concurrent use.
type Client struct {
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration
}

// Dial connects to the store at addr ("host:port") and validates the
// connection. Every call on the client is bounded by timeout (default 5 s).
func Dial(ctx context.Context, addr string, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("TCPStore %s: %w", addr, err)
	}
	c := &Client{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn), timeout: timeout}
	c.arm()
	c.w.WriteByte(qValidate)
	c.u32(magic)
	if err := c.w.Flush(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TCPStore %s: validating: %w", addr, err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) arm() { c.conn.SetDeadline(time.Now().Add(c.timeout)) }

func (c *Client) u32(v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	c.w.Write(b[:])
}

func (c *Client) u64(v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	c.w.Write(b[:])
}

// keyPrefix is what torch's TCPStore client puts before every key.
const keyPrefix = "/"

func (c *Client) key(k string) {
	c.u64(uint64(len(keyPrefix) + len(k)))
	c.w.WriteString(keyPrefix)
	c.w.WriteString(k)
}

func (c *Client) readU64() (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Set stores value under key (no reply in the protocol).
func (c *Client) Set(key string, value []byte) error {
	c.arm()
	c.w.WriteByte(qSet)
	c.key(key)
	c.u64(uint64(len(value)))
	c.w.Write(value)
	return c.w.Flush()
}

// Check says whether every key exists, without waiting.
func (c *Client) Check(keys ...string) (bool, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return false, fmt.Errorf("TCPStore check: %d keys, want 1..%d", len(keys), MaxKeys)
	}
	c.arm()
	c.w.WriteByte(qCheck)
	c.u64(uint64(len(keys)))
	for _, k := range keys {
		c.key(k)
	}
	if err := c.w.Flush(); err != nil {
		return false, err
	}
	b, err := c.r.ReadByte()
	if err != nil {
		return false, err
	}
	switch b {
	case 0:
		return true, nil
	case 1:
		return false, nil
	}
	return false, fmt.Errorf("TCPStore check: reply byte %d is neither ready (0) nor not ready (1)", b)
}

// ErrNoKey: Get of a key the store does not have (checked first: a GET of
// a missing key would wait for it).
var ErrNoKey = errors.New("no such key")

// ErrTooLarge: Get of a value over MaxValue, read past and dropped; the
// client can go on. A value over maxDiscard ends the connection instead.
var ErrTooLarge = errors.New("value too large")

const maxDiscard = 64 << 20

// Get reads key's value if the key exists; ErrNoKey if it does not.
func (c *Client) Get(key string) ([]byte, error) {
	ok, err := c.Check(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("TCPStore get %q: %w", key, ErrNoKey)
	}
	c.arm()
	c.w.WriteByte(qGet)
	c.key(key)
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	n, err := c.readU64()
	if err != nil {
		return nil, err
	}
	if n > MaxValue {
		if n <= maxDiscard {
			// Read past it (within the deadline) so that the connection
			// stays in step: one oversized key, which anyone who reaches
			// the store can write, must not end the whole read.
			if _, err := io.CopyN(io.Discard, c.r, int64(n)); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("TCPStore get %q: the value is %d bytes, over the %d this client reads: %w", key, n, MaxValue, ErrTooLarge)
		}
		return nil, fmt.Errorf("TCPStore get %q: the store says the value is %d bytes, over the %d this client reads", key, n, MaxValue)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Add adds delta to the integer at key (0 if absent) and returns the sum.
func (c *Client) Add(key string, delta int64) (int64, error) {
	c.arm()
	c.w.WriteByte(qAdd)
	c.key(key)
	c.u64(uint64(delta))
	if err := c.w.Flush(); err != nil {
		return 0, err
	}
	v, err := c.readU64()
	return int64(v), err
}
