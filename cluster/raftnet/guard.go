package raftnet

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
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/nodeapi"
)

// Node identity in certificates, and the guard in front of raft's decoder
// on every accepted Raft connection: a node's certificate is the only sender it may claim.
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
// binary longer than MaxField, a container of more than maxRaftItems,
// nesting deeper than maxRaftDepth, an unknown RPC type, or a sender ID other
// than the certificate's, or a sender address (RPCHeader.Addr) naming another
// group than the connection's (mux.go; at most maxServerIDLen bytes). It reads in raft's own goroutine and hands raft an
// RPC's end only once the RPC is checked, so raft never completes decoding a
// refused one (rpcReader).
//
// The guard and raft's decoder must read the same sender from the same
// bytes: the decoder keeps the last of two equal keys, matches names in any
// case and takes a []byte from a string, a binary, an array of integers or
// nil. So the guard accepts a request only in the shape raft v1.7.3's
// encoder writes it (rpcFields): a map holding each of the request's fields
// exactly once, named as raft names it (a fixstr), each of the msgpack type
// raft writes for it, the sender's ID and Addr as non-empty strings. Any
// other reading of the header is refused, not interpreted.

// NodeURIPrefix starts the URI SAN naming a node's ID in its certificate.
const NodeURIPrefix = "limitd://node/"

