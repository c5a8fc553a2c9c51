package cluster

import (
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/overlimit"
	"github.com/prometheus/client_golang/prometheus"
)

// The node side of the over-limit cache (package overlimit, see its
// DESIGN.md): the state machine fills and invalidates the cache in log order;
// the node decides when its entries may be trusted and answers the check
// path from them.

// overLimitRefresh is how often the node re-evaluates whether its cache may
// be used. Ready is too expensive to ask per request (it reads the Raft
// configuration and copies the node map); between two refreshes a node that
// just lost its leader can serve a cached refusal that a reset it has not
// received would have lifted: one more refusal, never one more allowance.
// The same holds while a cut-off follower still believes in its leader (until
// Raft's heartbeat timeout): Ready cannot see what it was not sent.
const overLimitRefresh = 50 * time.Millisecond

// overLimit is the node's over-limit cache and whether it may answer.
type overLimit struct {
	cache  *overlimit.Cache // nil: disabled (Config.OverLimitEntries 0)
	usable atomic.Bool
	// ready replaces Node.Ready in overLimitLoop when set (tests).
	ready atomic.Pointer[func() error]
}

// initOverLimit builds the cache from the configuration (before the state
// machine opens, which takes it in its Options).
func (n *Node) initOverLimit() {
	if n.cfg.OverLimitEntries > 0 {
		n.ol.cache = overlimit.New(overlimit.Options{MaxEntries: n.cfg.OverLimitEntries})
	}
}

// OverLimitCache is the node's over-limit cache, or nil when disabled.
func (n *Node) OverLimitCache() *overlimit.Cache { return n.ol.cache }

// startOverLimit starts overLimitLoop (counted in n.wg on its own, so that
// Open's count of its goroutines does not depend on it).
func (n *Node) startOverLimit() {
	n.wg.Add(1)
	go n.overLimitLoop()
}

// overLimitLoop keeps the cache usable only while the node is Ready (a
// member, a leader known, the state machine caught up): a node cut off from
// the leader stops receiving the resets, policy changes and restores that
// invalidate entries, and an entry may last a whole window. On every
// transition to unusable the cache is cleared, so that stale entries cannot
// come back when the node rejoins.
func (n *Node) overLimitLoop() {
	defer n.wg.Done()
	if n.ol.cache == nil {
		return
	}
	t := time.NewTicker(overLimitRefresh)
	defer t.Stop()
	for {
		n.refreshOverLimit()
		select {
		case <-n.closing:
			n.disableOverLimit()
			return
		case <-t.C:
		}
	}
}

func (n *Node) refreshOverLimit() {
	ready := n.Ready
	if f := n.ol.ready.Load(); f != nil {
		ready = *f
	}
	if ready() == nil {
		n.ol.usable.Store(true)
		return
	}
	n.disableOverLimit()
}

// disableOverLimit stops answering from the cache and empties it (loss of
// readiness or membership, removal, a fatal error, close).
func (n *Node) disableOverLimit() {
	if n.ol.cache == nil {
		return
	}
	if n.ol.usable.Swap(false) || n.ol.cache.Stats().Entries > 0 {
		n.ol.cache.Clear()
	}
}

// Refused answers a check of cost on key under the limit id from the
// over-limit cache: a refusal the state machine made (or an equivalent one),
// with RetryAfter counted from now = max(local clock, the state machine's
// last leader time): entries expire in leader time, and a node whose clock
// is behind the leader's would otherwise serve them past their end. It
// reports a miss when the cache is disabled or overLimitLoop last found the
// node not Ready (entries the state machine adds meanwhile, as a lagging
// node applies, are not served). It never answers "allowed"; a miss is decided through
// the log as before.
func (n *Node) Refused(id overlimit.LimitID, key string, cost int64) (algo.Decision, bool) {
	if n.ol.cache == nil || !n.ol.usable.Load() {
		return algo.Decision{}, false
	}
	now := n.wallNow()
	if last := n.fsm.LastTime(); last > now {
		now = last
	}
	return n.ol.cache.LookupString(id, key, cost, now)
}

// overLimitCollectors is the cache's metrics (hits by policy, size,
// evictions, contradictions), when it is enabled.
func (n *Node) overLimitCollectors() []prometheus.Collector {
	if n.ol.cache == nil {
		return nil
	}
	return []prometheus.Collector{n.ol.cache}
}
