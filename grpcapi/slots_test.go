package grpcapi

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// A check under a concurrency limit answers its slot over gRPC as over HTTP,
// and a concurrency policy round-trips its hold and max_hold.
func TestConcurrencySlotOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "w", Limit: &limitdv1.Limit{Algorithm: "concurrency", Limit: 1, Hold: "30s"}}})
	if err != nil || pol.GetLimit().GetHold() != "30s" || pol.GetLimit().GetMaxHold() != "5m" {
		t.Fatalf("PutPolicy: %v %v", pol, err)
	}
	r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "job", Policy: "w", RequestId: "slot-1"})
	if err != nil || !r.GetDecision().GetAllowed() || r.GetDecision().GetSlot() != "slot-1" || r.GetDecision().GetSlotExpires().AsDuration() != 30*time.Second {
		t.Fatalf("acquire: %v %v", r, err)
	}
	r, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "job", Limit: &limitdv1.Limit{Algorithm: "concurrency", Limit: 1, Hold: "1s"}})
	if err != nil || r.GetDecision().GetSlot() == "" {
		t.Fatalf("inline acquire: %v %v", r, err)
	}
}

func TestReleaseAndRenewOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "w", Limit: &limitdv1.Limit{Algorithm: "concurrency", Limit: 1, Hold: "30s"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "job", Policy: "w"})
	if err != nil || r.GetDecision().GetSlot() == "" {
		t.Fatalf("acquire: %v %v", r, err)
	}
	req := &limitdv1.SlotRequest{Key: "job", Policy: "w", Slot: r.GetDecision().GetSlot()}
	if s, err := cl.Renew(ctx, req); err != nil || !s.GetDone() || s.GetSlotExpires().AsDuration() != 30*time.Second {
		t.Fatalf("renew: %v %v", s, err)
	}
	if s, err := cl.Release(ctx, req); err != nil || !s.GetDone() || s.GetRemaining() != 1 {
		t.Fatalf("release: %v %v", s, err)
	}
	if s, err := cl.Release(ctx, req); err != nil || s.GetDone() {
		t.Fatalf("repeated release: %v %v", s, err)
	}
	_, err = cl.Release(ctx, &limitdv1.SlotRequest{Key: "job", Policy: "w", Slot: "never"})
	wantError(t, err, codes.NotFound, "not_found", "slot")
}