// Bounds of one Raft RPC as the guard reads it.
const (
	// MaxField bounds a string or binary in a Raft RPC: a log entry's
	// data is at most MaxEntryBytes, plus room for its framing.
	MaxField     = nodeapi.MaxEntryBytes + 1<<20
	maxRaftItems = 1 << 16
	maxRaftDepth = 16
	// rpc types of hashicorp/raft's NetworkTransport (0 AppendEntries ...
	// 4 RequestPreVote).
	maxRPCType         = 4
	rpcRequestVote     = 1
	rpcInstallSnapshot = 2
	rpcRequestPreVote  = 4
	// guardFlushBytes: the most checked bytes of one RPC a connection
	// keeps before handing them to raft (rpcReader).
	guardFlushBytes  = 64 << 10
	guardBufferBytes = 64 << 10
	// guardOutBytes: the most a connection keeps, guardFlushBytes plus the
	// largest piece scanned at once (a sender ID with its header).
	guardOutBytes = guardFlushBytes + maxServerIDLen + 8
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

// rpcReader is what raft reads an accepted connection through: each Read
// scans the connection's next bytes (in raft's own per-connection goroutine,
// synchronously) and hands raft only bytes it has checked. The scanned bytes
// of an RPC are kept (out) until the RPC is complete and checked, and then
// handed over, so raft never completes decoding a refused RPC. An RPC longer
// than guardFlushBytes is handed over in pieces of that size before its end:
// a piece that does not end an RPC cannot complete one. So one connection
// holds at most guardFlushBytes plus one header (maxServerIDLen for a sender
// ID) of checked bytes, whatever the RPC's size; an InstallSnapshot's data
// after its request passes through unread and unbuffered.
//
// A Read returns at most up to the end of one RPC: raft asks for the next
// bytes only when it has decoded and answered every RPC before them, which
// lets the reader answer a refused vote on the connection itself (votegate.go).
type rpcReader struct {
	src    *bufio.Reader
	sender string       // "": any
	group  uint32       // the connection's group (mux.go): every RPC's header address must name it
	conn   net.Conn     // written for a refused vote, closed on a refusal; nil in tests
	layer  *streamLayer // nil in tests

	out   []byte // scanned bytes not yet handed to raft
	ready []byte // the part of out being handed to raft
	err   error  // sticky: the connection is done
	snap  int64  // InstallSnapshot data still to pass through unread

	// The RPC being scanned.
	inRPC   bool
	rpcType byte
	stack   []rpcFrame // open containers; stack[0] holds the request itself
	skip    int64      // bytes of a string, binary or ext still to pass on unread
	field   int        // the request's field whose value is next (rpcFields index)
	seen    uint32     // the request's fields read so far, a bit each
	size    int64      // InstallSnapshot's Size
	id      []byte     // the sender ID the request names, as checked

	// checked, if set (tests), sees each RPC the guard passed: its type and
	// the sender ID it read.
	checked func(rpcType byte, id []byte)
}

// fieldKind is the msgpack a field of a request may hold: what raft's
// encoder (go-msgpack with raft's handle) writes for the field's Go type.
type fieldKind uint8

const (
	kindBytes   fieldKind = iota // []byte: nil, or a string (fixstr, str16, str32)
	kindSender                   // ID, Addr: a non-empty string; raft always sets them
	kindUint                     // uint64, LogType: a positive fixint or uint8-64
	kindInt                      // int, int64: a fixint or int8-64
	kindBool                     // true or false
	kindEntries                  // []*Log: nil or an array
)

func (k fieldKind) String() string {
	return [...]string{"nil or a string", "a non-empty string", "an unsigned integer", "an integer", "a boolean", "nil or an array"}[k]
}

// allows reports whether a value starting with b is of kind k.
func (k fieldKind) allows(b byte) bool {
	isStr := (b >= 0xa0 && b <= 0xbf) || b == 0xda || b == 0xdb // never str8 nor bin: raft's handle writes the old spec
	switch k {
	case kindBytes:
		return b == 0xc0 || isStr
	case kindSender:
		return isStr && b != 0xa0
	case kindUint:
		return b <= 0x7f || (b >= 0xcc && b <= 0xcf)
	case kindInt:
		return b <= 0x7f || b >= 0xe0 || (b >= 0xd0 && b <= 0xd3)
	case kindBool:
		return b == 0xc2 || b == 0xc3
	case kindEntries:
		return b == 0xc0 || (b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd
	}
	return false
}

// rpcField is one field of a request as raft's encoder writes it.
type rpcField struct {
	name string
	kind fieldKind
}

// rpcFields are the fields of each request raft v1.7.3 sends, by RPC type
// (its commands.go; RPCHeader's fields are inlined): every one is written,
// nil or zero included, so a request holds exactly these. fieldID and
// fieldSize are the indexes the guard reads values of.
var rpcFields = [maxRPCType + 1][]rpcField{
	0: withHeader( // AppendEntries
		rpcField{"Term", kindUint}, rpcField{"Leader", kindBytes}, rpcField{"PrevLogEntry", kindUint},
		rpcField{"PrevLogTerm", kindUint}, rpcField{"Entries", kindEntries}, rpcField{"LeaderCommitIndex", kindUint}),
	rpcRequestVote: withHeader(
		rpcField{"Term", kindUint}, rpcField{"Candidate", kindBytes}, rpcField{"LastLogIndex", kindUint},
		rpcField{"LastLogTerm", kindUint}, rpcField{"LeadershipTransfer", kindBool}),
	rpcInstallSnapshot: withHeader(
		rpcField{"Size", kindInt}, // fieldSize
		rpcField{"SnapshotVersion", kindInt}, rpcField{"Term", kindUint}, rpcField{"Leader", kindBytes},
		rpcField{"LastLogIndex", kindUint}, rpcField{"LastLogTerm", kindUint}, rpcField{"Peers", kindBytes},
		rpcField{"Configuration", kindBytes}, rpcField{"ConfigurationIndex", kindUint}),
	3: withHeader(), // TimeoutNow
	rpcRequestPreVote: withHeader(
		rpcField{"Term", kindUint}, rpcField{"LastLogIndex", kindUint}, rpcField{"LastLogTerm", kindUint}),
}

const (
	fieldID   = 0 // RPCHeader.ID: the sender
	fieldAddr = 1 // RPCHeader.Addr: the sender's address, with its group (mux.go)
	fieldSize = 3 // InstallSnapshotRequest.Size
)

func withHeader(fields ...rpcField) []rpcField {
	return append([]rpcField{{"ID", kindSender}, {"Addr", kindSender}, {"ProtocolVersion", kindInt}}, fields...)
}

// fieldIndex is the index of the field named k in fields, or -1.
func fieldIndex(fields []rpcField, k []byte) int {
	for i, f := range fields {
		if f.name == string(k) {
			return i
		}
	}
	return -1
}

// rpcFrame is an open msgpack container: the values it still holds (a map
// of n entries holds 2n: keys and values).
type rpcFrame struct {
	left  int
	isMap bool
}

// newRPCReader reads the RPCs on an accepted connection (conn, after its
// preamble) that pass the guard; sender is the node the certificate names.
func newRPCReader(conn net.Conn, sender string, layer *streamLayer) *rpcReader {
	r := &rpcReader{src: bufio.NewReaderSize(conn, guardBufferBytes), conn: conn, sender: sender, layer: layer}
	if layer != nil {
		r.group = layer.group
	}
	return r
}

func (r *rpcReader) Read(b []byte) (int, error) {
	for {
		if len(r.ready) > 0 {
			n := copy(b, r.ready)
			r.ready = r.ready[n:]
			if len(r.ready) == 0 {
				r.out = r.out[:0]
			}
			return n, nil
		}
		if r.err != nil {
			return 0, r.err
		}
		if r.snap > 0 {
			n, err := r.src.Read(b[:min(int64(len(b)), r.snap)])
			r.snap -= int64(n)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		if err := r.scan(); err != nil {
			r.err, r.out = err, r.out[:0]
			if errors.Is(err, errRaftFrame) && r.layer != nil {
				r.layer.refusals.refused(r.layer.logger, fmt.Errorf("raft connection from %s: %w", r.conn.RemoteAddr(), err))
				r.conn.Close()
			}
			continue
		}
		r.ready = r.out
	}
}

func (r *rpcReader) refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errRaftFrame}, args...)...)
}

