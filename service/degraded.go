package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// Degraded mode. A policy with "degraded":{"mode":"share"} lets a node that
// cannot get a check decided by a quorum within its deadline decide it
// alone: with its share of the limit, ceil(limit / voters) per key and
// window of the node's own clock, counted in memory here; the answer says
// "degraded". What it admitted alone is charged to the replicated state
// once a quorum answers again (Degrader.ChargeDegraded: an overdraft, once
// per id: fsm/degraded.go), so the checks after the heal are refused until
// the window has made up for it.
//
// The bound (docs/CLUSTER.md "Degraded mode"): in one window of a key, with
// V voters of which m answer degraded at some point of it, the checks
// admitted number at most limit + m·ceil(limit/V): the quorum side (if any)
// admits at most the limit, counting what it has been told, and each of the
// m alone at most its share. m ≤ V − 1 while some quorum decides, m ≤ V when
// none does (a full partition). A check that timed out may also have been
// counted by the log; charging it again only makes the window stricter.
//
// Without the option a check that reaches no quorum fails as before (503):
// the option is what consents to the overshoot. Checks with a request_id
// (exactly once) and atomic groups are never decided alone.

// Degrader is the Node's part in degraded mode.
type Degrader interface {
	// ChargeDegraded charges, through the leader, what this node admitted
	// alone, under a stable id (a retry charges nothing twice).
	ChargeDegraded(ctx context.Context, id string, charges []nodeapi.DegradedCharge) error
	// Voters is the number of voters in the node's configuration (0: it
	// cannot tell).
	Voters() int
}

// DegradedConfig is a policy's "degraded" option as a client gives it.
type DegradedConfig struct {
	Mode string `json:"mode"`
}

// DegradedModeShare is the one mode: a node decides alone with its share.
const DegradedModeShare = "share"

// ValidateDegraded validates a policy's "degraded" option (nil: none) for
// its spec: mode "share", under fixed_window or sliding_window with a
// duration window (a count the charge can overdraw exactly, and a window a
// node can tell from its own clock), never with shadow. Errors name
// "degraded" or "degraded.mode" under prefix.
func ValidateDegraded(c *DegradedConfig, spec algo.Spec, shadow bool, prefix string) (nodeapi.DegradedMode, *Error) {
	if c == nil {
		return nodeapi.DegradedNone, nil
	}
	switch {
	case c.Mode != DegradedModeShare:
		return 0, Invalid(joinPrefix(prefix, "degraded.mode"), `must be "share", got `+strconv.Quote(c.Mode))
	case spec.Algorithm != algo.FixedWindow && spec.Algorithm != algo.SlidingWindow:
		return 0, Invalid(joinPrefix(prefix, "degraded"), "needs fixed_window or sliding_window (a count the charge after the heal can overdraw exactly), not "+spec.Algorithm.String())
	case spec.Window <= 0:
		return 0, Invalid(joinPrefix(prefix, "degraded"), "needs a window of a fixed duration, not a calendar window")
	case shadow:
		return 0, Invalid(joinPrefix(prefix, "degraded"), "not with shadow (a shadow policy allows every check)")
	}
	return nodeapi.DegradedShare, nil
}

// DegradedOut is m in the API's form (nil: none).
func DegradedOut(m nodeapi.DegradedMode) *DegradedConfig {
	if m == nodeapi.DegradedShare {
		return &DegradedConfig{Mode: DegradedModeShare}
	}
	return nil
}

// maxDegradedKeys bounds the keys counted alone at once; past it a check
// fails as without the option (503), so memory stays bounded in a long
// partition.
const maxDegradedKeys = 100_000

// degradedFlushEvery is how often pending charges are proposed again while
// the quorum is away.
const degradedFlushEvery = 200 * time.Millisecond

type degradedKey struct {
	policy, key string
	window      int64 // the window's index on this node's clock
}

type chargeKey struct{ policy, key string }

type degradedState struct {
	mu       sync.Mutex
	counts   map[degradedKey]int64 // admitted alone in the window
	pending  map[chargeKey]int64   // admitted alone, not yet charged
	inflight []nodeapi.DegradedCharge
	id       string // inflight's id, reused by every retry
	seq      uint64
	prefix   string
	flushing bool

	admitted, refused, charged atomic.Int64
}

// DegradedStats are this node's degraded-mode figures since it started.
type DegradedStats struct {
	Admitted int64 // units admitted alone
	Refused  int64 // checks refused alone (the share was spent)
	Charged  int64 // units charged to the replicated state after a heal
	Pending  int64 // units admitted alone not yet charged
}

