package raftnet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// rpcBytes encodes RPCs as hashicorp/raft's NetworkTransport sends them: a
// type byte, the msgpack request, and for InstallSnapshot the data after it.
func rpcBytes(t *testing.T, rpcs ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
	for _, r := range rpcs {
		switch r := r.(type) {
		case *raft.AppendEntriesRequest:
			b.WriteByte(0)
			enc.Encode(r)
		case *raft.RequestVoteRequest:
			b.WriteByte(1)
			enc.Encode(r)
		case *raft.InstallSnapshotRequest:
			b.WriteByte(2)
			enc.Encode(r)
			b.Write(bytes.Repeat([]byte{0xc1}, int(max(r.Size, 0)))) // not msgpack: must pass unread
		case []byte:
			b.Write(r)
		default:
			t.Fatalf("rpcBytes: %T", r)
		}
	}
	return b.Bytes()
}

// guard reads in through the guard, arriving a byte at a time, as raft
// does (256 KiB reads), and returns what it passed on and its error.
func guard(in []byte, sender string) ([]byte, error) {
	out, _, err := readGuarded(newTestReader(iotest.OneByteReader(bytes.NewReader(in)), sender))
	return out, err
}

func newTestReader(src io.Reader, sender string) *rpcReader {
	return &rpcReader{src: bufioReader(src), sender: sender}
}

// readGuarded reads r to its end, returning the bytes, the length of each
// Read, and the error that ended it (nil for io.EOF).
func readGuarded(r *rpcReader) ([]byte, []int, error) {
	var out []byte
	var reads []int
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if n > 0 {
			reads = append(reads, n)
		}
		if errors.Is(err, io.EOF) {
			return out, reads, nil
		}
		if err != nil {
			return out, reads, err
		}
	}
}

func header(id string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte("127.0.0.1:8300")}
}

// Well-formed RPCs from the node the certificate names pass byte for byte,
// snapshot data included.
func TestRaftGuardPassesRPCs(t *testing.T) {
	in := rpcBytes(t,
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 7, Entries: []*raft.Log{
			{Index: 1, Term: 7, Data: bytes.Repeat([]byte("x"), 300<<10)}, {Index: 2, Term: 7, Data: []byte("y")}}},
		&raft.RequestVoteRequest{RPCHeader: header("n2"), Term: 8},
		&raft.InstallSnapshotRequest{RPCHeader: header("n2"), Term: 8, Size: 100_000},
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 8})
	for _, sender := range []string{"n2", ""} {
		out, err := guard(in, sender)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("sender %q: %v; passed %d of %d bytes", sender, err, len(out), len(in))
		}
	}
}

// An RPC claiming another sender than the certificate's node, or none, is
// refused, and its last byte is not passed on: raft cannot finish decoding it.
func TestRaftGuardBindsSender(t *testing.T) {
	ok := rpcBytes(t, &raft.AppendEntriesRequest{RPCHeader: header("n3"), Term: 2})
	for name, rpc := range map[string]any{
		"as n2": &raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 51},
		"vote":  &raft.RequestVoteRequest{RPCHeader: header("n2"), Term: 51},
		"no ID": &raft.AppendEntriesRequest{RPCHeader: header(""), Term: 51},
		// No ID field at all: known only at the request's last byte.
		"no ID field": []byte{0, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x33},
		// The decoder takes any string or binary key, the last "ID" winning.
		"second ID as str8": []byte{0, 0x82, 0xa2, 'I', 'D', 0xa2, 'n', '3', 0xd9, 2, 'I', 'D', 0xa2, 'n', '2'},
		"second ID as bin8": []byte{0, 0x82, 0xa2, 'I', 'D', 0xa2, 'n', '3', 0xc4, 2, 'I', 'D', 0xa2, 'n', '2'},
	} {
		bad := rpcBytes(t, rpc)
		out, err := guard(append(append([]byte{}, ok...), bad...), "n3")
		if !errors.Is(err, errRaftFrame) {
			t.Fatalf("%s with n3's certificate: %v, want refused", name, err)
		}
		if len(out) >= len(ok)+len(bad) || !bytes.Equal(out[:len(ok)], ok) {
			t.Fatalf("%s: passed %d bytes of %d+%d: the refused RPC reached raft whole", name, len(out), len(ok), len(bad))
		}
	}
	// A certificate naming no node (issued before the rule) speaks as any.
	if _, err := guard(rpcBytes(t, &raft.AppendEntriesRequest{RPCHeader: header("n2")}), ""); err != nil {
		t.Fatalf("no identity in the certificate: %v", err)
	}
}