// peek returns the next n bytes, unconsumed.
func (r *rpcReader) peek(n int) ([]byte, error) {
	b, err := r.src.Peek(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the RPC is cut short
	}
	return b, err
}

// take moves the peeked bytes b from the connection to out.
func (r *rpcReader) take(b []byte) {
	r.out = append(r.out, b...)
	r.src.Discard(len(b))
}

// scan reads on until out holds a whole checked RPC, or guardFlushBytes of
// an RPC that is not yet complete; nil means out may be handed to raft.
func (r *rpcReader) scan() error {
	if r.out == nil {
		r.out = make([]byte, 0, guardOutBytes) // never grows (guardOutBytes)
	}
	for {
		if !r.inRPC {
			t, err := r.src.ReadByte()
			if err != nil {
				return err // io.EOF here is a clean end between RPCs
			}
			if t > maxRPCType {
				return r.refuse("unknown RPC type %d", t)
			}
			r.out = append(r.out, t)
			r.inRPC, r.rpcType, r.seen, r.field, r.size, r.skip, r.id = true, t, 0, -1, 0, 0, r.id[:0]
			r.stack = append(r.stack[:0], rpcFrame{left: 1})
		}
		if len(r.out) >= guardFlushBytes {
			if r.rpcType == rpcRequestVote || r.rpcType == rpcRequestPreVote {
				// Answered from out when refused (votegate.go): kept whole,
				// so bounded (a real one is ~100 bytes).
				return r.refuse("a vote request of more than %d bytes", guardFlushBytes)
			}
			return nil // not the end of the RPC: raft cannot complete it
		}
		done, err := r.step()
		if err != nil {
			return err
		}
		if !done {
			continue
		}
		r.inRPC = false
		if fields := rpcFields[r.rpcType]; r.seen != 1<<len(fields)-1 {
			// Not reached: the request's map holds len(fields) distinct fields.
			return r.refuse("a request without all of its fields")
		}
		if r.checked != nil {
			r.checked(r.rpcType, r.id)
		}
		switch r.rpcType {
		case rpcInstallSnapshot:
			if r.size < 0 {
				return r.refuse("snapshot size %d", r.size)
			}
			r.snap = r.size
		case rpcRequestVote, rpcRequestPreVote:
			answered, err := r.answerVote()
			if err != nil {
				return err
			}
			if answered {
				r.out = r.out[:0]
				continue
			}
		}
		return nil
	}
}

