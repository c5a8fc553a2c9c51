package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/fsm"
)

// Quota leases (fsm/lease.go): a node asks the leader to grant or take back
// leases on keys. The entries carry the leader's time, like checks: on the
// leader they are stamped under clock.mu; a follower sends the entry it built
// to the leader's /internal/v1/lease, which re-stamps it (fsm.StampLeaseCommand)
// before proposing. The holder named in the entry is this node's id.

const pathLease = forward.PathLease

// leaseHook passes the state machine's lease events (fsm.LeaseHook) to the
// lease table set with SetLeaseHook; before one is set they go nowhere (a
// node that holds no leases has nothing to give back).
type leaseHook struct{ to atomic.Pointer[fsm.LeaseHook] }

func (h *leaseHook) Recall(policy, key string) {
	if to := h.to.Load(); to != nil {
		(*to).Recall(policy, key)
	}
}

func (h *leaseHook) Returned(policy, key string) {
	if to := h.to.Load(); to != nil {
		(*to).Returned(policy, key)
	}
}

// SetLeaseHook makes h hear of lease recalls and returns as this node's
// state machine applies them (the service's lease table sets it).
func (n *Node) SetLeaseHook(h fsm.LeaseHook) { n.leaseHook.to.Store(&h) }

// GrantLeases asks for leases (fsm.LeaseRequest) held by this node. An error
// means no grant is known: with ErrOutcomeUnknown some may have been made,
// and a repeat with the same ids answers them without taking more.
func (n *Node) GrantLeases(ctx context.Context, reqs []fsm.LeaseRequest) ([]fsm.LeaseGrant, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if len(reqs) > fsm.MaxLeaseOps {
		return nil, fmt.Errorf("%w: %d lease requests (bound %d)", ErrTooLarge, len(reqs), fsm.MaxLeaseOps)
	}
	var out []fsm.LeaseGrant
	err := n.leaseCommand(ctx, fsm.EncodeGrantLease(nil, 0, n.cfg.NodeID, reqs), func(resp interface{}) error {
		gs, ok := resp.([]fsm.LeaseGrant)
		if !ok || len(gs) != len(reqs) {
			return fmt.Errorf("%w: grant lease answered %T", errShortResponse, resp)
		}
		out = gs
		return nil
	}, func(body []byte) error { return json.Unmarshal(body, &out) })
	if err == nil && len(out) != len(reqs) {
		return nil, fmt.Errorf("%w: %d grants for %d requests", ErrOutcomeUnknown, len(out), len(reqs))
	}
	return out, err
}

// ReturnLeases gives back what this node's leases did not spend, and returns
// the units credited. The node must not spend from a lease once it is
// passed here.
func (n *Node) ReturnLeases(ctx context.Context, rets []fsm.LeaseReturn) ([]int64, error) {
	if len(rets) == 0 {
		return nil, nil
	}
	if len(rets) > fsm.MaxLeaseOps {
		return nil, fmt.Errorf("%w: %d lease returns (bound %d)", ErrTooLarge, len(rets), fsm.MaxLeaseOps)
	}
	var out []int64
	err := n.leaseCommand(ctx, fsm.EncodeReturnLease(nil, 0, n.cfg.NodeID, rets), func(resp interface{}) error {
		ns, ok := resp.([]int64)
		if !ok || len(ns) != len(rets) {
			return fmt.Errorf("%w: return lease answered %T", errShortResponse, resp)
		}
		out = ns
		return nil
	}, func(body []byte) error { return json.Unmarshal(body, &out) })
	if err == nil && len(out) != len(rets) {
		return nil, fmt.Errorf("%w: %d answers for %d returns", ErrOutcomeUnknown, len(out), len(rets))
	}
	return out, err
}

// leaseCommand proposes cmd (stamped by the leader) and hands the state
// machine's response to local (on the leader) or the leader's JSON answer
// to remote (on a follower).
func (n *Node) leaseCommand(ctx context.Context, cmd []byte, local func(interface{}) error, remote func([]byte) error) error {
	if len(cmd) > MaxCommandBytes {
		return fmt.Errorf("%w: a lease command of %d bytes (bound %d)", ErrTooLarge, len(cmd), MaxCommandBytes)
	}
	if err := n.vit.unavailable(); err != nil {
		return err
	}
	return n.onLeader(ctx,
		func() error {
			resp, err := n.proposeLease(ctx, cmd)
			if err != nil {
				return err
			}
			return local(resp)
		},
		func(addr string) error {
			body, err := n.fwd.Post(ctx, addr, pathLease, "application/octet-stream", cmd)
			if err != nil {
				return err
			}
			if err := remote(body); err != nil {
				return fmt.Errorf("%w: decode leader response: %v", ErrOutcomeUnknown, err)
			}
			return nil
		})
}

// proposeLease stamps cmd with leader time and proposes it.
func (n *Node) proposeLease(ctx context.Context, cmd []byte) (interface{}, error) {
	n.clock.mu.Lock()
	var bounds fsm.Bounds
	if n.cfg.CheckBounds != nil {
		bounds = n.cfg.CheckBounds() // a grant creates key state: bounded like a check
	}
	stamped, err := fsm.StampLeaseCommandBounded(nil, cmd, n.clock.stampLocked(), bounds)
	if err != nil {
		n.clock.mu.Unlock()
		return nil, err
	}
	f := n.propose(stamped, nil, n.cfg.ApplyTimeout)
	n.clock.mu.Unlock()
	resp, err := n.await(ctx, f)
	if err != nil {
		return nil, err
	}
	if e, ok := resp.(error); ok {
		return nil, e
	}
	return resp, nil
}

// handleLease runs a follower's lease command on the leader.
func (l leaderSide) handleLease(w http.ResponseWriter, r *http.Request) {
	n := l.n
	cmd, ok := forward.ReadBody(w, r, MaxCommandBytes)
	if !ok {
		return
	}
	if !l.leaseHolderIsPeer(w, r, cmd) {
		return
	}
	if !n.IsLeader() {
		forward.WriteError(w, errRetry)
		return
	}
	resp, err := n.proposeLease(r.Context(), cmd)
	if err != nil {
		if errorsIsBadCommand(err) {
			forward.WriteBadRequest(w, err.Error())
			return
		}
		forward.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func errorsIsBadCommand(err error) bool {
	return errors.Is(err, fsm.ErrBadCommand) || errors.Is(err, fsm.ErrUnknownCommand)
}

// leaseHolderIsPeer admits a follower's lease command only for the node its
// certificate names (a certificate naming no node is accepted as any, as
// everywhere: forward.Server.Authenticate). Without it one member could give back
// another's leases, which that node would go on spending: the key would admit
// more than its limit. It writes the refusal itself: 400 bad_request for a
// command it cannot read, 403 for another node's.
func (l leaderSide) leaseHolderIsPeer(w http.ResponseWriter, r *http.Request, cmd []byte) bool {
	if l.n.cfg.TLS == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return true
	}
	id, named := raftnet.NodeIDFromCert(r.TLS.PeerCertificates[0])
	if !named {
		return true
	}
	holder, err := fsm.LeaseCommandHolder(cmd)
	if err != nil {
		forward.WriteBadRequest(w, err.Error())
		return false
	}
	if holder != id {
		http.Error(w, fmt.Sprintf("this certificate names node %.64q, which may take and give back only its own leases (the command is %.64q's)", id, holder), http.StatusForbidden)
		return false
	}
	return true
}
