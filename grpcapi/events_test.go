package grpcapi

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestWatchEventsStreamsThresholdsAndResumes: WatchEvents needs the admin
// token; it streams each threshold a check crosses, once, with the outbox
// id and type GET /v1/events gives and the webhook body as data; a stream
// opened with after_id gets the outbox's events after it first.
func TestWatchEventsStreamsThresholdsAndResumes(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{Config: Config{AdminToken: "tok"}})
	ctx := ctxT(t)
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	cl := c.limitd(0)

	anon, err := cl.WatchEvents(ctx, &limitdv1.WatchEventsRequest{})
	if err == nil {
		_, err = anon.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, want Unauthenticated", err)
	}
	if _, err := cl.PutPolicy(admin, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api",
		Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 2, Window: "1h", Notify: []float64{0.5, 1}}}}); err != nil {
		t.Fatal(err)
	}
	watch := func(after uint64) (limitdv1.Limitd_WatchEventsClient, context.CancelFunc) {
		sctx, cancel := context.WithCancel(admin)
		s, err := cl.WatchEvents(sctx, &limitdv1.WatchEventsRequest{AfterId: after})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Header(); err != nil { // subscribed
			t.Fatal(err)
		}
		return s, cancel
	}
	s, cancel := watch(0)
	defer cancel()
	for range 3 { // the third is refused, and crosses nothing new
		if _, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "api"}); err != nil {
			t.Fatal(err)
		}
	}
	var first *limitdv1.Event
	for i, want := range []float64{0.5, 1} {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			ID        string  `json:"id"`
			Type      string  `json:"type"`
			Key       string  `json:"key"`
			Policy    string  `json:"policy"`
			Threshold float64 `json:"threshold"`
		}
		if err := json.Unmarshal([]byte(ev.GetData()), &body); err != nil || ev.GetType() != "threshold" || body.Type != "threshold" ||
			body.Key != "k" || body.Policy != "api" || body.Threshold != want || ev.GetId() == 0 {
			t.Fatalf("event %d: %+v (%v), want threshold %v for k", i, ev, err, want)
		}
		if i == 0 {
			first = ev
		} else if ev.GetId() <= first.GetId() {
			t.Fatalf("ids out of order: %d after %d", ev.GetId(), first.GetId())
		}
	}
	// Resume after the first: the second comes from the outbox (no webhook
	// loop runs here, so nothing was acked), with its id.
	r, cancel2 := watch(first.GetId())
	defer cancel2()
	ev, err := r.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Threshold float64 `json:"threshold"`
	}
	if json.Unmarshal([]byte(ev.GetData()), &body) != nil || body.Threshold != 1 || ev.GetId() <= first.GetId() {
		t.Fatalf("resumed: %+v, want the threshold-1 event after %d", ev, first.GetId())
	}
}
