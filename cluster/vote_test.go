package cluster

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
)

// A node killed after receiving the leader's record of its incarnation, but
// before applying it, is admitted at the next start from its log: after a
// whole-cluster restart its vote may be needed to elect the leader that
// would replay the record (found by TestFaultsWipeKillPause: three nodes
// refusing each other's pre-votes). Another node's record does not count.
func TestAdmitFromLogRecord(t *testing.T) {
	dir := t.TempDir()
	inc, created, err := loadIncarnation(dir)
	if err != nil || !created || inc.Admitted {
		t.Fatalf("new directory: %+v created %v, %v; want a new, unadmitted incarnation", inc, created, err)
	}
	a := &admission{dir: dir, nodeID: "n2", id: inc.ID, log: discardLogger()}
	logs := raft.NewInmemStore()
	if err := logs.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: fsm.EncodeSetNode(incarnationKey("n3"), inc.ID)},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: fsm.EncodeSetNode(incarnationKey("n2"), "another incarnation")},
	}); err != nil {
		t.Fatal(err)
	}
	record := fsm.EncodeSetNode(incarnationKey("n2"), inc.ID)
	if err := a.admitFromLog(logs, record); err != nil || a.admitted.Load() {
		t.Fatalf("without its own record: admitted %v, %v", a.admitted.Load(), err)
	}
	if err := logs.StoreLog(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: record}); err != nil {
		t.Fatal(err)
	}
	if err := a.admitFromLog(logs, record); err != nil || !a.admitted.Load() {
		t.Fatalf("with its record in the log: admitted %v, %v", a.admitted.Load(), err)
	}
	// Durable: the next start reads it admitted.
	again, created, err := loadIncarnation(dir)
	if err != nil || created || again != (incarnation{ID: inc.ID, Admitted: true, NodeID: "n2"}) {
		t.Fatalf("reloaded %+v created %v, %v", again, created, err)
	}
}

// A directory with Raft state from before incarnations keeps its vote; a
// damaged incarnation file stops the node with the recovery step.
func TestIncarnationLegacyAndDamaged(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, walDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	inc, created, err := loadIncarnation(dir)
	if err != nil || !created || !inc.Admitted {
		t.Fatalf("legacy directory: %+v created %v, %v; want admitted", inc, created, err)
	}
	if err := os.WriteFile(filepath.Join(dir, incarnationFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadIncarnation(dir); err == nil || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("damaged file: %v", err)
	}
}

// streamTransport is limitd's Raft transport on a local port, as
// newRaftTransport builds it.
func streamTransport(t *testing.T, id string) idTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	layer := &streamLayer{ln: ln, adv: ln.Addr(), localID: id, logger: hclog.NewNullLogger()}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 1, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { nt.Close() })
	return idTransport{nt, layer}
}

