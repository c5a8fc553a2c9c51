package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// planNode records what reaches the node's plan capability and answers bulk
// assignments with assignErr.
type planNode struct {
	*node
	assigned  [][]nodeapi.Assignment
	overrides []nodeapi.Override
	assignErr *nodeapi.Error
}

func (n *planNode) AssignPlans(_ context.Context, as []nodeapi.Assignment) error {
	n.assigned = append(n.assigned, as)
	if n.assignErr != nil {
		return n.assignErr
	}
	return nil
}

func (n *planNode) PutOverride(_ context.Context, _ string, o nodeapi.Override) error {
	n.overrides = append(n.overrides, o)
	return nil
}

func TestValidatePlan(t *testing.T) {
	tb := algo.Config{Algorithm: "token_bucket", Limit: 10, Window: "1s"}
	p, e := ValidatePlan(PlanRequest{Name: "pro", Limits: map[string]algo.Config{"z": tb, "a": tb}})
	if e != nil || len(p.Limits) != 2 || p.Limits[0].Name != "a" {
		t.Fatalf("valid plan: %+v %v", p, e)
	}
	for _, tc := range []struct {
		r     PlanRequest
		field string
	}{
		{PlanRequest{Name: "", Limits: map[string]algo.Config{"a": tb}}, "name"},
		{PlanRequest{Name: "default", Limits: map[string]algo.Config{"a": tb}}, "name"},
		{PlanRequest{Name: "p"}, "limits"},
		{PlanRequest{Name: "p", Limits: map[string]algo.Config{"a b": tb}}, "limits.a b"},
		{PlanRequest{Name: "p", Limits: map[string]algo.Config{strings.Repeat("x", nodeapi.MaxPlanLimitName+1): tb}}, "limits." + strings.Repeat("x", nodeapi.MaxPlanLimitName+1)},
		{PlanRequest{Name: "p", Limits: map[string]algo.Config{"daily": {Algorithm: "fixed_window", Limit: 1, Window: "x"}}}, "limits.daily.window"},
	} {
		_, e := ValidatePlan(tc.r)
		wantErr(t, e, CodeInvalidArgument, tc.field)
	}
	many := map[string]algo.Config{}
	for i := 0; i <= nodeapi.MaxPlanLimits; i++ {
		many[strings.Repeat("l", i+1)] = tb
	}
	_, e = ValidatePlan(PlanRequest{Name: "p", Limits: many})
	wantErr(t, e, CodeInvalidArgument, "limits")
}

func TestAssignPlansNamesTheLine(t *testing.T) {
	n := &planNode{node: newNode()}
	s := New(DepsOf(n), Config{})
	lines := []AssignLine{{Line: 1, Key: "a", Plan: "pro"}, {Line: 3, Key: "b", Plan: "pro"}}
	n.assignErr = &nodeapi.Error{Code: CodeNotFound, Field: "assignments[1].plan", Message: "plan does not exist"}
	wantErr(t, s.AssignPlans(t.Context(), lines), CodeInvalidArgument, "lines[3].plan")
	wantErr(t, s.AssignPlans(t.Context(), []AssignLine{{Line: 4, Key: "", Plan: "p"}}), CodeInvalidArgument, "lines[4].key")
	wantErr(t, s.AssignPlans(t.Context(), []AssignLine{{Line: 2, Key: "k", Plan: "a b"}}), CodeInvalidArgument, "lines[2].plan")
	wantErr(t, s.AssignPlans(t.Context(), nil), CodeInvalidArgument, "lines")
	if len(n.assigned) != 1 {
		t.Fatalf("invalid bulk bodies reached the node: %d", len(n.assigned))
	}
	n.assignErr = &nodeapi.Error{Code: CodeNotFound, Field: "assignments[0].plan", Message: "plan does not exist"}
	wantErr(t, s.AssignPlan(t.Context(), "k", "pro"), CodeNotFound, "plan")
}

func TestPutOverrideValidation(t *testing.T) {
	n := &planNode{node: newNode()}
	s := New(DepsOf(n), Config{})
	for _, tc := range []struct {
		r     OverrideRequest
		field string
	}{
		{OverrideRequest{}, "limits"},
		{OverrideRequest{Limits: map[string]nodeapi.LimitOverride{"daily": {}}}, "limits.daily"},
		{OverrideRequest{Limits: map[string]nodeapi.LimitOverride{"daily": {Limit: -1}}}, "limits.daily.limit"},
		{OverrideRequest{Limits: map[string]nodeapi.LimitOverride{"daily": {Limit: algo.MaxLimit + 1}}}, "limits.daily.limit"},
		{OverrideRequest{Limits: map[string]nodeapi.LimitOverride{"daily": {Limit: 1}}, Expires: time.Now().Add(-time.Second)}, "expires"},
	} {
		_, e := s.PutOverride(t.Context(), "k", tc.r)
		wantErr(t, e, CodeInvalidArgument, tc.field)
	}
	exp := time.Now().Add(time.Hour)
	o, e := s.PutOverride(t.Context(), "k", OverrideRequest{Limits: map[string]nodeapi.LimitOverride{"b": {Limit: 5}, "a": {Burst: 2}}, Expires: exp})
	if e != nil || len(n.overrides) != 1 || o.Limits[0].Name != "a" || o.Limits[1].Name != "b" || o.Expires != exp.UnixNano() {
		t.Fatalf("override %+v %v", o, e)
	}
}

// TestKeyOnlyCheckIsAPlanCheck: a check with neither policy nor limit goes to
// the node as a plan check, never answered from the over-limit cache; an
// atomic group and a reset refuse one.
func TestKeyOnlyCheckIsAPlanCheck(t *testing.T) {
	n := newNode()
	s := New(DepsOf(n), Config{})
	res, e := s.Check(t.Context(), &CheckRequest{Key: "tenant:acme", Cost: 1})
	if e != nil || len(n.ops) != 1 || !n.ops[0].Checks[0].ByPlan || res.Limit.Name != PlanMetricName {
		t.Fatalf("plan check: %+v %v %+v", res, e, n.ops)
	}
	_, e = s.CheckAll(t.Context(), []CheckRequest{{Key: "k", Cost: 1}}, "")
	wantErr(t, e, CodeInvalidArgument, "checks[0].policy")
	wantErr(t, s.ResetKey(t.Context(), &CheckRequest{Key: "k"}), CodeInvalidArgument, "policy")
}
