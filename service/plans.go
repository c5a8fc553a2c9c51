package service

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// Plans (nodeapi/plan.go): named bundles of limits, and how a key gets one.
// The service validates what can be judged from the request alone; what
// depends on the replicated state (the plan exists, a prefix rule overlaps
// another, an override fits the key's plan) is decided by the state machine
// at apply time, so concurrent admins cannot slip past a check made here.

// Plans is the Node's plan capability: writes through the leader, reads of
// this replica's copy (which may lag the leader).
type Plans interface {
	PutPlan(ctx context.Context, p nodeapi.Plan) error
	DeletePlan(ctx context.Context, name string) error
	PutPrefixRule(ctx context.Context, r nodeapi.PrefixRule) error
	DeletePrefixRule(ctx context.Context, prefix string) error
	SetDefaultPlan(ctx context.Context, plan string) error
	AssignPlans(ctx context.Context, as []nodeapi.Assignment) error
	PutOverride(ctx context.Context, key string, o nodeapi.Override) error
	DeleteOverride(ctx context.Context, key string) error
	Plan(name string) (nodeapi.Plan, bool)
	Plans() []nodeapi.Plan
	PrefixRules() []nodeapi.PrefixRule
	DefaultPlan() string
}

// PlanMetricName is the name plan checks are counted under in the decision
// metrics and RateLimit headers: the plan is resolved only in the state
// machine, and a metric label must come from a bounded set.
const PlanMetricName = "plan"

// ReservedPlanName is the one name a plan may not take: the HTTP API's
// /v1/plans/default is the default plan.
const ReservedPlanName = "default"

// PlanRequest is a plan as a client gives it.
type PlanRequest struct {
	Name   string
	Limits map[string]algo.Config
	// Notify are the alert thresholds of the limits that have them, by
	// limit name (ValidateNotify; events.go).
	Notify map[string][]float64
	// History is each limit's "history" option by limit name (absent:
	// none; usage.go).
	History map[string]string
}

// ValidatePlanLimitName enforces a policy name's characters on a plan
// limit's name, 1 to nodeapi.MaxPlanLimitName bytes: it appears in answers,
// field paths and override bodies.
func ValidatePlanLimitName(name, field string) *Error {
	if len(name) > nodeapi.MaxPlanLimitName {
		return Invalid(field, "a limit's name must be at most "+strconv.Itoa(nodeapi.MaxPlanLimitName)+" characters")
	}
	return ValidatePolicyName(name, field)
}

// ValidatePlan validates r into a plan, limits sorted by name. Errors name
// "name", "limits" or "limits.<name>.<field>".
func ValidatePlan(r PlanRequest) (nodeapi.Plan, *Error) {
	if e := ValidatePolicyName(r.Name, "name"); e != nil {
		return nodeapi.Plan{}, e
	}
	if r.Name == ReservedPlanName {
		return nodeapi.Plan{}, Invalid("name", `"default" names the default plan (PUT /v1/plans/default {"plan": ...}); a plan cannot take it`)
	}
	if len(r.Limits) == 0 || len(r.Limits) > nodeapi.MaxPlanLimits {
		return nodeapi.Plan{}, Invalid("limits", "a plan has 1 to "+strconv.Itoa(nodeapi.MaxPlanLimits)+" limits")
	}
	names := make([]string, 0, len(r.Limits))
	for n := range r.Limits {
		names = append(names, n)
	}
	sort.Strings(names)
	p := nodeapi.Plan{Name: r.Name, Limits: make([]nodeapi.PlanLimit, 0, len(names))}
	for _, n := range names {
		if e := ValidatePlanLimitName(n, "limits."+n); e != nil {
			return nodeapi.Plan{}, e
		}
		spec, e := ValidateLimit(r.Limits[n], "limits."+n)
		if e != nil {
			return nodeapi.Plan{}, e
		}
		if spec.Algorithm == algo.Concurrency {
			// A plan check answers one decision for all its limits: no
			// slot to release (slots.go).
			return nodeapi.Plan{}, Invalid("limits."+n+".algorithm", "concurrency limits are not available in plans: use a concurrency policy")
		}
		notify, e := ValidateNotify(r.Notify[n], "limits."+n) // events.go
		if e != nil {
			return nodeapi.Plan{}, e
		}
		history, e := ValidateHistory(r.History[n], spec, "limits."+n) // usage.go
		if e != nil {
			return nodeapi.Plan{}, e
		}
		p.Limits = append(p.Limits, nodeapi.PlanLimit{Name: n, Spec: spec, Options: nodeapi.LimitOptions{Notify: notify, History: history}})
	}
	for n := range r.Notify {
		if _, ok := r.Limits[n]; !ok {
			return nodeapi.Plan{}, Invalid("limits."+n+".notify", "no such limit in the plan")
		}
	}
	for n := range r.History {
		if _, ok := r.Limits[n]; !ok {
			return nodeapi.Plan{}, Invalid("limits."+n+".history", "no such limit in the plan")
		}
	}
	return p, nil
}

