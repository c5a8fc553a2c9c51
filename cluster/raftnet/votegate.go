package raftnet

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// errNoPast is what an unadmitted node answers its own Raft when Raft wants
// to ask for votes: it must not lead a cluster whose history it lacks.
var errNoPast = errors.New("this node's data directory is new and not yet admitted by a leader: it does not ask for votes")

// VoteGate wraps the Raft transport of a node: while the node may not vote
// (mayVote, the node's admission of its incarnation) it answers every incoming RequestVote and RequestPreVote with
// Granted=false itself (Raft never sees them) and fails its outgoing ones.
// Everything else passes through. On limitd's own transport the refusal is
// written on the connection by the guard that reads it (guard.go,
// answerVote), and Raft reads the transport's RPC channel directly: no RPC
// takes an extra goroutine hop. On a transport passed in (tests' in-memory
// one) a goroutine filters the channel. It also turns off pipelining when
// asked (noPipeline; see cluster/DESIGN.md, bounded shutdown).
type VoteGate struct {
	raft.Transport
	nodeID   string
	mayVote  func() bool
	refusing func() // told of every refusal

	layer      *streamLayer  // limitd's transport: votes refused in its stream
	out        chan raft.RPC // otherwise: the filtered channel
	stop       chan struct{}
	stopOnce   sync.Once
	noPipeline bool
	pipes      pipelines // pipeline.go
	pipeBound  time.Duration
}

// NewVoteGate wraps t for the node nodeID; refusing is called on every
// vote it refuses (the node rate-limits its log line).
func NewVoteGate(t raft.Transport, nodeID string, mayVote func() bool, refusing func(), noPipeline bool) *VoteGate {
	g := &VoteGate{Transport: t, nodeID: nodeID, mayVote: mayVote, refusing: refusing, stop: make(chan struct{}), noPipeline: noPipeline, pipeBound: pipelineSendBound}
	if it, ok := t.(Transport); ok && it.layer != nil {
		g.layer = it.layer
		g.layer.votes.Store(g)
		return g
	}
	g.out = make(chan raft.RPC)
	go g.run(t.Consumer())
	return g
}

// Consumer is the RPC stream Raft reads, without refused votes.
func (g *VoteGate) Consumer() <-chan raft.RPC {
	if g.layer != nil {
		return g.Transport.Consumer()
	}
	return g.out
}

func (g *VoteGate) run(in <-chan raft.RPC) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-g.stop:
			return
		}
		if resp := g.refusal(rpc.Command); resp != nil {
			rpc.Respond(resp, nil)
			continue
		}
		select {
		case g.out <- rpc:
		case <-g.stop:
			return
		}
	}
}

// refusal is the answer to req when it is a vote or pre-vote request this
// node may not grant; nil when Raft is to handle req.
func (g *VoteGate) refusal(req any) any {
	var resp any
	switch req := req.(type) {
	case *raft.RequestVoteRequest:
		if g.mayVote() || noHistory(req.LastLogIndex, req.LastLogTerm) {
			return nil
		}
		resp = &raft.RequestVoteResponse{RPCHeader: g.header(), Term: req.Term, Granted: false}
	case *raft.RequestPreVoteRequest:
		if g.mayVote() || noHistory(req.LastLogIndex, req.LastLogTerm) {
			return nil
		}
		resp = &raft.RequestPreVoteResponse{RPCHeader: g.header(), Term: req.Term, Granted: false}
	default:
		return nil
	}
	g.report()
	return resp
}

// noHistory: a candidate whose log is at most the bootstrap configuration
// (index 1, term 1) — the first election of a --bootstrap-expect cluster,
// whose other members are new and not yet admitted. Voting for it cannot
// lose anything: there is nothing beyond the configuration to lose, and a
// cluster that has more refuses such a candidate through its own voters.
func noHistory(lastIndex, lastTerm uint64) bool { return lastIndex <= 1 && lastTerm <= 1 }

func (g *VoteGate) header() raft.RPCHeader {
	return raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(g.nodeID),
		Addr:            g.Transport.EncodePeer(raft.ServerID(g.nodeID), g.Transport.LocalAddr()),
	}
}

func (g *VoteGate) report() { g.refusing() }

func (g *VoteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if !g.mayVote() {
		return errNoPast
	}
	return g.Transport.RequestVote(id, target, args, resp)
}

func (g *VoteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if !g.mayVote() {
		return errNoPast
	}
	pv, ok := g.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("transport does not support pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// AppendEntriesPipeline returns a bounded pipeline (pipeline.go), or none
// when pipelining is off: then Raft sends one AppendEntries at a time.
func (g *VoteGate) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if g.noPipeline {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	p, err := g.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return g.pipes.wrap(p, g.pipeBound), nil
}

// Close stops the filter and closes the wrapped transport if it can be
// closed (Raft calls it on shutdown, as it would the transport's own).
func (g *VoteGate) Close() error {
	g.Halt()
	g.pipes.closeAll()
	if c, ok := g.Transport.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Halt stops the filter without closing the wrapped transport (a transport
// passed in by the caller stays the caller's).
func (g *VoteGate) Halt() {
	g.stopOnce.Do(func() { close(g.stop) })
	if g.layer != nil {
		g.layer.votes.CompareAndSwap(g, nil)
	}
}
