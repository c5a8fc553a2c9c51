package nodeapi

import "github.com/limitd/limitd/algo"

// Plans: a named bundle of limits a key is checked against together,
// atomically, when its check names no policy and no limit (Check.ByPlan).
// Which plan a key has is resolved inside the state machine's apply, so the
// resolution is atomic with the check and every replica agrees:
//
//	the key's assignment > the longest matching prefix rule > the default plan
//
// Plans, prefix rules and the default plan are cluster-wide configuration,
// replicated like policies. A key's assignment and override belong to the
// key and are stored with its state.

// Bounds on plans, defined once here (the service enforces them before
// anything is proposed, the state machine again on every entry). Raising one
// is safe; lowering one would make replicas answer an old log differently.
const (
	MaxPlans          = 1000 // plans in the cluster
	MaxPlanLimits     = 16   // limits in one plan
	MaxPlanLimitName  = 64   // bytes of a limit's name within a plan
	MaxPrefixRules    = 1000 // prefix rules in the cluster
	MaxAssignLines    = 1000 // lines of one bulk assignment
	MaxAssignBodySize = 48 << 10
	// MaxAssignBodySize keeps a bulk assignment within one admin command
	// (64 KiB, cluster.MaxCommandBytes) with room for its framing.
)

// PlanLimit is one named limit of a plan.
type PlanLimit struct {
	Name string
	Spec algo.Spec
	// Options are the limit's options kept beside its spec (fsm/limitopts.go).
	Options LimitOptions
}

// Plan is a named bundle of limits; Limits are sorted by name.
type Plan struct {
	Name   string
	Limits []PlanLimit
}

// Limit returns the plan's limit called name.
func (p *Plan) Limit(name string) (*PlanLimit, bool) {
	for i := range p.Limits {
		if p.Limits[i].Name == name {
			return &p.Limits[i], true
		}
	}
	return nil, false
}

// PrefixRule gives every key starting with Prefix the plan Plan (unless the
// key has an assignment). Prefix rules never nest: no rule's prefix is a
// prefix of another's, so a key matches at most one rule.
type PrefixRule struct {
	Prefix string
	Plan   string
}

// Assignment gives Key the plan Plan.
type Assignment struct {
	Key  string
	Plan string
}

// LimitOverride replaces numeric fields of one plan limit for one key; a
// zero field keeps the plan's value.
type LimitOverride struct {
	Name  string
	Limit int64
	Burst int64 // token_bucket and leaky_bucket only
}

// Override is a key's replacement of fields of its plan's limits, until
// Expires (Unix ns, leader time; 0: never). Limits are sorted by name.
type Override struct {
	Limits  []LimitOverride
	Expires int64
}

// PlanDecision says how a plan check was decided: under which plan, which
// limit decided (the first that refused, else the one with the least
// remaining), whether the key's override applied, and every limit's own
// decision in the plan's order.
type PlanDecision struct {
	Plan       string
	Limit      string
	Overridden bool
	Limits     []NamedDecision
	// Adjusted, for an adjustment (Check.Adjust), is the units actually
	// credited (negative: debited) to Limit's current window.
	Adjusted int64
	// Source says how the key got Plan (SourceAssignment, ...).
	Source string
	// Assigned and Override, for a plan read (Check.PlanInfo), are the key's
	// own assignment ("" if none) and its live override (nil if none).
	Assigned string
	Override *Override
}

// NamedDecision is one plan limit's decision.
type NamedDecision struct {
	Name string
	algo.Decision
}

// KeyPlan is what a key resolves to, and why (for GET of a key's plan).
type KeyPlan struct {
	Plan     string // "" when the key has no plan
	Source   string // "assignment", "prefix_rule", "default" or ""
	Assigned string // the key's own assignment, "" if none
	Override *Override
}

// Plan sources (KeyPlan.Source).
const (
	SourceAssignment = "assignment"
	SourcePrefixRule = "prefix_rule"
	SourceDefault    = "default"
)
