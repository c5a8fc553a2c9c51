package grpcapi

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestPlansOverGRPC: plans put on the leader decide key-only checks on
// every node (resolved in apply, so followers agree), assignments move a
// key between plans keeping what it spent in the limits both name, reads of
// a key's plan see a write made through another node, and the plan RPCs
// that write need the admin token.
func TestPlansOverGRPC(t *testing.T) {
	c := newTestCluster(t, 3, testConfig{Config: Config{AdminToken: "tok"}})
	ctx := ctxT(t)
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	lead := c.leader()
	f1, f2 := (lead+1)%3, (lead+2)%3
	limits := func(perHour int64) map[string]*limitdv1.Limit {
		return map[string]*limitdv1.Limit{"hourly": fixedWindow(perHour), "daily": {Algorithm: "fixed_window", Limit: 100, Calendar: "day"}}
	}
	_, err := c.limitd(f1).PutPlan(ctx, &limitdv1.PutPlanRequest{Plan: &limitdv1.Plan{Name: "free", Limits: limits(2)}})
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	for name, n := range map[string]int64{"free": 2, "pro": 50} {
		if _, err := c.limitd(f1).PutPlan(admin, &limitdv1.PutPlanRequest{Plan: &limitdv1.Plan{Name: name, Limits: limits(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.limitd(lead).PutPlan(admin, &limitdv1.PutPlanRequest{Plan: &limitdv1.Plan{Name: "bad", Limits: map[string]*limitdv1.Limit{"daily": {Algorithm: "fixed_window", Limit: 1, Window: "x"}}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "plan.limits.daily.window")

	_, err = c.limitd(f2).Check(ctx, &limitdv1.CheckRequest{Key: "tenant:acme"})
	wantError(t, err, codes.NotFound, "not_found", "policy")
	if _, err := c.limitd(f2).SetDefaultPlan(admin, &limitdv1.SetDefaultPlanRequest{Plan: "free"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		r, err := c.limitd(i%3).Check(ctx, &limitdv1.CheckRequest{Key: "tenant:acme"})
		if err != nil || r.Decision.Allowed != want || r.Decision.Plan != "free" || len(r.Decision.Limits) != 2 {
			t.Fatalf("check %d on node %d: %v %v", i, i%3, r, err)
		}
		if !want && r.Decision.PlanLimit != "hourly" {
			t.Fatalf("refused by %q, want hourly", r.Decision.PlanLimit)
		}
	}
	kp, err := c.limitd(f1).AssignPlan(admin, &limitdv1.AssignPlanRequest{Key: "tenant:acme", Plan: "pro"})
	if err != nil || kp.Source != "assignment" {
		t.Fatalf("assign: %v %v", kp, err)
	}
	kp, err = c.limitd(f2).GetKeyPlan(ctx, &limitdv1.GetKeyPlanRequest{Key: "tenant:acme"})
	if err != nil || kp.Plan != "pro" || kp.Assigned != "pro" {
		t.Fatalf("read after a write through another node: %v %v", kp, err)
	}
	r, err := c.limitd(lead).Check(ctx, &limitdv1.CheckRequest{Key: "tenant:acme", Cost: new(int64)})
	if err != nil || r.Decision.Plan != "pro" || r.Decision.Limits[0].Name != "daily" || r.Decision.Limits[0].Decision.Remaining != 98 {
		t.Fatalf("under pro: %v %v", r, err)
	}
	// Plan configuration reads are the node's replicated copy, which may lag.
	var l *limitdv1.ListPlansResponse
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if l, err = c.limitd(f2).ListPlans(ctx, &limitdv1.ListPlansRequest{}); err == nil && len(l.Plans) == 2 && l.DefaultPlan == "free" {
			break
		}
	}
	if err != nil || len(l.Plans) != 2 || l.DefaultPlan != "free" {
		t.Fatalf("list: %v %v", l, err)
	}
	_, err = c.limitd(f1).DeletePlan(admin, &limitdv1.DeletePlanRequest{Name: "free"})
	wantError(t, err, codes.AlreadyExists, "conflict", "plan")
	if _, err := c.limitd(f2).GetPlan(ctx, &limitdv1.GetPlanRequest{Name: "pro"}); err != nil {
		t.Fatal(err)
	}

	// Prefix rules and overrides.
	if _, err := c.limitd(f1).PutPrefixRule(admin, &limitdv1.PrefixRule{Prefix: "org:", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.limitd(f1).PutPrefixRule(admin, &limitdv1.PrefixRule{Prefix: "org:a", Plan: "free"})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "prefix")
	if r, err := c.limitd(f2).Check(ctx, &limitdv1.CheckRequest{Key: "org:x"}); err != nil || r.Decision.Plan != "pro" {
		t.Fatalf("rule: %v %v", r, err)
	}
	_, err = c.limitd(f1).PutOverride(admin, &limitdv1.Override{Key: "org:x", Limits: map[string]*limitdv1.LimitOverride{"monthly": {Limit: 5}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "limits.monthly")
	_, err = c.limitd(f1).PutOverride(ctx, &limitdv1.Override{Key: "org:x", Limits: map[string]*limitdv1.LimitOverride{"daily": {Limit: 5}}})
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	o, err := c.limitd(f1).PutOverride(admin, &limitdv1.Override{Key: "org:x", Limits: map[string]*limitdv1.LimitOverride{"daily": {Limit: 7}},
		Expires: timestamppb.New(time.Now().Add(time.Hour))})
	if err != nil || o.Limits["daily"].GetLimit() != 7 || o.Expires == nil {
		t.Fatalf("override: %v %v", o, err)
	}
	if r, err := c.limitd(lead).Check(ctx, &limitdv1.CheckRequest{Key: "org:x"}); err != nil || !r.Decision.Overridden || r.Decision.Limits[0].Decision.Limit != 7 {
		t.Fatalf("overridden check: %v %v", r, err)
	}
	if _, err := c.limitd(f2).DeleteOverride(admin, &limitdv1.DeleteOverrideRequest{Key: "org:x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.limitd(f2).DeletePrefixRule(admin, &limitdv1.DeletePrefixRuleRequest{Prefix: "org:"}); err != nil {
		t.Fatal(err)
	}
}
