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
func (c *Catalog) PutPlan(ctx context.Context, p nodeapi.Plan) error {
	return c.applyAdmin(ctx, fsm.EncodePutPlan(p))
}

// DeletePlan deletes a plan; not_found when absent, conflict while a prefix
// rule or the default names it.
func (c *Catalog) DeletePlan(ctx context.Context, name string) error {
	return c.applyAdmin(ctx, fsm.EncodeDeletePlan(name))
}

// PutPrefixRule gives keys starting with r.Prefix the plan r.Plan.
func (c *Catalog) PutPrefixRule(ctx context.Context, r nodeapi.PrefixRule) error {
	return c.applyAdmin(ctx, fsm.EncodePutPrefixRule(r))
}

// DeletePrefixRule removes a prefix rule; not_found when absent.
func (c *Catalog) DeletePrefixRule(ctx context.Context, prefix string) error {
	return c.applyAdmin(ctx, fsm.EncodeDeletePrefixRule(prefix))
}

// SetDefaultPlan names the default plan ("" clears it).
func (c *Catalog) SetDefaultPlan(ctx context.Context, plan string) error {
	return c.applyAdmin(ctx, fsm.EncodeSetDefaultPlan(plan))
}

// AssignPlans assigns (plan "" unassigns) keys, all or none.
func (c *Catalog) AssignPlans(ctx context.Context, as []nodeapi.Assignment) error {
	return c.applyAdmin(ctx, fsm.EncodeAssignPlans(as))
}

// PutOverride sets a key's override of its plan's limits.
func (c *Catalog) PutOverride(ctx context.Context, key string, o nodeapi.Override) error {
	return c.applyAdmin(ctx, fsm.EncodePutOverride(key, o))
}

// DeleteOverride removes a key's override; not_found when it has none.
func (c *Catalog) DeleteOverride(ctx context.Context, key string) error {
	return c.applyAdmin(ctx, fsm.EncodeDeleteOverride(key))
}

// Plan, Plans, PrefixRules and DefaultPlan read this replica's copy (it
// may lag the leader). A key's plan is read through the log (fsm PlanInfo).
func (c *Catalog) Plan(name string) (nodeapi.Plan, bool) { return c.fsm.Plan(name) }
func (c *Catalog) Plans() []nodeapi.Plan                 { return c.fsm.Plans() }
func (c *Catalog) PrefixRules() []nodeapi.PrefixRule     { return c.fsm.PrefixRules() }
func (c *Catalog) DefaultPlan() string                   { return c.fsm.DefaultPlan() }
