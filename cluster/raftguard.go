package cluster

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Node identity in certificates, and the guard in front of raft's decoder
// on every accepted Raft connection (issue 22, finding 5).
//
// A node certificate names its node with a URI SAN "limitd://node/<id>"
// (scripts/certs.sh issues one). On an accepted Raft connection whose
// certificate names a node, every RPC must claim that node as its sender
// (the RPC header's ID); on the internal HTTP endpoints a join must join
// as it. So node A's certificate cannot speak as B. A certificate naming no
// node (issued before this rule) is accepted as any node, as before, and
// the node logs that it is.
//
// hashicorp/raft's NetworkTransport decodes msgpack straight from the
// connection and allocates what a length prefix claims (a frame claiming a
// 2 GB field grew the leader by 600 MB). The guard scans each RPC's msgpack
// before raft reads it and refuses, before the bytes reach raft, a string or
// binary longer than MaxRaftField, a container of more than maxRaftItems,
// nesting deeper than maxRaftDepth, an unknown RPC type, or a sender ID other
// than the certificate's. It holds back the last byte of each request until
// the request is checked, so raft never completes decoding a refused one.

// NodeURIPrefix starts the URI SAN naming a node's ID in its certificate.
const NodeURIPrefix = "limitd://node/"

// Bounds of one Raft RPC as the guard reads it.
const (
	// MaxRaftField bounds a string or binary in a Raft RPC: a log entry's
	// data is at most MaxEntryBytes, plus room for its framing.
	MaxRaftField = MaxEntryBytes + 1<<20
	maxRaftItems = 1 << 16
	maxRaftDepth = 16
	// rpc types of hashicorp/raft's NetworkTransport (0 AppendEntries ...
	// 4 RequestPreVote).
	maxRPCType         = 4
	rpcInstallSnapshot = 2
	guardFlushBytes    = 64 << 10
)

// errRaftFrame: an RPC the guard refused.
var errRaftFrame = errors.New("raft RPC refused")

// NodeIDFromCert returns the node ID a certificate names in a
// "limitd://node/<id>" URI SAN.
func NodeIDFromCert(c *x509.Certificate) (string, bool) {
	for _, u := range c.URIs {
		if u.Scheme == "limitd" && u.Host == "node" && len(u.Path) > 1 {
			return strings.TrimPrefix(u.Path, "/"), true
		}
	}
	return "", false
}

// NodeURI is the URI SAN naming node id.
func NodeURI(id string) *url.URL {
	return &url.URL{Scheme: "limitd", Host: "node", Path: "/" + id}
}

// guardRPCs returns a reader of conn's bytes that passes on only RPCs that
// hold to the bounds and, when sender is not "", claim sender as their ID.
// A refused RPC ends the stream with an error and closes conn.
func guardRPCs(conn net.Conn, sender string, layer *streamLayer) io.Reader {
	pr, pw := io.Pipe()
	g := &rpcGuard{src: bufio.NewReaderSize(conn, 64<<10), dst: pw, sender: sender}
	go func() {
		err := g.run()
		if errors.Is(err, errRaftFrame) {
			layer.refusals.refused(layer.logger, fmt.Errorf("raft connection from %s: %w", conn.RemoteAddr(), err))
			conn.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

type rpcGuard struct {
	src    *bufio.Reader
	dst    io.Writer
	out    []byte
	sender string

	// Per request, at the top level of its map.
	sawID bool
	size  int64 // InstallSnapshot's Size
}

func (g *rpcGuard) refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errRaftFrame}, args...)...)
}

// flush passes the scanned bytes on; it is called only before waiting for
// more input, so a request is never complete downstream before it is checked.
func (g *rpcGuard) flush() error {
	if len(g.out) == 0 {
		return nil
	}
	_, err := g.dst.Write(g.out)
	g.out = g.out[:0]
	return err
}