// A length beyond the bound is refused before a byte of the field is read
// or passed on (a 2 GB claim grew the leader by 600 MB), as are huge
// counts, deep nesting, unknown RPC types and bytes that are not msgpack.
func TestRaftGuardBoundsFrames(t *testing.T) {
	cases := map[string][]byte{
		"2 GB binary":    {0, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xc6, 0x7f, 0xff, 0xff, 0xff},
		"2 GB string":    {0, 0x81, 0xa2, 'I', 'D', 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"4G entries":     {0, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge map":       {0, 0xdf, 0x7f, 0xff, 0xff, 0xff},
		"deep":           append([]byte{0, 0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 100)...),
		"unknown type":   {9, 0x80},
		"not msgpack":    {0, 0xc1},
		"huge snapshot":  rpcBytes(t, &raft.InstallSnapshotRequest{RPCHeader: header("n2"), Size: -1}),
		"oversized ID":   append([]byte{0, 0x81, 0xa2, 'I', 'D', 0xda, 0x08, 0x00}, strings.Repeat("a", 2048)...),
		"lower-case id":  {0, 0x81, 0xa2, 'i', 'd', 0xa2, 'n', '9'},
		"ext over bound": {0, 0x81, 0xa1, 'x', 0xc9, 0x7f, 0xff, 0xff, 0xff, 1},
	}
	for name, in := range cases {
		out, err := guard(in, "n2")
		if !errors.Is(err, errRaftFrame) {
			t.Errorf("%s: %v, want refused", name, err)
		}
		if len(out) >= len(in) {
			t.Errorf("%s: all %d bytes passed on", name, len(in))
		}
	}
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

// Refused Raft connections are logged at most once a second, with a count
// of those not logged (8,000 refused connections wrote 1.5 MB of log).
func TestRefusedConnectionLogsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	var l refusalLog
	start := time.Now()
	for i := 0; i < 8000; i++ {
		l.refused(logger, errors.New("raft TLS handshake: bad certificate"))
	}
	lines := strings.Count(buf.String(), "\n")
	if bound := 1 + int(time.Since(start)/time.Second); lines < 1 || lines > bound {
		t.Fatalf("8,000 refusals in %v logged %d lines, want 1 to %d:\n%.500s", time.Since(start), lines, bound, buf.String())
	}
}

// BenchmarkRaftGuard: the guard's cost per AppendEntries of 64 entries of
// 4 KiB (a group-committed batch each), as bytes through it.
func BenchmarkRaftGuard(b *testing.B) {
	entries := make([]*raft.Log, 64)
	for i := range entries {
		entries[i] = &raft.Log{Index: uint64(i + 1), Term: 3, Data: bytes.Repeat([]byte{byte(i)}, 4<<10)}
	}
	var in bytes.Buffer
	enc := codec.NewEncoder(&in, &codec.MsgpackHandle{})
	in.WriteByte(0)
	enc.Encode(&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 3, Entries: entries})
	rpc := in.Bytes()
	b.SetBytes(int64(len(rpc)))
	buf := make([]byte, 256<<10)
	for b.Loop() {
		r := newTestReader(bytes.NewReader(rpc), "n2")
		for {
			_, err := r.Read(buf)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Each Read hands raft at most one RPC, whole once checked (so raft asks for
// more only after answering the RPCs before: a refused vote is answered on
// the connection in between); an RPC longer than guardFlushBytes goes in
// pieces of at most that, the connection's buffer never growing past
// guardOutBytes; snapshot data passes through unbuffered.
func TestRaftGuardReadsOneRPCAtATime(t *testing.T) {
	big := make([]*raft.Log, 8)
	for i := range big {
		big[i] = &raft.Log{Index: uint64(i + 1), Term: 7, Data: bytes.Repeat([]byte{byte(i)}, 256<<10)}
	}
	rpcs := []any{
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 7, Entries: []*raft.Log{{Index: 1, Term: 7, Data: []byte("x")}}},
		&raft.RequestVoteRequest{RPCHeader: header("n2"), Term: 8},
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 8, Entries: big},
		&raft.InstallSnapshotRequest{RPCHeader: header("n2"), Term: 8, Size: 300 << 10},
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 8},
	}
	var in []byte
	var lens []int
	for _, rpc := range rpcs {
		b := rpcBytes(t, rpc)
		in = append(in, b...)
		lens = append(lens, len(b))
	}
	r := newTestReader(bytes.NewReader(in), "n2")
	out, reads, err := readGuarded(r)
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("%v; passed %d of %d bytes", err, len(out), len(in))
	}
	if reads[0] != lens[0] || reads[1] != lens[1] {
		t.Fatalf("reads %v, want the first two RPCs (%d, %d bytes) one per read", reads[:2], lens[0], lens[1])
	}
	pieces := 0
	for sum, i := 0, 2; sum < lens[2]; i++ { // the large AppendEntries
		if n := reads[i]; n > guardFlushBytes || sum+n > lens[2] {
			t.Fatalf("a read of %d bytes at %d of the large AppendEntries (%d bytes; pieces of at most %d)", n, sum, lens[2], guardFlushBytes)
		}
		sum += reads[i]
		pieces++
	}
	if pieces < lens[2]/guardFlushBytes {
		t.Fatalf("%d pieces of the large AppendEntries", pieces)
	}
	if cap(r.out) != guardOutBytes {
		t.Fatalf("the connection's buffer grew to %d bytes (bound %d)", cap(r.out), guardOutBytes)
	}
}

// BenchmarkRaftAppendEntriesRoundTrip: one AppendEntries (one entry of
// 200 bytes) from one node's transport to another's and back over loopback
// TCP, through everything limitd puts on the way (stream layer, guard, vote
// gate); the receiving side answers at once, as a follower's Raft would
// after its log write. Run with -cpu 1, as the nodes of `limitd bench`.
func BenchmarkRaftAppendEntriesRoundTrip(b *testing.B) {
	transport := func(id string) Transport {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		t, err := Listen(Config{NodeID: id, Addr: addr, Bind: addr}, hclog.NewNullLogger())
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	server := NewVoteGate(transport("n1"), "n1", func() bool { return true }, func() {}, false)
	defer server.Close()
	client := transport("n2")
	defer client.Close()
	go func() {
		for {
			select {
			case rpc := <-server.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 3, Success: true}, nil)
			case <-server.stop:
				return
			}
		}
	}()
	req := &raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 3, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: 10,
		Entries: []*raft.Log{{Index: 11, Term: 3, Type: raft.LogCommand, Data: bytes.Repeat([]byte("c"), 200)}}}
	addr := server.LocalAddr()
	var cpu0 time.Duration
	for i := 0; b.Loop(); i++ {
		if i == 0 {
			cpu0 = processCPU()
		}
		var resp raft.AppendEntriesResponse
		if err := client.AppendEntries("n1", addr, req, &resp); err != nil || !resp.Success {
			b.Fatal(resp, err)
		}
	}
	// CPU time of the process, both ends: unlike the elapsed time it does
	// not move when other processes share the cores.
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// kv is one field of a request as raft encodes it: its name and the msgpack
// of its value.
type kv struct {
	key string
	raw []byte
}

