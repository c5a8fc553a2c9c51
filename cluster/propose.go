package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
)

var errShortResponse = errors.New("state machine returned the wrong number of results")

// Check decides ops through the Raft leader. On the leader they join the
// group-commit batcher; on a follower they are forwarded to the leader (package forward). It retries internally while no leader is known or leadership moves
// before anything was proposed, until ctx ends (ErrNoLeader). If a proposal
// was made but its fate is unknown, it returns ErrOutcomeUnknown.
func (n *Node) Check(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if err := n.vit.unavailable(); err != nil {
		return nil, err
	}
	if tracing.Enabled() {
		return n.checkTraced(ctx, ops) // tracing.go; off, a check does no work for it
	}
	var res []fsm.Result
	err := n.onLeader(ctx,
		func() (err error) { res, err = n.leaderBatch.do(ctx, ops); return err },
		func(string) (err error) { res, err = n.fwd.Check(ctx, ops); return err })
	return res, err
}

// onLeader runs local on the leader or forward(leader's HTTP address) on a
// follower, and retries, while nothing was proposed (errRetry), until ctx ends.
func (n *Node) onLeader(ctx context.Context, local func() error, forward func(addr string) error) error {
	for {
		var err error
		if n.IsLeader() {
			err = local()
		} else if _, addr := n.forwardTarget(); addr != "" {
			err = forward(addr)
		} else {
			err = errRetry
		}
		if !errors.Is(err, errRetry) {
			return err
		}
		if err := n.vit.unavailable(); err != nil {
			return err
		}
		// quorum.go: no 5 s wait without a leader; a node with a LeaderHint
		// hears from no leader when it holds no replica, and retries its
		// hint until ctx ends.
		if n.cfg.LeaderHint == nil {
			if err := n.leaderGone(); err != nil {
				return err
			}
		}
		if err := pause(ctx, n.closing); err != nil {
			return err
		}
	}
}

// pause waits a moment before retrying, or reports why it cannot.
func pause(ctx context.Context, closing <-chan struct{}) error {
	t := time.NewTimer(10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ErrNoLeader
	case <-closing:
		return ErrNoLeader
	case <-t.C:
		return nil
	}
}

// proposeChecks is the leader's batcher send: one CmdCheck entry for all
// ops; ext (the forwarded units' tags, ahead.go) travels in the entry's
// Extensions.
func (n *Node) proposeChecks(ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error) {
	return n.proposeChecksIn(context.Background(), ops, ext, encoded)
}

// proposeChecksIn is proposeChecks whose ctx carries only the batch's span
// (tracing.go): the wait is bounded by ApplyTimeout, not by any caller.
func (n *Node) proposeChecksIn(spanCtx context.Context, ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error) {
	// Stamping and enqueueing under one lock keeps leader time monotonic in
	// log order even with several batches in flight.
	n.clock.mu.Lock()
	var bounds fsm.Bounds
	if n.cfg.CheckBounds != nil {
		bounds = n.cfg.CheckBounds()
	}
	cmd := fsm.EncodeCheckBounded(nil, n.clock.stampLocked(), int64(n.cfg.RequestIDRetention), bounds, ops)
	encoded()
	f := n.propose(cmd, ext, n.cfg.ApplyTimeout)
	n.clock.mu.Unlock()
	resp, err := n.await(context.Background(), f)
	if tracing.Enabled() {
		traceApplied(spanCtx, f, err)
	}
	if err != nil {
		return nil, err
	}
	switch r := resp.(type) {
	case []fsm.Result:
		return r, nil
	case error:
		return nil, r
	default:
		return nil, fmt.Errorf("unexpected check response %T", resp)
	}
}

