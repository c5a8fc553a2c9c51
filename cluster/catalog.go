package cluster

import (
	"context"

	"github.com/limitd/limitd/fsm"
)

// Catalog is the cluster-wide configuration: policies (service.go), plans,
// prefix rules, the default plan, key assignments and overrides (plans.go),
// allow and deny lists and bans (lists.go), Envoy RLS domains (rls.go), and
// the usage inventory (inventory.go). Writes are admin commands proposed
// through the leader (c.propose, which is Node.Apply: forwarded when this
// node follows, waited for); reads are this replica's applied copy (c.fsm),
// which may lag the leader.
//
// New cluster-wide configuration commands go here, proposed through
// c.propose, not on Node: Node keeps proposing, membership and leases
// (cluster/DESIGN.md, "What Node keeps"; TestNodeMethodBound counts them).
type Catalog struct {
	fsm     *fsm.FSM
	propose proposer
	ol      *OverLimit   // bans are answered only while it vouches for this replica
	clock   *leaderClock // this node's clock, which only makes an answer more careful (Times)
	// leaderApply proposes a command no client may propose, on this node
	// only while it leads (the groups record, groupsrecord.go).
	leaderApply proposer
	// putRecord writes a placement record through the leader (groupsrecord.go).
	putRecord func(ctx context.Context, key, v string) error
}

// proposer submits an admin command (fsm.Encode*) through the leader and
// waits for the state machine's response (Node.Apply).
type proposer func(ctx context.Context, cmd []byte) (interface{}, error)

// Catalog returns the node's cluster-wide configuration (service's Policies,
// Plans, Lists, Bans, Domains and Inventory).
func (n *Node) Catalog() *Catalog { return n.catalog }

func (c *Catalog) applyAdmin(ctx context.Context, cmd []byte) error {
	return applyAdmin(ctx, c.propose, cmd)
}

// Policy returns this node's replicated copy of a policy.
func (c *Catalog) Policy(name string) (fsm.Policy, bool) { return c.fsm.Policy(name) }

// Policies returns this node's replicated policies, sorted by name.
func (c *Catalog) Policies() []fsm.Policy { return c.fsm.Policies() }