// step scans the next piece of the RPC: part of a string, binary or ext, or
// one value's header. It reports whether the RPC is complete.
func (r *rpcReader) step() (bool, error) {
	if r.skip > 0 {
		room := guardFlushBytes - len(r.out) // > 0: scan hands out over before
		chunk, err := r.peek(int(min(r.skip, int64(max(r.src.Buffered(), 1)), int64(room))))
		if len(chunk) == 0 {
			return false, err
		}
		r.take(chunk)
		r.skip -= int64(len(chunk))
		if r.skip > 0 {
			return false, nil
		}
		return r.valueDone(), nil
	}
	top := &r.stack[len(r.stack)-1]
	depth := len(r.stack) - 1 // of the value starting here
	topLevel := depth == 1    // a field of the request, or its name
	isKey := topLevel && top.left%2 == 0
	top.left--
	if depth > maxRaftDepth {
		return false, r.refuse("nested deeper than %d", maxRaftDepth)
	}
	h, err := r.peek(1)
	if err != nil {
		return false, err
	}
	b := h[0]
	n := headerLen(b)
	fields := rpcFields[r.rpcType]
	switch {
	case depth == 0:
		// The request: a map of its fields (the decoder would also fill a
		// struct from an array, by position).
		if l, ok := mapLen(b, r); !ok || l != len(fields) {
			return false, r.refuse("RPC type %d: not a map of its %d fields (byte 0x%02x)", r.rpcType, len(fields), b)
		}
	case isKey:
		// Named as raft's encoder names it, once: the decoder keeps the
		// last of two equal names and matches them in any case.
		if b < 0xa0 || b > 0xbf {
			return false, r.refuse("a field name that is not a short string (byte 0x%02x)", b)
		}
		k, err := r.peek(1 + int(b&0x1f))
		if err != nil {
			return false, err
		}
		i := fieldIndex(fields, k[1:])
		if i < 0 {
			return false, r.refuse("RPC type %d has no field %.40q", r.rpcType, k[1:])
		}
		if r.seen&(1<<i) != 0 {
			return false, r.refuse("field %s twice", fields[i].name)
		}
		r.seen |= 1 << i
		r.field = i
		r.take(k)
		return r.valueDone(), nil
	case topLevel:
		if f := fields[r.field]; !f.kind.allows(b) {
			return false, r.refuse("field %s: byte 0x%02x, raft writes %s", f.name, b, f.kind)
		}
	}
	field := -1 // the request's field this value is, if it is one
	if topLevel {
		field = r.field
	}
	if n == 0 {
		return false, r.refuse("not msgpack (byte 0x%02x)", b)
	}
	if h, err = r.peek(n); err != nil {
		return false, err
	}
	switch {
	case b <= 0x7f || b >= 0xe0: // fixints
		if r.isSize(field) {
			r.size = int64(int8(b))
			if b <= 0x7f {
				r.size = int64(b)
			}
		}
	case b <= 0x8f:
		return r.open(h, int(b&0x0f), true)
	case b <= 0x9f:
		return r.open(h, int(b&0x0f), false)
	case b <= 0xbf:
		return r.bytesValue(h, int64(b&0x1f), field)
	case b == 0xc4 || b == 0xc5 || b == 0xc6 || b == 0xd9 || b == 0xda || b == 0xdb:
		return r.bytesValue(h, int64(beUint(h[1:])), field)
	case b == 0xc7 || b == 0xc8 || b == 0xc9: // ext: length, type, data
		l := beUint(h[1 : n-1])
		if l > MaxField {
			return false, r.refuse("a field of %d bytes (bound %d)", l, MaxField)
		}
		r.take(h)
		r.skip = int64(l)
		if r.skip > 0 {
			return false, nil
		}
		return r.valueDone(), nil
	case b >= 0xcc && b <= 0xcf:
		if v := beUint(h[1:]); r.isSize(field) {
			r.size = int64(v)
			if v > 1<<62 {
				r.size = -1
			}
		}
	case b >= 0xd0 && b <= 0xd3:
		if r.isSize(field) {
			bits := 8 * (n - 1)
			r.size = int64(beUint(h[1:])) << (64 - bits) >> (64 - bits)
		}
	case b == 0xdc || b == 0xdd:
		return r.open(h, int(beUint(h[1:])), false)
	case b == 0xde || b == 0xdf:
		return r.open(h, int(beUint(h[1:])), true)
	}
	r.take(h) // nil, booleans, floats, fixext: all in the header
	return r.valueDone(), nil
}