// raftFields encodes rpc as raft v1.7.3's NetworkTransport does (its
// handle) and splits the request's map into its fields, in order.
func raftFields(t testing.TB, rpc any) (byte, []kv) {
	t.Helper()
	var typ byte
	switch rpc.(type) {
	case *raft.AppendEntriesRequest:
		typ = 0
	case *raft.RequestVoteRequest:
		typ = 1
	case *raft.InstallSnapshotRequest:
		typ = 2
	case *raft.TimeoutNowRequest:
		typ = 3
	case *raft.RequestPreVoteRequest:
		typ = 4
	default:
		t.Fatalf("raftFields: %T", rpc)
	}
	var b []byte
	//lint:ignore SA1019 the handle NetworkTransport encodes with (net_transport.go)
	codec.NewEncoderBytes(&b, &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}}).MustEncode(rpc)
	if b[0]&0xf0 != 0x80 {
		t.Fatalf("raftFields: %T is not a fixmap: % x", rpc, b[:1])
	}
	dec := codec.NewDecoderBytes(b[1:], &codec.MsgpackHandle{})
	var kvs []kv
	for range int(b[0] & 0x0f) {
		var key string
		var v any
		dec.MustDecode(&key)
		at := dec.NumBytesRead()
		dec.MustDecode(&v)
		kvs = append(kvs, kv{key, b[1+at : 1+dec.NumBytesRead()]})
	}
	return typ, kvs
}

