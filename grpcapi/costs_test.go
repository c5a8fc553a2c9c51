package grpcapi

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// Reserve, settle (below and above the estimate, repeated, at another
// cost), overdraft and refund over gRPC answer as over HTTP, and bad input
// is INVALID_ARGUMENT naming the field.
func TestReserveSettleRefundOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "t", Limit: &limitdv1.Limit{Algorithm: "token_bucket", Limit: 100, Window: "1h"}}}); err != nil {
		t.Fatal(err)
	}
	cost := func(n int64) *int64 { return &n }
	r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "t", Cost: cost(60), Reserve: &limitdv1.Reserve{Hold: "60s"}})
	d := r.GetDecision()
	if err != nil || !d.GetAllowed() || d.GetReservation() == "" || d.GetReservationExpires().AsDuration() != time.Minute {
		t.Fatalf("reserve: %v %v", r, err)
	}
	s, err := cl.Settle(ctx, &limitdv1.SettleRequest{Reservation: d.GetReservation(), Cost: 20})
	if err != nil || s.GetCredited() != 40 || s.GetDecision().GetRemaining() != 80 {
		t.Fatalf("settle: %v %v", s, err)
	}
	if s, err = cl.Settle(ctx, &limitdv1.SettleRequest{Reservation: d.GetReservation(), Cost: 20}); err != nil || !s.GetReplayed() {
		t.Fatalf("repeated settle: %v %v", s, err)
	}
	_, err = cl.Settle(ctx, &limitdv1.SettleRequest{Reservation: d.GetReservation(), Cost: 21})
	wantError(t, err, codes.AlreadyExists, "conflict", "cost")
	r, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "t", Cost: cost(150), Overdraft: true})
	if err != nil || !r.GetDecision().GetAllowed() || r.GetDecision().GetDebt() != 70 {
		t.Fatalf("overdraft: %v %v", r, err)
	}
	if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "f", Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 100, Window: "24h"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "v", Policy: "f", Cost: cost(30), RequestId: "job"}); err != nil {
		t.Fatal(err)
	}
	if s, err = cl.Refund(ctx, &limitdv1.RefundRequest{RequestId: "job", Cost: 30}); err != nil || s.GetCredited() != 30 {
		t.Fatalf("refund: %v %v", s, err)
	}
	_, err = cl.Refund(ctx, &limitdv1.RefundRequest{RequestId: "job", Cost: 1})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "cost")
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "t", Reserve: &limitdv1.Reserve{Hold: "forever"}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "reserve.hold")
	_, err = cl.Settle(ctx, &limitdv1.SettleRequest{Reservation: "x", Cost: 1})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "reservation")
}
