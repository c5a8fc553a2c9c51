package cluster

import (
	"context"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Plans, prefix rules, the default plan, key assignments and overrides
// (fsm/plan.go): replicated like policies. The Raft layer only replicates
// them; the service validates what it can alone, and the state machine
// decides what depends on the state (a plan exists, a rule overlaps, an
// override fits the key's plan) at apply time.

// PutPlan creates or replaces a plan.
func (n *Node) PutPlan(ctx context.Context, p nodeapi.Plan) error {
	return n.applyAdmin(ctx, fsm.EncodePutPlan(p))
}

// DeletePlan deletes a plan; not_found when absent, conflict while a prefix
// rule or the default names it.
func (n *Node) DeletePlan(ctx context.Context, name string) error {
	return n.applyAdmin(ctx, fsm.EncodeDeletePlan(name))
}

// PutPrefixRule gives keys starting with r.Prefix the plan r.Plan.
func (n *Node) PutPrefixRule(ctx context.Context, r nodeapi.PrefixRule) error {
	return n.applyAdmin(ctx, fsm.EncodePutPrefixRule(r))
}

// DeletePrefixRule removes a prefix rule; not_found when absent.
func (n *Node) DeletePrefixRule(ctx context.Context, prefix string) error {
	return n.applyAdmin(ctx, fsm.EncodeDeletePrefixRule(prefix))
}

// SetDefaultPlan names the default plan ("" clears it).
func (n *Node) SetDefaultPlan(ctx context.Context, plan string) error {
	return n.applyAdmin(ctx, fsm.EncodeSetDefaultPlan(plan))
}

// AssignPlans assigns (plan "" unassigns) keys, all or none.
func (n *Node) AssignPlans(ctx context.Context, as []nodeapi.Assignment) error {
	return n.applyAdmin(ctx, fsm.EncodeAssignPlans(as))
}

// PutOverride sets a key's override of its plan's limits.
func (n *Node) PutOverride(ctx context.Context, key string, o nodeapi.Override) error {
	return n.applyAdmin(ctx, fsm.EncodePutOverride(key, o))
}

// DeleteOverride removes a key's override; not_found when it has none.
func (n *Node) DeleteOverride(ctx context.Context, key string) error {
	return n.applyAdmin(ctx, fsm.EncodeDeleteOverride(key))
}

// Plan, Plans, PrefixRules and DefaultPlan read this replica's copy (it
// may lag the leader). A key's plan is read through the log (fsm PlanInfo).
func (n *Node) Plan(name string) (nodeapi.Plan, bool) { return n.fsm.Plan(name) }
func (n *Node) Plans() []nodeapi.Plan                 { return n.fsm.Plans() }
func (n *Node) PrefixRules() []nodeapi.PrefixRule     { return n.fsm.PrefixRules() }
func (n *Node) DefaultPlan() string                   { return n.fsm.DefaultPlan() }