// frame is the RPC of type typ whose request holds fields, in order.
func frame(typ byte, fields []kv) []byte {
	b := []byte{typ, 0x80 | byte(len(fields))}
	for _, f := range fields {
		b = append(append(append(b, 0xa0|byte(len(f.key))), f.key...), f.raw...)
	}
	return b
}

// edited returns fields with key's value replaced by raw (dropped if raw is
// nil), or with key added at the end when add is set.
func edited(fields []kv, key string, raw []byte, add bool) []kv {
	var out []kv
	for _, f := range fields {
		if f.key == key && !add {
			if raw != nil {
				out = append(out, kv{key, raw})
			}
			continue
		}
		out = append(out, f)
	}
	if add {
		out = append(out, kv{key, raw})
	}
	return out
}

// allRPCs is one request of each type raft v1.7.3 sends, from id.
func allRPCs(id string) []any {
	h := header(id)
	return []any{
		//lint:ignore SA1019 raft v1.7.3 still sends Leader
		&raft.AppendEntriesRequest{RPCHeader: h, Term: 7, Leader: h.Addr, PrevLogEntry: 3, PrevLogTerm: 6, LeaderCommitIndex: 3,
			Entries: []*raft.Log{{Index: 4, Term: 7, Type: raft.LogCommand, Data: []byte("x"), AppendedAt: time.Unix(1, 0)}}},
		&raft.RequestVoteRequest{RPCHeader: h, Term: 8, LastLogIndex: 4, LastLogTerm: 7, LeadershipTransfer: true},
		&raft.RequestPreVoteRequest{RPCHeader: h, Term: 8, LastLogIndex: 4, LastLogTerm: 7},
		&raft.TimeoutNowRequest{RPCHeader: h},
		&raft.InstallSnapshotRequest{RPCHeader: h, SnapshotVersion: 1, Term: 8, LastLogIndex: 4, LastLogTerm: 7,
			Configuration: []byte("c"), ConfigurationIndex: 1},
	}
}

// headerBypasses are edits of a well-formed request from n3 under which the
// guard and raft's decoder could read different senders, or raft none:
// each must be refused whatever the certificate names.
var headerBypasses = []struct {
	name string
	key  string
	raw  []byte
	add  bool
}{
	{"ID twice, then n2 as an array of bytes", "ID", []byte{0x92, 'n', '2'}, true},
	{"ID twice, then n2 as str8", "ID", []byte{0xd9, 2, 'n', '2'}, true},
	{"ID twice, then n2 as bin8", "ID", []byte{0xc4, 2, 'n', '2'}, true},
	{"ID twice, then nil", "ID", []byte{0xc0}, true},
	{"ID twice, the same", "ID", []byte{0xa2, 'n', '3'}, true},
	{"id in lower case after ID", "id", []byte{0xa2, 'n', '2'}, true},
	{"ID nil", "ID", []byte{0xc0}, false},
	{"ID empty", "ID", []byte{0xa0}, false},
	{"ID missing", "ID", nil, false},
	{"ID as an array of bytes", "ID", []byte{0x92, 'n', '3'}, false},
	{"ID as bin8", "ID", []byte{0xc4, 2, 'n', '3'}, false},
	{"ID as str8", "ID", []byte{0xd9, 2, 'n', '3'}, false},
	{"ID as str16", "ID", []byte{0xda, 0, 2, 'n', '3'}, false},
	{"Addr nil", "Addr", []byte{0xc0}, false},
	{"Addr missing", "Addr", nil, false},
	{"Addr twice", "Addr", []byte{0xa1, 'x'}, true},
	{"Addr as an array of bytes", "Addr", []byte{0x91, 'x'}, false},
	{"ProtocolVersion as a string", "ProtocolVersion", []byte{0xa1, '3'}, false},
	{"ProtocolVersion twice", "ProtocolVersion", []byte{0x03}, true},
	{"a field raft does not send", "Sender", []byte{0xa2, 'n', '2'}, true},
}

