package grpcapi

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// The pair batches over gRPC answer per item as over HTTP: settles applied
// once (a repeat replays), an item's error naming "settles[i]…" or
// "releases[i]…", and an empty batch is INVALID_ARGUMENT naming the field.
func TestPairBatchesOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "t", Limit: &limitdv1.Limit{Algorithm: "token_bucket", Limit: 100, Window: "1h"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "w", Limit: &limitdv1.Limit{Algorithm: "concurrency", Limit: 2, Hold: "30s"}}}); err != nil {
		t.Fatal(err)
	}
	cost := func(n int64) *int64 { return &n }
	r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "t", Cost: cost(60), Reserve: &limitdv1.Reserve{Hold: "60s"}})
	if err != nil {
		t.Fatal(err)
	}
	batch := &limitdv1.SettleBatchRequest{Items: []*limitdv1.SettleRequest{
		{Reservation: r.GetDecision().GetReservation(), Cost: 20}, {Reservation: "bogus", Cost: 1}}}
	s, err := cl.SettleBatch(ctx, batch)
	if err != nil || len(s.GetResults()) != 2 || s.GetResults()[0].GetResponse().GetCredited() != 40 {
		t.Fatalf("settle batch: %v %v", s, err)
	}
	if e := s.GetResults()[1].GetError(); e.GetCode() != "invalid_argument" || e.GetField() != "settles[1].reservation" {
		t.Fatalf("bad item: %v", e)
	}
	if s, err = cl.SettleBatch(ctx, batch); err != nil || !s.GetResults()[0].GetResponse().GetReplayed() {
		t.Fatalf("repeated settle batch: %v %v", s, err)
	}
	a, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "job", Policy: "w"})
	if err != nil || a.GetDecision().GetSlot() == "" {
		t.Fatalf("acquire: %v %v", a, err)
	}
	slot := a.GetDecision().GetSlot()
	rel, err := cl.ReleaseBatch(ctx, &limitdv1.SlotBatchRequest{Items: []*limitdv1.SlotRequest{
		{Key: "job", Policy: "w", Slot: slot}, {Key: "job", Policy: "w"}, {Key: "job", Policy: "w", Slot: slot}}})
	if err != nil || !rel.GetResults()[0].GetResponse().GetDone() || rel.GetResults()[2].GetResponse().GetDone() {
		t.Fatalf("release batch: %v %v", rel, err)
	}
	if e := rel.GetResults()[1].GetError(); e.GetField() != "releases[1].slot" {
		t.Fatalf("item without a slot: %v", e)
	}
	if _, err := cl.RenewBatch(ctx, &limitdv1.SlotBatchRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty renew batch: %v", err)
	}
	if _, err := cl.SettleBatch(ctx, &limitdv1.SettleBatchRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty settle batch: %v", err)
	}
}