// PutPlan creates or replaces a plan. Keys under it keep their state in every
// limit whose name stays (a limit of another algorithm starts fresh).
func (s *Service) PutPlan(ctx context.Context, r PlanRequest) (nodeapi.Plan, *Error) {
	p, e := ValidatePlan(r)
	if e != nil {
		return nodeapi.Plan{}, e
	}
	return p, s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.PutPlan(ctx, p) })
}

// GetPlan returns this node's copy of a plan.
func (s *Service) GetPlan(name string) (nodeapi.Plan, *Error) {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return nodeapi.Plan{}, e
	}
	p, ok := s.deps.Plans.Plan(name)
	if !ok {
		return nodeapi.Plan{}, &Error{Code: CodeNotFound, Field: "name", Message: fmt.Sprintf("no plan named %q", name)}
	}
	return p, nil
}

// ListPlans returns this node's plans sorted by name.
func (s *Service) ListPlans() []nodeapi.Plan { return s.deps.Plans.Plans() }

// DeletePlan deletes a plan; refused (conflict) while a prefix rule or the
// default plan names it.
func (s *Service) DeletePlan(ctx context.Context, name string) *Error {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return e
	}
	return s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.DeletePlan(ctx, name) })
}

// PutPrefixRule gives keys starting with prefix the plan; a prefix that is a
// prefix of another rule's (or the reverse) is refused by the state machine.
func (s *Service) PutPrefixRule(ctx context.Context, prefix, plan string) *Error {
	if e := ValidateKey(prefix, "prefix"); e != nil {
		return e
	}
	if e := ValidatePolicyName(plan, "plan"); e != nil {
		return e
	}
	return s.admin(ctx, func(ctx context.Context) error {
		return s.deps.Plans.PutPrefixRule(ctx, nodeapi.PrefixRule{Prefix: prefix, Plan: plan})
	})
}

// DeletePrefixRule removes a prefix rule.
func (s *Service) DeletePrefixRule(ctx context.Context, prefix string) *Error {
	if e := ValidateKey(prefix, "prefix"); e != nil {
		return e
	}
	return s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.DeletePrefixRule(ctx, prefix) })
}

// ListPrefixRules returns this node's prefix rules sorted by prefix.
func (s *Service) ListPrefixRules() []nodeapi.PrefixRule { return s.deps.Plans.PrefixRules() }

// SetDefaultPlan names the plan of keys with no assignment and no matching
// prefix rule ("" clears it).
func (s *Service) SetDefaultPlan(ctx context.Context, plan string) *Error {
	if plan != "" {
		if e := ValidatePolicyName(plan, "plan"); e != nil {
			return e
		}
	}
	return s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.SetDefaultPlan(ctx, plan) })
}

// DefaultPlan returns this node's default plan ("" when none).
func (s *Service) DefaultPlan() string { return s.deps.Plans.DefaultPlan() }

// AssignPlan gives key the plan ("" removes the key's assignment).
func (s *Service) AssignPlan(ctx context.Context, key, plan string) *Error {
	if e := ValidateKey(key, "key"); e != nil {
		return e
	}
	if plan != "" {
		if e := ValidatePolicyName(plan, "plan"); e != nil {
			return e
		}
	}
	e := s.admin(ctx, func(ctx context.Context) error {
		return s.deps.Plans.AssignPlans(ctx, []nodeapi.Assignment{{Key: key, Plan: plan}})
	})
	if e != nil {
		if f, ok := strings.CutPrefix(e.Field, "assignments[0]."); ok {
			c := *e // the node's error may be shared
			c.Field = f
			return &c
		}
	}
	return e
}

// AssignLine is one line of a bulk assignment; Line (from 1) names it in errors.
type AssignLine struct {
	Line      int
	Key, Plan string
}

