package grpcapi

import (
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestPolicyDegradedOverGRPC: the degraded option round-trips through
// PutPolicy and GetPolicy; a bad mode or an algorithm it cannot serve is
// InvalidArgument naming the field, and nothing is stored; a put without it
// turns it off. A healthy single node decides by its quorum: never degraded.
func TestPolicyDegradedOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	share := &limitdv1.DegradedOption{Mode: "share"}
	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "d", Limit: fixedWindow(5), Degraded: share}})
	if err != nil || pol.GetDegraded().GetMode() != "share" {
		t.Fatalf("put: %v %v, want degraded share", pol, err)
	}
	if got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "d"}); err != nil || got.GetDegraded().GetMode() != "share" {
		t.Fatalf("get: %v %v, want degraded share", got, err)
	}
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "e", Limit: fixedWindow(5), Degraded: &limitdv1.DegradedOption{Mode: "guess"}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.degraded.mode")
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "e", Limit: &limitdv1.Limit{Algorithm: "token_bucket", Limit: 5, Window: "1m"}, Degraded: share}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.degraded")
	if _, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "e"}); grpcstatus.Code(err) != codes.NotFound {
		t.Fatalf("a refused policy was stored: %v", err)
	}
	if d, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "d"}); err != nil || !d.GetDecision().GetAllowed() || d.GetDecision().GetDegraded() {
		t.Fatalf("a check with the quorum: %v %v, want allowed, not degraded", d, err)
	}
	if pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "d", Limit: fixedWindow(5)}}); err != nil || pol.GetDegraded() != nil {
		t.Fatalf("a put without it: %v %v, want no degraded option", pol, err)
	}
}
