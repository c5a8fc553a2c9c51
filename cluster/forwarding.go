package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
)

// The node's side of the node-to-node protocol (package forward): the
// follower's forwarder is built in Open; the leader's endpoints call the
// node through leaderSide, forward.Leader's one implementation.

// errRetry marks a failure before anything was proposed (forward.ErrRetry).
var errRetry = forward.ErrRetry

// unavailableError carries the cause of an ErrUnavailable.
type unavailableError = forward.UnavailableError

// Internal returns the handler for node-to-node requests, mounted under /internal/.
func (n *Node) Internal() http.Handler {
	mux := http.NewServeMux()
	n.fwdSrv.Register(mux)
	mux.HandleFunc("POST "+pathLease, leaderSide{n}.handleLease) // lease.go
	mux.HandleFunc("GET "+pathBootstrap, n.disc.handleBootstrap)
	mux.HandleFunc("POST "+pathClusterRecord, clusterRecordHandler(n)) // groupsrecord.go
	return n.fwdSrv.Authenticate(mux)
}

// leaderSide is what the node-to-node endpoints call on this node.
type leaderSide struct{ n *Node }

var _ forward.Leader = leaderSide{}

func (l leaderSide) IsLeader() bool          { return l.n.IsLeader() }
func (l leaderSide) IsMember(id string) bool { return isMember(l.n.raft, id) }
func (l leaderSide) Join(id, raftAddr, httpAddr string) error {
	return l.n.joinLocal(id, raftAddr, httpAddr)
}
func (l leaderSide) Remove(id string) error { return l.n.removeLocal(id) }

func (l leaderSide) Apply(ctx context.Context, cmd []byte) (any, error) {
	return l.n.await(ctx, l.n.raft.Apply(cmd, l.n.cfg.ApplyTimeout))
}

// Decide decides a follower's forwarded unit, from the check
// stream or /internal/v1/check. Its ops are proposed in entries of at most
// BatchMaxOps ops and MaxEntryBytes (so a batch from a follower with other
// settings, or a forged one, is split), in order; a failure after the first
// entry is ErrOutcomeUnknown, whatever its own cause, since the earlier
// entries were proposed.
//
// A unit with a tag (from a check stream whose follower named it) goes into
// its entry's tags when it is one entry, so that the follower can answer it
// from its own log (ahead.go).
func (l leaderSide) Decide(ctx context.Context, ops []fsm.Op, tag forward.Tag) ([]fsm.Result, error) {
	n := l.n
	chunks, err := splitOps(ops, n.cfg.BatchMaxOps)
	if err != nil {
		return nil, err
	}
	if len(chunks) != 1 {
		tag = forward.Tag{}
	}
	if err := n.vit.unavailable(); err != nil {
		return nil, err
	}
	if !n.IsLeader() {
		return nil, errRetry
	}
	res := make([]fsm.Result, 0, len(ops))
	for i, chunk := range chunks {
		part, err := n.leaderBatch.doTagged(ctx, chunk, tag)
		if err != nil {
			if i > 0 && !errors.Is(err, ErrOutcomeUnknown) {
				// Earlier chunks were proposed: the batch as a whole was not
				// "not proposed", whatever this chunk's failure says.
				err = fmt.Errorf("%w: part %d of %d failed: %v", ErrOutcomeUnknown, i+1, len(chunks), err)
			}
			return nil, err
		}
		res = append(res, part...)
	}
	return res, nil
}

// splitOps cuts ops into consecutive runs that each fit one entry: at most
// maxOps ops and MaxEntryBytes. An op larger than MaxEntryBytes on its
// own is ErrTooLarge.
func splitOps(ops []fsm.Op, maxOps int) ([][]fsm.Op, error) {
	var chunks [][]fsm.Op
	start, size := 0, 0
	for i := range ops {
		s := opsSize(ops[i : i+1])
		if s > MaxEntryBytes {
			return nil, fmt.Errorf("%w: op %d is up to %d bytes encoded (bound %d)", ErrTooLarge, i, s, MaxEntryBytes)
		}
		if i > start && (i-start >= maxOps || size+s > MaxEntryBytes) {
			chunks = append(chunks, ops[start:i])
			start, size = i, 0
		}
		size += s
	}
	if start < len(ops) {
		chunks = append(chunks, ops[start:])
	}
	return chunks, nil
}