// LineField names line n of a bulk body in errors ("lines[7]" is line 7,
// counted from 1 as editors do).
func LineField(n int) string { return "lines[" + strconv.Itoa(n) + "]" }

// AssignPlans applies a bulk assignment whole or not at all: every line is
// validated here, every plan's existence by the state machine, in one entry.
// Errors name the line ("lines[7].plan").
func (s *Service) AssignPlans(ctx context.Context, lines []AssignLine) *Error {
	if len(lines) == 0 || len(lines) > nodeapi.MaxAssignLines {
		return Invalid("lines", "a bulk assignment has 1 to "+strconv.Itoa(nodeapi.MaxAssignLines)+" lines")
	}
	as := make([]nodeapi.Assignment, len(lines))
	for i, l := range lines {
		if e := ValidateKey(l.Key, LineField(l.Line)+".key"); e != nil {
			return e
		}
		if e := ValidatePolicyName(l.Plan, LineField(l.Line)+".plan"); e != nil {
			return e
		}
		as[i] = nodeapi.Assignment{Key: l.Key, Plan: l.Plan}
	}
	e := s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.AssignPlans(ctx, as) })
	if e != nil {
		// The state machine names "assignments[i]": render it as the line.
		if rest, ok := strings.CutPrefix(e.Field, "assignments["); ok {
			if j := strings.IndexByte(rest, ']'); j > 0 {
				if i, err := strconv.Atoi(rest[:j]); err == nil && i >= 0 && i < len(lines) {
					c := *e
					c.Field = LineField(lines[i].Line) + rest[j+1:]
					// A line naming an unknown plan is a bad line of the
					// body (400), like any other, not a missing resource.
					if c.Code == CodeNotFound {
						c.Code = CodeInvalidArgument
					}
					return &c
				}
			}
		}
	}
	return e
}

// KeyPlan returns what key resolves to, its own assignment and its live
// override. It is read through the log (like a peek), so it sees every
// write acknowledged before it, on whichever node it is asked.
func (s *Service) KeyPlan(ctx context.Context, key string) (nodeapi.KeyPlan, *Error) {
	if e := ValidateKey(key, "key"); e != nil {
		return nodeapi.KeyPlan{}, e
	}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, []nodeapi.Op{{Checks: []nodeapi.Check{{Key: key, PlanInfo: true}}}})
	cancel()
	switch {
	case err != nil:
		return nodeapi.KeyPlan{}, s.nodeError(err)
	case len(results) != 1:
		return nodeapi.KeyPlan{}, Internal("the node returned " + strconv.Itoa(len(results)) + " results for 1 op")
	case results[0].Err != nil:
		return nodeapi.KeyPlan{}, s.nodeError(results[0].Err)
	case len(results[0].Decisions) != 1 || results[0].Decisions[0].Plan == nil:
		return nodeapi.KeyPlan{}, Internal("the node's answer to a plan read has no plan decision")
	}
	pd := results[0].Decisions[0].Plan
	return nodeapi.KeyPlan{Plan: pd.Plan, Source: pd.Source, Assigned: pd.Assigned, Override: pd.Override}, nil
}

// OverrideRequest is a key's override as a client gives it: per limit name
// the fields that replace the plan's (0: keep), and when it ends (zero: never).
type OverrideRequest struct {
	Limits  map[string]nodeapi.LimitOverride
	Expires time.Time
}

// PutOverride replaces fields of the key's plan limits for that key until
// r.Expires. Only limit and burst can change; the state machine checks each
// name against the key's plan at apply time.
func (s *Service) PutOverride(ctx context.Context, key string, r OverrideRequest) (nodeapi.Override, *Error) {
	if e := ValidateKey(key, "key"); e != nil {
		return nodeapi.Override{}, e
	}
	if len(r.Limits) == 0 || len(r.Limits) > nodeapi.MaxPlanLimits {
		return nodeapi.Override{}, Invalid("limits", "an override names 1 to "+strconv.Itoa(nodeapi.MaxPlanLimits)+" limits")
	}
	o := nodeapi.Override{}
	if !r.Expires.IsZero() {
		if !r.Expires.After(time.Now()) {
			return nodeapi.Override{}, Invalid("expires", "must be in the future")
		}
		if r.Expires.UnixNano() > algo.MaxTime || r.Expires.Year() > 2100 {
			return nodeapi.Override{}, Invalid("expires", "must be before 2100")
		}
		o.Expires = r.Expires.UnixNano()
	}
	names := make([]string, 0, len(r.Limits))
	for n := range r.Limits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		lo := r.Limits[n]
		field := "limits." + n
		if e := ValidatePlanLimitName(n, field); e != nil {
			return nodeapi.Override{}, e
		}
		switch {
		case lo.Limit < 0 || lo.Limit > algo.MaxLimit:
			return nodeapi.Override{}, Invalid(field+".limit", "must be a positive integer up to "+strconv.FormatInt(algo.MaxLimit, 10))
		case lo.Burst < 0 || lo.Burst > algo.MaxLimit:
			return nodeapi.Override{}, Invalid(field+".burst", "must be a positive integer up to "+strconv.FormatInt(algo.MaxLimit, 10))
		case lo.Limit == 0 && lo.Burst == 0:
			return nodeapi.Override{}, Invalid(field, "give limit or burst")
		}
		lo.Name = n
		o.Limits = append(o.Limits, lo)
	}
	return o, s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.PutOverride(ctx, key, o) })
}