// await waits for a proposal and classifies its failure: not proposed
// (errRetry / ErrNoLeader) versus proposed with unknown fate. It waits at
// most ApplyTimeout, and no longer than ctx, and returns at once when the
// state machine halts or the node closes: the future of an entry the halted
// state machine will never apply is never answered.
func (n *Node) await(ctx context.Context, f raft.ApplyFuture) (interface{}, error) {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(n.cfg.ApplyTimeout)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-n.vit.halted:
		return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, n.vit.unavailable())
	case <-n.closing:
		return nil, fmt.Errorf("%w: the node is shutting down", ErrOutcomeUnknown)
	case <-t.C:
		return nil, fmt.Errorf("%w: the entry was not applied within %v", ErrOutcomeUnknown, n.cfg.ApplyTimeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: no answer before the request's deadline (%v)", ErrOutcomeUnknown, ctx.Err())
	}
	switch {
	case err == nil:
		return f.Response(), nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return nil, errRetry
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return nil, ErrNoLeader
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrAbortedByRestore):
		return nil, ErrOutcomeUnknown
	default:
		return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
}

// Apply proposes an admin command (built with the fsm.Encode* functions) and
// returns the state machine's response, forwarding to the leader when needed.
func (n *Node) Apply(ctx context.Context, cmd []byte) (interface{}, error) {
	if len(cmd) > MaxCommandBytes {
		return nil, fmt.Errorf("%w: an admin command of %d bytes (bound %d)", ErrTooLarge, len(cmd), MaxCommandBytes)
	}
	if err := fsm.ValidateCommand(cmd); err != nil {
		return nil, err
	}
	var resp interface{}
	err := n.onLeader(ctx,
		func() (err error) { resp, err = n.await(ctx, n.raft.Apply(cmd, n.cfg.ApplyTimeout)); return err },
		func(addr string) (err error) { resp, err = n.fwd.Apply(ctx, addr, cmd); return err })
	return resp, err
}

// Join adds a voter (or updates its addresses) through the leader, and
// records its HTTP address in the replicated node table.
func (n *Node) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	if id == "" || raftAddr == "" { // http_addr is optional: a leader registers its own
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Field: "id", Message: "join needs id and raft_addr"}
	}
	return n.onLeader(ctx,
		func() error { return n.joinLocal(id, raftAddr, httpAddr) },
		func(addr string) error {
			return n.fwd.PostJSON(ctx, addr, forward.PathJoin, forward.JoinRequest{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr})
		})
}

func (n *Node) joinLocal(id, raftAddr, httpAddr string) error {
	if e := addressTaken(n.raft, id, raftAddr); e != nil { // members.go
		return e
	}
	handled, inc, err := n.promo.admitJoin(id, raftAddr, httpAddr) // admit.go: a wiped member rejoins as a non-voter
	if handled || err != nil {
		return err
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return errRetry
		}
		return fmt.Errorf("add voter %s at %s: %w", id, raftAddr, err)
	}
	if httpAddr == "" {
		return nil
	}
	if _, err := n.await(context.Background(), n.raft.Apply(fsm.EncodeSetNode(id, httpAddr), n.cfg.ApplyTimeout)); err != nil {
		return err
	}
	return n.promo.recordIncarnation(id, inc)
}

// Remove takes a server out of the Raft configuration through the leader.
func (n *Node) Remove(ctx context.Context, id string) error {
	return n.onLeader(ctx,
		func() error { return n.removeLocal(id) },
		func(addr string) error {
			return n.fwd.PostJSON(ctx, addr, forward.PathRemove, forward.JoinRequest{ID: id})
		})
}

func (n *Node) removeLocal(id string) error {
	found := false
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			found = found || string(s.ID) == id
		}
	}
	if !found {
		return &fsm.Error{Code: "not_found", Field: "id", Message: fmt.Sprintf("no member with id %q", id)}
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return errRetry
		}
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	if id == n.cfg.NodeID {
		// The removal is committed, and a leader that removed itself steps
		// down: the node-table entry below could never commit through it,
		// and failing the call would tell the caller the removal may not
		// have happened (a retry then answers not_found). The entry is
		// only an address; a member that joins again under the id replaces it.
		return nil
	}
	_, err := n.await(context.Background(), n.raft.Apply(fsm.EncodeRemoveNode(id), n.cfg.ApplyTimeout))
	return err
}
