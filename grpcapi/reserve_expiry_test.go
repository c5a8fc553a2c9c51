package grpcapi

import (
	"testing"

	"google.golang.org/grpc/codes"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestReservationExpiryOverGRPC: Limit.reservation_expiry (field 12) travels
// both ways on a policy ("return" kept and read back; the default left
// empty), and a bad value, "return" on an algorithm that cannot be reserved,
// the field on an inline check's limit and on a plan's limit are
// INVALID_ARGUMENT naming it.
func TestReservationExpiryOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	ret := fixedWindow(5)
	ret.ReservationExpiry = "return"
	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "r", Limit: ret}})
	if err != nil || pol.GetLimit().GetReservationExpiry() != "return" {
		t.Fatalf("put: %v %v, want reservation_expiry return", pol, err)
	}
	if got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "r"}); err != nil || got.GetLimit().GetReservationExpiry() != "return" {
		t.Fatalf("get: %v %v", got, err)
	}
	settle := fixedWindow(5)
	settle.ReservationExpiry = "settle"
	if pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "s", Limit: settle}}); err != nil || pol.GetLimit().GetReservationExpiry() != "" {
		t.Fatalf("put settle: %v %v, want the default left empty", pol, err)
	}
	bad := fixedWindow(5)
	bad.ReservationExpiry = "later"
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "r", Limit: bad}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.limit.reservation_expiry")
	log := &limitdv1.Limit{Algorithm: "sliding_log", Limit: 5, Window: "60s", ReservationExpiry: "return"}
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "r", Limit: log}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.limit.reservation_expiry")
	if got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "r"}); err != nil || got.GetLimit().GetAlgorithm() != "fixed_window" {
		t.Fatalf("a refused put changed the policy: %v %v", got, err)
	}
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Limit: ret})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "limit.reservation_expiry")
	_, err = cl.PutPlan(ctx, &limitdv1.PutPlanRequest{Plan: &limitdv1.Plan{Name: "p", Limits: map[string]*limitdv1.Limit{"a": ret}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "plan.limits.a.reservation_expiry")
}