// DeleteOverride removes a key's override.
func (s *Service) DeleteOverride(ctx context.Context, key string) *Error {
	if e := ValidateKey(key, "key"); e != nil {
		return e
	}
	return s.admin(ctx, func(ctx context.Context) error { return s.deps.Plans.DeleteOverride(ctx, key) })
}

// admin runs one admin write with the request timeout.
func (s *Service) admin(ctx context.Context, fn func(context.Context) error) *Error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := fn(ctx); err != nil {
		return s.nodeError(err)
	}
	return nil
}

// AdjustRequest credits Add units (negative: debits) to the current window
// of the limit named Limit in Key's plan, once per RequestID.
type AdjustRequest struct {
	Key, Limit string
	Add        int64
	RequestID  string
}

// AdjustResult is what an adjustment did: the units applied (signed; less
// than asked where the window holds less, or a bucket is full or empty), and
// the limit's decision after it.
type AdjustResult struct {
	Plan, Limit string
	Adjusted    int64
	Overridden  bool
	Decision    nodeapi.Decision
	Replayed    bool // a retry of an applied request_id: nothing applied again
}

// Adjust applies an adjustment through the log. The request id is required:
// it is what makes a retry after an outcome_unknown apply once. Only
// fixed_window (and calendar windows), sliding_window, token_bucket and
// leaky_bucket limits can be adjusted exactly (algo.Adjust); the state
// machine refuses the others, naming "limit".
func (s *Service) Adjust(ctx context.Context, r AdjustRequest) (AdjustResult, *Error) {
	if e := ValidateKey(r.Key, "key"); e != nil {
		return AdjustResult{}, e
	}
	if e := ValidatePlanLimitName(r.Limit, "limit"); e != nil {
		return AdjustResult{}, e
	}
	if r.Add == 0 || r.Add < -algo.MaxLimit || r.Add > algo.MaxLimit {
		return AdjustResult{}, Invalid("add", "must be a non-zero integer within ±"+strconv.FormatInt(algo.MaxLimit, 10))
	}
	if r.RequestID == "" {
		return AdjustResult{}, Invalid("request_id", "is required: it makes a retried adjustment apply once")
	}
	if e := ValidateRequestID(r.RequestID, "request_id"); e != nil {
		return AdjustResult{}, e
	}
	op := nodeapi.Op{RequestID: r.RequestID, Checks: []nodeapi.Check{{Key: r.Key, Policy: r.Limit, Adjust: true, Cost: r.Add}}}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, []nodeapi.Op{op})
	cancel()
	switch {
	case err != nil:
		return AdjustResult{}, s.nodeError(err)
	case len(results) != 1:
		return AdjustResult{}, Internal("the node returned " + strconv.Itoa(len(results)) + " results for 1 op")
	case results[0].Err != nil:
		return AdjustResult{}, s.nodeError(results[0].Err)
	case len(results[0].Decisions) != 1 || results[0].Decisions[0].Plan == nil:
		if results[0].Replayed {
			return AdjustResult{}, conflictRequestID("request_id")
		}
		return AdjustResult{}, Internal("the node's answer to an adjustment has no plan decision")
	}
	d := results[0].Decisions[0]
	return AdjustResult{Plan: d.Plan.Plan, Limit: d.Plan.Limit, Adjusted: d.Plan.Adjusted, Overridden: d.Plan.Overridden,
		Decision: d, Replayed: results[0].Replayed}, nil
}
