package raftnet

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// streamTransport is limitd's Raft transport on a local port, as Listen
// builds it.
func streamTransport(t *testing.T, id string) Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := NewOn(ln, nil, id, 5*time.Second, hclog.NewNullLogger())
	t.Cleanup(func() { tr.Close() })
	return tr
}

// On limitd's own transport the vote gate takes no goroutine hop: Raft
// reads the transport's channel, and an unadmitted node's refusals
// (Granted=false, the candidate's term) are written on the connection by
// the guard, so Raft never sees those requests; other RPCs on the same
// connection, the first election's votes (noHistory), and every vote once
// the node is admitted reach Raft.
func TestVoteGateAnswersInStream(t *testing.T) {
	server, client := streamTransport(t, "n1"), streamTransport(t, "n2")
	var admitted atomic.Bool
	g := NewVoteGate(server, "n1", admitted.Load, func() {}, false)
	defer g.Halt()
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

	admitted.Store(true)
	got = raftAnswers(&raft.RequestVoteResponse{Term: 9, Granted: true})
	if err := client.RequestVote("n1", addr, &stale, &resp); err != nil || !resp.Granted {
		t.Fatalf("vote to an admitted node: %+v, %v; want raft's answer", resp, err)
	}
	if _, ok := (<-got).(*raft.RequestVoteRequest); !ok {
		t.Fatal("an admitted node's vote request did not reach raft")
	}
}