// On limitd's own transport the vote gate takes no goroutine hop: Raft
// reads the transport's channel, and an unadmitted node's refusals
// (Granted=false, the candidate's term) are written on the connection by
// the guard, so Raft never sees those requests; other RPCs on the same
// connection, the first election's votes (noHistory), and every vote once
// the node is admitted reach Raft.
func TestVoteGateAnswersInStream(t *testing.T) {
	server, client := streamTransport(t, "n1"), streamTransport(t, "n2")
	a := &admission{dir: t.TempDir(), nodeID: "n1", id: "inc1", log: discardLogger()}
	g := newVoteGate(server, a, false)
	defer g.halt()
	if g.Consumer() != server.Consumer() || g.out != nil {
		t.Fatal("the gate filters limitd's transport through a channel of its own")
	}
	addr := raft.ServerAddress(server.LocalAddr())
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(client.LocalAddr())}
	stale := raft.RequestVoteRequest{RPCHeader: hdr, Term: 9, LastLogIndex: 40, LastLogTerm: 3}
	// raftAnswers serves one RPC as Raft, and returns it.
	raftAnswers := func(resp any) <-chan any {
		got := make(chan any, 1)
		go func() {
			select {
			case rpc := <-g.Consumer():
				got <- rpc.Command
				rpc.Respond(resp, nil)
			case <-time.After(30 * time.Second):
				got <- nil
			}
		}()
		return got
	}
	noRaft := func(what string) {
		t.Helper()
		select {
		case rpc := <-g.Consumer():
			t.Fatalf("%s reached raft: %T", what, rpc.Command)
		default:
		}
	}

	for range 2 { // twice: the connection carries on after a refusal
		var resp raft.RequestVoteResponse
		if err := client.RequestVote("n1", addr, &stale, &resp); err != nil || resp.Granted || resp.Term != 9 || string(resp.ID) != "n1" {
			t.Fatalf("vote from an unadmitted node: %+v, %v; want refused at term 9 by n1", resp, err)
		}
		noRaft("a refused vote")
		var pre raft.RequestPreVoteResponse
		if err := client.RequestPreVote("n1", addr, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 10, LastLogIndex: 40, LastLogTerm: 3}, &pre); err != nil || pre.Granted || pre.Term != 10 {
			t.Fatalf("pre-vote from an unadmitted node: %+v, %v; want refused at term 10", pre, err)
		}
		noRaft("a refused pre-vote")
		got := raftAnswers(&raft.AppendEntriesResponse{Term: 9, Success: true})
		var ae raft.AppendEntriesResponse
		if err := client.AppendEntries("n1", addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 9, PrevLogEntry: 40, Entries: []*raft.Log{{Index: 41, Term: 9, Data: []byte("x")}}}, &ae); err != nil || !ae.Success {
			t.Fatalf("AppendEntries after a refused vote: %+v, %v", ae, err)
		}
		if c, ok := (<-got).(*raft.AppendEntriesRequest); !ok || c.PrevLogEntry != 40 {
			t.Fatalf("raft got %#v, want the AppendEntries", c)
		}
	}

	first := raft.RequestVoteRequest{RPCHeader: hdr, Term: 2, LastLogIndex: 1, LastLogTerm: 1}
	got := raftAnswers(&raft.RequestVoteResponse{Term: 2, Granted: true})
	var resp raft.RequestVoteResponse
	if err := client.RequestVote("n1", addr, &first, &resp); err != nil || !resp.Granted {
		t.Fatalf("first election's vote: %+v, %v; want raft's answer", resp, err)
	}
	if _, ok := (<-got).(*raft.RequestVoteRequest); !ok {
		t.Fatal("the first election's vote did not reach raft")
	}

	a.admit("test")
	got = raftAnswers(&raft.RequestVoteResponse{Term: 9, Granted: true})
	if err := client.RequestVote("n1", addr, &stale, &resp); err != nil || !resp.Granted {
		t.Fatalf("vote to an admitted node: %+v, %v; want raft's answer", resp, err)
	}
	if _, ok := (<-got).(*raft.RequestVoteRequest); !ok {
		t.Fatal("an admitted node's vote request did not reach raft")
	}
}

// A data directory records its node: opened under another node id it is
// refused with both names, instead of running forever, never ready. A file
// from before the record is claimed by the first node to open it.
func TestDataDirBelongsToItsNode(t *testing.T) {
	dir := t.TempDir()
	inc, _, err := loadIncarnation(dir)
	if err != nil {
		t.Fatal(err)
	}
	if inc, err = claimDataDir(dir, "n1", inc); err != nil || inc.NodeID != "n1" {
		t.Fatalf("claim a new directory: %+v %v", inc, err)
	}
	again, _, err := loadIncarnation(dir)
	if err != nil || again.NodeID != "n1" {
		t.Fatalf("reloaded %+v %v: the claim is not durable", again, err)
	}
	if _, err := claimDataDir(dir, "n1", again); err != nil {
		t.Fatalf("its own node: %v", err)
	}
	_, err = claimDataDir(dir, "n4", again)
	if err == nil || !strings.Contains(err.Error(), `belongs to node "n1"`) || !strings.Contains(err.Error(), `not to --node-id "n4"`) {
		t.Fatalf("another node id: %v", err)
	}
}
