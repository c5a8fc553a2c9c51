package raftnet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// testMux is a shared Raft port on loopback for node id, with groups open.
func testMux(t *testing.T, id string, groups ...uint32) (*Mux, map[uint32]Transport) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMuxOn(ln, nil, id, 5*time.Second, hclog.NewNullLogger())
	t.Cleanup(func() { m.Close() })
	trs := map[uint32]Transport{}
	for _, g := range groups {
		tr, err := m.Group(g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[g] = tr
	}
	return m, trs
}

// receive waits for one RPC on tr's consumer, answers it and returns it; nil
// if none came within wait.
func receive(tr Transport, wait time.Duration) *raft.RPC {
	select {
	case rpc := <-tr.Consumer():
		rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
		return &rpc
	case <-time.After(wait):
		return nil
	}
}

// nothing fails if a group's raft was handed an RPC.
func nothing(t *testing.T, what string, trs ...Transport) {
	t.Helper()
	for _, tr := range trs {
		select {
		case rpc := <-tr.Consumer():
			t.Fatalf("%s: group %d received %T", what, tr.Group(), rpc.Command)
		default:
		}
	}
}

// Each group of a shared port receives only its own group's RPCs, from the
// peer's transport of the same group, and learns the sender's plain
// address (EncodePeer's group suffix undone).
func TestMuxDeliversEachGroupItsOwnRPCs(t *testing.T) {
	a, ta := testMux(t, "a", 0, 1, 2)
	_, tb := testMux(t, "b", 0, 1, 2)
	for _, g := range []uint32{0, 1, 2} {
		done := make(chan *raft.RPC, 1)
		go func() { done <- receive(ta[g], 10*time.Second) }()
		req := &raft.AppendEntriesRequest{RPCHeader: tb[g].header("b"), Term: uint64(10 + g)}
		var resp raft.AppendEntriesResponse
		if err := tb[g].AppendEntries("a", raft.ServerAddress(a.Addr().String()), req, &resp); err != nil || !resp.Success {
			t.Fatalf("group %d: %v %+v", g, err, resp)
		}
		rpc := <-done
		if rpc == nil {
			t.Fatalf("group %d received nothing", g)
		}
		got := rpc.Command.(*raft.AppendEntriesRequest)
		if got.Term != uint64(10+g) {
			t.Fatalf("group %d received term %d", g, got.Term)
		}
		if addr := ta[g].DecodePeer(got.Addr); addr != tb[g].LocalAddr() {
			t.Fatalf("group %d: sender address %q decodes to %q", g, got.Addr, addr)
		}
		for h, tr := range ta {
			if h != g {
				nothing(t, "an RPC of another group", tr)
			}
		}
	}
	if s := a.Stats(); s != (MuxStats{}) {
		t.Fatalf("refusals counted: %+v", s)
	}
}

// header is the RPC header raft writes through this transport.
func (t Transport) header(id string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: t.EncodePeer(raft.ServerID(id), t.LocalAddr())}
}

