package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
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

// promotions is the leader's side of admission: it asks a joiner for its
// incarnation, demotes a wiped member to a non-voter and promotes it once it
// has caught up, and records incarnations in the node table. It owns the
// promotions in progress and the incarnations a --bootstrap-expect
// bootstrap left to record; the rest it reads from the node, set in Open.
type promotions struct {
	self         string
	applyTimeout time.Duration
	raft         *raft.Raft
	fsm          *fsm.FSM
	peers        *peerClient
	await        func(ctx context.Context, f raft.ApplyFuture) (interface{}, error) // Node.await
	leading      func() bool
	log          *slog.Logger
	closing      <-chan struct{}
	wg           *sync.WaitGroup // the node's: Close waits for a promotion's watcher

	mu        sync.Mutex
	promoting map[string]bool   // members the leader is catching up
	bootIncs  map[string]string // peers' incarnations to record after a --bootstrap-expect bootstrap
}

// promotePoll is how often the leader asks a catching-up member for its
// applied index.
const promotePoll = 200 * time.Millisecond

// admitJoin runs on the leader before a join's AddVoter. handled: the join
// is complete (the member is a non-voter being caught up); otherwise the
// caller adds it as a voter and then calls recordIncarnation with inc.
func (p *promotions) admitJoin(id, raftAddr, httpAddr string) (handled bool, inc string, err error) {
	if httpAddr == "" || id == p.self {
		return false, "", nil
	}
	info, err := p.peers.infoRetry(httpAddr)
	if err != nil {
		return false, "", fmt.Errorf("join %s: ask it for its incarnation: %w", id, err)
	}
	if info.ID != id {
		return false, "", fmt.Errorf("join %s: the node at %s says it is %q", id, httpAddr, info.ID)
	}
	if info.Incarnation == "" { // a node from before incarnations
		return false, "", nil
	}
	known := p.fsm.Nodes()[incarnationKey(id)]
	suffrage, inConfig := p.suffrage(id)
	if info.Admitted || known == info.Incarnation || !inConfig {
		return false, info.Incarnation, nil
	}
	// A known member with a new data directory (or one added without an
	// HTTP address, whose incarnation the leader could not ask then).
	if info.Applied >= p.raft.CommitIndex() {
		// It holds everything committed: record it now; it is admitted
		// when it applies the record (and so holds everything before it).
		p.log.Warn("node came back with a new data directory and has caught up: admitting it",
			"node", id, "incarnation", info.Incarnation, "previous_incarnation", known, "applied", info.Applied)
		return false, info.Incarnation, nil
	}
	p.log.Warn("node came back with a new data directory: re-adding it as a non-voter until it has caught up",
		"node", id, "incarnation", info.Incarnation, "previous_incarnation", known)
	var f raft.IndexFuture
	if suffrage == raft.Voter {
		f = p.raft.DemoteVoter(raft.ServerID(id), 0, p.applyTimeout)
	} else {
		f = p.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, p.applyTimeout)
	}
	if err := f.Error(); err != nil {
		if err == raft.ErrNotLeader {
			return true, "", errRetry
		}
		return true, "", fmt.Errorf("demote %s to non-voter: %w", id, err)
	}
	if _, err := p.await(context.Background(), p.raft.Apply(fsm.EncodeSetNode(id, httpAddr), p.applyTimeout)); err != nil {
		return true, "", err
	}
	p.startPromotion(id, raftAddr, httpAddr, info.Incarnation, p.raft.LastIndex())
	return true, "", nil
}

// recordIncarnation writes a member's incarnation into the node table (after
// its configuration entry).
func (p *promotions) recordIncarnation(id, inc string) error {
	if inc == "" || p.fsm.Nodes()[incarnationKey(id)] == inc {
		return nil
	}
	_, err := p.await(context.Background(), p.raft.Apply(fsm.EncodeSetNode(incarnationKey(id), inc), p.applyTimeout))
	return err
}

// suffrage returns a server's suffrage in the latest configuration.
func (p *promotions) suffrage(id string) (raft.ServerSuffrage, bool) {
	f := p.raft.GetConfiguration()
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
func (p *promotions) startPromotion(id, raftAddr, httpAddr, inc string, target uint64) {
	p.mu.Lock()
	if p.promoting == nil {
		p.promoting = map[string]bool{}
	}
	if p.promoting[id] {
		p.mu.Unlock()
		return
	}
	p.promoting[id] = true
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { p.mu.Lock(); delete(p.promoting, id); p.mu.Unlock() }()
		deadline := time.Now().Add(DefaultJoinTimeout)
		t := time.NewTicker(promotePoll)
		defer t.Stop()
		for time.Now().Before(deadline) && p.leading() {
			select {
			case <-p.closing:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), promotePoll*5)
			info, err := p.peers.info(ctx, httpAddr)
			cancel()
			if err != nil || info.Incarnation != inc {
				continue
			}
			if info.Applied < target {
				continue
			}
			if err := p.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, p.applyTimeout).Error(); err != nil {
				p.log.Info("promote caught-up member", "node", id, "error", err)
				continue
			}
			if err := p.recordIncarnation(id, inc); err != nil {
				p.log.Info("record incarnation", "node", id, "error", err)
				continue
			}
			p.log.Warn("re-added member caught up: it is a voter again", "node", id, "incarnation", inc, "applied", info.Applied)
			return
		}
	}()
}

// recordBootIncarnations records, on the leader that bootstrapped a
// --bootstrap-expect cluster, the incarnations its peers reported then.
func (p *promotions) recordBootIncarnations() {
	p.mu.Lock()
	incs := p.bootIncs
	p.bootIncs = nil
	p.mu.Unlock()
	for id, inc := range incs {
		if err := p.recordIncarnation(id, inc); err != nil {
			p.log.Debug("record incarnation", "node", id, "error", err)
			p.mu.Lock()
			if p.bootIncs == nil {
				p.bootIncs = map[string]string{}
			}
			p.bootIncs[id] = inc // again at the next tick
			p.mu.Unlock()
		}
	}
}
