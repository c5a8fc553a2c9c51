package grpcapi

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestInflightOverGRPC: GetInflight lists a key's held slot and its open
// reservation (the token the reserve answered) with their expiries, for
// admins only; bad input is InvalidArgument and an unknown policy NotFound,
// each naming the field.
func TestInflightOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{Config: Config{AdminToken: "tok"}})
	ctx := ctxT(t)
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	g := c.limitd(0)
	for _, p := range []*limitdv1.Policy{
		{Name: "workers", Limit: &limitdv1.Limit{Algorithm: "concurrency", Limit: 2, Hold: "5m"}},
		{Name: "tokens", Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 100, Window: "1h"}},
	} {
		if _, err := g.PutPolicy(admin, &limitdv1.PutPolicyRequest{Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := g.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "workers", RequestId: "job-1"}); err != nil || r.GetDecision().GetSlot() != "job-1" {
		t.Fatalf("acquire: %v %v", r, err)
	}
	r, err := g.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "tokens", Cost: proto.Int64(7), Reserve: &limitdv1.Reserve{Hold: "10m"}})
	if err != nil || r.GetDecision().GetReservation() == "" {
		t.Fatalf("reserve: %v %v", r, err)
	}
	res := r.GetDecision().GetReservation()

	_, err = g.GetInflight(ctx, &limitdv1.GetInflightRequest{Key: "k", Policy: "workers"})
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	read := func(policy string, ok func(*limitdv1.GetInflightResponse) bool) *limitdv1.GetInflightResponse {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; { // the read is the last finished commit
			v, err := g.GetInflight(admin, &limitdv1.GetInflightRequest{Key: "k", Policy: policy})
			if err == nil && ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("GetInflight %s: %v %v", policy, v, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	v := read("workers", func(v *limitdv1.GetInflightResponse) bool { return v.GetSlotsHeld() == 1 })
	s := v.GetSlots()[0]
	if !v.GetConcurrency() || len(v.GetSlots()) != 1 || s.GetSlot() != "job-1" ||
		s.GetExpires().AsTime().Sub(s.GetAcquired().AsTime()) != 5*time.Minute || len(v.GetReservations()) != 0 {
		t.Fatalf("slots: %v", v)
	}
	v = read("tokens", func(v *limitdv1.GetInflightResponse) bool { return len(v.GetReservations()) == 1 })
	if x := v.GetReservations()[0]; v.GetConcurrency() || x.GetReservation() != res || x.GetCost() != 7 ||
		x.GetExpires().AsTime().Sub(v.GetAt().AsTime()) <= 0 || x.GetExpires().AsTime().Sub(v.GetAt().AsTime()) > 10*time.Minute {
		t.Fatalf("reservations: %v", v)
	}

	_, err = g.GetInflight(admin, &limitdv1.GetInflightRequest{Key: "k", Policy: "nope"})
	wantError(t, err, codes.NotFound, "not_found", "policy")
	_, err = g.GetInflight(admin, &limitdv1.GetInflightRequest{Key: "k", Policy: "workers", Max: 1001})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "max")
	_, err = g.GetInflight(admin, &limitdv1.GetInflightRequest{Policy: "workers"})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "key")
}