// rawConn dials the port and writes a preamble line and then rpcs.
func rawConn(t *testing.T, m *Mux, preamble string, rpcs []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(append([]byte(preamble), rpcs...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByServer reports whether the server closed c (a read ends) within wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.ReadAll(c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// A node of today's build sends "limitd-raft/1 <id>" and plain header
// addresses: that is group 0 on the shared port, byte for byte, so a
// rolling upgrade keeps one group.
func TestMuxV1PreambleIsGroupZero(t *testing.T) {
	m, trs := testMux(t, "a", 0, 1)
	req := &raft.AppendEntriesRequest{RPCHeader: header("old"), Term: 4}
	c := rawConn(t, m, "limitd-raft/1 a\n", rpcBytes(t, req))
	rpc := receive(trs[0], 10*time.Second)
	if rpc == nil || rpc.Command.(*raft.AppendEntriesRequest).Term != 4 {
		t.Fatalf("group 0 got %+v", rpc)
	}
	nothing(t, "a v1 connection", trs[1])
	// raft's answer comes back on the connection, as a v1 dialer reads it.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b := make([]byte, 1); func() error { _, err := io.ReadFull(c, b); return err }() != nil {
		t.Fatal("no answer on the v1 connection")
	}
	// And the dialer of this build speaks v1 for group 0.
	if p := preamble("a", 0); p != "limitd-raft/1 a\n" {
		t.Fatalf("group 0's preamble is %q", p)
	}
}

// A preamble naming a group the node does not host closes the connection,
// is counted, and reaches no group.
func TestMuxRefusesAndCountsUnknownGroup(t *testing.T) {
	m, trs := testMux(t, "a", 0, 1)
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b"), Addr: []byte(groupAddr("127.0.0.1:1", 7))}}
	c := rawConn(t, m, "limitd-raft/2 a 7\n", rpcBytes(t, req))
	if !closedByServer(c, 10*time.Second) {
		t.Fatal("a connection for group 7 stayed open")
	}
	if got := m.Stats().UnknownGroup; got != 1 {
		t.Fatalf("unknown-group refusals %d, want 1", got)
	}
	nothing(t, "a connection for group 7", trs[0], trs[1])
	// A group that was open and is closed is unknown from then on.
	trs[1].Close()
	c = rawConn(t, m, "limitd-raft/2 a 1\n", nil)
	if !closedByServer(c, 10*time.Second) || m.Stats().UnknownGroup != 2 {
		t.Fatalf("a closed group's connection: counted %d", m.Stats().UnknownGroup)
	}
}

// The guard binds a connection to its preamble's group: an RPC its sender
// wrote for group 1 (header address "host:port#1") passes on group 1's
// connection and is refused on group 2's and group 0's, as group 0's plain
// address is refused on group 1's; the refused connection is closed and no
// group's raft sees the RPC.
func TestMuxGuardRefusesAnRPCOfAnotherGroup(t *testing.T) {
	m, trs := testMux(t, "a", 0, 1, 2)
	_, tb := testMux(t, "b", 1)
	frame1 := rpcBytes(t, &raft.AppendEntriesRequest{RPCHeader: tb[1].header("b"), Term: 5})
	c := rawConn(t, m, "limitd-raft/2 a 1\n", frame1)
	if rpc := receive(trs[1], 10*time.Second); rpc == nil {
		t.Fatal("group 1's own RPC did not reach it")
	}
	c.Close()
	for _, cs := range []struct {
		preamble string
		frame    []byte
	}{
		{"limitd-raft/2 a 2\n", frame1},
		{"limitd-raft/1 a\n", frame1},
		{"limitd-raft/2 a 0\n", frame1},
		{"limitd-raft/2 a 1\n", rpcBytes(t, &raft.AppendEntriesRequest{RPCHeader: header("b"), Term: 5})},
		{"limitd-raft/2 a 2\n", rpcBytes(t, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("b"), Addr: []byte("127.0.0.1:1#02")}})},
	} {
		c := rawConn(t, m, cs.preamble, cs.frame)
		if !closedByServer(c, 10*time.Second) {
			t.Fatalf("%q: the connection stayed open", cs.preamble)
		}
		time.Sleep(20 * time.Millisecond)
		nothing(t, cs.preamble, trs[0], trs[1], trs[2])
	}
}

// At most maxPendingHandshakes connections handshake at once: one more is
// closed at once and counted, and a connection after the silent ones are
// gone is served.
func TestMuxBoundsPendingHandshakes(t *testing.T) {
	m, trs := testMux(t, "a", 0)
	var silent []net.Conn
	for range maxPendingHandshakes {
		silent = append(silent, rawConn(t, m, "", nil))
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(m.pending) < maxPendingHandshakes && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	extra := rawConn(t, m, "", nil)
	if !closedByServer(extra, 5*time.Second) || m.Stats().Busy != 1 {
		t.Fatalf("the connection past the bound: busy %d", m.Stats().Busy)
	}
	for _, c := range silent {
		c.Close()
	}
	for len(m.pending) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	rawConn(t, m, "limitd-raft/1 a\n", rpcBytes(t, &raft.AppendEntriesRequest{RPCHeader: header("b")}))
	if receive(trs[0], 10*time.Second) == nil {
		t.Fatal("a connection after the silent ones was not served")
	}
}

// Closing one group's transport (its raft's shutdown) leaves the port and
// the other groups serving; the group may open again, but not twice.
func TestMuxGroupCloseLeavesOthers(t *testing.T) {
	a, ta := testMux(t, "a", 0, 1)
	_, tb := testMux(t, "b", 0)
	if _, err := a.Group(1); err == nil {
		t.Fatal("group 1 opened twice")
	}
	ta[1].Close()
	done := make(chan *raft.RPC, 1)
	go func() { done <- receive(ta[0], 10*time.Second) }()
	var resp raft.AppendEntriesResponse
	if err := tb[0].AppendEntries("a", raft.ServerAddress(a.Addr().String()), &raft.AppendEntriesRequest{RPCHeader: tb[0].header("b")}, &resp); err != nil {
		t.Fatalf("group 0 after group 1 closed: %v", err)
	}
	if <-done == nil {
		t.Fatal("group 0 received nothing")
	}
	again, err := a.Group(1)
	if err != nil {
		t.Fatalf("group 1 reopened: %v", err)
	}
	again.Close()
}

// Preambles: v1 is group 0; v2 names a group in its one decimal spelling;
// anything else is refused.
func TestReadPreamble(t *testing.T) {
	good := map[string]struct {
		id string
		g  uint32
	}{
		"limitd-raft/1 n1\n":             {"n1", 0},
		"limitd-raft/2 n1 0\n":           {"n1", 0},
		"limitd-raft/2 n1 12\n":          {"n1", 12},
		"limitd-raft/2 a b 4294967295\n": {"a b", 4294967295},
	}
	for in, want := range good {
		id, g, err := readPreamble(bytes.NewReader([]byte(in + "rest")))
		if err != nil || id != want.id || g != want.g {
			t.Errorf("%q: %q %d %v, want %q %d", in, id, g, err, want.id, want.g)
		}
		if want.g != 0 && preamble(want.id, want.g) != in {
			t.Errorf("preamble(%q, %d) = %q", want.id, want.g, preamble(want.id, want.g))
		}
	}
	for _, in := range []string{"limitd-raft/2 n1\n", "limitd-raft/2 n1 01\n", "limitd-raft/2 n1 +1\n", "limitd-raft/2 n1 4294967296\n",
		"limitd-raft/3 n1 1\n", "GET / HTTP/1.1\n", "limitd-raft/2 n1 x\n"} {
		if _, _, err := readPreamble(bytes.NewReader([]byte(in))); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