// isSize reports whether field (an index of rpcFields, -1 for a nested
// value) is InstallSnapshot's Size.
func (r *rpcReader) isSize(field int) bool {
	return r.rpcType == rpcInstallSnapshot && field == fieldSize
}

// mapLen is the length of the map whose header starts with b (peeking at
// its length bytes); ok is false for other types.
func mapLen(b byte, r *rpcReader) (int, bool) {
	switch {
	case b >= 0x80 && b <= 0x8f:
		return int(b & 0x0f), true
	case b == 0xde || b == 0xdf:
		h, err := r.peek(headerLen(b))
		if err != nil {
			return 0, false
		}
		return int(min(beUint(h[1:]), maxRaftItems+1)), true
	}
	return 0, false
}

// headerLen is the length of the msgpack header starting with b, payload
// included for fixed-size values; 0 for a byte that starts no value.
func headerLen(b byte) int {
	switch {
	case b <= 0xbf || b >= 0xe0:
		return 1
	case b == 0xc0 || b == 0xc2 || b == 0xc3:
		return 1
	case b == 0xc4 || b == 0xd9:
		return 2
	case b == 0xc5 || b == 0xda || b == 0xdc || b == 0xde:
		return 3
	case b == 0xc6 || b == 0xdb || b == 0xdd || b == 0xdf:
		return 5
	case b >= 0xc7 && b <= 0xc9:
		return 2 + 1<<(b-0xc7)
	case b == 0xca:
		return 5
	case b == 0xcb:
		return 9
	case b >= 0xcc && b <= 0xcf:
		return 1 + 1<<(b-0xcc)
	case b >= 0xd0 && b <= 0xd3:
		return 1 + 1<<(b-0xd0)
	case b >= 0xd4 && b <= 0xd8:
		return 2 + 1<<(b-0xd4)
	}
	return 0 // 0xc1
}

// beUint decodes a big-endian unsigned integer of up to 8 bytes.
func beUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// open starts a container of n items whose header is h.
func (r *rpcReader) open(h []byte, n int, isMap bool) (bool, error) {
	if n > maxRaftItems {
		return false, r.refuse("%d items in one container (bound %d)", n, maxRaftItems)
	}
	r.take(h)
	if isMap {
		n *= 2
	}
	if n == 0 {
		return r.valueDone(), nil
	}
	r.stack = append(r.stack, rpcFrame{left: n, isMap: isMap})
	return false, nil
}

