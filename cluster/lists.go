package cluster

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Allow and deny lists, replicated through the log like RLS domains
// (fsm/lists.go). The Raft layer only replicates them: the service
// validates a list and hands over its canonical encoding, and every node
// compiles and answers lists from its own replicated copy.

// A list travels whole in one admin command (nodeapi.MaxListBytes): this
// fails to compile if the list bound outgrows the command bound.
var _ [MaxCommandBytes - (nodeapi.MaxListBytes + nodeapi.MaxPolicyName + 32)]struct{}

// PutList stores a list's canonical encoding (validated by the caller)
// through the leader. Errors as PutPolicy's.
func (c *Catalog) PutList(ctx context.Context, name string, canonical []byte) error {
	return c.applyAdmin(ctx, fsm.EncodePutList(name, canonical))
}

// DeleteList removes a list through the leader; *nodeapi.Error not_found
// when it does not exist.
func (c *Catalog) DeleteList(ctx context.Context, name string) error {
	return c.applyAdmin(ctx, fsm.EncodeDeleteList(name))
}

// List returns this replica's canonical encoding of a list.
func (c *Catalog) List(name string) ([]byte, bool) {
	l, ok := c.fsm.List(name)
	return l.Config, ok
}

// Lists returns this replica's lists sorted by name.
func (c *Catalog) Lists() []nodeapi.List { return c.fsm.Lists() }

// ListsVersion changes whenever this replica's lists change.
func (c *Catalog) ListsVersion() uint64 { return c.fsm.ListsVersion() }

// LeaderTime is max(this node's clock, the leader time of the last entry
// applied here): an estimate of now, for hints such as a Retry-After. It
// never decides an end: ends are decided on Times' applied time.
func (c *Catalog) LeaderTime() int64 {
	return max(c.clock.wallNow(), c.fsm.LastTime())
}

// Times is this node's view of leader time: applied, the leader time of
// the last entry its replica applied (replicated: every replica agrees on
// it at the same index), which decides every end; and clock, this node's
// own clock, which may only make an answer more careful (fsm/DESIGN.md
// "Ends in leader time").
func (c *Catalog) Times() (applied, clock int64) {
	return c.fsm.LastTime(), c.clock.wallNow()
}

// Bans (fsm/ban.go) are decided in apply; what the node adds is the read
// path: answering a banned key from this replica's applied bans without a
// Raft round, under the over-limit cache's condition (the node is Ready, so
// the unbans and policy changes that end bans reach it; overlimit.go), and
// the proposal that lifts a ban.

// Banned reports the time left until the end of key's ban under policy in
// this replica's applied state, if it is in force at the replicated time; a
// miss while the node cannot vouch for its copy (the over-limit cache is off
// or not usable), and a miss when this node's clock has passed the end its
// replicated time has not: the check then goes through the log, where apply
// decides at the entry's leader time (fsm/DESIGN.md "Ends in leader time").
func (c *Catalog) Banned(policy, key string) (time.Duration, bool) {
	if !c.ol.vouches() {
		return 0, false
	}
	applied, clock := c.Times()
	until, ok := c.fsm.Banned(policy, key, applied)
	if !ok || clock >= until {
		return 0, false
	}
	return time.Duration(until - max(applied, clock)), true // > 0: clock < until, applied < until
}

// Bans lists this replica's bans in force at its replicated time, limit
// after cursor.
func (c *Catalog) Bans(cursor string, limit int) ([]nodeapi.Ban, string) {
	return c.fsm.Bans(cursor, limit, c.fsm.LastTime())
}

// Unban removes key's bans under policy ("": every policy) through the
// leader; *nodeapi.Error not_found when there are none.
func (c *Catalog) Unban(ctx context.Context, key, policy string) error {
	return c.applyAdmin(ctx, fsm.EncodeUnban(key, policy))
}

func (c *Catalog) banCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_bans_active",
			Help: "Keys banned now under a policy's on_exceed, in this replica's applied state."},
			func() float64 { a, _ := c.fsm.BanCounts(c.fsm.LastTime()); return float64(a) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_bans_issued_total",
			Help: "Bans this replica's applies issued since it started (every replica applies the same bans)."},
			func() float64 { _, i := c.fsm.BanCounts(c.fsm.LastTime()); return float64(i) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_bans_unindexed",
			Help: "1 when this node's in-memory index of bans is full (nodeapi.MaxBanIndex): bans past it still hold, through the log, and are missing from GET /v1/bans."},
			func() float64 {
				if c.fsm.BansUnindexed() {
					return 1
				}
				return 0
			}),
	}
}
