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

// LeaderTime is the time a check decided on this node now is decided at:
// the local clock, but never before the leader time of the last entry
// applied here (the same lower bound the leader stamps entries with), so
// an expiry in leader time is never read as earlier than a replica that
// applied the same entries would read it.
func (c *Catalog) LeaderTime() int64 {
	return max(time.Now().UnixNano(), c.fsm.LastTime())
}

// Bans (fsm/ban.go) are decided in apply; what the node adds is the read
// path: answering a banned key from this replica's applied bans without a
// Raft round, under the over-limit cache's condition (the node is Ready, so
// the unbans and policy changes that end bans reach it; overlimit.go), and
// the proposal that lifts a ban.

// Banned reports the end of key's ban under policy in this replica's
// applied state, if it is banned at LeaderTime; a miss while the node cannot
// vouch for its copy (the over-limit cache is off or not usable).
func (c *Catalog) Banned(policy, key string) (int64, bool) {
	if !c.ol.vouches() {
		return 0, false
	}
	return c.fsm.Banned(policy, key, c.LeaderTime())
}

// Bans lists this replica's bans in force, limit after cursor.
func (c *Catalog) Bans(cursor string, limit int) ([]nodeapi.Ban, string) {
	return c.fsm.Bans(cursor, limit, c.LeaderTime())
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
			func() float64 { a, _ := c.fsm.BanCounts(c.LeaderTime()); return float64(a) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_bans_issued_total",
			Help: "Bans this replica's applies issued since it started (every replica applies the same bans)."},
			func() float64 { _, i := c.fsm.BanCounts(c.LeaderTime()); return float64(i) }),
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
