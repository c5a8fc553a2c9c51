package cluster

import (
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
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

// OverLimit is the node's over-limit cache and whether it may answer
// (service.Refuser): a runtime of its own that needs only the node's
// readiness (run), and the state machine's leader time and the node's
// clock (Refused).
type OverLimit struct {
	cache  *overlimit.Cache // nil: disabled (Config.OverLimitEntries 0)
	usable atomic.Bool
	fsm    *fsm.FSM     // set once the state machine opens, before any check
	clock  *leaderClock // wallNow: the local clock with its fault offset
	// ready replaces Node.Ready in run when set (tests).
	ready atomic.Pointer[func() error]
}

// newOverLimit builds the cache of up to entries entries (0: disabled),
// before the state machine opens, which takes it in its Options.
func newOverLimit(entries int) *OverLimit {
	o := &OverLimit{}
	if entries > 0 {
		o.cache = overlimit.New(overlimit.Options{MaxEntries: entries})
	}
	return o
}

// OverLimit is the node's over-limit cache runtime (service.Refuser).
func (n *Node) OverLimit() *OverLimit { return n.ol }

// Cache is the over-limit cache, or nil when disabled.
func (o *OverLimit) Cache() *overlimit.Cache { return o.cache }

// vouches reports whether this replica's applied state may answer a check
// without a Raft round (the cache is on and the node was last found Ready).
func (o *OverLimit) vouches() bool { return o.cache != nil && o.usable.Load() }

// run keeps the cache usable only while the node is ready (nodeReady: a
// member, a leader known, the state machine caught up), until closing: a
// node cut off from the leader stops receiving the resets, policy changes
// and restores that invalidate entries, and an entry may last a whole
// window. On every transition to unusable the cache is cleared, so that
// stale entries cannot come back when the node rejoins.
func (o *OverLimit) run(closing <-chan struct{}, nodeReady func() error) {
	if o.cache == nil {
		return
	}
	t := time.NewTicker(overLimitRefresh)
	defer t.Stop()
	for {
		o.refresh(nodeReady)
		select {
		case <-closing:
			o.disable()
			return
		case <-t.C:
		}
	}
}

func (o *OverLimit) refresh(nodeReady func() error) {
	ready := nodeReady
	if f := o.ready.Load(); f != nil {
		ready = *f
	}
	if ready() == nil {
		o.usable.Store(true)
		return
	}
	o.disable()
}

// disable stops answering from the cache and empties it (loss of
// readiness or membership, removal, a fatal error, close).
func (o *OverLimit) disable() {
	if o.cache == nil {
		return
	}
	if o.usable.Swap(false) || o.cache.Stats().Entries > 0 {
		o.cache.Clear()
	}
}

// Refused answers a check of cost on key under the limit id from the
// over-limit cache: a refusal the state machine made (or an equivalent one),
// with RetryAfter counted from now = max(local clock, the state machine's
// last leader time): entries expire in leader time, and a node whose clock
// is behind the leader's would otherwise serve them past their end. It
// reports a miss when the cache is disabled or the cache's loop last found
// the node not Ready (entries the state machine adds meanwhile, as a lagging
// node applies, are not served). It never answers "allowed"; a miss is decided through
// the log as before.
func (o *OverLimit) Refused(id overlimit.LimitID, key string, cost int64) (algo.Decision, bool) {
	if o.cache == nil || !o.usable.Load() {
		return algo.Decision{}, false
	}
	now := o.clock.wallNow()
	if last := o.fsm.LastTime(); last > now {
		now = last
	}
	return o.cache.LookupString(id, key, cost, now)
}

// collectors is the cache's metrics (hits by policy, size, evictions,
// contradictions), when it is enabled.
func (o *OverLimit) collectors() []prometheus.Collector {
	if o.cache == nil {
		return nil
	}
	return []prometheus.Collector{o.cache}
}