// DegradedStats reports the node's degraded-mode figures.
func (s *Service) DegradedStats() DegradedStats {
	d := &s.degraded
	d.mu.Lock()
	var p int64
	for _, u := range d.pending {
		p += u
	}
	for _, c := range d.inflight {
		p += c.Units
	}
	d.mu.Unlock()
	return DegradedStats{Admitted: d.admitted.Load(), Refused: d.refused.Load(), Charged: d.charged.Load(), Pending: p}
}

// degradedFallback reports whether a failed check may be decided alone: its
// policy has the option and the node found no quorum (nothing it can tell
// was counted: an unavailable answer).
func degradedFallback(l *Limit, requestID string, peek bool, e *Error) bool {
	return l.degraded && requestID == "" && !peek && e != nil && e.Code == CodeUnavailable
}

// decideDegraded decides c alone under l's share.
func (s *Service) decideDegraded(c *nodeapi.Check, l *Limit) (nodeapi.Decision, bool) {
	d := &s.degraded
	voters := int64(max(s.deps.Degrader.Voters(), 1))
	share := (l.Spec.Limit + voters - 1) / voters
	_, clock := s.deps.Lists.Times()
	w := int64(l.Spec.Window)
	if w <= 0 {
		return nodeapi.Decision{}, false
	}
	idx := clock / w
	reset := time.Duration((idx+1)*w - clock)
	k := degradedKey{policy: c.Policy, key: c.Key, window: idx}
	d.mu.Lock()
	if d.counts == nil {
		d.counts, d.pending = map[degradedKey]int64{}, map[chargeKey]int64{}
	}
	used, ok := d.counts[k]
	if !ok && len(d.counts) >= maxDegradedKeys {
		for old := range d.counts { // windows that have ended count nothing
			if old.window < idx {
				delete(d.counts, old)
			}
		}
		if len(d.counts) >= maxDegradedKeys {
			d.mu.Unlock()
			return nodeapi.Decision{}, false
		}
	}
	dec := nodeapi.Decision{Decision: algo.Decision{Limit: l.Spec.Limit, ResetAfter: reset}, Degraded: true}
	if used+c.Cost <= share {
		used += c.Cost
		d.counts[k] = used
		if c.Cost > 0 {
			d.pending[chargeKey{c.Policy, c.Key}] += c.Cost
			d.admitted.Add(c.Cost)
			s.startFlush()
		}
		dec.Allowed, dec.Remaining = true, share-used
	} else {
		dec.RetryAfter = reset
		d.refused.Add(1)
	}
	d.mu.Unlock()
	return dec, true
}

// startFlush starts the flusher if it is not running (d.mu held).
func (s *Service) startFlush() {
	d := &s.degraded
	if d.flushing {
		return
	}
	d.flushing = true
	if d.prefix == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		d.prefix = hex.EncodeToString(b[:])
	}
	go s.flushDegraded()
}

// flushDegraded proposes the pending charges until none is left: one entry
// at a time, each under an id kept until it is acknowledged, so a retry
// after a lost answer charges nothing twice.
func (s *Service) flushDegraded() {
	d := &s.degraded
	t := time.NewTicker(degradedFlushEvery)
	defer t.Stop()
	for {
		<-t.C
		d.mu.Lock()
		if d.inflight == nil {
			d.inflight = takeCharges(d.pending)
			if d.inflight == nil {
				d.flushing = false
				d.mu.Unlock()
				return
			}
			d.seq++
			d.id = d.prefix + "-" + strconv.FormatUint(d.seq, 10)
		}
		id, batch := d.id, d.inflight
		d.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		err := s.deps.Degrader.ChargeDegraded(ctx, id, batch)
		cancel()
		if err != nil {
			continue // the quorum is still away: the same id again
		}
		var units int64
		for _, c := range batch {
			units += c.Units
		}
		d.charged.Add(units)
		d.mu.Lock()
		d.inflight = nil
		d.mu.Unlock()
		slog.Warn("degraded mode: charged what this node admitted alone to the replicated state",
			"charge_id", id, "keys", len(batch), "units", units,
			"admitted_alone_total", d.admitted.Load(), "refused_alone_total", d.refused.Load(), "charged_total", d.charged.Load(),
			"bound", "per key and window: limit + m·ceil(limit/voters), m the nodes that answered alone (docs/CLUSTER.md)")
	}
}

// takeCharges removes from pending one entry's worth of charges (bounded
// in count and encoded bytes), nil when pending is empty.
func takeCharges(pending map[chargeKey]int64) []nodeapi.DegradedCharge {
	var out []nodeapi.DegradedCharge
	size := 0
	for k, u := range pending {
		n := len(k.policy) + len(k.key) + 3*4
		if len(out) == nodeapi.MaxDegradedCharges || size+n > nodeapi.MaxDegradedChargeBytes {
			break
		}
		out = append(out, nodeapi.DegradedCharge{Policy: k.policy, Key: k.key, Units: u})
		size += n
		delete(pending, k)
	}
	return out
}
