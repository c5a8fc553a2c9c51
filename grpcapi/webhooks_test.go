package grpcapi

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestWebhooksAndNotifyOverGRPC: a bad webhook is INVALID_ARGUMENT naming
// the field under "webhook" and stores nothing; no read returns a secret;
// a policy's limit.notify round-trips, a bad threshold names its index,
// and an inline limit's notify is refused.
func TestWebhooksAndNotifyOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	ctx := ctxT(t)
	cl := c.limitd(0)
	_, err := cl.PutWebhook(ctx, &limitdv1.PutWebhookRequest{Webhook: &limitdv1.Webhook{Name: "ops", Url: "gopher://x", Secret: "0123456789abcdef"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "webhook.url") {
		t.Fatalf("bad url: %v", err)
	}
	if _, err := cl.GetWebhook(ctx, &limitdv1.GetWebhookRequest{Name: "ops"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused webhook was stored: %v", err)
	}
	w, err := cl.PutWebhook(ctx, &limitdv1.PutWebhookRequest{Webhook: &limitdv1.Webhook{Name: "ops", Url: "https://hooks.example/x", Secret: "0123456789abcdef"}})
	if err != nil || w.GetSecret() != "" || w.GetUrl() != "https://hooks.example/x" {
		t.Fatalf("put: %v %v", w, err)
	}
	ws, err := cl.ListWebhooks(ctx, &limitdv1.ListWebhooksRequest{})
	if err != nil || len(ws.GetWebhooks()) != 1 || ws.GetWebhooks()[0].GetSecret() != "" {
		t.Fatalf("list: %v %v", ws, err)
	}
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api",
		Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 10, Window: "1h", Notify: []float64{0.8, 0.8}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "policy.limit.notify[1]") {
		t.Fatalf("bad notify: %v", err)
	}
	p, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api",
		Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 10, Window: "1h", Notify: []float64{0.8, 1}}}})
	if err != nil || len(p.GetLimit().GetNotify()) != 2 || p.GetLimit().GetNotify()[0] != 0.8 {
		t.Fatalf("put policy: %v %v", p, err)
	}
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 1, Window: "1h", Notify: []float64{1}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit.notify") {
		t.Fatalf("inline notify: %v", err)
	}
	if _, err := cl.DeleteWebhook(ctx, &limitdv1.DeleteWebhookRequest{Name: "ops"}); err != nil {
		t.Fatal(err)
	}
}