// bytesValue starts a string or binary of n bytes whose header is h; the
// sender ID (field fieldID of the request) is checked.
func (r *rpcReader) bytesValue(h []byte, n int64, field int) (bool, error) {
	if n > MaxField {
		return false, r.refuse("a field of %d bytes (bound %d)", n, MaxField)
	}
	if field >= 0 && !shortestString(h[0], n) {
		// As raft's encoder writes it: one string has one encoding.
		return false, r.refuse("field %s: a string of %d bytes in header 0x%02x", rpcFields[r.rpcType][field].name, n, h[0])
	}
	if field != fieldID && field != fieldAddr {
		r.take(h)
		r.skip = n
		if n > 0 {
			return false, nil
		}
		return r.valueDone(), nil
	}
	if n > maxServerIDLen {
		return false, r.refuse("a sender %s of %d bytes", strings.ToLower(rpcFields[r.rpcType][field].name), n)
	}
	hl := len(h)
	v, err := r.peek(hl + int(n))
	if err != nil {
		return false, err
	}
	if field == fieldAddr {
		// The group is the connection's for its life (its preamble): an
		// RPC its sender wrote for another group is refused, not handed to
		// this group's raft, whose terms and indexes are another log's.
		if _, g, ok := splitGroupAddr(string(v[hl:])); !ok || g != r.group {
			return false, r.refuse("an RPC of sender address %.80q on a connection of group %d", v[hl:], r.group)
		}
		r.take(v)
		return r.valueDone(), nil
	}
	id := v[hl:]
	if r.sender != "" && string(id) != r.sender {
		return false, r.refuse("the RPC claims to come from %.64q; the certificate names %q", id, r.sender)
	}
	r.id = append(r.id[:0], id...)
	r.take(v)
	return r.valueDone(), nil
}

// shortestString reports whether a string of n bytes in header b is in the
// encoding raft's encoder writes for n: fixstr, str16, str32.
func shortestString(b byte, n int64) bool {
	switch {
	case b >= 0xa0 && b <= 0xbf:
		return true
	case b == 0xda:
		return n >= 32
	case b == 0xdb:
		return n > 0xffff
	}
	return false
}

// valueDone closes the containers a value just finished; it reports whether
// that completed the request.
func (r *rpcReader) valueDone() bool {
	for len(r.stack) > 0 && r.stack[len(r.stack)-1].left == 0 {
		r.stack = r.stack[:len(r.stack)-1]
	}
	return len(r.stack) == 0
}

// answerVote answers a complete vote or pre-vote request in out itself when
// the node may not vote (votegate.go), writing the refusal where raft would
// write its answer; raft never sees the request. Raft is between RPCs on
// this connection (it asks for bytes only then), so the answer cannot
// interleave with one of its own.
func (r *rpcReader) answerVote() (bool, error) {
	if r.layer == nil {
		return false, nil
	}
	g := r.layer.votes.Load()
	if g == nil {
		return false, nil
	}
	var req any = &raft.RequestVoteRequest{}
	if r.rpcType == rpcRequestPreVote {
		req = &raft.RequestPreVoteRequest{}
	}
	if err := codec.NewDecoderBytes(r.out[1:], &codec.MsgpackHandle{}).Decode(req); err != nil {
		return false, r.refuse("a vote request raft cannot decode: %v", err)
	}
	resp := g.refusal(req)
	if resp == nil {
		return false, nil
	}
	var buf bytes.Buffer
	// As raft's NetworkTransport answers: an error string, then the
	// response (which holds no time, the one thing its handle sets).
	enc := codec.NewEncoder(&buf, &codec.MsgpackHandle{})
	if err := enc.Encode(""); err != nil {
		return false, fmt.Errorf("encode vote refusal: %w", err)
	}
	if err := enc.Encode(resp); err != nil {
		return false, fmt.Errorf("encode vote refusal: %w", err)
	}
	r.conn.SetWriteDeadline(time.Now().Add(raftIOTimeout))
	_, err := r.conn.Write(buf.Bytes())
	r.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		return false, fmt.Errorf("answer vote request: %w", err)
	}
	return true, nil
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
