package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
)

// Admission on the leader (see vote.go for why). A join names the joiner's
// HTTP address; the leader asks it (GET /internal/v1/bootstrap) for its
// incarnation and whether it is admitted:
//
//   - a new node ID: added as a voter as before, then its incarnation is
//     recorded — the record comes after the configuration entry in the log, so
//     when the joiner applies it, it holds everything before;
//   - a known ID whose incarnation is admitted (a restart, a bootstrap peer):
//     its incarnation is recorded if it was not;
//   - a known ID with a new, unadmitted incarnation (a wiped data directory
//     under an old name): it is demoted to (or added as) a non-voter, so the
//     quorum no longer counts it; once its applied index reaches the leader's
//     last index at the demotion it is promoted and its incarnation recorded.

// promotePoll is how often the leader asks a catching-up member for its
// applied index.
const promotePoll = 200 * time.Millisecond

// admitJoin runs on the leader before a join's AddVoter. handled: the join
// is complete (the member is a non-voter being caught up); otherwise the
// caller adds it as a voter and then calls recordIncarnation with inc.
func (n *Node) admitJoin(id, raftAddr, httpAddr string) (handled bool, inc string, err error) {
	if httpAddr == "" || id == n.cfg.NodeID {
		return false, "", nil
	}
	info, err := n.peers.infoRetry(httpAddr)
	if err != nil {
		return false, "", fmt.Errorf("join %s: ask it for its incarnation: %w", id, err)
	}
	if info.ID != id {
		return false, "", fmt.Errorf("join %s: the node at %s says it is %q", id, httpAddr, info.ID)
	}
	if info.Incarnation == "" { // a node from before incarnations
		return false, "", nil
	}
	known := n.fsm.Nodes()[incarnationKey(id)]
	suffrage, inConfig := n.suffrage(id)
	if info.Admitted || known == info.Incarnation || !inConfig {
		return false, info.Incarnation, nil
	}
	// A known member with a new data directory (or one added without an
	// HTTP address, whose incarnation the leader could not ask then).
	if info.Applied >= n.raft.CommitIndex() {
		// It holds everything committed: record it now; it is admitted
		// when it applies the record (and so holds everything before it).
		n.log.Warn("node came back with a new data directory and has caught up: admitting it",
			"node", id, "incarnation", info.Incarnation, "previous_incarnation", known, "applied", info.Applied)
		return false, info.Incarnation, nil
	}
	n.log.Warn("node came back with a new data directory: re-adding it as a non-voter until it has caught up",
		"node", id, "incarnation", info.Incarnation, "previous_incarnation", known)
	var f raft.IndexFuture
	if suffrage == raft.Voter {
		f = n.raft.DemoteVoter(raft.ServerID(id), 0, n.cfg.ApplyTimeout)
	} else {
		f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)
	}
	if err := f.Error(); err != nil {
		if err == raft.ErrNotLeader {
			return true, "", errRetry
		}
		return true, "", fmt.Errorf("demote %s to non-voter: %w", id, err)
	}
	if _, err := n.await(context.Background(), n.raft.Apply(fsm.EncodeSetNode(id, httpAddr), n.cfg.ApplyTimeout)); err != nil {
		return true, "", err
	}
	n.startPromotion(id, raftAddr, httpAddr, info.Incarnation, n.raft.LastIndex())
	return true, "", nil
}

// recordIncarnation writes a member's incarnation into the node table (after
// its configuration entry).
func (n *Node) recordIncarnation(id, inc string) error {
	if inc == "" || n.fsm.Nodes()[incarnationKey(id)] == inc {
		return nil
	}
	_, err := n.await(context.Background(), n.raft.Apply(fsm.EncodeSetNode(incarnationKey(id), inc), n.cfg.ApplyTimeout))
	return err
}

// suffrage returns a server's suffrage in the latest configuration.
func (n *Node) suffrage(id string) (raft.ServerSuffrage, bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// startPromotion watches a re-added member until it has applied target,
// then makes it a voter again and records its incarnation. One watcher per
// member; it ends when this node stops leading (the member joins again and
// the next leader takes over), when the member's incarnation changes, or
// after DefaultJoinTimeout.
func (n *Node) startPromotion(id, raftAddr, httpAddr, inc string, target uint64) {
	n.promoMu.Lock()
	if n.promoting == nil {
		n.promoting = map[string]bool{}
	}
	if n.promoting[id] {
		n.promoMu.Unlock()
		return
	}
	n.promoting[id] = true
	n.promoMu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { n.promoMu.Lock(); delete(n.promoting, id); n.promoMu.Unlock() }()
		deadline := time.Now().Add(DefaultJoinTimeout)
		t := time.NewTicker(promotePoll)
		defer t.Stop()
		for time.Now().Before(deadline) && n.IsLeader() {
			select {
			case <-n.closing:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), promotePoll*5)
			info, err := n.peers.info(ctx, httpAddr)
			cancel()
			if err != nil || info.Incarnation != inc {
				continue
			}
			if info.Applied < target {
				continue
			}
			if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
				n.log.Info("promote caught-up member", "node", id, "error", err)
				continue
			}
			if err := n.recordIncarnation(id, inc); err != nil {
				n.log.Info("record incarnation", "node", id, "error", err)
				continue
			}
			n.log.Warn("re-added member caught up: it is a voter again", "node", id, "incarnation", inc, "applied", info.Applied)
			return
		}
	}()
}

// recordBootIncarnations records, on the leader that bootstrapped a
// --bootstrap-expect cluster, the incarnations its peers reported then.
func (n *Node) recordBootIncarnations() {
	n.promoMu.Lock()
	incs := n.bootIncs
	n.bootIncs = nil
	n.promoMu.Unlock()
	for id, inc := range incs {
		if err := n.recordIncarnation(id, inc); err != nil {
			n.log.Debug("record incarnation", "node", id, "error", err)
			n.promoMu.Lock()
			if n.bootIncs == nil {
				n.bootIncs = map[string]string{}
			}
			n.bootIncs[id] = inc // again at the next tick
			n.promoMu.Unlock()
		}
	}
}