// Every header bypass is refused for every RPC type, and the refused RPC
// does not reach raft whole: the guard reads the header exactly as raft
// writes it, so it and raft's decoder cannot read two senders from one
// request. Fails if the guard compares only some encodings of ID (a second
// ID as an array of bytes passed), or lets a nil ID or Addr through.
func TestRaftGuardRefusesHeaderBypasses(t *testing.T) {
	for _, rpc := range allRPCs("n3") {
		typ, fields := raftFields(t, rpc)
		ok := frame(typ, fields)
		for _, sender := range []string{"n3", ""} {
			if out, err := guard(ok, sender); err != nil || !bytes.Equal(out, ok) {
				t.Fatalf("%T, certificate naming %q: the request as raft writes it: %v", rpc, sender, err)
			}
			for _, c := range headerBypasses {
				bad := frame(typ, edited(fields, c.key, c.raw, c.add))
				out, err := guard(append(append([]byte{}, ok...), bad...), sender)
				if !errors.Is(err, errRaftFrame) {
					t.Errorf("%T, %s, certificate naming %q: %v, want refused", rpc, c.name, sender, err)
					continue
				}
				if len(out) != len(ok) {
					t.Errorf("%T, %s: passed %d bytes of %d+%d", rpc, c.name, len(out), len(ok), len(bad))
				}
			}
		}
	}
	// Every field holds the type raft writes for it: an integer where raft
	// writes a string or nil, a string where it writes anything else.
	for _, rpc := range allRPCs("n3") {
		typ, fields := raftFields(t, rpc)
		for _, f := range fields {
			wrong := []byte{0xa1, '7'}
			if c := f.raw[0]; c == 0xc0 || (c >= 0xa0 && c <= 0xbf) || c == 0xda || c == 0xdb {
				wrong = []byte{0x07}
			}
			in := frame(typ, edited(fields, f.key, wrong, false))
			if _, err := guard(in, "n3"); !errors.Is(err, errRaftFrame) {
				t.Errorf("%T, %s as % x (raft writes % x): %v, want refused", rpc, f.key, wrong, f.raw[:1], err)
			}
		}
	}
}

// FuzzRaftGuardMatchesRaftDecoder feeds the same bytes to the guard and to
// raft's decoder, read as NetworkTransport.handleCommand reads a connection
// (go-msgpack with raft's handle, one decoder for the connection): on every
// input, each RPC the guard passes decodes, if it decodes, to the sender the
// guard checked (the certificate's node, when it names one) with an address,
// and raft cannot complete decoding any RPC the guard did not pass.
func FuzzRaftGuardMatchesRaftDecoder(f *testing.F) {
	for _, rpc := range allRPCs("n3") {
		typ, fields := raftFields(f, rpc)
		f.Add(frame(typ, fields))
		for _, c := range headerBypasses {
			f.Add(frame(typ, edited(fields, c.key, c.raw, c.add)))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, sender := range []string{"n3", ""} {
			var types []byte
			var ids []string
			r := newTestReader(bytes.NewReader(in), sender)
			r.checked = func(typ byte, id []byte) {
				types = append(types, typ)
				ids = append(ids, string(id))
			}
			out, _, _ := readGuarded(r)
			br := bufio.NewReader(bytes.NewReader(out))
			dec := codec.NewDecoder(br, &codec.MsgpackHandle{})
			for i := 0; ; i++ {
				typ, err := br.ReadByte()
				if err != nil {
					break
				}
				var h *raft.RPCHeader
				var req any
				var size int64
				switch typ {
				case 0:
					r := &raft.AppendEntriesRequest{}
					req, h = r, &r.RPCHeader
				case 1:
					r := &raft.RequestVoteRequest{}
					req, h = r, &r.RPCHeader
				case 2:
					r := &raft.InstallSnapshotRequest{}
					req, h = r, &r.RPCHeader
				case 3:
					r := &raft.TimeoutNowRequest{}
					req, h = r, &r.RPCHeader
				case 4:
					r := &raft.RequestPreVoteRequest{}
					req, h = r, &r.RPCHeader
				default:
					t.Fatalf("sender %q: the guard passed RPC type %d", sender, typ)
				}
				if err := dec.Decode(req); err != nil {
					break // raft closes the connection
				}
				if i >= len(types) {
					t.Fatalf("sender %q: raft decoded RPC %d (type %d), which the guard did not pass: %+v", sender, i, typ, req)
				}
				if string(h.ID) != ids[i] || (sender != "" && string(h.ID) != sender) || len(h.ID) == 0 || len(h.Addr) == 0 {
					t.Fatalf("sender %q: raft decoded RPC %d as from ID %q, Addr %q; the guard checked %q", sender, i, h.ID, h.Addr, ids[i])
				}
				if s, ok := req.(*raft.InstallSnapshotRequest); ok {
					size = s.Size
				}
				if _, err := io.CopyN(io.Discard, br, size); err != nil {
					break
				}
			}
		}
	})
}