func (g *rpcGuard) readByte() (byte, error) {
	if g.src.Buffered() == 0 {
		if err := g.flush(); err != nil {
			return 0, err
		}
	}
	b, err := g.src.ReadByte()
	if err == nil {
		g.out = append(g.out, b)
	}
	return b, err
}

// copyN passes n bytes on unread, in chunks.
func (g *rpcGuard) copyN(n int64) error {
	for n > 0 {
		if g.src.Buffered() == 0 || len(g.out) >= guardFlushBytes {
			if err := g.flush(); err != nil {
				return err
			}
		}
		chunk, err := g.src.Peek(min(max(g.src.Buffered(), 1), int(min(n, guardFlushBytes))))
		if len(chunk) == 0 && err != nil {
			return err
		}
		g.out = append(g.out, chunk...)
		g.src.Discard(len(chunk))
		n -= int64(len(chunk))
	}
	return nil
}

// readN reads n (small) bytes, passing them on too.
func (g *rpcGuard) readN(n int) ([]byte, error) {
	b := make([]byte, n)
	for i := range b {
		c, err := g.readByte() // a flush may empty g.out meanwhile
		if err != nil {
			return nil, err
		}
		b[i] = c
	}
	return b, nil
}

func (g *rpcGuard) readUint(n int) (uint64, error) {
	var v uint64
	for i := 0; i < n; i++ {
		c, err := g.readByte()
		if err != nil {
			return 0, err
		}
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (g *rpcGuard) run() error {
	for {
		t, err := g.readByte()
		if err != nil {
			return err
		}
		if t > maxRPCType {
			return g.refuse("unknown RPC type %d", t)
		}
		g.sawID, g.size = false, 0
		// Scanned bytes go on only before the guard waits for more input,
		// so the request's last byte stays here until it is checked below.
		if err := g.value(0, ""); err != nil {
			return err
		}
		if g.sender != "" && !g.sawID {
			return g.refuse("the RPC names no sender; the certificate names %q", g.sender)
		}
		if t == rpcInstallSnapshot {
			if g.size < 0 {
				return g.refuse("snapshot size %d", g.size)
			}
			if err := g.copyN(g.size); err != nil {
				return err
			}
		}
	}
}

// value scans one msgpack value at depth; key is the top-level map key it
// is the value of ("" elsewhere).
func (g *rpcGuard) value(depth int, key string) error {
	if depth > maxRaftDepth {
		return g.refuse("nested deeper than %d", maxRaftDepth)
	}
	b, err := g.readByte()
	if err != nil {
		return err
	}
	switch {
	case b <= 0x7f || b >= 0xe0: // fixints
		if key == "Size" {
			g.size = int64(int8(b))
			if b <= 0x7f {
				g.size = int64(b)
			}
		}
		return nil
	case b >= 0x80 && b <= 0x8f:
		return g.container(depth, int(b&0x0f), true)
	case b >= 0x90 && b <= 0x9f:
		return g.container(depth, int(b&0x0f), false)
	case b >= 0xa0 && b <= 0xbf:
		return g.bytesValue(int64(b&0x1f), key)
	}
	switch b {
	case 0xc0, 0xc2, 0xc3:
		return nil
	case 0xc4, 0xd9:
		return g.sized(1, key)
	case 0xc5, 0xda:
		return g.sized(2, key)
	case 0xc6, 0xdb:
		return g.sized(4, key)
	case 0xc7, 0xc8, 0xc9: // ext: length, type, data
		n, err := g.readUint(1 << (b - 0xc7))
		if err != nil {
			return err
		}
		if n > MaxRaftField {
			return g.refuse("a field of %d bytes (bound %d)", n, MaxRaftField)
		}
		if _, err := g.readByte(); err != nil {
			return err
		}
		return g.copyN(int64(n))
	case 0xca:
		_, err := g.readN(4)
		return err
	case 0xcb:
		_, err := g.readN(8)
		return err
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err := g.readUint(1 << (b - 0xcc))
		if key == "Size" {
			g.size = int64(v)
			if v > 1<<62 {
				g.size = -1
			}
		}
		return err
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n := 1 << (b - 0xd0)
		v, err := g.readUint(n)
		if key == "Size" {
			g.size = int64(v) << (64 - 8*n) >> (64 - 8*n)
		}
		return err
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: type, 1..16 bytes
		_, err := g.readN(1 + 1<<(b-0xd4))
		return err
	case 0xdc:
		n, err := g.readUint(2)
		if err != nil {
			return err
		}
		return g.container(depth, int(n), false)
	case 0xdd:
		n, err := g.readUint(4)
		if err != nil {
			return err
		}
		return g.container(depth, int(n), false)
	case 0xde:
		n, err := g.readUint(2)
		if err != nil {
			return err
		}
		return g.container(depth, int(n), true)
	case 0xdf:
		n, err := g.readUint(4)
		if err != nil {
			return err
		}
		return g.container(depth, int(n), true)
	}
	return g.refuse("not msgpack (byte 0x%02x)", b)
}

func (g *rpcGuard) sized(lenBytes int, key string) error {
	n, err := g.readUint(lenBytes)
	if err != nil {
		return err
	}
	return g.bytesValue(int64(n), key)
}

// bytesValue scans a string or binary of n bytes; the sender ID is checked.
func (g *rpcGuard) bytesValue(n int64, key string) error {
	if n > MaxRaftField {
		return g.refuse("a field of %d bytes (bound %d)", n, MaxRaftField)
	}
	if !strings.EqualFold(key, "ID") {
		return g.copyN(n)
	}
	if n > maxServerIDLen {
		return g.refuse("a sender ID of %d bytes", n)
	}
	id, err := g.readN(int(n))
	if err != nil {
		return err
	}
	g.sawID = true
	if g.sender != "" && !bytes.Equal(id, []byte(g.sender)) {
		return g.refuse("the RPC claims to come from %.64q; the certificate names %q", id, g.sender)
	}
	return nil
}

func (g *rpcGuard) container(depth, n int, isMap bool) error {
	if n > maxRaftItems {
		return g.refuse("%d items in one container (bound %d)", n, maxRaftItems)
	}
	for i := 0; i < n; i++ {
		key := ""
		if isMap {
			if depth == 0 {
				k, err := g.mapKey()
				if err != nil {
					return err
				}
				key = k
			} else if err := g.value(depth+1, ""); err != nil {
				return err
			}
		}
		if err := g.value(depth+1, key); err != nil {
			return err
		}
	}
	return nil
}

// mapKey scans a top-level key, returning it when it is a short string.
func (g *rpcGuard) mapKey() (string, error) {
	if g.src.Buffered() == 0 {
		if err := g.flush(); err != nil {
			return "", err
		}
	}
	b, err := g.src.Peek(1)
	if err != nil {
		return "", err
	}
	if b[0] >= 0xa0 && b[0] <= 0xbf {
		n := int(b[0] & 0x1f)
		if _, err := g.readByte(); err != nil {
			return "", err
		}
		k, err := g.readN(n)
		return string(k), err
	}
	return "", g.value(1, "")
}

// refusalLog logs refused Raft connections at most once a second, with the
// count of those not logged: 8,000 refused connections wrote 1.5 MB of log.
type refusalLog struct {
	mu    sync.Mutex
	last  time.Time
	quiet int
}

func (l *refusalLog) refused(logger hclog.Logger, err error) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < time.Second {
		l.quiet++
		l.mu.Unlock()
		return
	}
	quiet := l.quiet
	l.last, l.quiet = now, 0
	l.mu.Unlock()
	if quiet > 0 {
		logger.Warn("refused raft connection", "error", err, "not_logged_since_last", quiet)
		return
	}
	logger.Warn("refused raft connection", "error", err)
}
