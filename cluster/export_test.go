package cluster

// Internals for the external tests (package cluster_test), which use the
// exported harness in cluster/clustertest: it imports this package, so only
// a test package of its own can use it. Compiled into the test binary only.

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/cluster/logstore"
	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/fsm"
)

// Raft is the node's Raft instance, for tests that drive or inspect Raft
// directly (raw entries, log index, state, leadership).
func (n *Node) Raft() *raft.Raft { return n.raft }

// SetPropose replaces how n proposes check entries (fault injection
// between raft.Apply and its future). Call before the node sees checks.
func SetPropose(n *Node, propose func(cmd []byte, timeout time.Duration) raft.ApplyFuture) {
	n.propose = func(cmd, _ []byte, timeout time.Duration) raft.ApplyFuture { return propose(cmd, timeout) }
}

// SetOverLimitReady replaces the readiness the over-limit cache's loop
// consults (Node.Ready) with ready.
func SetOverLimitReady(n *Node, ready func() error) { n.ol.ready.Store(&ready) }

// LogStore is the Raft log and stable store a node opens.
type LogStore = logstore.Store

// SetWrapLogStore makes a node opened with cfg wrap its Raft log store
// (storage fault injection).
func SetWrapLogStore(cfg *Config, wrap func(LogStore) LogStore) { cfg.wrapLogStore = wrap }

// Internal endpoint paths.
const (
	PathCheck = forward.PathCheck
	PathLease = pathLease
	PathApply = forward.PathApply
)

// OpsSize is the bound on the entry size of ops that batching uses.
func OpsSize(ops []fsm.Op) int { return opsSize(ops) }

// NewStreamTransport is a Raft network transport on ln over the node stream
// layer (tc nil: plain TCP; localID is sent in the preamble), as an
// arbitrary client would build one.
func NewStreamTransport(ln net.Listener, tc *tls.Config, localID string) interface {
	raft.Transport
	raft.WithClose
} {
	return raftnet.NewOn(ln, tc, localID, 2*time.Second, hclog.NewNullLogger())
}

// MayVote reports whether n's incarnation may vote (vote.go).
func MayVote(n *Node) bool { return n.adm.mayVote() }
